"""Our engine vs vLLM on the CPU, same random Llama pair and prompts: batch 1 (AR and speculative), then vLLM's
throughput at batch 1, 4 and 16. Needs .venv-vllm (bash scripts/vllm_env.sh); prints a Markdown table.

    python scripts/vllm_bench.py                      # 12 x 512 target, 2 x 256 draft, 128 tokens, K 4, 1 thread
    python scripts/vllm_bench.py --tokens 64 --repeats 2 --json bench.json

Random weights at the default init give near-uniform distributions, so the draft agrees with the target
often: this measures the engines' mechanics (per-step overhead, batching), not a trained pair's acceptance.
Batch-1 runs are interleaved (ours AR, ours speculative, vLLM AR, vLLM speculative) and the median is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate  # noqa: E402
from ssd_demo.config import SETTINGS  # noqa: E402
from ssd_demo.backends.vllm.worker import VllmWorker, WorkerSpec  # noqa: E402


def build_pair(root: Path, vocab: int) -> tuple[Path, Path, object, object]:
    from transformers import LlamaConfig, LlamaForCausalLM

    folders, models = [], []
    for name, layers, hidden, heads, seed in (("target", 12, 512, 8, 0), ("draft", 2, 256, 4, 1)):
        torch.manual_seed(seed)
        config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
                             bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
        model = LlamaForCausalLM(config).eval()
        model.save_pretrained(root / name)
        folders.append(root / name)
        models.append(model)
    return folders[0], folders[1], models[0], models[1]


def ours(target, draft, prompt: list[int], tokens: int, k: int, speculative: bool, seed: int) -> float:
    config = DecodingConfig(draft_len=k, beta=0.0, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=tokens, seed=seed)
    ids = torch.tensor([prompt])
    started = time.perf_counter()
    result = (speculative_generate(target, draft, ids, config) if speculative
              else autoregressive_generate(target, ids, config))
    assert len(result.tokens) == tokens
    return time.perf_counter() - started


def on_vllm(worker: VllmWorker, prompts: list[list[int]], tokens: int, seed: int):
    batch = worker.generate(prompts, tokens, temperature=1.0, seed=seed, ignore_eos=True)
    assert all(len(t) == tokens for t in batch.tokens)
    return batch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--draft-len", type=int, default=SETTINGS["draft_len"].default)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, args.vocab, (16,), generator=generator).tolist() for _ in range(16)]
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        target_dir, draft_dir, target, draft = build_pair(Path(tmp), args.vocab)
        ar_spec = WorkerSpec(target=str(target_dir), max_model_len=1024)
        sd_spec = WorkerSpec(target=str(target_dir), draft=str(draft_dir), draft_len=args.draft_len, max_model_len=1024)
        with VllmWorker.start(ar_spec) as vllm_ar, VllmWorker.start(sd_spec) as vllm_sd:
            print(f"vLLM {vllm_ar.version}: engine start {vllm_ar.startup_seconds:.0f} s / {vllm_sd.startup_seconds:.0f} s",
                  file=sys.stderr)
            on_vllm(vllm_ar, prompts[:1], 8, 0), on_vllm(vllm_sd, prompts[:1], 8, 0)  # warm-up
            ours(target, draft, prompts[0], 8, args.draft_len, True, 0)
            times = {name: [] for name in ("ours AR", "ours speculative", "vLLM AR", "vLLM speculative")}
            for repeat in range(args.repeats):
                times["ours AR"].append(ours(target, draft, prompts[0], args.tokens, args.draft_len, False, repeat))
                times["ours speculative"].append(ours(target, draft, prompts[0], args.tokens, args.draft_len, True, repeat))
                times["vLLM AR"].append(on_vllm(vllm_ar, prompts[:1], args.tokens, repeat).wall_seconds)
                times["vLLM speculative"].append(on_vllm(vllm_sd, prompts[:1], args.tokens, repeat).wall_seconds)
            for name, values in times.items():
                median = statistics.median(values)
                results[f"batch1 {name} (median of {args.repeats})"] = median
                rows.append(f"| {name} | 1 | {median:.2f} | {args.tokens / median:.0f} | {median:.2f} |")
            # One run per batch size: its own keys, so that batch 1 here never replaces the interleaved medians.
            for size in [int(b) for b in args.batches.split(",")]:
                for name, worker in (("vLLM AR", vllm_ar), ("vLLM speculative", vllm_sd)):
                    batch = on_vllm(worker, prompts[:size], args.tokens, 100 + size)
                    rate = size * args.tokens / batch.wall_seconds
                    accept = f" (acceptance {batch.acceptance_rate:.0%})" if worker is vllm_sd else ""
                    results[f"batch{size} {name} (one run)"] = {"wall_s": batch.wall_seconds, "tokens_per_s": rate,
                                                      "median_latency_s": statistics.median(batch.latencies)}
                    rows.append(f"| {name}{accept} | {size} | {batch.wall_seconds:.2f} | {rate:.0f} | "
                                f"{statistics.median(batch.latencies):.2f} |")
    print(f"{args.tokens} tokens per prompt, K {args.draft_len}, vocabulary {args.vocab}, one thread")
    print("| engine, decoder | batch | wall s | tokens/s | median latency s |\n|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # vLLM's engine is a spawned process
    sys.exit(main())

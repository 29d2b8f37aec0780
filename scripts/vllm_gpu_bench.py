"""Llasa-1B drafting Llasa-8B on one GPU, our engine vs vLLM, with no downloads: random weights at the real
shapes (193,800-token vocabulary, bfloat16), built on the GPU and saved to a temporary folder. About 8 minutes
on an H100/H200-class GPU, most of it writing and loading 19 GB of weights.

    bash scripts/vllm_env.sh --gpu            # once: .venv-vllm with vllm==0.32.0 (CUDA) and the plugin
    python scripts/vllm_gpu_bench.py          # from this project's own environment (.venv), prints Markdown
    python scripts/vllm_gpu_bench.py --tokens 256 --graphs --json gpu.json

Measures, on the same pair and prompts: batch 1 AR and speculative (K 4) on our engine and on vLLM; vLLM's AR
and speculative throughput at batch 1, 4 and 16; and vLLM's speculative run at beta 0.3 (the plugin) next to
beta 0. Random weights give near-uniform distributions, so acceptance is not a trained pair's: the numbers
are the engines' costs per step and what batching buys.
"""

from __future__ import annotations

import argparse
import json
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

ROPE = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
        "rope_type": "llama3"}
COMMON = {"vocab_size": 193_800, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
          "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0}
SHAPES = {  # the Llasa repositories' config.json values that shape the models
    "1B": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, tie_word_embeddings=True, rope_scaling=ROPE),
    "8B": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False, rope_scaling={**ROPE, "factor": 8.0}),
}


def build(size: str, folder: Path, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**COMMON, **SHAPES[size])).eval()
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(folder)
    return model


def ours(target, draft, prompt, tokens, k, speculative, seed) -> float:
    config = DecodingConfig(draft_len=k, beta=0.0, temperature=0.8, top_k=0, top_p=1.0, max_new_tokens=tokens, seed=seed)
    ids = torch.tensor([prompt], device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    (speculative_generate(target, draft, ids, config) if speculative else autoregressive_generate(target, ids, config))
    torch.cuda.synchronize()
    return time.perf_counter() - started


def run(worker, prompts, tokens, seed):
    return worker.generate(prompts, tokens, temperature=0.8, seed=seed, ignore_eos=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--draft-len", type=int, default=SETTINGS["draft_len"].default)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--graphs", action="store_true", help="vLLM with CUDA graphs (longer start, faster steps)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: this script measures the GPU path (scripts/vllm_bench.py is the CPU one)")
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(128264, 193800, (64,), generator=generator).tolist() for _ in range(16)]
    rows, results = [], {"gpu": torch.cuda.get_device_name()}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        target, draft = build("8B", Path(tmp) / "8b", 0), build("1B", Path(tmp) / "1b", 1)
        print(f"built and saved the pair in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        common = dict(target=str(Path(tmp) / "8b"), dtype="bfloat16", max_model_len=2048, eager=not args.graphs,
                      gpu_memory_utilization=0.25)
        specs = {"vLLM AR": WorkerSpec(**common),
                 "vLLM speculative": WorkerSpec(**common, draft=str(Path(tmp) / "1b"), draft_len=args.draft_len),
                 "vLLM SSD beta 0.3": WorkerSpec(**common, draft=str(Path(tmp) / "1b"), draft_len=args.draft_len,
                                                 beta=0.3)}
        workers = {name: VllmWorker.start(spec) for name, spec in specs.items()}
        try:
            for worker in workers.values():
                run(worker, prompts[:1], 8, 0)  # warm-up
            ours(target, draft, prompts[0], 8, args.draft_len, True, 0)
            times = {name: [] for name in ("ours AR", "ours speculative", *workers)}
            for repeat in range(args.repeats):  # interleaved, medians kept
                times["ours AR"].append(ours(target, draft, prompts[0], args.tokens, args.draft_len, False, repeat))
                times["ours speculative"].append(ours(target, draft, prompts[0], args.tokens, args.draft_len, True, repeat))
                for name, worker in workers.items():
                    times[name].append(run(worker, prompts[:1], args.tokens, repeat).wall_seconds)
            for name, values in times.items():
                median = statistics.median(values)
                results[f"batch1 {name}"] = median
                rows.append(f"| {name} | 1 | {median:.2f} | {args.tokens / median:.0f} | {median:.2f} | |")
            for size in (4, 16):
                for name, worker in workers.items():
                    batch = run(worker, prompts[:size], args.tokens, 100 + size)
                    rate = size * args.tokens / batch.wall_seconds
                    results[f"batch{size} {name}"] = {"wall_s": batch.wall_seconds, "tokens_per_s": rate,
                                                      "acceptance": batch.acceptance_rate}
                    accept = f"{batch.acceptance_rate:.0%}" if batch.draft_tokens else ""
                    rows.append(f"| {name} | {size} | {batch.wall_seconds:.2f} | {rate:.0f} | "
                                f"{statistics.median(batch.latencies):.2f} | {accept} |")
        finally:
            for worker in workers.values():
                worker.close()
    print(f"{results['gpu']}: Llasa-1B -> 8B shapes, random bfloat16 weights, {args.tokens} tokens, K {args.draft_len}")
    print("| engine, decoder | batch | wall s | tokens/s | median latency s | acceptance |\n|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # vLLM's engine is a spawned process
    sys.exit(main())

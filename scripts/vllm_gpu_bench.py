"""Llasa-1B drafting Llasa-8B on one GPU, our engine vs vLLM, with no downloads: random weights at the real
shapes (193,800-token vocabulary, bfloat16), built on the GPU and saved to a temporary folder. About 8 minutes
on an 80 GB H100/H200-class GPU, most of it writing and loading 19 GB of weights.

    bash scripts/vllm_env.sh --gpu            # once: .venv-vllm with vllm==0.32.0 (CUDA) and the plugin
    python scripts/vllm_gpu_bench.py          # from this project's own environment (.venv), prints Markdown
    python scripts/vllm_gpu_bench.py --tokens 256 --graphs --json gpu.json
    python scripts/vllm_gpu_bench.py --plan   # the memory plan only (no GPU needed)

Two phases, so that the GPU never holds the weights twice over: first our engine (AR and speculative, K 4, batch
1, interleaved, medians), whose models are then freed; then vLLM's two engines (AR, and speculative with the
draft, each request carrying its own beta), each given the share of the GPU its weights, a KV cache and a
working margin need (`memory_plan`), so both fit on an 80 GB card. vLLM is measured at batch 1 (interleaved,
medians), 4 and 16, for AR, exact (beta 0) and SSD (beta 0.3), and once with beta 0 and beta 0.3 requests in
one batch. Random weights give near-uniform distributions, so acceptance is not a trained pair's: the numbers
are the engines' costs per step and what batching buys.
"""

from __future__ import annotations

import argparse
import gc
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

GIB = 1024 ** 3
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
BETA = 0.3
MAX_MODEL_LEN = 2048
MAX_SEQS = 16
#: Besides weights and KV cache: activations, the 193,800-wide logits, CUDA's context, CUDA graphs when captured.
MARGIN_GIB = 4.0


def parameters(size: str) -> int:
    """The model's parameter count from its shape (embeddings, layers, norms, the output layer unless tied)."""
    shape = SHAPES[size]
    hidden, inter, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    kv = shape["num_key_value_heads"] * shape["head_dim"]
    q = shape["num_attention_heads"] * shape["head_dim"]
    per_layer = hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inter + 2 * hidden
    embeddings = COMMON["vocab_size"] * hidden
    return embeddings * (1 if shape["tie_word_embeddings"] else 2) + layers * per_layer + hidden


def kv_bytes_per_token(size: str) -> int:
    shape = SHAPES[size]
    return 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * shape["head_dim"] * 2  # K and V, bf16


def memory_plan(total_bytes: int) -> dict[str, float]:
    """Each vLLM engine's gpu_memory_utilization: its bf16 weights, a KV cache for MAX_SEQS full-length
    sequences (target and draft), and MARGIN_GIB, as fractions of the card; refuses a card they do not fit."""
    kv_tokens = MAX_SEQS * MAX_MODEL_LEN
    needs = {"AR": 2 * parameters("8B") + kv_tokens * kv_bytes_per_token("8B") + MARGIN_GIB * GIB,
             "speculative": 2 * (parameters("8B") + parameters("1B"))
             + kv_tokens * (kv_bytes_per_token("8B") + kv_bytes_per_token("1B")) + MARGIN_GIB * GIB}
    shares = {name: round(need / total_bytes + 0.005, 2) for name, need in needs.items()}
    if sum(shares.values()) > 0.92:
        raise SystemExit(f"the two engines need {sum(needs.values()) / GIB:.0f} GiB of this card's "
                         f"{total_bytes / GIB:.0f} GiB: run on a card of 80 GB or more")
    return shares


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


def run(worker, prompts, tokens, seed, beta=0.0):
    return worker.generate(prompts, tokens, temperature=0.8, seed=seed, ignore_eos=True, beta=beta)


def measure_ours(folder: Path, prompts, args, rows, results) -> None:
    started = time.perf_counter()
    target, draft = build("8B", folder / "8b", 0), build("1B", folder / "1b", 1)
    print(f"built and saved the pair in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    ours(target, draft, prompts[0], 8, args.draft_len, True, 0)  # warm-up
    times = {"ours AR": [], "ours speculative": []}
    for repeat in range(args.repeats):  # interleaved, medians kept
        times["ours AR"].append(ours(target, draft, prompts[0], args.tokens, args.draft_len, False, repeat))
        times["ours speculative"].append(ours(target, draft, prompts[0], args.tokens, args.draft_len, True, repeat))
    for name, values in times.items():
        median = statistics.median(values)
        results[f"batch1 {name} (median of {args.repeats})"] = median
        rows.append(f"| {name} | 1 | {median:.2f} | {args.tokens / median:.0f} | {median:.2f} | |")
    del target, draft
    gc.collect()
    torch.cuda.empty_cache()  # vLLM's engines load their own copies next


def measure_vllm(folder: Path, prompts, args, rows, results) -> None:
    shares = memory_plan(torch.cuda.get_device_properties(0).total_memory)
    results["gpu_memory_utilization"] = shares
    common = dict(target=str(folder / "8b"), dtype="bfloat16", max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_SEQS,
                  eager=not args.graphs)
    specs = {"AR": WorkerSpec(**common, gpu_memory_utilization=shares["AR"]),
             "speculative": WorkerSpec(**common, draft=str(folder / "1b"), draft_len=args.draft_len,
                                       gpu_memory_utilization=shares["speculative"])}
    workers = {}
    try:
        for name, spec in specs.items():  # one after the other: each checks the memory left when it starts
            workers[name] = VllmWorker.start(spec)
            print(f"vLLM {name} engine up in {workers[name].startup_seconds:.0f} s", file=sys.stderr)
        systems = {"vLLM AR": (workers["AR"], 0.0), "vLLM exact speculative": (workers["speculative"], 0.0),
                   f"vLLM SSD beta {BETA}": (workers["speculative"], BETA)}
        for worker, beta in systems.values():
            run(worker, prompts[:1], 8, 0, beta)  # warm-up
        times = {name: [] for name in systems}
        for repeat in range(args.repeats):  # interleaved, medians kept
            for name, (worker, beta) in systems.items():
                times[name].append(run(worker, prompts[:1], args.tokens, repeat, beta).wall_seconds)
        for name, values in times.items():
            median = statistics.median(values)
            results[f"batch1 {name} (median of {args.repeats})"] = median
            rows.append(f"| {name} | 1 | {median:.2f} | {args.tokens / median:.0f} | {median:.2f} | |")
        for size in (4, 16):  # one run per batch size: its own keys
            for name, (worker, beta) in systems.items():
                batch = run(worker, prompts[:size], args.tokens, 100 + size, beta)
                rate = size * args.tokens / batch.wall_seconds
                results[f"batch{size} {name} (one run)"] = {"wall_s": batch.wall_seconds, "tokens_per_s": rate,
                                                            "acceptance": batch.acceptance_rate}
                accept = f"{batch.acceptance_rate:.0%}" if batch.draft_tokens else ""
                rows.append(f"| {name} | {size} | {batch.wall_seconds:.2f} | {rate:.0f} | "
                            f"{statistics.median(batch.latencies):.2f} | {accept} |")
        betas = [0.0 if index % 2 == 0 else BETA for index in range(16)]  # both rules in one batch
        mixed = run(workers["speculative"], prompts[:16], args.tokens, 200, betas)
        for beta in (0.0, BETA):
            mine = [counts for counts, b in zip(mixed.requests, betas) if b == beta]
            rate = sum(c.accepted_tokens for c in mine) / max(1, sum(c.draft_tokens for c in mine))
            results[f"mixed batch16 acceptance at beta {beta}"] = rate
            rows.append(f"| vLLM speculative, beta {beta} beside beta {BETA if beta == 0 else 0.0} | 16 (8 + 8) | "
                        f"{mixed.wall_seconds:.2f} | {16 * args.tokens / mixed.wall_seconds:.0f} | "
                        f"{statistics.median(mixed.latencies):.2f} | {rate:.0%} |")
    finally:
        for worker in workers.values():
            worker.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--draft-len", type=int, default=SETTINGS["draft_len"].default)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--graphs", action="store_true", help="vLLM with CUDA graphs (longer start, faster steps)")
    parser.add_argument("--plan", action="store_true", help="print each engine's memory share for 80 and 141 GB cards")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.plan:
        for card in (80, 141):
            print(f"{card} GB card: gpu_memory_utilization {memory_plan(card * 10 ** 9)}")
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: this script measures the GPU path (scripts/vllm_bench.py is the CPU one)")
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(128264, 193800, (64,), generator=generator).tolist() for _ in range(16)]
    rows, results = [], {"gpu": torch.cuda.get_device_name()}
    with tempfile.TemporaryDirectory() as tmp:
        measure_ours(Path(tmp), prompts, args, rows, results)
        measure_vllm(Path(tmp), prompts, args, rows, results)
    print(f"{results['gpu']}: Llasa-1B -> 8B shapes, random bfloat16 weights, {args.tokens} tokens, K {args.draft_len}; "
          f"vLLM engines' memory shares {results['gpu_memory_utilization']}")
    print("| engine, decoder | batch | wall s | tokens/s | median latency s | acceptance |\n|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # vLLM's engine is a spawned process
    sys.exit(main())

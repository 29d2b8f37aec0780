"""`python -m scripts.ab_generate --baseline CHECKOUT`: bench's AR and speculative runs on this checkout's lean
forward and on another checkout's, interleaved repetition by repetition in one process.

Why: `bench` run once per checkout compares runs minutes apart, which a shared machine's load can swamp; here
each repetition runs both forwards back to back (order alternating), so a slow minute slows both. Only the lean
forward (`ssd_demo/engine/static_cache.py`) comes from the baseline: the decoders, sampling and kernels are this
checkout's, so the difference measured is the forward's. Reports, per forward: the median run time of AR and
speculative decoding, AR's time per target call against the weight-streaming time, and speculative's speedup.
Same pairs and settings as `bench` (the random pair, or `--target/--draft`).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from scripts._cli import run_cli
from scripts.decode_step import baseline_class

from ssd_demo.config import SETTINGS, DecodingConfig
from ssd_demo.engine import kernels, kv
from ssd_demo.engine.generate import autoregressive_generate, speculative_generate
from ssd_demo.measure.bench import load_pair
from ssd_demo.measure.reporting import cpu_name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", required=True, metavar="CHECKOUT", help="the other checkout (e.g. ../base)")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--draft-len", type=int, default=SETTINGS["draft_len"].default)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)


def main(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    target, draft = load_pair(args.target, args.draft, "cpu")
    vocab = target.get_output_embeddings().weight.shape[0]
    prompt = torch.randint(0, vocab, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))
    config = DecodingConfig(draft_len=args.draft_len, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    forwards = {"now": kv.StaticCacheLM, "baseline": baseline_class(args.baseline)}
    times: dict[tuple[str, str], list[float]] = {}
    streams = []
    try:
        for repeat in range(args.repeats + 1):  # the first repetition warms up
            run_config = config.with_(seed=repeat)
            for name, forward in (forwards.items() if repeat % 2 else list(forwards.items())[::-1]):
                kv.StaticCacheLM = forward  # what `kv.cached_lm` builds
                ar = autoregressive_generate(target, prompt, run_config)
                spec = speculative_generate(target, draft, prompt, run_config)
                if repeat:
                    for key, value in (("ar", ar.stats.wall_seconds), ("speculative", spec.stats.wall_seconds),
                                       ("ar call", ar.stats.mean_target_call_seconds)):
                        times.setdefault((name, key), []).append(value)
            if repeat:
                streams.append(kernels.weight_stream_seconds(target, repeats=5))
    finally:
        kv.StaticCacheLM = forwards["now"]
    median = {key: statistics.median(values) for key, values in times.items()}
    stream = statistics.median(streams)
    megabytes = kernels.weight_bytes(target) / 1e6
    print(f"{cpu_name()}, {torch.get_num_threads()} thread(s); target weights {megabytes:.1f} MB "
          f"streamed once in {stream * 1e3:.2f} ms; {args.repeats} repetitions, forwards interleaved")
    print("| forward | AR s | AR ms per target call | x weight stream | speculative s | speedup vs its AR |")
    print("|---|---|---|---|---|---|")
    for name in forwards:
        ar, call, spec = median[(name, "ar")], median[(name, "ar call")], median[(name, "speculative")]
        print(f"| {name} | {ar:.3f} | {call * 1e3:.2f} | {call / stream:.2f}x | {spec:.3f} | {ar / spec:.2f}x |")
    print(f"AR now / baseline: {median[('now', 'ar')] / median[('baseline', 'ar')]:.3f}; speculative now / baseline: "
          f"{median[('now', 'speculative')] / median[('baseline', 'speculative')]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli("python -m scripts.ab_generate", __doc__, add_arguments, main))

"""`python -m ssd_demo bench`: its flags, and the table it prints (the timing is ssd_demo.measure.bench)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .decoding_flags import add_decoding_arguments, decoding_arguments
from ..measure.bench_options import DECODING_DEFAULTS, DECODING_FLAGS, DTYPE_NAMES, METHODS, parse_methods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target model directory (save_pretrained); default: random 12x512 Llama")
    parser.add_argument("--draft", help="draft model directory; default: random 2x256 Llama")
    add_decoding_arguments(parser, DECODING_FLAGS, defaults=DECODING_DEFAULTS)
    parser.add_argument("--prompt-len", type=int, default=32, help="random prompt length in tokens (default: 32)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per method, median reported (default: 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions first (default: 1)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: 0, torch's own choice)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda where there is one, else cpu)")
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default="auto",
                        help="the models' dtype (default: auto, the app's choice: bfloat16 on a GPU, float32 on a CPU, "
                        "where half precision is slow)")
    parser.add_argument("--json", type=Path, help="write the results here")


def main(args: argparse.Namespace) -> int:
    import torch  # deferred, as the benchmark: --help stays quick

    from ..measure.bench import benchmark, markdown_table

    settings = decoding_arguments(args, DECODING_FLAGS)  # checked before the models load
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    result = benchmark(settings, parse_methods(args.methods), target=args.target, draft=args.draft,
                       device=args.device, dtype=args.dtype, prompt_len=args.prompt_len, repeats=args.repeats, warmup=args.warmup,
                       threads=args.threads)
    result["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    print(markdown_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0

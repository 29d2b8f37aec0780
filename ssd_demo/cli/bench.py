"""`python -m ssd_demo bench`: its flags, and the table it prints (the timing is ssd_demo.measure.bench)."""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from ..errors import InputError
from ..config import DecodingConfig
from .decoding_flags import add_decoding_arguments, decoding_arguments
from ..measure.reporting import cpu_name, git_commit
from ..engine.static_cache import describe_kernels
from ..measure.bench import DECODING_DEFAULTS, DECODING_FLAGS, METHODS, load_pair, markdown_table, run_benchmark


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target model directory (save_pretrained); default: random 12x512 Llama")
    parser.add_argument("--draft", help="draft model directory; default: random 2x256 Llama")
    add_decoding_arguments(parser, DECODING_FLAGS, defaults=DECODING_DEFAULTS)
    parser.add_argument("--prompt-len", type=int, default=32, help="random prompt length in tokens")
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per method (median reported)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path, help="write the results here")


def main(args: argparse.Namespace) -> int:
    settings = decoding_arguments(args, DECODING_FLAGS)  # checked before the models load
    if args.threads:
        torch.set_num_threads(args.threads)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    target, draft = load_pair(args.target, args.draft, args.device)
    target, draft = target.to(args.device), draft.to(args.device)
    vocab = target.get_output_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, vocab, (1, args.prompt_len), generator=generator).to(args.device)
    config = DecodingConfig(**settings)
    result = run_benchmark(target, draft, prompt, config, repeats=args.repeats, warmup=args.warmup, methods=methods)
    result["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result["machine"] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "device": args.device,
        "cuda": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "torch": torch.__version__,
        "kernels": describe_kernels(target),
    }
    result["commit"] = git_commit()
    print(markdown_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0

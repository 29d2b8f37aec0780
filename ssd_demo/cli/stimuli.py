"""`python -m ssd_demo stimuli`: its flags (rendering a set is ssd_demo.listening.stimuli)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..backends.vllm import ENGINES
from ..listening.stimuli import DEFAULT_SENTENCES, DEFAULT_SYSTEMS, render_stimulus_set, stimulus_texts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", required=True, help="stimulus set name (folder under <data dir>/stimuli)")
    parser.add_argument("--preset", default="embedded", help="model preset to render with (default: embedded)")
    parser.add_argument(
        "--systems",
        nargs="+",
        default=list(DEFAULT_SYSTEMS),
        help='named systems, e.g. "AR" "SSD beta=0.3 K=4" "exact speculative" (optionally draft=NAME)',
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--texts", type=Path, help="UTF-8 file with one sentence per line")
    source.add_argument("--sentence", action="append", help="a sentence (repeatable)")
    parser.add_argument(
        "--count", type=int, default=len(DEFAULT_SENTENCES), help="how many default sentences when none given"
    )
    parser.add_argument("--seed", type=int, default=0, help="base seed; sentence i uses seed+i for every system")
    parser.add_argument("--data-dir", type=Path, help="data directory (default: $SSD_DEMO_DATA_DIR or ./data)")
    parser.add_argument("--device", default=None, help="torch device (default: automatic)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing set of the same name")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="where the speech LM runs: ours (default) or vllm (Llasa presets; each system's "
                             "sentences in one batch, throughput printed; needs .venv-vllm, see docs/vllm.md); default "
                             "$SSD_DEMO_ENGINE or ours")


def main(args: argparse.Namespace) -> int:
    texts = stimulus_texts(args.texts, args.sentence, args.count)
    stimulus_set = render_stimulus_set(
        args.name,
        texts,
        args.systems,
        preset=args.preset,
        root=args.data_dir.resolve() if args.data_dir else None,
        base_seed=args.seed,
        overwrite=args.overwrite,
        device=args.device,
        progress=lambda line: print(line, flush=True),
        engine=args.engine,
    )
    clips = sum(len(item.clips) for item in stimulus_set.items)
    print(
        f"wrote {clips} clips ({len(stimulus_set.items)} sentences x {len(stimulus_set.systems)} systems) to {stimulus_set.root}"
    )
    return 0

"""`python -m ssd_demo sweep`: its flags, and the map it writes (the sweep is ssd_demo.measure.sweep)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from ..errors import InputError
from ..models.cpu_threads import check_thread_count
from .decoding_flags import add_decoding_arguments, decoding_arguments
from ..measure.reporting import add_docs_argument, docs_target, write_section


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sentences", type=int, default=8,
                        help="held-out sentences from ssd_demo/measure/visitor_texts.py (default 8)")
    parser.add_argument("--quick", action="store_true", help="a small grid (the app's Benchmark tab uses it)")
    parser.add_argument("--draft", default="distilled",
                        help="draft(s) of the embedded voice, comma-separated (e.g. distilled,heads): every setting "
                             "runs with each, on one map; the first draft's SSD point at the voice's beta is the reference")
    parser.add_argument("--rules", default=None,
                        help="comma-separated subset of the grid's rules (ssd, pcg, topk, exact-K, exact-adaptive)")
    add_decoding_arguments(parser, ("cost_ratio",), unset="the config's")
    add_decoding_arguments(parser, ("seed",), defaults={"seed": 0})
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed runs per setting and sentence (same tokens); the fastest counts")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                        help="torch CPU threads (default 2, or 1 on a one-CPU machine; ONNX Runtime's forward runs "
                             "as many only where they time faster than one, which the report names)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    add_docs_argument(parser, "speed-fidelity map (and the chart beside it)")


def main(args: argparse.Namespace) -> int:
    import torch  # deferred, as the sweep and its report: --help stays quick

    from ..measure.sweep import sweep_map
    from ..measure.sweep_report import SECTION, markdown, pareto_figure

    decoding_arguments(args, ("cost_ratio", "seed"))  # checked before the voice loads
    check_thread_count(args.threads)
    torch.set_num_threads(args.threads)
    drafts = [d.strip() for d in args.draft.split(",") if d.strip()]
    if not drafts:
        raise InputError(f"--draft names no draft ({args.draft!r})")
    rules = [r.strip() for r in args.rules.split(",") if r.strip()] if args.rules else None
    bar = tqdm(total=100, desc="sweep")

    def progress(fraction: float, message: str) -> None:
        bar.n = int(100 * fraction)
        bar.set_postfix_str(message[:40])
        bar.refresh()

    result = sweep_map(drafts, args.sentences, quick=args.quick, rules=rules, seed=args.seed,
                       cost_ratio=args.cost_ratio, repeats=args.repeats, threads=args.threads, progress=progress,
                       note=lambda line: print(f"note: {line}"))
    bar.close()
    points, ar_row, meta = result.points, result.ar_row, result.meta
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps({"points": [asdict(p) for p in points], "ar": ar_row, **meta},
                                                    indent=2))
    figure = pareto_figure(points, ar_row["mcd"])
    figure.savefig(args.out / "sweep_pareto.png", dpi=120)
    for p in points:
        print(f"{p.label:42s} speedup {p.lm_speedup:5.2f}x  acc {p.acceptance:.2f}  WER {p.wer:.3f}  "
              f"OVRL {p.dnsmos:.2f}  MCD {p.mcd:6.2f}  NLL {p.nll:.3f}"
              f"{'  *' if p.pareto else ''}")
    docs = docs_target(args)
    if docs is not None:
        command = "python -m ssd_demo sweep " + " ".join(sys.argv[2:])
        write_section(docs, SECTION, markdown(points, ar_row, command.strip(), meta, result.reference_label))
        figure.savefig(docs.parent / "sweep_pareto.png", dpi=120)
        print(f"updated {docs}")
    return 0

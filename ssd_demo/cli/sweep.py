"""`python -m ssd_demo sweep`: its flags, and the map it writes (the sweep is ssd_demo.measure.sweep)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from ..backends.embedded import load_synthesizer
from ..errors import InputError
from .decoding_flags import add_decoding_arguments, decoding_arguments
from ..measure.reporting import add_docs_argument, cpu_name, docs_target, git_commit, write_section
from ..engine.static_cache import describe_kernels
from ..measure import teacher_reference
from ..measure.sweep import (SECTION, SweepPoint, default_settings, held_out_sentences, mark_pareto, markdown,
                             pareto_figure, run_sweep, teacher_references)


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
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    add_docs_argument(parser, "speed-fidelity map (and the chart beside it)")


def main(args: argparse.Namespace) -> int:
    decoding_arguments(args, ("cost_ratio", "seed"))  # checked before the voice loads
    torch.set_num_threads(args.threads)

    drafts = [d.strip() for d in args.draft.split(",") if d.strip()]
    if not drafts:
        raise InputError(f"--draft names no draft ({args.draft!r})")
    synth = load_synthesizer(draft=drafts[0])
    unknown = [d for d in drafts if d not in synth.drafts]
    if unknown:
        raise InputError(f"unknown draft(s) {unknown}; the voice has {', '.join(synth.drafts)}")
    sentences = held_out_sentences(args.sentences)
    if teacher_reference.available():
        references = teacher_references(sentences, synth.backend.sample_rate, threads=args.threads)
    else:
        print(f"note: {teacher_reference.MISSING_NOTE}; the map's fidelity axis is the target NLL")
        references = [None] * len(sentences)
    settings = default_settings(synth, quick=args.quick)
    if args.rules:
        wanted = {r.strip() for r in args.rules.split(",") if r.strip()}
        unknown = wanted - {s.rule for s in settings}
        if unknown:
            raise InputError(f"unknown rule(s) {sorted(unknown)}; the grid has {sorted({s.rule for s in settings})}")
        settings = [s for s in settings if s.rule in wanted]
    bar = tqdm(total=100, desc="sweep")

    def progress(fraction: float, message: str) -> None:
        bar.n = int(100 * fraction)
        bar.set_postfix_str(message[:40])
        bar.refresh()

    points: list[SweepPoint] = []
    for index, draft in enumerate(drafts):  # each draft's speedups against AR timed within its own pass
        result = run_sweep(synth, sentences, references, settings, seed=args.seed, draft=draft,
                           progress=lambda f, m, index=index, draft=draft: progress((index + f) / len(drafts),
                                                                                    f"{draft}: {m}"),
                           cost_ratio=args.cost_ratio, repeats=args.repeats, judges=("wer", "dnsmos"))
        for p in result.points:
            if len(drafts) > 1:
                p.draft, p.label = draft, f"{draft}: {p.label}"
        points += result.points
    bar.close()
    mark_pareto(points)  # over every draft's settings together
    # same seeds: the same AR audio
    ar_row = {"mcd": result.ar_mcd, "nll": result.ar_nll, "wer": result.ar_wer, "dnsmos": result.ar_dnsmos}
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{cpu_name()}, torch threads: {args.threads}, {describe_kernels(synth.target)}",
        "sentences": len(sentences),
        "repeats": args.repeats, "drafts": drafts,
    }
    (args.out / "sweep.json").write_text(json.dumps({"points": [asdict(p) for p in points], "ar": ar_row, **meta}, indent=2))
    figure = pareto_figure(points, ar_row["mcd"])
    figure.savefig(args.out / "sweep_pareto.png", dpi=120)
    for p in points:
        print(f"{p.label:42s} speedup {p.lm_speedup:5.2f}x  acc {p.acceptance:.2f}  WER {p.wer:.3f}  "
              f"OVRL {p.dnsmos:.2f}  MCD {p.mcd:6.2f}  NLL {p.nll:.3f}"
              f"{'  *' if p.pareto else ''}")
    docs = docs_target(args)
    if docs is not None:
        command = "python -m ssd_demo sweep " + " ".join(sys.argv[2:])
        reference_label = (f"{drafts[0]}: " if len(drafts) > 1 else "") + f"ssd beta={synth.config().beta:g}"
        write_section(docs, SECTION, markdown(points, ar_row, command.strip(), meta, reference_label))
        figure.savefig(docs.parent / "sweep_pareto.png", dpi=120)
        print(f"updated {docs}")
    return 0

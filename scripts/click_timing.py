"""`python -m scripts.click_timing`: what a user waits for after one click in the app.

Runs the app's own handler code for the "Synthesise with both decoders" button, without a
browser: `compare.compare` (load, warm-up on the first click, AR, then speculative), WAV
writing, the token view, the four charts and the statistics text. Default settings of the
chosen preset, the page's example sentences in turn, one torch thread rule as in the app.

Reported (medians and ranges over the clicks after the first; the first also pays for loading
and warm-up and is shown on its own): the whole click, AR alone and speculative alone (LM +
codec seconds and real-time factor), and the LM speedup of each click. Writes the table into
docs/benchmarks.md under "## App: one click on the embedded voice".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from scripts._cli import run_cli

from ssd_demo.app import compare
from ssd_demo.measure.reporting import add_docs_argument, cpu_name, docs_target, git_commit, median, write_section

SECTION = "## App: one click on the embedded voice"


@dataclass
class Click:
    text: str
    seconds: float  # the whole handler
    ar_seconds: float  # AR synthesis: LM + codec
    ar_rtf: float
    spec_seconds: float
    spec_rtf: float
    audio_seconds: float
    lm_speedup: float


def time_clicks(preset: str, clicks: int, texts: list[str], directory: Path) -> list[Click]:
    """Run `clicks` clicks through the handler code; the first one includes loading and warm-up."""
    if clicks < 2:
        raise ValueError("--clicks must be at least 2 (the first click also loads and warms up)")
    results = []
    for index in range(clicks):
        text = texts[index % len(texts)]
        started = time.perf_counter()
        comparison = compare.compare(compare.Request(text=text, preset=preset))
        compare.write_audio_files(comparison, directory)
        compare.comparison_token_view(comparison)
        compare.figures(comparison)  # charts are plain Figures (no pyplot), freed with the comparison
        compare.stats_markdown(comparison)
        compare.details(comparison)
        seconds = time.perf_counter() - started
        ar, spec = comparison.ar, comparison.spec
        results.append(Click(text, seconds, ar.total_seconds, ar.real_time_factor, spec.total_seconds,
                             spec.real_time_factor, ar.duration_seconds, comparison.report.measured))
    return results


def markdown(clicks: list[Click], command: str, meta: dict) -> str:
    first, rest = clicks[0], clicks[1:]

    def span(values: list[float], unit: str = " s", digits: int = 2) -> tuple[str, str]:
        return f"{median(values):.{digits}f}{unit}", f"{min(values):.{digits}f}-{max(values):.{digits}f}{unit}"

    click, click_range = span([c.seconds for c in rest])
    ar, ar_range = span([c.ar_seconds for c in rest])
    spec, spec_range = span([c.spec_seconds for c in rest])
    ar_rtf = median([c.ar_rtf for c in rest])
    spec_rtf = median([c.spec_rtf for c in rest])
    speedup, speedup_range = span([c.lm_speedup for c in rest], "x")
    audio_range = f"{min(c.audio_seconds for c in rest):.1f}-{max(c.audio_seconds for c in rest):.1f} s"
    return "\n".join([
        SECTION, "",
        f"Command: `{command}`  ",
        f"Commit {meta['commit']}, {meta['date']}, {meta['machine']}. The app's handler code for one click "
        f"(load, warm-up on the first click, AR then speculative, WAVs, token view, four charts, statistics), "
        f"default settings of the preset, the page's example sentences in turn; medians over the "
        f"{len(rest)} clicks after the first.", "",
        "| what | median | range |", "|---|---|---|",
        f"| first click (loads the voice and warms up, then the same work) | {first.seconds:.2f} s | |",
        f"| one click: AR + speculative, WAVs, charts | {click} | {click_range} |",
        f"| AR alone (LM + codec) | {ar}, real-time factor {ar_rtf:.2f} | {ar_range}, for {audio_range} of audio |",
        f"| speculative alone (LM + codec) | {spec}, real-time factor {spec_rtf:.2f} | {spec_range} |",
        f"| LM speedup shown on the page | {speedup} | {speedup_range} |",
        "",
    ])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="embedded", help="model preset (default: the embedded voice)")
    parser.add_argument("--clicks", type=int, default=7, help="clicks to time; the first also loads (default 7)")
    add_docs_argument(parser, "app")


def main(args: argparse.Namespace) -> int:
    texts = compare.example_texts()
    with tempfile.TemporaryDirectory() as directory:
        clicks = time_clicks(args.preset, args.clicks, texts, Path(directory))
    meta = {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{cpu_name()}, {os.cpu_count()} cores, torch threads: {torch.get_num_threads()}"}
    command = ("python -m scripts.click_timing " + " ".join(sys.argv[1:])).strip()
    text = markdown(clicks, command, meta)
    print(text)
    docs = docs_target(args)
    if docs is not None:
        write_section(docs, SECTION, text)
        print(f"updated {docs}")
    return 0



def cli(argv: list[str] | None = None) -> int:
    return run_cli("python -m scripts.click_timing", __doc__, add_arguments, main, argv)


if __name__ == "__main__":
    sys.exit(cli())

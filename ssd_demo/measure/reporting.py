"""Small helpers shared by the bench, eval and sweep commands: medians, the commit, docs sections."""

from __future__ import annotations

import platform
import statistics
import subprocess
from pathlib import Path

import numpy as np

#: Generated text of a section ends here; hand-written notes below it survive a regeneration.
GENERATED_END = "<!-- end of generated table -->"


def median(values) -> float:
    """Median ignoring NaN (a sentence whose metric could not be computed); NaN when nothing is left."""
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def paired_difference(values, baseline, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of values[i] - baseline[i] over the items where both are finite, with a 95% bootstrap
    interval (items resampled with replacement). Pairing by item (sentence) removes the spread
    between sentences, which dwarfs the differences between decoding settings."""
    diffs = np.array([v - b for v, b in zip(values, baseline) if v == v and b == b], dtype=float)
    if diffs.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(resamples, diffs.size))].mean(axis=1)
    return float(diffs.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def cpu_name() -> str:
    """The CPU model and its widest matrix instructions, e.g. "AMD EPYC (AVX2)": speed ratios depend on it."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
            if flags and name:
                break
    except OSError:
        pass
    if "amx_tile" in flags:
        isa = "AMX"
    elif "avx512f" in flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2"
    else:
        isa = ""
    return f"{name} ({isa})" if isa else name


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def add_docs_argument(parser, section: str) -> None:
    """`--docs FILE`: the markdown file whose `section` the command rewrites. Opt-in: a run on a new machine
    or with other settings must not replace the project's recorded numbers by accident."""
    parser.add_argument("--docs", type=Path, default=None,
                        help=f"markdown file whose {section} section is rewritten with this run (default: none; "
                             "the project records its numbers with --docs docs/benchmarks.md)")


def docs_target(args) -> Path | None:
    """The `--docs` file to rewrite, or None (not given, or '' / '-' as older commands wrote it)."""
    docs = getattr(args, "docs", None)
    return None if docs is None or str(docs) in ("", ".", "-") else Path(docs)


def write_section(path: Path, heading: str, generated: str) -> None:
    """Put `generated` (which starts with `heading`) into the markdown file at `path`.

    The section runs from `heading` to the next "## " heading. Its generated part ends at
    GENERATED_END: whatever a person wrote after that marker (readings of the numbers) is kept.
    """
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = generated.rstrip("\n") + "\n\n" + GENERATED_END + "\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + block
    else:
        following = text.find("\n## ", start + len(heading))
        end = len(text) if following < 0 else following + 1
        marker = text.find(GENERATED_END, start, end)
        notes = text[marker + len(GENERATED_END):end] if marker >= 0 else "\n"
        text = text[:start] + block + "\n" + notes.lstrip("\n") + text[end:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")

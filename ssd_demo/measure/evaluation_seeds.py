"""One evaluation at several seeds, one run each, and what the runs say together (`eval --seeds`).

Why: a short test set heard by Whisper tiny.en moves by 15-25 points of mean WER from one seed to the next (57
single words; exact speculative sampling, which has AR's distribution, scored 38.6 % and 66.7 % beside it), so a
check such as "3 seeds, one run each" needs every seed's report and a table over them. Each seed's report is the
one `eval` writes for that seed alone; this module only combines finished reports.
"""

from __future__ import annotations

from statistics import mean

from ..errors import InputError
from .evaluation_report import markdown


def parse_seeds(text: str) -> list[int]:
    """--seeds as distinct non-negative integers, in the order given."""
    try:
        seeds = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise InputError(f"--seeds takes comma-separated whole numbers, e.g. 0,100,200; got {text!r}") from None
    if not seeds or any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds takes distinct whole numbers of 0 or more, e.g. 0,100,200; got {text!r}")
    return seeds


def over_seeds(reports: list[dict]) -> list[dict]:
    """Per system (the reference rows first, as in each report): its readings at every seed and over all of them.

    Means for WER, DNSMOS and LM speedup (each seed's run weighs the same); counts added up for texts misheard and
    endings cut (each text of each run counts once)."""
    texts = [len(report["ids"]) for report in reports]
    rows = []
    for index, first in enumerate(reports[0]["systems"]):
        label = first["system"]
        runs = [report["systems"][index] for report in reports]
        if any(run["system"] != label for run in runs):
            raise ValueError(f"the seeds' reports list different systems: {[run['system'] for run in runs]}")
        row = {"system": label, "texts": sum(texts)}
        for key in ("wer", "dnsmos_ovrl", "lm_speedup"):
            values = [run.get(key) for run in runs]
            if all(isinstance(value, (int, float)) and value == value for value in values):
                row[key] = values
                row[f"{key}_mean"] = mean(values)
        for key in ("misheard_count", "cut_endings_count"):
            if all(key in run for run in runs):
                row[key] = sum(run[key] for run in runs)
        rows.append(row)
    return rows


def combined_markdown(reports: list[dict], seeds: list[int], command: str) -> str:
    """The section `eval --seeds` writes: a table over the seeds, then each seed's own table under its heading."""
    rows = over_seeds(reports)
    heading = reports[0].get("section", "## Embedded voice evaluation")
    first = reports[0]
    lines = [heading, "", f"Command: `{command}`", "",
             f"- Run: commit {first['commit']}, {first['date']}; machine: {first['machine']}.",
             f"- Seeds {', '.join(map(str, seeds))}, one run each: means over the seeds (each seed's run weighs the "
             "same); texts misheard (any word wrong) and endings cut at full loudness added up over every text of "
             "every run. Each seed's full table follows.", "",
             "| system | WER % by seed | WER % mean | misheard (texts) | DNSMOS OVRL mean | cut endings (clips) "
             "| LM speedup by seed | LM speedup mean |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| " + " | ".join([
            row["system"],
            " / ".join(f"{value * 100:.1f}" for value in row.get("wer", [])),
            f"{row['wer_mean'] * 100:.1f}" if "wer_mean" in row else "",
            f"{row['misheard_count']} of {row['texts']}" if "misheard_count" in row else "",
            f"{row['dnsmos_ovrl_mean']:.2f}" if "dnsmos_ovrl_mean" in row else "",
            f"{row['cut_endings_count']} of {row['texts']}" if "cut_endings_count" in row else "",
            " / ".join(f"{value:.2f}" for value in row.get("lm_speedup", [])),
            f"{row['lm_speedup_mean']:.2f}x" if "lm_speedup_mean" in row else "",
        ]) + " |")
    for seed, report in zip(seeds, reports):
        own = markdown(report, command).split("\n")
        body = [line for line in own[1:] if not line.startswith("Command: ")]  # the heading and command are above
        lines += ["", f"### Seed {seed}", *body]
    return "\n".join(lines).rstrip("\n") + "\n"

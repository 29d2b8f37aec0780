"""`python -m ssd_demo study results NAME`: a study's screening and statistics as text, and its exports."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from .figures import save_mushra_boxplot
from .objective import Judge, agreements, clip_metrics, objective_lines, objective_summary, system_metrics
from .study_store import ListeningStore
from .study_results import StudyResults, study_results, write_long_csv, write_summary_json
from .study_sessions import database_path, list_studies, load_study_and_stimuli
from .study_stats import FEW_RATERS


def report(name: str, *, root: Path | None = None, exclude: bool = True, csv_path: Path | None = None,
           json_path: Path | None = None, figure_path: Path | None = None, all_versions: bool = False,
           objective: bool = True, judge: Judge | None = None) -> int:
    """Print the study's results (and, with `objective`, each system's objective metrics and their agreement
    with the listeners, `listening.objective`; `judge` replaces the default ASR + DNSMOS judge); write the
    asked-for exports."""
    if name not in list_studies(root):
        raise InputError(f"no study named {name!r}; `python -m ssd_demo study list` shows the studies")
    study, stimulus_set = load_study_and_stimuli(name, root, verify=False)
    database = database_path(root)
    if not database.is_file():
        raise InputError(f"no listening database at {database}: nobody has taken a study yet")
    with ListeningStore(database) as store:
        results = study_results(store, study, None if all_versions else stimulus_set.manifest_sha256)
    print("\n".join(format_results(results, exclude)))
    extra = {}
    if objective:
        order = (study.reference, *study.systems, *study.anchors)
        clips = clip_metrics(stimulus_set, judge)
        systems = system_metrics(clips, order)
        agreement = agreements(clips, results.statistics(exclude).per_item)
        print("\n" + "\n".join(objective_lines(systems, agreement)))
        extra["objective"] = objective_summary(systems, agreement)
    if csv_path:
        others = results.other_versions_left_out
        others = f" and {others} of other stimulus versions" if others else ""
        print(f"wrote {len(results.rows)} ratings{others} to {write_long_csv(results, _private(csv_path))}")
    if json_path:
        print(f"wrote the summary to {write_summary_json(results, _private(json_path), extra)}")
    if figure_path:
        print(f"wrote the box plot to {save_mushra_boxplot(results, _private(figure_path), exclude)}")
    return 0


def _private(path: Path) -> Path:
    """The export's file, created (or made) readable by its owner only, like the database it comes from."""
    path = Path(path)
    path.touch(mode=0o600, exist_ok=True)
    os.chmod(path, 0o600)
    return path


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None else f"[{low:.1f}, {high:.1f}]"


def format_results(results: StudyResults, exclude: bool = True) -> list[str]:
    stats = results.statistics(exclude)
    view = "excluded raters left out" if exclude else "every rater kept (--no-exclude)"
    lines = [f"Study {results.study}: {stats.raters} raters ({view})"]
    if results.stimulus_version is not None:
        lines.append(f"Stimulus version {results.stimulus_version[:12]} (the current one) only; "
                     f"{results.other_versions_left_out} ratings of other versions left out (--all-versions)")
    lines.append("")
    lines.append(f"Screening: {len(results.excluded_raters)} of {len(results.raters)} raters excluded")
    lines += [f"  {e.rater}: {e.rule} ({e.detail})" for e in results.exclusions]
    if stats.mushra:
        lines += ["", "MUSHRA (mean over raters, 95% t interval clipped to the scale 0-100)"]
        lines += [f"  {m.system:32} {m.mean:6.1f} {_interval(m.low, m.high):>16}  raters {m.raters}, ratings {m.ratings}"
                  for m in stats.mushra]
        lines += ["", "Paired Wilcoxon signed-rank on raters' means (two-sided, Holm-corrected over all pairs)",
                  "  (exact differences of the raters' means, so equal differences tie; zero differences dropped;",
                  "  p exact with no ties and n <= 50, exact over sign permutations of the mid-ranks with ties or",
                  "  zeros and n <= 13, else the normal approximation with tie correction, no continuity correction)"]
        lines += [f"  {t.system_x} vs {t.system_y}: difference {t.mean_difference:+.1f}, p {_p(t.p_value)}, "
                  f"Holm p {_p(t.p_holm)} (raters {t.raters})" for t in stats.mushra_tests]
    if stats.abx:
        lines += ["", "ABX (accuracy, exact 95% interval, one-sided binomial p vs chance, Holm over pairs)"]
        lines += [f"  {a.system_x} vs {a.system_y}: {a.correct}/{a.trials} = {a.accuracy:.0%} "
                  f"[{a.low:.0%}, {a.high:.0%}], p {_p(a.p_value)}, Holm p {_p(a.p_holm)}" for a in stats.abx]
        lines += ["  Across raters, not pooled (pooling overstates significance when raters differ): one-sided t test",
                  "  of the raters' accuracies vs 0.5, Holm over pairs; per rater: accuracy, d' (independent observation),",
                  "  exact one-sided binomial p"]
        for a in stats.abx:
            across = "-" if a.rater_t_p is None else f"p {_p(a.rater_t_p)}, Holm p {_p(a.rater_t_p_holm)}"
            lines.append(f"  {a.system_x} vs {a.system_y}: {a.raters} raters, mean accuracy "
                         f"{(a.mean_rater_accuracy or 0):.0%}, t test {across}")
            lines += [f"    {r.rater:24} {r.correct}/{r.trials} = {r.accuracy:.0%}, d' {r.d_prime:.2f}, p {_p(r.p_value)}"
                      for r in stats.abx_raters if (r.system_x, r.system_y) == (a.system_x, a.system_y)]
    if stats.ab:
        lines += ["", "A/B preference (exact sign test, ties dropped, Holm over pairs)"]
        lines += [f"  {a.system_x} {a.wins_x} - {a.wins_y} {a.system_y} ({a.ties} no preference): p {_p(a.p_value)}, "
                  f"Holm p {_p(a.p_holm)}" for a in stats.ab]
    if stats.mos:
        lines += ["", "MOS (mean over raters, 95% t interval clipped to the scale 1-5)"]
        lines += [f"  {m.system:32} {m.mean:5.2f} {_interval(m.low, m.high):>14}  raters {m.raters}" for m in stats.mos]
    if (stats.mushra or stats.mos) and stats.raters < FEW_RATERS:
        lines += ["", f"Note: {stats.raters} rater(s), fewer than {FEW_RATERS}: the intervals are rough and the tests "
                      "have little power."]
    lines += ["", f"Screening rules: {', '.join(results.screening)}",
              "Raters (share of MUSHRA items: reference < 90 / anchor > reference / mid-range anchor > 90; "
              "attention failed/checks)"]
    for r in results.raters:
        mid = "-" if r.mid_anchor_above_90 is None else f"{r.mid_anchor_above_90:.0%}"
        share = ("-" if r.reference_below_90 is None
                 else f"{r.reference_below_90:.0%} / {r.anchor_above_reference:.0%} / {mid}")
        seconds = "-" if r.median_seconds is None else f"{r.median_seconds:.1f} s"
        lines.append(f"  {r.rater:24} answers {r.answers:3}  {share:>11}  attention {r.attention_failures}/"
                     f"{r.attention_checks}  median {seconds}  {'EXCLUDED: ' + ', '.join(r.rules) if r.excluded else ''}")
    return lines

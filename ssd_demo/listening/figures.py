"""A study's MUSHRA box plot: one box per system (median, quartiles, whiskers at 1.5 IQR, outliers), the
mean with its 95% interval over raters drawn beside it. Matplotlib's object API (no pyplot, no global
state), so it is safe in a server thread; no Gradio.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from .study_results import StudyResults


def mushra_boxplot(results: StudyResults, exclude: bool = True) -> Figure:
    """The figure; `exclude` leaves out the raters the screening excludes (as in the paper's main result)."""
    means = results.statistics(exclude).mushra
    systems = [m.system for m in means]
    scores = {system: [] for system in systems}
    for row in results.rows:
        if row.kind == "mushra" and not row.attention_check and row.system in scores and not (exclude and row.excluded):
            scores[row.system].append(row.score)
    figure = Figure(figsize=(max(4.0, 1.3 * len(systems) + 1.5), 4.2), layout="constrained")
    axes = figure.add_subplot()
    if not systems:
        rated = {row.rater for row in results.rows if row.kind == "mushra" and not row.attention_check}
        message = "no MUSHRA ratings yet"
        if exclude and rated and all(row.excluded for row in results.rows if row.rater in rated):
            message = (f"every rater ({len(rated)}) was excluded by the screening:\n"
                       "no MUSHRA ratings are left; show all raters to see them")
        axes.text(0.5, 0.5, message, ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
        return figure
    positions = list(range(1, len(systems) + 1))
    axes.boxplot([scores[s] for s in systems], positions=positions, widths=0.5)
    for position, mean in zip(positions, means):
        if mean.low is not None:
            axes.errorbar(position + 0.33, mean.mean, yerr=[[mean.mean - mean.low], [mean.high - mean.mean]],
                          fmt="o", color="tab:red", capsize=3, markersize=4)
    axes.set_xticks(positions, [s.replace(" ", "\n", 1) for s in systems], fontsize=8)
    axes.set_ylim(-2, 102)
    axes.set_ylabel("MUSHRA score")
    who = "screened raters" if exclude else "all raters"
    axes.set_title(f"{results.study}: {who} (red: mean, 95% interval over raters)", fontsize=9)
    axes.grid(axis="y", alpha=0.3)
    return figure


def save_mushra_boxplot(results: StudyResults, path: Path | str, exclude: bool = True) -> Path:
    path = Path(path)
    mushra_boxplot(results, exclude).savefig(path, dpi=120)
    return path

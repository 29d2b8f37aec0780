"""Listening-test charts: plain matplotlib figures, no Gradio import.

`matplotlib.figure.Figure` is built directly rather than through pyplot, so figures
can be made from server threads without a global figure registry.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from ...listening.ab_mos import ListeningSummary

COLOURS = {"x": "#4C72B0", "tie": "#BBBBBB", "y": "#DD8452", "mos": "#55A868"}


def results_figure(summary: ListeningSummary) -> Figure:
    """Left: preference shares per pair with 95% Wilson intervals. Right: MOS per system with 95% t intervals."""
    figure = Figure(figsize=(10, 3.2 + 0.5 * max(len(summary.pairs), len(summary.mos), 1)), layout="constrained")
    preference, mos = figure.subplots(1, 2, width_ratios=(3, 2))
    if summary.empty:
        for axis in (preference, mos):
            axis.text(0.5, 0.5, "No votes yet", ha="center", va="center", transform=axis.transAxes)
            axis.set_axis_off()
        return figure

    # Three bars per pair: first system, no preference, second system, each with its interval.
    height = 0.25
    labels = []
    for row, pair in enumerate(summary.pairs):
        for offset, share, ci, colour, label in (
            (-height, pair.share_x, pair.ci_x, COLOURS["x"], pair.system_x),
            (0.0, pair.share_tie, pair.ci_tie, COLOURS["tie"], "no preference"),
            (height, pair.share_y, pair.ci_y, COLOURS["y"], pair.system_y),
        ):
            y = row + offset
            preference.barh(y, 100 * share, height=height * 0.9, color=colour)
            preference.errorbar(
                100 * share,
                y,
                xerr=[[100 * (share - ci.low)], [100 * (ci.high - share)]],
                fmt="none",
                ecolor="black",
                capsize=3,
            )
            preference.text(
                1,
                y,
                label,
                va="center",
                fontsize=8,
                zorder=3,
                bbox={"facecolor": "white", "alpha": 0.7, "pad": 1, "linewidth": 0},
            )
        p_text = "" if pair.p_value is None else f", p={pair.p_value:.2g}"
        labels.append(f"{pair.system_x}\nvs {pair.system_y}\n(n={pair.n}{p_text})")
    preference.set_yticks(range(len(summary.pairs)), labels, fontsize=8)
    preference.invert_yaxis()
    preference.set_xlim(0, 100)
    preference.set_xlabel("share of votes (%), 95% Wilson interval")
    preference.set_title("Preference")

    if summary.mos:
        names = [m.system for m in summary.mos]
        means = [m.mean for m in summary.mos]
        low = [m.mean - m.ci.low if m.ci else 0.0 for m in summary.mos]
        high = [m.ci.high - m.mean if m.ci else 0.0 for m in summary.mos]
        mos.bar(range(len(names)), means, color=COLOURS["mos"], yerr=[low, high], capsize=4)
        mos.set_xticks(range(len(names)), [f"{n}\n(n={m.n})" for n, m in zip(names, summary.mos)], fontsize=8)
        mos.set_ylim(1, 5)
        mos.set_ylabel("MOS, 95% t interval")
    else:
        mos.text(0.5, 0.5, "No naturalness scores yet", ha="center", va="center", transform=mos.transAxes)
        mos.set_axis_off()
    mos.set_title("Naturalness")
    return figure

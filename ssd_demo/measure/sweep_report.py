"""The speed-fidelity map's report: the Pareto chart, the markdown table, the matched-fidelity comparison."""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from .reporting import paired_difference

if TYPE_CHECKING:
    from .sweep import SweepPoint

SECTION = "## Speed-fidelity map"


def at_matched_fidelity(points: list[SweepPoint], reference: SweepPoint, tolerance: float = 0.01) -> dict[str, SweepPoint]:
    """Per rule, the fastest setting whose MCD-DTW is at most (1 + tolerance) x the reference's.

    This is the comparison "same fidelity, who is faster" (the reference is normally SSD at the
    voice's default beta); rules with no setting that faithful are left out.
    """
    best: dict[str, SweepPoint] = {}
    for p in points:
        if p.mcd == p.mcd and p.mcd <= reference.mcd * (1 + tolerance):
            if p.family not in best or p.lm_speedup > best[p.family].lm_speedup:
                best[p.family] = p
    return best


def pareto_figure(points: list[SweepPoint], ar_mcd: float | None = None):
    """Speed (x) against MCD-DTW (y, lower is better), one colour per rule, one line style per draft
    (when the points come from several); frontier joined."""

    use_mcd = any(p.mcd == p.mcd for p in points)
    y_of = (lambda p: p.mcd) if use_mcd else (lambda p: p.nll)
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")  # no pyplot: no global state, no display needed
    ax = fig.subplots()
    colours = {"ssd": "#1f77b4", "pcg": "#d62728", "topk": "#2ca02c", "exact-K": "#7f7f7f", "exact-adaptive": "#9467bd"}
    # per draft: (line style of a rule's settings, marker of its single adaptive point)
    styles = dict(zip(dict.fromkeys(p.draft for p in points), (("o-", "D"), ("s--", "P"), ("^:", "X"), ("v-.", "*"))))
    for family in dict.fromkeys(p.family for p in points):
        group = [p for p in points if p.family == family]
        line, marker = styles.get(group[0].draft, ("o-", "D"))
        ax.plot([p.lm_speedup for p in group], [y_of(p) for p in group],
                marker if group[0].rule == "exact-adaptive" else line,
                color=colours.get(group[0].rule, "#8c564b"), label=family, alpha=0.85, markersize=6)
    frontier = sorted((p for p in points if p.pareto), key=lambda p: p.lm_speedup)
    if frontier:
        ax.plot([p.lm_speedup for p in frontier], [y_of(p) for p in frontier], "--", color="#888888", lw=1,
                label="Pareto frontier")
    if ar_mcd is not None and use_mcd:
        ax.axhline(ar_mcd, color="#888888", lw=0.8, ls=":", label="AR")
    ax.axvline(1.0, color="#888888", lw=0.8, ls=":")
    ax.set_xlabel("LM speedup over autoregressive decoding (x)")
    ax.set_ylabel("MCD-DTW to the teacher's rendering (dB, lower is better)" if use_mcd
                  else "target NLL per token (nats)")
    ax.set_title("Speed against fidelity, embedded voice")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def markdown(points: list[SweepPoint], ar_row: dict, command: str, meta: dict, reference_label: str | None = None) -> str:
    lines = [
        SECTION, "",
        f"Command: `{command}`  ",
        f"Commit {meta['commit']}, {meta['date']}, {meta['machine']}; {meta['sentences']} held-out sentences, "
        f"medians; LM speedup per generated token against AR timed before and after the settings on the same "
        f"sentence (settings in rotating order; fastest of {meta.get('repeats', 1)} identical runs each).", "",
        f"AR reference: WER {_pct(ar_row.get('wer'))} %, DNSMOS OVRL {ar_row.get('dnsmos', float('nan')):.2f}, "
        f"MCD-DTW {ar_row['mcd']:.2f} dB, NLL {ar_row['nll']:.3f}. WER: Whisper tiny.en (Whisper's English "
        "normaliser), mean over sentences; DNSMOS: P.835 overall quality (1-5), mean over sentences; MCD-DTW "
        "against the teacher's rendering of each sentence.", "",
        "| setting | LM speedup | acceptance | tokens/target call | WER % | DNSMOS OVRL | MCD-DTW dB | NLL | Pareto |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(f"| {p.label} | {p.lm_speedup:.2f}x | {p.acceptance:.2f} | {p.tokens_per_call:.2f} | "
                     f"{_pct(p.wer)} | {p.dnsmos:.2f} | {p.mcd:.2f} | {p.nll:.3f} | {'yes' if p.pareto else ''} |")
    reference = next((p for p in points if p.label == reference_label), None)
    if reference is not None:
        lines += ["", f"Fastest setting of each rule (per draft, where several) at the fidelity of {reference.label} (MCD-DTW at most 1% above "
                  f"its {reference.mcd:.2f} dB), speed relative to it:", "",
                  "| rule | setting | LM speedup | relative to reference | MCD-DTW dB | MCD-DTW - reference, mean "
                  "per sentence [95% CI] | NLL |", "|---|---|---|---|---|---|---|"]
        for rule, p in at_matched_fidelity(points, reference).items():
            mean, low, high = paired_difference(p.mcds, reference.mcds)
            lines.append(f"| {rule} | {p.label} | {p.lm_speedup:.2f}x | {p.lm_speedup / reference.lm_speedup:.2f}x | "
                         f"{p.mcd:.2f} | {mean:+.2f} [{low:+.2f}, {high:+.2f}] | {p.nll:.3f} |")
        lines += ["", "The interval is the paired difference's 95% bootstrap interval over sentences: an interval "
                  "that spans zero by more than 1% of the reference's MCD means this many sentences cannot tell the "
                  "settings' fidelity apart at the 1% level."]
    lines += ["", "![Speed against fidelity](sweep_pareto.png)", ""]
    return "\n".join(lines)


def _pct(value) -> str:
    return f"{100 * value:.1f}" if value is not None and value == value else "nan"

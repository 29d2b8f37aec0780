"""Matplotlib figures built from generation results; no Gradio, no pyplot state.

Every builder takes plain result objects (`GenerationResult`, `SynthesisResult`)
and returns a `matplotlib.figure.Figure`. Figures are created with the
object-oriented API (not `pyplot`), so they are garbage-collected when dropped and
safe to build from several server threads at once.

The style aims to stay legible on light and dark pages: a transparent background,
mid-grey text and axes, and colours that keep their contrast on white and on
near-black.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...engine.results import GenerationResult, RoundRecord
from ...speech.synthesis import SynthesisResult

# Mid-grey reads on both white and dark backgrounds.
TEXT_COLOUR = "#8a8a8a"
GRID_COLOUR = "#8a8a8a"
AR_COLOUR = "#e8873a"  # orange
SPEC_COLOUR = "#3b8fd9"  # blue
ACCEPTED_COLOUR = "#3aa655"  # green
REJECTED_COLOUR = "#d9534f"  # red
BONUS_COLOUR = "#3b8fd9"  # blue
OTHER_COLOUR = "#9a9a9a"
THEORY_COLOUR = "#b07cd9"  # violet

FIGSIZE = (6.4, 3.4)


def _new_figure(figsize: tuple[float, float] = FIGSIZE) -> tuple[Figure, "object"]:
    figure = Figure(figsize=figsize, dpi=100, layout="constrained")
    figure.patch.set_alpha(0.0)
    axes = figure.add_subplot()
    axes.set_facecolor("none")
    for spine in axes.spines.values():
        spine.set_color(GRID_COLOUR)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.tick_params(colors=TEXT_COLOUR, labelcolor=TEXT_COLOUR)
    axes.grid(True, color=GRID_COLOUR, alpha=0.25, linewidth=0.6)
    axes.set_axisbelow(True)
    return figure, axes


def _label(axes, title: str, xlabel: str, ylabel: str) -> None:
    axes.set_title(title, color=TEXT_COLOUR, fontsize=11)
    axes.set_xlabel(xlabel, color=TEXT_COLOUR)
    axes.set_ylabel(ylabel, color=TEXT_COLOUR)


def _legend(axes, **kwargs) -> None:
    legend = axes.legend(frameon=False, fontsize=8, labelcolor=TEXT_COLOUR, **kwargs)
    if legend is not None:
        legend.get_frame().set_alpha(0.0)


def _empty(axes, message: str) -> None:
    axes.text(0.5, 0.5, message, ha="center", va="center", color=TEXT_COLOUR, transform=axes.transAxes)


# ---------------------------------------------------------------------------
# Accepted length per round
# ---------------------------------------------------------------------------


def accepted_length_figure(spec: GenerationResult) -> Figure:
    """Bars: drafted tokens accepted in each speculative round, with K and the mean."""
    figure, axes = _new_figure()
    steps = spec.steps
    _label(axes, "Accepted draft tokens per round", "round", "accepted tokens")
    if not steps:
        _empty(axes, "no speculative rounds")
        return figure
    rounds = np.arange(1, len(steps) + 1)
    accepted = np.array([step.accepted for step in steps])
    draft_len = spec.stats.draft_len or max((len(step.drafted) for step in steps), default=0)
    if len(steps) > MAX_BARS:
        return _accepted_length_trend(figure, axes, rounds, accepted, draft_len)
    colours = [_round_colour(step) for step in steps]
    axes.bar(rounds, accepted, width=0.85, color=colours, linewidth=0)
    axes.axhline(draft_len, color=TEXT_COLOUR, linestyle=":", linewidth=1, label=f"K = {draft_len}")
    axes.axhline(float(accepted.mean()), color=SPEC_COLOUR, linestyle="--", linewidth=1.2,
                 label=f"mean = {accepted.mean():.2f}")
    # Proxy artists so the legend explains the bar colours.
    axes.bar([np.nan], [np.nan], color=BONUS_COLOUR, label="all accepted (+ bonus)")
    axes.bar([np.nan], [np.nan], color=REJECTED_COLOUR, label="ended by a rejection")
    axes.set_ylim(0, draft_len + 0.6)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(axes, loc="upper right", ncol=2)
    return figure


#: Beyond this many rounds (a paragraph has hundreds) one bar per round is a barcode: a running mean instead.
MAX_BARS = 150


def _accepted_length_trend(figure: Figure, axes, rounds: np.ndarray, accepted: np.ndarray, draft_len: int) -> Figure:
    window = max(5, len(rounds) // 50)
    running = np.convolve(accepted, np.ones(window) / window, mode="valid")  # mean over `window` rounds
    axes.plot(rounds[window - 1 :], running, color=SPEC_COLOUR, linewidth=1.4, label=f"mean of {window} rounds")
    axes.axhline(draft_len, color=TEXT_COLOUR, linestyle=":", linewidth=1, label=f"K = {draft_len}")
    axes.axhline(float(accepted.mean()), color=THEORY_COLOUR, linestyle="--", linewidth=1.2,
                 label=f"overall mean = {accepted.mean():.2f}")
    axes.set_ylim(0, draft_len + 0.9)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(axes, loc="upper center", ncol=3)
    return figure


def _round_colour(step: RoundRecord) -> str:
    if step.next_kind == "bonus":
        return BONUS_COLOUR
    if step.next_kind == "replacement":
        return REJECTED_COLOUR
    return OTHER_COLOUR  # stopped inside the block (end token or length limit)


# ---------------------------------------------------------------------------
# Tokens produced vs wall time
# ---------------------------------------------------------------------------


def cumulative_tokens(result: GenerationResult) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, tokens produced so far) at the end of every round, starting at (0, 0)."""
    seconds = [0.0] + [step.end_seconds for step in result.steps]
    counts = np.cumsum([0] + [len(step.emitted) for step in result.steps])
    return np.asarray(seconds, dtype=float), counts


def tokens_vs_time_figure(ar: GenerationResult, spec: GenerationResult) -> Figure:
    """Staircases of tokens produced against wall time; the horizontal gap is the speedup."""
    figure, axes = _new_figure()
    _label(axes, "Tokens produced vs wall time", "wall time since start of generation (s)", "tokens produced")
    for result, colour, name in ((ar, AR_COLOUR, "autoregressive"), (spec, SPEC_COLOUR, "speculative")):
        seconds, counts = cumulative_tokens(result)
        axes.step(seconds, counts, where="post", color=colour, linewidth=1.8,
                  label=f"{name}: {counts[-1]} tokens in {seconds[-1]:.2f} s")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    _legend(axes, loc="lower right")
    return figure


# ---------------------------------------------------------------------------
# Timing breakdown
# ---------------------------------------------------------------------------

BREAKDOWN_PARTS = ("draft", "target", "codec", "other")
BREAKDOWN_LABELS = {
    "draft": "draft model",
    "target": "target model (prefill + steps / verify)",
    "codec": "codec (tokens → audio)",
    "other": "other (sampling, bookkeeping)",
}
BREAKDOWN_COLOURS = {"draft": "#3b8fd9", "target": "#e8873a", "codec": "#3aa655", "other": "#9a9a9a"}


@dataclass(frozen=True)
class TimingBreakdown:
    draft: float
    target: float
    codec: float
    other: float

    @property
    def total(self) -> float:
        return self.draft + self.target + self.codec + self.other


def timing_breakdown(result: SynthesisResult) -> TimingBreakdown:
    """Split a synthesis's wall time into draft, target, codec and everything else (seconds)."""
    stats = result.generation.stats
    draft = max(stats.draft_seconds, 0.0)
    target = max(stats.prefill_seconds + stats.verify_seconds, 0.0)
    # "Other" is what the LM stage spent outside the two models' forward calls.
    other = max(result.lm_seconds - draft - target, 0.0)
    return TimingBreakdown(draft=draft, target=target, codec=max(result.codec_seconds, 0.0), other=other)


def timing_breakdown_figure(ar: SynthesisResult, spec: SynthesisResult) -> Figure:
    """Horizontal stacked bars: where each run's wall time went."""
    figure, axes = _new_figure((6.4, 2.8))
    _label(axes, "Where the time went", "wall time (s)", "")
    rows = [("speculative", timing_breakdown(spec)), ("autoregressive", timing_breakdown(ar))]
    names = [name for name, _ in rows]
    left = np.zeros(len(rows))
    for part in BREAKDOWN_PARTS:
        widths = np.array([getattr(breakdown, part) for _, breakdown in rows])
        axes.barh(names, widths, left=left, color=BREAKDOWN_COLOURS[part], label=BREAKDOWN_LABELS[part], height=0.55)
        left += widths
    for index, (_, breakdown) in enumerate(rows):
        axes.text(breakdown.total, index, f"  {breakdown.total:.2f} s", va="center", color=TEXT_COLOUR, fontsize=9)
    axes.set_xlim(0, max(left.max(), 1e-3) * 1.18)
    axes.grid(True, axis="x", color=GRID_COLOUR, alpha=0.25)
    axes.grid(False, axis="y")
    _legend(axes, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    return figure


# ---------------------------------------------------------------------------
# Acceptance by position in the block
# ---------------------------------------------------------------------------


def acceptance_by_position(steps: Sequence[RoundRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Empirical P(drafted token i is kept), i = 1..K, and the number of rounds behind each.

    Token i is kept only if tokens 1..i-1 were, so this is a survival curve: under an
    i.i.d. per-token acceptance alpha it equals alpha^i. A round ended by a rejection (or
    a fully accepted block) decides every position it drafted. A round that stopped
    inside the block (end token accepted, length limit) only tells us about the tokens
    it kept, so its later positions are left out of the denominator.
    """
    max_len = max((len(step.drafted) for step in steps), default=0)
    kept = np.zeros(max_len)
    seen = np.zeros(max_len)
    for step in steps:
        decided = len(step.drafted) if step.next_kind in ("replacement", "bonus") else step.accepted
        seen[:decided] += 1
        kept[: step.accepted] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(seen > 0, kept / np.maximum(seen, 1), np.nan)
    return rate, seen


def acceptance_by_position_figure(spec: GenerationResult) -> Figure:
    """Measured acceptance at each block position next to alpha^i."""
    figure, axes = _new_figure()
    _label(axes, "Acceptance by position in the block", "position i in the drafted block", "P(token i accepted)")
    rate, seen = acceptance_by_position(spec.steps)
    if len(rate) == 0:
        _empty(axes, "no drafted tokens")
        return figure
    positions = np.arange(1, len(rate) + 1)
    axes.bar(positions, rate, width=0.6, color=SPEC_COLOUR, label="measured")
    alpha = spec.stats.alpha
    fine = np.linspace(1, len(rate), 100) if len(rate) > 1 else np.array([1.0])
    axes.plot(fine, alpha**fine, color=THEORY_COLOUR, linewidth=1.8, label=rf"$\alpha^i$, $\alpha$ = {alpha:.2f} (expected acceptance)")
    axes.plot(positions, alpha**positions, "o", color=THEORY_COLOUR, markersize=4)
    for position, value, count in zip(positions, rate, seen):
        if not np.isnan(value):
            axes.text(position, 0.02, f"n={int(count)}", ha="center", va="bottom", color="white", fontsize=7)
    axes.set_ylim(0, 1.12)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(axes, loc="upper right")
    return figure

"""Chart builders: hand-made results in, figures with the expected series out."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure

from ssd_demo.app.compare import charts
from ssd_demo.config import DecodingConfig
from ssd_demo.engine.results import GenerationResult, GenerationStats, RoundRecord
from ssd_demo.speech.synthesis import SynthesisResult


def _stats(mode: str, steps: list[RoundRecord], draft_len: int, alpha: float = 0.0, **overrides) -> GenerationStats:
    new_tokens = sum(len(step.emitted) for step in steps)
    drafted = sum(len(step.drafted) for step in steps)
    accepted = sum(step.accepted for step in steps)
    values = dict(
        mode=mode,
        new_tokens=new_tokens,
        rounds=len(steps),
        target_calls=len(steps) + 1,
        draft_calls=drafted,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        alpha=alpha,
        mean_tokens_per_call=new_tokens / max(len(steps), 1),
        mean_accepted_length=accepted / max(len(steps), 1),
        prefill_seconds=0.05,
        draft_seconds=sum(step.draft_seconds for step in steps),
        verify_seconds=sum(step.verify_seconds for step in steps),
        wall_seconds=steps[-1].end_seconds if steps else 0.0,
        tokens_per_second=1.0,
        mean_draft_step_seconds=0.001,
        mean_target_call_seconds=0.01,
        finish_reason="eos",
        draft_len=draft_len,
        seed=0,
    )
    values.update(overrides)
    fields = GenerationStats.__dataclass_fields__
    return GenerationStats(**{k: v for k, v in values.items() if k in fields})


def spec_result() -> GenerationResult:
    """Four rounds with K = 3: rejection at 2, full block + bonus, rejection at 1, end token inside."""
    steps = [
        RoundRecord([10, 11, 12], 1, 20, "replacement", 0.03, 0.02, 0.10, [0.9, 0.2]),
        RoundRecord([13, 14, 15], 3, 21, "bonus", 0.03, 0.02, 0.15, [0.8, 0.9, 0.7]),
        RoundRecord([16, 17, 18], 0, 22, "replacement", 0.03, 0.02, 0.20, [0.1]),
        RoundRecord([19, 99, 30], 2, None, "none", 0.03, 0.02, 0.25, [0.9, 0.95]),
    ]
    return GenerationResult(tokens=[t for s in steps for t in s.emitted], steps=steps, stats=_stats("speculative", steps, 3, alpha=0.6))


def ar_result(n: int = 9, step_seconds: float = 0.04) -> GenerationResult:
    steps = [
        RoundRecord([], 0, 100 + i, "sampled", 0.0, step_seconds, 0.05 + step_seconds * (i + 1)) for i in range(n)
    ]
    return GenerationResult(tokens=[s.next_token for s in steps], steps=steps, stats=_stats("ar", steps, 0))


def synthesis(generation: GenerationResult, lm_seconds: float, codec_seconds: float) -> SynthesisResult:
    return SynthesisResult(
        text="hi",
        mode=generation.stats.mode,
        audio=np.zeros(1600, dtype=np.float32),
        sample_rate=16000,
        generation=generation,
        config=DecodingConfig(),
        lm_seconds=lm_seconds,
        codec_seconds=codec_seconds,
    )


def _assert_readable(figure: Figure) -> None:
    axes = figure.axes[0]
    assert axes.get_title()
    assert axes.get_xlabel()
    assert figure.patch.get_alpha() == 0.0  # transparent: fits light and dark pages
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")


def test_accepted_length_of_hundreds_of_rounds_is_a_running_mean_not_a_barcode():
    one = spec_result()
    steps = one.steps * 100  # 400 rounds, as a paragraph has
    spec = GenerationResult(tokens=[], steps=steps, stats=_stats("speculative", steps, 3))
    figure = charts.accepted_length_figure(spec)
    _assert_readable(figure)
    axes = figure.axes[0]
    assert not [p for p in axes.patches if np.isfinite(p.get_height())]
    labels = [line.get_label() for line in axes.lines]
    assert any(label.startswith("mean of ") for label in labels) and "overall mean = 1.50" in labels
    trend = next(line for line in axes.lines if line.get_label().startswith("mean of "))
    assert np.allclose(trend.get_ydata(), 1.5)  # the window spans whole repeats of 1, 3, 0, 2


def test_accepted_length_bars_match_rounds():
    spec = spec_result()
    figure = charts.accepted_length_figure(spec)
    _assert_readable(figure)
    axes = figure.axes[0]
    assert "tokens" in axes.get_ylabel()
    bars = [patch for patch in axes.patches if np.isfinite(patch.get_height())]
    assert [bar.get_height() for bar in bars] == [1, 3, 0, 2]
    colours = [bar.get_facecolor()[:3] for bar in bars]
    assert colours[1] != colours[0]  # a bonus round looks different from a rejection round
    assert colours[0] == colours[2]
    levels = sorted(line.get_ydata()[0] for line in axes.lines)
    assert levels == pytest.approx([1.5, 3.0])  # the mean of 1, 3, 0, 2 and K


def test_cumulative_tokens_counts_every_emitted_token():
    seconds, counts = charts.cumulative_tokens(spec_result())
    assert seconds.tolist() == pytest.approx([0.0, 0.10, 0.15, 0.20, 0.25])
    assert counts.tolist() == [0, 2, 6, 7, 9]  # 1+1, 3+1, 0+1, 2+0


def test_tokens_vs_time_has_one_staircase_per_decoder():
    ar, spec = ar_result(), spec_result()
    figure = charts.tokens_vs_time_figure(ar, spec)
    _assert_readable(figure)
    axes = figure.axes[0]
    assert "(s)" in axes.get_xlabel()
    assert len(axes.lines) == 2
    ar_line, spec_line = axes.lines
    assert ar_line.get_ydata()[-1] == 9 and spec_line.get_ydata()[-1] == 9
    assert ar_line.get_xdata()[-1] == pytest.approx(0.05 + 0.04 * 9)
    assert spec_line.get_xdata()[-1] == pytest.approx(0.25)
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert any("autoregressive" in label for label in labels) and any("speculative" in label for label in labels)


def test_timing_breakdown_splits_wall_time():
    spec = synthesis(spec_result(), lm_seconds=0.40, codec_seconds=0.05)
    parts = charts.timing_breakdown(spec)
    assert parts.draft == pytest.approx(0.12)
    assert parts.target == pytest.approx(0.05 + 0.08)  # prefill + verify calls
    assert parts.codec == pytest.approx(0.05)
    assert parts.other == pytest.approx(0.40 - 0.12 - 0.13)
    assert parts.total == pytest.approx(0.45)
    # Timers can disagree by a hair; "other" never goes negative.
    assert charts.timing_breakdown(synthesis(spec_result(), lm_seconds=0.1, codec_seconds=0.0)).other == 0.0


def test_timing_breakdown_figure_stacks_four_parts_per_run():
    ar = synthesis(ar_result(), lm_seconds=0.45, codec_seconds=0.05)
    spec = synthesis(spec_result(), lm_seconds=0.30, codec_seconds=0.05)
    figure = charts.timing_breakdown_figure(ar, spec)
    _assert_readable(figure)
    axes = figure.axes[0]
    bars = axes.patches
    assert len(bars) == 2 * len(charts.BREAKDOWN_PARTS)
    # The right end of each row's last segment is that run's total.
    ends = sorted(bar.get_x() + bar.get_width() for bar in bars[-2:])
    assert ends == pytest.approx(sorted([0.35, 0.50]))
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert len(labels) == 4 and any("draft" in label for label in labels) and any("codec" in label for label in labels)


def test_acceptance_by_position_is_a_survival_curve():
    rate, seen = charts.acceptance_by_position(spec_result().steps)
    # Rounds 1-3 decide all three positions (kept: 1, 3 and 0 tokens). Round 4 stopped at an
    # accepted end token after 2 kept tokens, so its third position is unknown.
    assert seen.tolist() == [4, 4, 3]
    assert rate.tolist() == pytest.approx([3 / 4, 2 / 4, 1 / 3])


def test_acceptance_by_position_figure_draws_alpha_powers():
    spec = spec_result()
    figure = charts.acceptance_by_position_figure(spec)
    _assert_readable(figure)
    axes = figure.axes[0]
    heights = [patch.get_height() for patch in axes.patches]
    assert heights == pytest.approx([3 / 4, 2 / 4, 1 / 3])
    markers = axes.lines[-1]
    assert markers.get_ydata().tolist() == pytest.approx([0.6, 0.36, 0.216])
    assert any("alpha" in text.get_text() for text in axes.get_legend().get_texts())


def test_empty_runs_still_give_labelled_figures():
    empty = GenerationResult(tokens=[], steps=[], stats=_stats("speculative", [], 4))
    for figure in (charts.accepted_length_figure(empty), charts.acceptance_by_position_figure(empty)):
        _assert_readable(figure)


@pytest.mark.slow
def test_charts_module_does_not_import_gradio():
    code = "import sys, ssd_demo.app.compare.charts; sys.exit(1 if 'gradio' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0

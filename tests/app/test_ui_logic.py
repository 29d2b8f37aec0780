"""The app's handler logic (ssd_demo.app.compare) on the toy voice, plus the embedded voice when present."""

from __future__ import annotations

from support.paths import REPOSITORY

import dataclasses

import json

import numpy as np
import pytest
import soundfile
import torch

from ssd_demo.app import compare as app_logic
from ssd_demo.models import cpu_threads
from ssd_demo.app.compare import Request
from ssd_demo.comparison import pipeline as session
from ssd_demo.errors import ModelLoadError
from ssd_demo.engine.generate import autoregressive_generate, speculative_generate
from ssd_demo.backends.registry import Preset, get_preset, load_preset, register
from ssd_demo.engine.results import GenerationResult, GenerationStats, RoundRecord
from ssd_demo.speech.synthesis import TextError
from support.toy_backend import EOS_ID, TOKEN_SECONDS, TOY_KEY, register_toy_preset

TEXT = "Speculative decoding, tested."


@pytest.fixture(scope="module")
def toy():
    register_toy_preset()
    return load_preset(TOY_KEY)


@pytest.fixture(scope="module")
def comparison(toy):
    return app_logic.compare(Request(text=TEXT, preset=TOY_KEY, seed=7))


def test_compare_matches_the_engine_run_directly(toy, comparison):
    config = comparison.config
    assert comparison.seed == 7 and config.seed == 7
    prompt = torch.tensor([toy.backend.prompt_ids(TEXT)])
    ar = autoregressive_generate(toy.target, prompt, config)
    spec = speculative_generate(toy.target, toy.drafts["small"], prompt, config)
    assert comparison.ar.generation.tokens == ar.tokens
    assert comparison.spec.generation.tokens == spec.tokens
    assert comparison.spec.generation.stats.accepted_tokens == spec.stats.accepted_tokens
    assert comparison.draft == "small"
    # The preset's defaults fill whatever the request left out.
    defaults = toy.config()
    assert (config.draft_len, config.beta, config.max_new_tokens) == (defaults.draft_len, defaults.beta, defaults.max_new_tokens)


def test_compare_reports_speedup_from_both_runs(comparison):
    report = comparison.report
    stats = comparison.spec.generation.stats
    assert report.alpha == stats.alpha
    assert report.draft_len == comparison.config.draft_len
    assert report.measured > 0 and report.predicted > 0


def test_settings_reach_the_config(toy):
    result = app_logic.compare(
        Request(text="Hi.", preset=TOY_KEY, draft="copy", draft_len=2.0, beta=0.0, acceptance="exact",
                temperature=0.7, top_k=20, top_p=0.9, seed=3, max_new_tokens=16.0)
    )
    config = result.config
    assert (config.draft_len, config.acceptance, config.temperature, config.top_k, config.top_p) == (2, "exact", 0.7, 20, 0.9)
    assert config.max_new_tokens == 16 and result.spec.generation.stats.new_tokens <= 16
    # A draft identical to the target is always right: every block is accepted whole.
    stats = result.spec.generation.stats
    assert stats.acceptance_rate == 1.0
    assert all(step.next_kind in ("bonus", "none") for step in result.spec.generation.steps)


def test_unknown_draft_falls_back_to_the_default(toy):
    preset = get_preset(TOY_KEY)
    assert app_logic.resolve_draft(preset, toy, "no-such-draft") == "small"
    assert app_logic.resolve_draft(preset, toy, None) == "small"
    assert app_logic.resolve_draft(preset, toy, "copy") == "copy"


@pytest.mark.parametrize(
    "text, message",
    [("", "type some text"), ("   ", "type some text"), ("x" * 500, "at most 120"), ("naïve ☃", "cannot read")],
)
def test_bad_text_is_a_text_error(toy, text, message):
    with pytest.raises(TextError, match=message):
        app_logic.compare(Request(text=text, preset=TOY_KEY))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"draft_len": 0}, "draft_len"),
        ({"draft_len": 2.5}, "draft_len must be an integer"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": -1.0}, "temperature"),
        ({"acceptance": "magic"}, "acceptance"),
        ({"beta": "lots"}, "beta"),
        ({"seed": -4}, "seed"),
    ],
)
def test_bad_settings_are_value_errors(toy, changes, message):
    with pytest.raises(ValueError, match=message):
        app_logic.compare(Request(text=TEXT, preset=TOY_KEY, **changes))


def test_unknown_preset_and_load_failures(toy):
    with pytest.raises(KeyError, match="unknown preset"):
        app_logic.compare(Request(text=TEXT, preset="no-such-preset"))

    def broken(device):
        raise FileNotFoundError("weights.safetensors not found")

    register(Preset(key="broken", label="Broken", description="", licence="", drafts=("d",), default_draft="d", loader=broken))
    with pytest.raises(ModelLoadError, match="Broken.*weights.safetensors"):
        app_logic.compare(Request(text=TEXT, preset="broken"))


def test_seeds():
    assert app_logic.resolve_seed(12, False) == 12
    assert app_logic.resolve_seed(12.0, False) == 12
    drawn = {app_logic.resolve_seed(12, True) for _ in range(5)}
    assert len(drawn) > 1 and all(0 <= s <= app_logic.MAX_SEED for s in drawn)
    with pytest.raises(ValueError, match="seed"):
        app_logic.resolve_seed(1.5, False)


def test_randomised_seed_is_reported_and_reproducible(toy):
    first = app_logic.compare(Request(text=TEXT, preset=TOY_KEY, randomize_seed=True))
    again = app_logic.compare(Request(text=TEXT, preset=TOY_KEY, seed=first.seed))
    assert again.spec.generation.tokens == first.spec.generation.tokens
    assert again.ar.generation.tokens == first.ar.generation.tokens


def test_warm_up_runs_once_per_draft(toy):
    app_logic.warm_up(toy, "small")
    assert app_logic.warm_up(toy, "small") is False


def _record(drafted, accepted, next_token, kind):
    return RoundRecord(drafted, accepted, next_token, kind, 0.0, 0.0, 0.0)


def test_token_view_colours_every_round():
    steps = [
        _record([1, 2, 3], 1, 9, "replacement"),
        _record([4, 5], 2, 6, "bonus"),
        _record([7, EOS_ID, 8], 2, None, "none"),
    ]
    stats = GenerationStats(**{name: 0 for name in GenerationStats.__dataclass_fields__})
    generation = GenerationResult(tokens=[], steps=steps, stats=stats)
    view = app_logic.token_view(generation, label=lambda t: f"s{t}", eos_ids=(EOS_ID,))
    assert view == [
        ("s1", "accepted"), ("s2", "rejected"), ("→s9", "replacement"), ("s3", "discarded"),
        (" | ", None),
        ("s4", "accepted"), ("s5", "accepted"), ("+s6", "bonus"),
        (" | ", None),
        ("s7", "accepted"), ("END", "accepted"), ("s8", "discarded"),
    ]
    assert {category for _, category in view if category} <= set(app_logic.TOKEN_COLOURS)


def test_token_view_of_a_real_run_has_one_group_per_round(comparison):
    view = app_logic.comparison_token_view(comparison)
    rounds = comparison.spec.generation.steps
    assert sum(1 for text, _ in view if text == " | ") == len(rounds) - 1
    kept = sum(1 for _, category in view if category in ("accepted", "replacement", "bonus"))
    assert kept == len(comparison.spec.generation.tokens)


def test_audio_files_are_named_int16_wavs(comparison, tmp_path):
    ar_path, spec_path = app_logic.write_audio_files(comparison, tmp_path)
    assert ar_path.name == "toy_seed7_autoregressive.wav"
    assert spec_path.name == "toy_seed7_speculative_small_ssd_K3_beta0.2.wav"
    for path, result in ((ar_path, comparison.ar), (spec_path, comparison.spec)):
        info = soundfile.info(str(path))
        assert info.subtype == "PCM_16" and info.samplerate == result.sample_rate
        assert info.frames == len(result.audio)
        speech = [t for t in result.generation.tokens if t != EOS_ID]
        assert info.duration == pytest.approx(len(speech) * TOKEN_SECONDS)


def test_int16_conversion_keeps_relative_loudness(tmp_path):
    loud = 0.8 * np.sin(np.linspace(0, 100, 4000)).astype(np.float32)
    quiet = 0.1 * loud
    app_logic.write_wav(tmp_path / "loud.wav", loud, 16000)
    app_logic.write_wav(tmp_path / "quiet.wav", quiet, 16000)
    a, _ = soundfile.read(tmp_path / "loud.wav", dtype="int16")
    b, _ = soundfile.read(tmp_path / "quiet.wav", dtype="int16")
    # No per-clip normalisation: the quiet clip stays a tenth of the loud one.
    assert np.abs(b).max() / np.abs(a).max() == pytest.approx(0.1, abs=2e-3)
    assert abs(int(np.abs(a).max()) - 0.8 * 32767) < 40
    clipped = app_logic.to_int16(np.array([2.0, -3.0, np.nan], dtype=np.float32))
    assert clipped.tolist() == [32767, -32767, 0]


def test_audio_directories_are_per_request(tmp_path):
    first, second = app_logic.audio_directory(tmp_path), app_logic.audio_directory(tmp_path)
    assert first != second and first.parent == second.parent == tmp_path


def test_stats_and_details_agree_with_the_results(comparison):
    rows = {name: (ar, spec) for name, ar, spec in app_logic.stats_rows(comparison)}
    ar_stats, spec_stats = comparison.ar.generation.stats, comparison.spec.generation.stats
    assert rows["Tokens sampled"] == (str(ar_stats.sampled_tokens), str(spec_stats.sampled_tokens))
    assert rows["Target calls"] == (str(ar_stats.target_calls), str(spec_stats.target_calls))
    assert rows["Acceptance rate (accepted / drafted)"][1] == f"{spec_stats.acceptance_rate * 100:.1f} %"
    markdown = app_logic.stats_markdown(comparison)
    assert markdown.startswith("| | Autoregressive | Speculative |") and "seed 7" in markdown
    assert "**Reading the table.**" in markdown and "*α* is the expected acceptance" in markdown
    assert "draft heads" not in markdown  # the heads' note only where they drafted
    assert "Not spoken" not in markdown and comparison.left_out == ""
    with_left_out = dataclasses.replace(comparison, left_out="你好")
    assert "**Not spoken:** 你好" in app_logic.stats_markdown(with_left_out)
    assert app_logic.details(with_left_out)["not_spoken"] == "你好" and app_logic.details(comparison)["not_spoken"] == ""

    details = json.loads(json.dumps(app_logic.details(comparison)))  # JSON-safe
    assert details["seed"] == 7 and details["draft"] == "small"
    assert details["speculative"]["tokens"] == comparison.spec.generation.tokens
    assert details["speculative"]["stats"]["target_calls"] == spec_stats.target_calls
    assert details["speedup"]["predicted"] == pytest.approx(comparison.report.predicted)
    assert "allowed_token_ids" not in details["config"]


def test_figures_are_built_for_a_real_run(comparison):
    figures = app_logic.figures(comparison)
    assert set(figures) == {"accepted_length", "tokens_vs_time", "timing_breakdown", "acceptance_by_position"}
    assert all(figure.axes[0].get_title() for figure in figures.values())


def test_preset_defaults_come_from_the_synthesizer(toy):
    defaults = app_logic.preset_defaults(TOY_KEY)
    assert defaults.drafts == ("small", "copy") and defaults.default_draft == "small"
    assert defaults.max_text_chars == toy.backend.max_text_chars
    assert defaults.config.draft_len == toy.config().draft_len


# --- the embedded voice, once its trained assets are in the repository -------------------------

EMBEDDED_ASSETS = REPOSITORY / "assets" / "embedded"


def _embedded_or_skip():
    pytest.importorskip("ssd_demo.backends.embedded")
    if not EMBEDDED_ASSETS.is_dir() or not any(EMBEDDED_ASSETS.iterdir()):
        pytest.skip("the embedded voice's trained assets (assets/embedded/) are not present")
    try:
        return load_preset("embedded")
    except FileNotFoundError as error:
        pytest.skip(f"the embedded voice's assets are incomplete: {error}")


@pytest.mark.slow
def test_embedded_voice_compares_end_to_end(tmp_path):
    synthesizer = _embedded_or_skip()
    result = app_logic.compare(Request(text="The cat sat on the mat.", preset="embedded", seed=1))
    for run in (result.ar, result.spec):
        assert 0.3 < run.duration_seconds < 15
        assert np.isfinite(run.audio).all() and np.abs(run.audio).max() > 1e-3
    assert result.draft in synthesizer.drafts
    ar_path, spec_path = app_logic.write_audio_files(result, tmp_path)
    assert soundfile.info(str(spec_path)).subtype == "PCM_16"


def test_preset_descriptions_list_licence_and_weights():
    from ssd_demo.backends.registry import list_presets

    presets = list_presets()
    assert presets[0].key == "embedded"  # the offline voice is the default, first in the list
    for preset in presets:
        text = app_logic.preset_markdown(preset)
        assert preset.label in text and f"Licence: {preset.licence}" in text
        if preset.needs_download:
            assert "Weights:" in text


def test_cpu_threads_follow_model_size(toy, monkeypatch):
    monkeypatch.delenv("SSD_TORCH_THREADS", raising=False)
    assert app_logic.cpu_threads_for(toy) == 1  # a tiny model: overhead-bound
    monkeypatch.setenv("SSD_TORCH_THREADS", "3")
    assert app_logic.cpu_threads_for(toy) == 3
    monkeypatch.setattr(cpu_threads, "SMALL_MODEL_PARAMETERS", 10)
    monkeypatch.delenv("SSD_TORCH_THREADS")
    assert app_logic.cpu_threads_for(toy) == cpu_threads._DEFAULT_THREADS


def test_example_texts_are_short_enough_for_every_voice():
    examples = app_logic.example_texts()
    assert 1 <= len(examples) <= app_logic.MAX_EXAMPLES
    assert all(0 < len(text) <= 120 for text in examples)  # the toy voice's limit, the smallest here


def test_a_run_cut_at_the_length_limit_is_flagged(toy, comparison):
    cut = app_logic.compare(Request(text=TEXT, preset=TOY_KEY, seed=7, max_new_tokens=1))
    reasons = [run.generation.stats.finish_reason for run in (cut.ar, cut.spec)]
    assert "length" in reasons  # one token is never a whole utterance
    note = app_logic.length_limit_note(cut)
    assert note.startswith("**Stopped at the length limit:**") and "(limit 1 token)" in note
    assert note in app_logic.stats_markdown(cut)
    assert app_logic.details(cut)["autoregressive"]["stats"]["finish_reason"] == reasons[0]
    finished = {run.generation.stats.finish_reason for run in (comparison.ar, comparison.spec)} == {"eos"}
    assert (app_logic.length_limit_note(comparison) is None) == finished


def test_gpu_memory_is_checked_inside_the_gpu_call(toy, monkeypatch):
    from ssd_demo.models import memory as model_memory

    checked = []
    monkeypatch.setattr(model_memory, "check_gpu_memory", lambda synthesizer: checked.append(synthesizer))
    session.decode_job(session.Job(TOY_KEY, None, TEXT, toy.config(max_new_tokens=4, seed=1), "small", None,
                                   toy.script(TEXT)))
    assert [synthesizer.backend.name for synthesizer in checked] == ["toy"]  # the pair that then runs


def test_the_comparison_shows_this_machines_costs_and_adaptive_k_uses_them(toy):
    comparison = app_logic.compare(Request(text=TEXT, preset=TOY_KEY, seed=3, adaptive_draft_len=True))
    costs = comparison.costs
    assert costs is not None and costs.verify[0] == 1.0 and len(costs.verify) > comparison.config.draft_len
    assert comparison.config.verify_costs == costs.verify and comparison.config.cost_ratio == costs.draft
    text = app_logic.stats_markdown(comparison)
    assert "Calibrated here" in text and "Predicted speedup, calibrated costs" in text
    # One formula for every prediction: the strict one is the calibrated one with this run's own costs.
    from ssd_demo.engine.calibration import StepCosts, predicted_with
    report = comparison.report
    own = StepCosts(draft=report.cost_ratio, verify=(1.0,) * report.draft_len + (report.verify_ratio,),
                    target_step_seconds=1.0)
    assert predicted_with(report.alpha, own, report.draft_len) == pytest.approx(report.predicted_strict)
    at_used = predicted_with(report.alpha, costs, comparison.config.draft_len)
    assert f"K = {comparison.config.draft_len}: {at_used:.2f}×" in text
    # Each calibrated verify cost says where it comes from: timed, raised to a shorter block's, or filled in.
    timed = dict(costs.measured_verify)
    origins = app_logic.details(comparison)["calibration"]["verify_origin"]
    for k in range(1, len(costs.verify)):
        expected = ("filled in" if k not in timed else "measured" if costs.verify[k] == timed[k] else "raised")
        assert origins[k] == expected == costs.verify_origin(k)
    assert f"| Target's matmul kernels here (rows = tokens per call) | {costs.kernels} | {costs.kernels} |" in text
    calibration = app_logic.details(comparison)["calibration"]
    assert 0 <= calibration["best_draft_len"] <= comparison.config.draft_len
    assert calibration["kernels"] == costs.kernels == "BLAS matmuls (too small a model to time the kernels)"
    fixed = app_logic.compare(Request(text=TEXT, preset=TOY_KEY, seed=3))
    assert fixed.config.verify_costs is None and fixed.costs is not None  # shown, not used, with fixed K


def test_an_unknown_draft_is_replaced_and_the_stats_say_so(toy):
    comparison = app_logic.compare(Request(text=TEXT, preset=TOY_KEY, draft="nope", seed=1))
    assert comparison.draft == "small" and comparison.requested_draft == "nope"
    assert "Draft `nope` is not available for this preset;** `small` was used" in app_logic.stats_markdown(comparison)
    assert app_logic.compare(Request(text=TEXT, preset=TOY_KEY, draft="copy", seed=1)).requested_draft is None

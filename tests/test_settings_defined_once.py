"""Each decoding setting is defined once and checked by one validator (`SettingSpec.accept`): the config, the
app and every CLI flag refuse the same values in the same words, and a bug (any exception that is not a UserError) is reported as one by the CLI and the app alike."""

import argparse
import math

import pytest

from ssd_demo import DecodingConfig
from ssd_demo.__main__ import main
from ssd_demo.app.compare import COMPARE_SETTINGS, SETTINGS_BY_NAME
from ssd_demo.app.compare import settings as app_settings
from ssd_demo.app.errors import INTERNAL_ERROR_MESSAGE, to_gradio_error
from ssd_demo.config import MAX_SEED, SETTINGS, resolve_seed
from ssd_demo.errors import InvalidSettingError, UserError
from ssd_demo.listening.errors import ListeningError
from ssd_demo.cli import bench, evaluation, sweep
from ssd_demo.cli import synth

#: Each tool's parser and the shortest argv that reaches its decoding-setting check (no model is loaded first).
CLIS = {"synth": (synth, ["synth", "Hello.", "--out", "/dev/null"]), "bench": (bench, ["bench"]),
        "eval": (evaluation, ["eval"]), "sweep": (sweep, ["sweep"])}


def _out_of_bounds(spec) -> list[object]:
    """Values just outside the spec's own bounds (and a wrong kind)."""
    if spec.kind == "choice":
        return ["no-such-choice"]
    if spec.kind == "bool":
        return ["maybe"]
    values: list[object] = ["abc"]
    step = 1 if spec.kind == "int" else 0.5
    if spec.minimum is not None:
        values.append(spec.minimum if spec.min_exclusive else spec.minimum - step)
    if spec.maximum is not None:
        values.append(spec.maximum if spec.max_exclusive else spec.maximum + step)
    return [int(v) if spec.kind == "int" and isinstance(v, float) else v for v in values]


def _flags(tool) -> set[str]:
    parser = argparse.ArgumentParser()
    tool.add_arguments(parser)
    return {option for action in parser._actions for option in action.option_strings}


CASES = [(spec, value) for spec in SETTINGS.values() for value in _out_of_bounds(spec)]


@pytest.mark.parametrize(("spec", "value"), CASES, ids=[f"{s.name}={v!r}" for s, v in CASES])
def test_a_value_out_of_the_specs_bounds_is_refused_everywhere_alike(spec, value, capsys):
    with pytest.raises(InvalidSettingError, match=f"^Invalid decoding setting: {spec.name} must be"):
        DecodingConfig(**{spec.name: value})
    with pytest.raises(InvalidSettingError, match=f"^Invalid decoding setting: {spec.name} must be"):
        spec.accept(value)  # a submitted value, as the library takes it
    if spec.name in SETTINGS_BY_NAME:
        with pytest.raises(InvalidSettingError, match=f"^Invalid decoding setting: {spec.name} must be"):
            spec.accept(value, controls=True, defaults=DecodingConfig())  # the app's range lies within the spec's
    if spec.kind == "bool" or isinstance(value, str):
        return  # a switch takes no value; argparse itself refuses a word where a number goes
    for name, (tool, argv) in CLIS.items():
        if spec.cli_flag in _flags(tool):
            assert main(argv + [spec.cli_flag, str(value)]) == 2, name
            err = capsys.readouterr().err
            assert f"Invalid decoding setting: {spec.name} must be {spec.requirement_text()}" in err, (name, err)
            assert "Traceback" not in err


def test_every_cli_flag_of_a_setting_is_the_specs_flag():
    taken = {name: {s.name for s in SETTINGS.values() if s.cli_flag in _flags(tool)} for name, (tool, _) in CLIS.items()}
    assert taken == {
        "synth": {"draft_len", "beta", "acceptance", "temperature", "top_k", "top_p", "max_new_tokens", "seed"},
        "bench": {"draft_len", "beta", "acceptance", "temperature", "top_k", "top_p", "max_new_tokens", "seed"},
        "eval": {"draft_len", "temperature", "adaptive_draft_len", "max_new_tokens", "seed"},
        "sweep": {"cost_ratio", "seed"},
    }


@pytest.mark.parametrize("setting", [s for s in COMPARE_SETTINGS if s.name in SETTINGS and s.kind in ("int", "float")],
                         ids=lambda s: s.name)
def test_the_apps_range_lies_within_the_specs_and_its_bounds_are_accepted_by_both(setting):
    low, high, low_open, _ = setting.bounds(controls=True, defaults=DecodingConfig())
    for value in (low, high):
        if value == low and low_open:
            value = value + (setting.control.step or 0.01) / 10
        assert setting.problem(int(value) if setting.kind == "int" else float(value)) is None
        DecodingConfig(**{setting.name: setting.accept(value, controls=True, defaults=DecodingConfig())})
    assert setting.default == getattr(DecodingConfig(), setting.name)


def test_the_app_keeps_its_narrower_ranges_in_the_librarys_words():
    defaults = DecodingConfig()
    for name, value, words in (("draft_len", 17, "an integer from 1 to 16"), ("seed", MAX_SEED + 1, "an integer from 0 to"),
                               ("pcg_theta", -0.5, "between 0 and 1"), ("temperature", 2.5, "between 0 and 2")):
        DecodingConfig(**{name: value})  # the library takes it ...
        with pytest.raises(InvalidSettingError, match=f"{name} must be {words}"):  # ... the app does not, as before
            SETTINGS[name].accept(value, controls=True, defaults=defaults)
    top_p = SETTINGS["top_p"]
    assert top_p.accept(0.01, controls=True) == 0.01  # below the slider, within the spec: accepted as before
    assert app_settings.control_range(top_p, defaults)[0] == 0.05  # ... though the slider starts higher
    with pytest.raises(InvalidSettingError, match=r"top_p must be in \(0, 1\]"):
        top_p.accept(0, controls=True)
    # beta: one range and one message, the library's, wherever it is checked
    for check in (lambda: DecodingConfig(beta=5), lambda: SETTINGS["beta"].accept(5),
                  lambda: SETTINGS["beta"].accept(5, controls=True, defaults=defaults)):
        with pytest.raises(InvalidSettingError, match=r"^Invalid decoding setting: beta must be between 0 and 1 "
                                                      r"\(1 keeps every drafted token\), got 5$"):
            check()


def test_a_growing_control_reaches_the_presets_default():
    spec, roomy = SETTINGS["max_new_tokens"], DecodingConfig(max_new_tokens=3000)
    assert spec.accept(3000.0, controls=True, defaults=roomy) == 3000
    assert app_settings.control_range(spec, roomy) == (8, 3000)
    with pytest.raises(InvalidSettingError, match="max_new_tokens must be an integer from 1 to 2048"):
        spec.accept(3000, controls=True, defaults=DecodingConfig())


def test_submitted_values_are_converted_once():
    assert SETTINGS["draft_len"].accept(16.0) == 16 and type(SETTINGS["draft_len"].accept(16.0)) is int
    assert SETTINGS["beta"].accept(1) == 1.0 and SETTINGS["adaptive_draft_len"].accept(1) is True
    assert SETTINGS["acceptance"].accept("exact") == "exact"
    for name, value in (("draft_len", 2.5), ("draft_len", True), ("beta", "lots"), ("beta", math.nan),
                        ("adaptive_draft_len", "maybe"), ("acceptance", "magic")):
        with pytest.raises(InvalidSettingError, match=f"{name} must be {SETTINGS[name].requirement_text()}"):
            SETTINGS[name].accept(value)


def test_one_request_takes_every_setting_within_the_librarys_or_the_controls_ranges():
    from ssd_demo import comparison

    class Defaults:
        def config(self, **changes):
            return DecodingConfig(**changes)

    assert set(comparison.REQUEST_SETTINGS) == set(SETTINGS) | {"randomize_seed", "text_normalizer"}
    official = comparison.Request(text="Hi.", text_normalizer="official")
    assert comparison.build_config(Defaults(), official, seed=0) == DecodingConfig(seed=0)  # not a decoding setting
    assert official.accepted("text_normalizer") == "official"
    with pytest.raises(InvalidSettingError, match="text_normalizer"):
        comparison.Request(text="Hi.", text_normalizer="loud").accepted("text_normalizer")
    wide = comparison.Request(text="Hi.", draft_len=17, cost_ratio=0.5, pcg_theta=-0.5)
    config = comparison.build_config(Defaults(), wide, seed=0)  # the library's whole range
    assert (config.draft_len, config.cost_ratio, config.pcg_theta) == (17, 0.5, -0.5)
    with pytest.raises(InvalidSettingError, match="draft_len"):
        comparison.build_config(Defaults(), comparison.Request(text="Hi.", draft_len=65), seed=0)
    with pytest.raises(TypeError, match="unknown setting"):
        comparison.Request(text="Hi.", no_such_setting=1)
    app = dict(within_controls=True)  # the web app's requests: within the controls' ranges
    with pytest.raises(InvalidSettingError, match="draft_len must be an integer from 1 to 16, got 17"):
        comparison.build_config(Defaults(), comparison.Request(text="Hi.", draft_len=17, **app), seed=0)
    assert comparison.build_config(Defaults(), comparison.Request(text="Hi.", draft_len=16.0, **app), seed=0).draft_len == 16
    # Not given (left out or None): the preset's default fills it.
    given = comparison.build_config(Defaults(), comparison.Request(text="Hi.", beta=None, top_k=None, **app), seed=0)
    assert given == DecodingConfig(seed=0)


def test_the_app_has_no_validator_of_its_own():
    assert not hasattr(app_settings, "Setting") and not hasattr(app_settings, "coerce_control")
    assert all(control is SETTINGS.get(control.name, control) for control in COMPARE_SETTINGS)


def test_one_seed_rule():
    assert resolve_seed(7) == 7 and resolve_seed(7.0) == 7
    assert all(0 <= resolve_seed(None) <= MAX_SEED for _ in range(20))
    assert 0 <= resolve_seed(7, randomize=True) <= MAX_SEED
    assert resolve_seed(2**40) == 2**40  # the library (and the CLI) accept more than the app shows
    for bad in (1.5, -1, 2**63, "abc", math.inf):
        with pytest.raises(InvalidSettingError, match="seed"):
            resolve_seed(bad)


def test_listening_errors_are_user_errors():
    assert issubclass(ListeningError, UserError) and issubclass(ListeningError, ValueError)


def test_an_internal_fault_is_a_traceback_and_exit_1_in_the_cli(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("a bug deep inside")

    monkeypatch.setattr(bench, "main", broken)
    assert main(["bench"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug deep inside" in err and "internal error" in err


def test_a_plain_value_error_is_an_internal_fault_too(monkeypatch, capsys):
    monkeypatch.setattr(bench, "main", lambda args: int("not a number"))
    assert main(["bench"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_an_internal_fault_is_the_internal_error_message_in_the_app(caplog):
    shown = to_gradio_error(RuntimeError("a bug deep inside"))
    assert shown.message == INTERNAL_ERROR_MESSAGE and "a bug deep inside" not in shown.message
    assert any(record.exc_info and "a bug deep inside" in str(record.exc_info[1]) for record in caplog.records)


def test_a_flags_former_name_is_still_accepted():
    # --adaptive-k was adaptive_draft_len's flag before every flag took its setting's name
    parser = argparse.ArgumentParser()
    evaluation.add_arguments(parser)
    assert SETTINGS["adaptive_draft_len"].cli_flag == "--adaptive-draft-len"
    for flag in ("--adaptive-draft-len", "--adaptive-k"):
        assert parser.parse_args([flag]).adaptive_draft_len is True
    assert parser.parse_args([]).adaptive_draft_len is False

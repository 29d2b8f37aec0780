"""User errors are told apart by type: one hierarchy, one ModelLoadError, the app maps by class."""

import gradio as gr
import pytest

from ssd_demo import DecodingConfig, errors
from ssd_demo.app.compare import build_config, resolve_seed
from ssd_demo.errors import ModelNotFoundError
from ssd_demo.backends.registry import get_preset
from ssd_demo.text import check_text
from ssd_demo.app.errors import to_gradio_error as _user_error


def test_every_user_error_is_a_value_error_with_its_own_title():
    kinds = [errors.InvalidSettingError, errors.UnknownPresetError, errors.TextError, errors.ModelLoadError,
             errors.InputError]
    for kind in kinds:
        assert issubclass(kind, errors.UserError) and issubclass(kind, ValueError)
    assert len({kind.title for kind in kinds}) == len(kinds)
    assert issubclass(errors.UnknownPresetError, KeyError)  # presets are looked up by key
    assert issubclass(ModelNotFoundError, errors.ModelLoadError)  # the Hub loader's kinds are load errors


def test_the_modules_raise_the_kinds():
    with pytest.raises(errors.InvalidSettingError, match="^Invalid decoding setting: beta must be between 0 and 1"):
        DecodingConfig(beta=-1.0)
    with pytest.raises(errors.InvalidSettingError, match="seed"):
        resolve_seed(1.5, randomize=False)
    with pytest.raises(errors.UnknownPresetError) as caught:
        get_preset("no-such-preset")
    assert str(caught.value).startswith("unknown preset 'no-such-preset'")  # not KeyError's quoted repr
    with pytest.raises(errors.TextError):
        check_text("\x00\x01 ")


@pytest.mark.parametrize(("error", "title"), [
    (errors.InvalidSettingError("top_p must be in (0, 1]"), "Invalid settings"),
    (errors.UnknownPresetError("unknown preset 'x'"), "Unknown preset"),
    (errors.TextError("text is empty"), "Cannot synthesise"),
    (errors.ModelLoadError("org/model: no config.json"), "Cannot load the models"),
])
def test_the_app_shows_a_user_error_as_its_message_under_its_title(error, title):
    shown = _user_error(error)
    assert isinstance(shown, gr.Error)
    assert shown.title == title and shown.message == str(error)


def test_the_app_does_not_classify_by_message_text():
    # An internal error that happens to start like a settings error is not shown as one.
    shown = _user_error(RuntimeError("Invalid decoding setting: from deep inside a library"))
    assert shown.title == "Error" and "internal error" in shown.message
    assert "deep inside" not in shown.message  # an internal message stays in the log


def test_build_config_reports_a_non_number_as_an_invalid_setting():
    from ssd_demo.app.compare import Request

    class Defaults:
        def config(self, **changes):
            return DecodingConfig(**changes)

    with pytest.raises(errors.InvalidSettingError, match="beta must be between 0 and 1"):
        build_config(Defaults(), Request(text="Hi.", beta="abc"), seed=0)

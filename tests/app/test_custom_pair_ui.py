"""Custom pairs and voice prompts from the app: registered as presets, loaded offline, cloned voices."""

import numpy as np
import pytest

from support.llasa_fixtures import build_llasa_family, sine_clip
from ssd_demo.app import compare as app_logic
from ssd_demo.backends import registry as presets
from ssd_demo.app.compare import Request
from ssd_demo.errors import ModelLoadError


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return build_llasa_family(tmp_path_factory.mktemp("pair"))


def test_voice_prompt_from_an_upload():
    stereo = (np.stack([sine_clip(1.0, 16000)] * 2, axis=1) * 32767).astype(np.int16)
    prompt = app_logic.voice_prompt_from_upload((16000, stereo), "  a short clip ")
    assert prompt.audio.dtype == np.float32 and prompt.audio.ndim == 1 and np.abs(prompt.audio).max() <= 1.0
    assert prompt.sample_rate == 16000 and prompt.transcript == "a short clip"
    assert app_logic.voice_prompt_from_upload(None, "") is None
    with pytest.raises(ValueError, match="needs its transcript"):
        app_logic.voice_prompt_from_upload((16000, stereo), " ")
    with pytest.raises(ValueError, match="without a clip"):
        app_logic.voice_prompt_from_upload(None, "words")


def test_custom_pair_becomes_a_preset_and_clones_a_voice(family):
    preset = presets.register_custom_pair(str(family.target), str(family.draft), str(family.codec))
    try:
        assert preset.key in [p.key for p in presets.list_presets()]
        assert presets.list_presets()[0].key == "embedded" and not preset.needs_download
        clip = app_logic.voice_prompt_from_upload((16000, sine_clip(1.0, 16000)), "hello")
        request = Request(text="hello there", preset=preset.key, draft_len=3, max_new_tokens=30, seed=1,
                          voice_prompt=clip)
        comparison = app_logic.compare(request)
        assert comparison.draft == preset.default_draft
        assert comparison.ar.audio.size > 0 and comparison.spec.audio.size > 0
        assert comparison.spec.generation.stats.new_tokens <= 30
    finally:
        presets.unload()


def test_custom_pair_errors_are_clear(family):
    with pytest.raises(ModelLoadError, match="both a target and a draft"):
        presets.register_custom_pair("", str(family.draft))
    missing = presets.register_custom_pair("no-such-org/no-such-model", str(family.draft), str(family.codec))
    with pytest.raises(Exception, match="no-such-org/no-such-model"):
        presets.load_preset(missing.key)

"""The app with a CosyVoice 2 preset (a tiny checkpoint folder laid out like the Hub repository) beside a page
whose default preset is another (the toy voice): /synthesize, naming CosyVoice 2 and nothing else, speaks 24 kHz
audio with both decoders at CosyVoice 2's own (the paper's) settings, takes a voice clip, and refuses sampling
settings that CosyVoice 2's own sampling would override."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
from gradio_client import Client, handle_file

from ssd_demo.backends.cosyvoice2.loading import load_cosyvoice2
from ssd_demo.backends.registry import Preset, register
from support.cosyvoice2 import FLOW, HIFT, SPEECH, FakeEncoders, build_tiny_checkpoint, default_voice
from support.toy_backend import TOY_KEY, register_toy_preset

pytestmark = pytest.mark.server

KEY = "cosyvoice2-tiny"
OUTPUTS = ("ar_audio", "spec_audio", "stats", "tokens", "tokens_vs_time", "breakdown", "accepted_length",
           "by_position", "details", "seed_used")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = build_tiny_checkpoint(tmp_path_factory.mktemp("CosyVoice2-0.5B"))

    def load(device):
        synthesizer = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT)
        synthesizer.backend.encoders = FakeEncoders()
        return synthesizer

    register(Preset(key=KEY, label="CosyVoice 2 (tiny, tests)", description="", licence="Apache-2.0",
                    drafts=("layers",), default_draft="layers", loader=load, sample_rate=24_000))
    from ssd_demo.app.page import build_demo

    register_toy_preset()
    demo = build_demo(default_preset=TOY_KEY)  # the settings an API caller leaves out are not the page's
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    yield Client(url, verbose=False)
    demo.close()


def _named(result) -> dict:
    return dict(zip(OUTPUTS, result))


def test_both_decoders_speak_at_the_paper_settings(client):
    out = _named(client.predict("A cat sat on the mat.", preset=KEY, api_name="/synthesize"))
    details = out["details"]
    config = details["config"]  # CosyVoice 2's defaults, not the page's default preset's (K 3, beta 0.2, ...)
    assert (config["draft_len"], config["beta"], config["temperature"], config["top_k"]) == (3, 0.4, 1.0, 0)
    assert details["preset"] == KEY and details["draft"] == "layers"
    for key, run in (("ar_audio", "autoregressive"), ("spec_audio", "speculative")):
        info = soundfile.info(out[key])
        speech = [t for t in details[run]["tokens"] if t < SPEECH]
        assert info.samplerate == 24_000 and info.frames == len(speech) * 2 * HIFT.hop_length
    assert "| Autoregressive | Speculative |" in out["stats"]


def test_a_voice_clip_and_its_transcript_are_taken(client, tmp_path):
    clip = tmp_path / "me.wav"
    soundfile.write(clip, (0.1 * np.sin(np.arange(24_000) / 9)).astype(np.float32), 24_000)
    calls = FakeEncoders.calls
    out = _named(client.predict("A cat.", preset=KEY, voice_audio=handle_file(str(clip)),
                                voice_transcript="What I say.", api_name="/synthesize"))
    assert FakeEncoders.calls == calls + 1 and soundfile.info(out["ar_audio"]).frames > 0


def test_sampling_settings_it_would_override_are_refused(client):
    with pytest.raises(Exception, match="repetition-aware sampling"):
        client.predict("A cat.", preset=KEY, temperature=0.7, api_name="/synthesize")

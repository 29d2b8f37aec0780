"""The shipped phoneme recognizer hears eSpeak NG speech (also through the codec) and tells wrong text apart."""

import numpy as np
import pytest
import torch

from ssd_demo import text as text_frontend
from ssd_demo.speech.codec import Codec
from ssd_demo.measure.recognizer import DEFAULT_PATH, Recognizer, greedy_decode, phoneme_error_rate, readable
from ssd_demo.training.render import render

needs_recognizer = pytest.mark.skipif(not (DEFAULT_PATH / "recognizer.json").exists(), reason="recognizer not shipped")
CLIP_TEXT = "Please bring the yellow umbrella to the station tomorrow."


def test_greedy_decode_collapses_repeats_and_drops_blanks():
    frames = torch.full((7, 4), -10.0)
    for t, label in enumerate([0, 2, 2, 0, 2, 3, 3]):
        frames[t, label] = 0.0
    assert greedy_decode(frames, 7) == [1, 1, 2]
    assert greedy_decode(frames, 3) == [1]


def test_phoneme_error_rate_counts_edits_over_the_reference():
    assert phoneme_error_rate([1, 2, 3], [1, 2, 3]) == 0.0
    assert phoneme_error_rate([1, 3], [1, 2, 3]) == pytest.approx(1 / 3)
    assert phoneme_error_rate([1, 2, 3, 4, 5, 6], [1, 2, 3]) == 1.0
    assert phoneme_error_rate([], []) == 0.0


@pytest.fixture(scope="module")
def recognizer():
    return Recognizer.load()


@needs_recognizer
def test_recognizer_hears_a_fixed_espeak_clip(recognizer):
    audio = render(text_frontend.check_text(CLIP_TEXT))
    heard = recognizer.transcribe(audio)
    reference = text_frontend.base_phonemes(text_frontend.phonemes(CLIP_TEXT))
    assert phoneme_error_rate(heard, reference) <= 0.1, readable(heard)
    assert recognizer.per(audio, CLIP_TEXT) == pytest.approx(phoneme_error_rate(heard, reference))


@needs_recognizer
def test_recognizer_hears_the_codec_round_trip_and_rejects_the_wrong_text(recognizer):
    codec = Codec.load(DEFAULT_PATH.parent / "embedded" / "codec")
    audio = codec.decode(codec.encode(render(text_frontend.check_text(CLIP_TEXT))))
    assert recognizer.per(audio, CLIP_TEXT) <= 0.15
    assert recognizer.per(audio, "The weather in Oslo was cold and grey all week.") > 0.6
    assert recognizer.transcribe(np.zeros(320, dtype=np.float32)) == []  # too short to hold a phoneme


@needs_recognizer
def test_shipped_recognizer_records_its_accuracy(recognizer):
    accuracy = recognizer.meta["accuracy"]
    assert accuracy["per_clean"] <= 0.05 and accuracy["per_round_trip"] <= 0.05
    assert sum(p.numel() for p in recognizer.model.parameters()) == recognizer.meta["parameters"]

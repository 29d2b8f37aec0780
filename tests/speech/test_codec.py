"""The speech tokenizer: encode/decode shapes and rates, determinism, save/load, and the MCD metric."""

import numpy as np
import pytest

from ssd_demo.speech.codec import Codec, CodecConfig, fit_codec
from ssd_demo.measure.mcd import dtw_path_cost, mcd_dtw


def _tone(freq: float, seconds: float = 0.6, rate: int = 16_000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t) * np.minimum(1, 10 * t)).astype(np.float32)


@pytest.fixture(scope="module")
def codec() -> Codec:
    audios = [_tone(f) for f in (150, 220, 330, 440, 660, 880, 1200, 2000)]
    return fit_codec(audios, CodecConfig(codebook_size=16, griffin_lim_iters=8), max_frames=10_000)


def test_fifty_tokens_per_second(codec):
    tokens = codec.encode(_tone(440, seconds=1.0))
    assert abs(len(tokens) - 50) <= 1
    assert tokens.min() >= 0 and tokens.max() < 16


def test_decode_length_and_determinism(codec):
    tokens = codec.encode(_tone(330))
    a, b = codec.decode(tokens), codec.decode(tokens)
    assert a.dtype == np.float32
    assert abs(len(a) - len(tokens) * codec.config.hop_length) <= codec.config.hop_length
    assert np.array_equal(a, b)
    assert np.abs(a).max() > 0.01


def test_different_tones_get_different_tokens(codec):
    low, high = codec.encode(_tone(150)), codec.encode(_tone(2000))
    assert np.bincount(low).argmax() != np.bincount(high).argmax()


def test_save_load_round_trip(codec, tmp_path):
    codec.save(tmp_path)
    loaded = Codec.load(tmp_path)
    assert loaded.config == codec.config
    assert np.array_equal(loaded.codebook, codec.codebook)


def test_bad_tokens_and_missing_folder(codec, tmp_path):
    with pytest.raises(ValueError):
        codec.decode([0, 16])
    with pytest.raises(FileNotFoundError):
        Codec.load(tmp_path / "nothing")


def test_dtw_finds_the_diagonal():
    cost = np.ones((4, 4))
    np.fill_diagonal(cost, 0)
    total, length = dtw_path_cost(cost)
    assert total == 0 and length == 4


def test_mcd_orders_similar_before_different():
    a = _tone(440)
    same = mcd_dtw(a, a)
    near = mcd_dtw(a, _tone(450))
    far = mcd_dtw(a, _tone(1500))
    assert same == pytest.approx(0, abs=1e-6)
    assert same < near < far

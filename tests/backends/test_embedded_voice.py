"""The shipped embedded voice: it loads offline, speaks unseen text in both modes, reproducibly."""

import numpy as np
import pytest
import torch

from ssd_demo import Backend, TextError
from ssd_demo.backends.embedded import DEFAULT_PATH, EmbeddedBackend, load_synthesizer
from ssd_demo.text import check_text
from ssd_demo.training.corpus import build_corpus
from support.tiny_models import onednn_call_rows

pytestmark = pytest.mark.skipif(not (DEFAULT_PATH / "voice.json").exists(), reason="embedded voice not shipped")

# Not in the training corpus (checked below): the voice has never heard it.
UNSEEN = "Seven purple kites drift above the harbour."


@pytest.fixture(scope="module")
def synth():
    return load_synthesizer()


def _config(synth, **kw):
    return synth.config(**kw)


def _assert_speech(result, low=0.8, high=6.0):
    assert result.audio.dtype == np.float32
    assert result.sample_rate == 22_050  # the teacher's rate (Piper en_US-joe-medium)
    assert low < result.duration_seconds < high, result.duration_seconds
    assert float(np.sqrt(np.mean(result.audio**2))) > 0.01  # not silence
    assert np.isfinite(result.audio).all() and np.abs(result.audio).max() <= 1.0


def test_assets_load_with_all_three_drafts(synth):
    from ssd_demo.engine.draft_heads import DraftHeads

    assert isinstance(synth.backend, Backend)
    assert set(synth.drafts) == {"distilled", "layers", "heads"}
    assert synth.draft_name == "heads"  # the preferred draft where the voice has heads
    assert synth.left_out("Tokyo 東京 is big.") == "東京" and synth.left_out("Tokyo is big.") == ""
    vocab = synth.target.config.vocab_size
    for name, draft in synth.drafts.items():
        if name == "heads":
            assert isinstance(draft, DraftHeads) and draft.config.hidden == synth.target.config.hidden_size
        else:
            assert draft.config.vocab_size == vocab
    # The target is much deeper than either draft (that is where the speedup comes from).
    assert synth.target.config.num_hidden_layers >= 4 * synth.drafts["distilled"].config.num_hidden_layers


@pytest.mark.slow
def test_unseen_sentence_autoregressive(synth):
    assert UNSEEN not in build_corpus()
    result = synth.synthesize(UNSEEN, mode="ar", config=_config(synth, seed=1))
    _assert_speech(result)
    assert result.generation.stats.finish_reason == "eos"
    assert result.lm_seconds > 0 and result.codec_seconds > 0


@pytest.mark.parametrize("draft", ["distilled", "layers"])
def test_unseen_sentence_speculative(synth, draft):
    result = synth.synthesize(UNSEEN, mode="speculative", config=_config(synth, seed=2), draft=draft)
    _assert_speech(result)
    assert result.generation.stats.accepted_tokens > 0


def test_same_seed_same_audio(synth):
    # Temperature 1 so that a different seed is (practically) sure to change the tokens.
    a = synth.synthesize("Good night.", mode="speculative", config=_config(synth, seed=5, temperature=1.0))
    b = synth.synthesize("Good night.", mode="speculative", config=_config(synth, seed=5, temperature=1.0))
    c = synth.synthesize("Good night.", mode="speculative", config=_config(synth, seed=6, temperature=1.0))
    assert a.generation.tokens == b.generation.tokens
    assert np.array_equal(a.audio, b.audio)
    assert a.generation.tokens != c.generation.tokens


@pytest.mark.parametrize("bad", ["", "   ", "?!", "\u4f60\u597d", "word " * 700])
def test_bad_inputs_raise_text_error(synth, bad):
    with pytest.raises(TextError):
        synth.synthesize(bad, mode="ar", config=_config(synth))


@pytest.mark.slow
def test_text_that_would_take_too_many_chunks_is_refused_before_decoding(synth):
    # 2,990 characters of digits are read digit by digit: far more to say than 3,000 characters of prose
    with pytest.raises(TextError, match="chunks to speak"):
        synth.backend.split_text("7" * 2990)


PARAGRAPH = (
    "Last summer we rented a small cottage near the mountains, far from the noise of the city. Every morning my "
    "brother went out early to photograph the birds, while I stayed behind with a cup of coffee and a good book. "
    "In the afternoons we walked along the river; on the last evening a storm knocked out the electricity, so we "
    "played cards by candlelight until midnight. Would we go back? Absolutely, and next time we will bring "
    "a proper torch, 2 spare batteries and a much better map!"
)


@pytest.mark.parametrize("mode", ["ar", "speculative"])
@pytest.mark.slow
def test_a_paragraph_is_spoken_whole_in_chunks(synth, mode):
    assert len(PARAGRAPH) > 450
    result = synth.synthesize(PARAGRAPH, mode=mode, config=synth.config(seed=3))
    assert len(result.chunks) >= 4
    assert " ".join(c.text for c in result.chunks) == check_text(PARAGRAPH)  # nothing dropped
    for chunk in result.chunks:
        stats = chunk.generation.stats
        assert stats.finish_reason == "eos"  # every chunk ran to its last phoneme
        n_phonemes = len(synth.backend.prompt_ids(chunk.text)) - 3
        # One inserted phoneme per phoneme after the first, and END: nothing skipped.
        assert stats.forced_tokens >= n_phonemes
    seconds = result.duration_seconds
    assert 20 < seconds < 50, seconds  # about 80 words at a reading pace
    assert result.generation.stats.new_tokens == sum(c.generation.stats.new_tokens for c in result.chunks)


def test_tokens_to_audio_ignores_the_end_token(synth):
    backend: EmbeddedBackend = synth.backend
    speech = backend.allowed_token_ids()[:20]
    with_end = backend.tokens_to_audio(speech + [backend.eos_token_id])
    assert np.array_equal(with_end, backend.tokens_to_audio(speech))
    assert len(backend.tokens_to_audio([backend.eos_token_id])) > 0  # a short silence, not an error


def test_unknown_draft_is_refused():
    with pytest.raises(ValueError, match="unknown draft"):
        load_synthesizer(draft="nope")


def test_a_voice_folder_in_the_earlier_espeak_format_is_refused_with_what_to_do(tmp_path):
    import json

    from ssd_demo.errors import ModelLoadError

    meta = json.loads((DEFAULT_PATH / "voice.json").read_text())
    del meta["phonemes"]  # what the eSpeak NG voice's voice.json looked like: no teacher phonemizer
    (tmp_path / "voice.json").write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="earlier eSpeak NG format.*python -m ssd_demo train"):
        EmbeddedBackend.from_directory(tmp_path)


def test_token_view_names_codec_codes():
    pytest.importorskip("ssd_demo.backends.embedded")
    from ssd_demo.backends.embedded import DEFAULT_PATH, EmbeddedBackend

    if not (DEFAULT_PATH / "voice.json").exists():
        pytest.skip("embedded voice not shipped")
    backend = EmbeddedBackend.from_directory(DEFAULT_PATH)
    offset = backend.layout.speech_offset
    assert backend.token_label(offset) == "0" and backend.token_label(offset + 17) == "17"
    assert backend.token_label(backend.eos_token_id) == "END"
    assert backend.token_label(backend.layout.next_phoneme_id) == "|"
    comma = backend.phonemes.id_map[","]  # the teacher's own phoneme table
    assert backend.token_label(backend.layout.phoneme_offset + comma) == "/,/"


def test_synthesize_fastest_retimes_the_same_tokens(synth, monkeypatch):
    from ssd_demo.speech.synthesis import synthesize_fastest

    runs = []
    real = synth.synthesize

    def spy(*args, **kwargs):
        runs.append(real(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(synth, "synthesize", spy)
    timed = synthesize_fastest(synth, "Good night.", 3, mode="speculative", config=_config(synth, seed=4))
    assert len(runs) == 3 and timed.repeats == 3 and timed.result is runs[0]
    assert all(r.generation.tokens == runs[0].generation.tokens for r in runs)  # same work, re-timed
    assert timed.lm_seconds_per_token == min(r.generation.stats.decode_seconds_per_token for r in runs)
    assert timed.total_seconds == min(r.total_seconds for r in runs)
    with pytest.raises(ValueError, match="fixed seed"):  # unseeded repeats would time different outputs
        synthesize_fastest(synth, "Good night.", 2, mode="ar", config=_config(synth, seed=None))


def test_greedy_speculative_equals_greedy_ar_with_verify_calls_on_the_other_kernel(synth, monkeypatch):
    # One-row steps on BLAS, every call of 2+ rows (verify calls, and AR steps that carry an inserted
    # phoneme) on oneDNN: the two kernels round differently, and greedy decoding must not notice.
    from ssd_demo.engine import kernels
    from ssd_demo.engine.kv import prepare_kernels

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch build")
    monkeypatch.setenv("SSD_DEMO_MATMUL", "blas")  # the lean forward (not ONNX Runtime's), its kernels set below
    # The probe times every kernel on the first call of each model: run it before the spy counts rows.
    prepare_kernels(synth.target, *synth.drafts.values())
    monkeypatch.setattr(kernels, "kernel_threshold", lambda model: 2)
    onednn_rows = onednn_call_rows(monkeypatch)
    config = _config(synth, temperature=0.0)
    ar = synth.synthesize(UNSEEN, mode="ar", config=config)
    assert ar.generation.stats.finish_reason == "eos"
    for draft in ("heads", "distilled"):
        spec = synth.synthesize(UNSEEN, mode="speculative", config=config, draft=draft)
        assert spec.generation.tokens == ar.generation.tokens, draft
        assert spec.generation.stats.accepted_tokens > 0
    assert onednn_rows and min(onednn_rows) >= 2 and max(onednn_rows) >= 5  # verify calls ran on oneDNN


def test_greedy_speculative_equals_greedy_ar_on_onnx_runtime(synth, monkeypatch):
    # Every model (target, layer drafts, heads) on ONNX Runtime's kernels, which round unlike torch's: one-row
    # steps and 2-8 row verify calls go through different MLAS kernels, and greedy decoding must not notice.
    from ssd_demo.engine import onnx_forward, onnx_heads

    monkeypatch.setenv("SSD_DEMO_MATMUL", "onnxruntime")
    rows, heads_steps = [], []
    real_forward, real_step = onnx_forward.OnnxForward.forward, onnx_heads.OnnxHeadsStep.__call__
    monkeypatch.setattr(onnx_forward.OnnxForward, "forward",
                        lambda self, ids, last_only=False: rows.append(len(ids)) or real_forward(self, ids, last_only))
    monkeypatch.setattr(onnx_heads.OnnxHeadsStep, "__call__",
                        lambda self, *a: heads_steps.append(a) or real_step(self, *a))
    config = _config(synth, temperature=0.0)
    ar = synth.synthesize(UNSEEN, mode="ar", config=config)
    assert ar.generation.stats.finish_reason == "eos"
    for draft in synth.drafts:
        spec = synth.synthesize(UNSEEN, mode="speculative", config=config, draft=draft)
        assert spec.generation.tokens == ar.generation.tokens, draft
        assert spec.generation.stats.accepted_tokens > 0
    assert heads_steps and max(rows) >= 5  # the heads and the verify calls ran on ONNX Runtime

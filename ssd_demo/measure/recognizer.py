"""A small phoneme recognizer (CTC) that measures what a voice actually says: phoneme error rate.

Why our own: no speech recognizer can be downloaded here, and pocketsphinx (which ships a model)
turns clear eSpeak speech into nonsense. This one is trained only on eSpeak NG speech (several
voices, rates and pitches; part of it through the embedded codec's round trip) and never on the
embedded voice's output, so it is an independent listener for that voice. Its own error rates
are in assets/recognizer/recognizer.json and docs/benchmarks.md; the recipe is
`python -m ssd_demo train-recognizer`.

Input: 16 kHz audio -> 80-bin log-mel at 50 frames/s (the codec's features), each utterance
normalised per bin. Model: two 1-D convolutions and a small Transformer encoder. Output: one of
`text.BASE_PHONEMES` or blank per frame; greedy CTC decoding.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torchaudio
from safetensors.torch import load_file, save_file
from torch import nn

from ..models.assets import asset_path, where_to_find
from ..errors import ModelLoadError
from .. import text as text_frontend
from ..speech.codec import CodecConfig, MelFeatures

#: As found at import; `Recognizer.load()` looks again (SSD_DEMO_ASSETS may be set later).
DEFAULT_PATH = asset_path("recognizer")
CONFIG_NAME = "recognizer.json"
WEIGHTS_NAME = "model.safetensors"


@dataclass(frozen=True)
class RecognizerConfig:
    n_mels: int = 80
    width: int = 192
    layers: int = 5
    heads: int = 4
    ffn: int = 768
    dropout: float = 0.1
    n_classes: int = len(text_frontend.BASE_PHONEMES) + 1  # + CTC blank (index 0)


class PhonemeRecognizer(nn.Module):
    def __init__(self, config: RecognizerConfig):
        super().__init__()
        self.config = config
        self.front = nn.Sequential(
            nn.Conv1d(config.n_mels, config.width, 5, padding=2), nn.GELU(),
            nn.Conv1d(config.width, config.width, 5, padding=2), nn.GELU(),
        )
        layer = nn.TransformerEncoderLayer(config.width, config.heads, config.ffn, config.dropout,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.n_classes)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """features [B, T, n_mels], lengths [B] -> CTC log-probabilities [B, T, n_classes]."""
        x = self.front(features.transpose(1, 2)).transpose(1, 2)  # [B, T, width]
        x = x + _sinusoids(x.shape[1], x.shape[2], x.device)
        padding = torch.arange(x.shape[1], device=x.device)[None] >= lengths[:, None]
        x = self.encoder(x, src_key_padding_mask=padding)
        return self.head(self.norm(x)).log_softmax(-1)


def _sinusoids(length: int, width: int, device) -> torch.Tensor:
    position = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, width, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width, device=device)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


class FeatureExtractor:
    """16 kHz audio -> per-utterance normalised log-mel frames [T, n_mels]."""

    def __init__(self) -> None:
        self.mel = MelFeatures(CodecConfig())

    def __call__(self, audio: np.ndarray) -> torch.Tensor:
        frames = torch.from_numpy(self.mel.log_mel(audio))
        return (frames - frames.mean(0)) / (frames.std(0) + 1e-3)


def greedy_decode(log_probs: torch.Tensor, length: int) -> list[int]:
    """Best path, repeats collapsed, blanks dropped -> indices into text.BASE_PHONEMES."""
    best = log_probs[:length].argmax(-1).tolist()
    out, previous = [], 0
    for label in best:
        if label != previous and label != 0:
            out.append(label - 1)
        previous = label
    return out


def phoneme_error_rate(hypothesis: list[int], reference: list[int]) -> float:
    """Levenshtein distance / reference length (can exceed 1 when the hypothesis is much longer)."""
    if not reference:
        return float(len(hypothesis) > 0)
    return torchaudio.functional.edit_distance(reference, hypothesis) / len(reference)


class Recognizer:
    """A trained recognizer, ready to transcribe audio into phonemes and score it against text."""

    def __init__(self, model: PhonemeRecognizer, meta: dict | None = None):
        self.model = model.eval()
        self.features = FeatureExtractor()
        self.meta = meta or {}

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Recognizer":
        default = path is None
        path = Path(path) if path is not None else asset_path("recognizer")
        meta_path = path / CONFIG_NAME
        if not meta_path.exists():
            hint = f": {where_to_find('recognizer')}" if default and not path.is_dir() else ""
            raise FileNotFoundError(f"no phoneme recognizer in {path} (missing {CONFIG_NAME}){hint}")
        meta = json.loads(meta_path.read_text())
        config = RecognizerConfig(**meta["config"])
        if config.n_classes != len(text_frontend.BASE_PHONEMES) + 1:
            raise ModelLoadError(f"the recognizer in {path} has {config.n_classes - 1} phoneme classes but the text "
                             f"front end {len(text_frontend.BASE_PHONEMES)}: retrain it")
        model = PhonemeRecognizer(config)
        state = {k: v.float() for k, v in load_file(str(path / WEIGHTS_NAME)).items()}
        model.load_state_dict(state, strict=True)
        return cls(model, meta)

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        # float16 halves the file; the recognizer's outputs do not change measurably (checked at export).
        state = {k: v.detach().to(torch.float16).contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(path / WEIGHTS_NAME))
        meta = {**self.meta, **(extra or {}), "config": asdict(self.model.config)}
        (path / CONFIG_NAME).write_text(json.dumps(meta, indent=1) + "\n")

    @torch.inference_mode()
    def transcribe(self, audio: np.ndarray) -> list[int]:
        """16 kHz float audio -> recognised stress-free phoneme indices."""
        if len(audio) < 640:
            return []
        features = self.features(np.asarray(audio, dtype=np.float32))[None]
        log_probs = self.model(features, torch.tensor([features.shape[1]]))
        return greedy_decode(log_probs[0], features.shape[1])

    def per(self, audio: np.ndarray, text: str) -> float:
        """Phoneme error rate of `audio` against what eSpeak NG would say for `text`."""
        reference = text_frontend.base_phonemes(text_frontend.phonemes(text))
        return phoneme_error_rate(self.transcribe(audio), reference)


def readable(indices: list[int]) -> str:
    return " ".join(text_frontend.BASE_PHONEMES[i] for i in indices)


__all__ = ["PhonemeRecognizer", "Recognizer", "RecognizerConfig", "greedy_decode", "phoneme_error_rate", "readable"]

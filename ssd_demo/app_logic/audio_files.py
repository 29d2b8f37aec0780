"""The two clips of a click as named 16-bit WAV files, one fresh directory per request."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

from .runner import Comparison

AUDIO_ROOT_NAME = "ssd_demo_audio"
AUDIO_MAX_AGE_SECONDS = 3600


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float [-1, 1] -> int16 with one fixed gain, so two clips keep their relative loudness."""
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def write_wav(path: Path, audio: np.ndarray, sample_rate: int) -> Path:
    soundfile.write(str(path), to_int16(audio), sample_rate, subtype="PCM_16")
    return path


def _slug(value: object) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text)


def audio_directory(root: Path | None = None) -> Path:
    """A fresh directory per request (so concurrent users never share files); old ones are pruned."""
    root = root or Path(tempfile.gettempdir()) / AUDIO_ROOT_NAME
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - AUDIO_MAX_AGE_SECONDS
    for old in root.iterdir():
        try:
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # another request pruned it first
    return Path(tempfile.mkdtemp(dir=root))


def write_audio_files(comparison: Comparison, directory: Path | None = None) -> tuple[Path, Path]:
    """Both clips as 16-bit WAVs whose names say what they are."""
    directory = directory or audio_directory()
    config = comparison.config
    stem = f"{_slug(comparison.preset)}_seed{comparison.seed}"
    ar_path = directory / f"{stem}_autoregressive.wav"
    spec_path = directory / (
        f"{stem}_speculative_{_slug(comparison.draft)}_{_slug(config.acceptance)}"
        f"_K{config.draft_len}_beta{_slug(float(config.beta))}.wav"
    )
    write_wav(ar_path, comparison.ar.audio, comparison.ar.sample_rate)
    write_wav(spec_path, comparison.spec.audio, comparison.spec.sample_rate)
    return ar_path, spec_path

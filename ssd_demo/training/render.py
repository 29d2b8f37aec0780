"""Render sentences to speech with the eSpeak NG command-line program (16 kHz mono float32).

Training and evaluation use the Debian `espeak-ng` program (`apt-get install espeak-ng`);
inference never needs it. Leading and trailing silence is trimmed the same way for
training data and evaluation references, so durations compare fairly.
"""

from __future__ import annotations

import io
import math
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

SAMPLE_RATE = 16_000
VOICE = "en-us"


def espeak_program() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise FileNotFoundError("the espeak-ng program is missing; install it with: apt-get install -y espeak-ng")
    return path


def trim_silence(audio: np.ndarray, sample_rate: int = SAMPLE_RATE, threshold_db: float = -45.0,
                 margin_s: float = 0.06) -> np.ndarray:
    """Drop leading/trailing frames quieter than threshold_db below the peak, keeping a small margin."""
    if audio.size == 0:
        return audio
    hop = sample_rate // 100
    frames = len(audio) // hop
    if frames == 0:
        return audio
    energy = np.sqrt(np.mean(audio[: frames * hop].reshape(frames, hop) ** 2, axis=1) + 1e-12)
    loud = np.nonzero(20 * np.log10(energy / (energy.max() + 1e-12)) > threshold_db)[0]
    if loud.size == 0:
        return audio
    margin = int(margin_s * sample_rate)
    start = max(0, loud[0] * hop - margin)
    end = min(len(audio), (loud[-1] + 1) * hop + margin)
    return audio[start:end]


def render(text: str, voice: str = VOICE, speed_wpm: int = 175) -> np.ndarray:
    """One sentence -> float32 mono audio at 16 kHz, silence trimmed."""
    result = subprocess.run(
        [espeak_program(), "-v", voice, "-s", str(speed_wpm), "--stdout", text],
        check=True, capture_output=True,
    )
    audio, rate = sf.read(io.BytesIO(result.stdout), dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    if rate != SAMPLE_RATE:
        # Polyphase resampling: exact rational ratio, and far cheaper than a generic sinc resampler.
        gcd = math.gcd(rate, SAMPLE_RATE)
        audio = resample_poly(audio, SAMPLE_RATE // gcd, rate // gcd)
    return trim_silence(audio.astype(np.float32))


def render_many(texts: list[str], workers: int = 2, **kwargs) -> list[np.ndarray]:
    """Render many sentences; eSpeak runs as separate processes, so threads overlap them."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda text: render(text, **kwargs), texts))

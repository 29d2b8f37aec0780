"""Clips made from the reference rather than decoded: MUSHRA's anchors and the attention-check clip.

- `lowpass(audio, rate, cutoff)`: ITU-R BS.1534-3's anchors are the reference low-passed at 3.5 kHz
  (low anchor) and 7 kHz (mid anchor). A zero-phase Butterworth filter (order 8, applied forward and
  backward) keeps the anchor aligned sample for sample with the reference, so switching between
  conditions at the same playback position works.
- `attention_noise(audio, seed)`: the reference under white noise 6 dB above its own level, an
  obvious defect that any attentive rater scores low (MOS) or rejects (A/B).
"""

from __future__ import annotations

import numpy as np

LOW_ANCHOR_HZ = 3500.0
FILTER_ORDER = 8
NOISE_DB = 6.0


def lowpass(audio: np.ndarray, sample_rate: int, cutoff_hz: float = LOW_ANCHOR_HZ) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float64)
    if not 0 < cutoff_hz < sample_rate / 2:
        raise ValueError(f"a {cutoff_hz:g} Hz low-pass needs a sample rate above {2 * cutoff_hz:g} Hz, got {sample_rate}")
    from scipy import signal  # deferred: importing it costs about 0.6 s of the app's start-up

    sos = signal.butter(FILTER_ORDER, cutoff_hz, btype="lowpass", fs=sample_rate, output="sos")
    return signal.sosfiltfilt(sos, audio).astype(np.float32)


def attention_noise(audio: np.ndarray, seed: int) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float64)
    level = float(np.sqrt(np.mean(audio**2))) or 0.05
    noise = np.random.default_rng(seed).standard_normal(audio.size) * level * 10 ** (NOISE_DB / 20)
    mixed = audio + noise
    return (mixed / max(1.0, float(np.max(np.abs(mixed))))).astype(np.float32)

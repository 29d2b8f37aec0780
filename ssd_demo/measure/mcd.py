"""Mel-cepstral distortion after dynamic time warping (MCD-DTW), in dB.

Both signals (mono float32 at the same `sample_rate`) -> 80-bin natural-log mel magnitudes over 0 Hz to
the Nyquist frequency (64 ms windows, 20 ms hop: at 16 kHz the old codec's analysis, 1,024 / 320 samples)
-> DCT-II (orthonormal) -> cepstral coefficients 1..24 (c0, the loudness, is left out). Frames are
aligned with DTW on Euclidean cepstral distance, and the distortion
(10 / ln 10) * sqrt(2 * sum_d (c_d - c'_d)^2) is averaged over the alignment path.
Lower is better; it measures spectral closeness, so it compares systems against the same
reference rather than giving an absolute quality scale.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torchaudio
from scipy.fft import dct

N_CEPSTRA = 24
N_MELS = 80
LOG_FLOOR = 1e-5
_MCD_SCALE = 10.0 / np.log(10.0) * np.sqrt(2.0)


@functools.lru_cache(maxsize=4)
def _mel(sample_rate: int) -> torchaudio.transforms.MelSpectrogram:
    return torchaudio.transforms.MelSpectrogram(
        sample_rate=sample_rate, n_fft=int(round(0.064 * sample_rate)), hop_length=int(round(0.02 * sample_rate)),
        n_mels=N_MELS, f_min=0.0, f_max=sample_rate / 2, power=1.0, center=True)


def mel_cepstrum(audio: np.ndarray, sample_rate: int = 16_000) -> np.ndarray:
    """(frames, N_CEPSTRA) mel cepstrum of a mono clip."""
    wave = torch.as_tensor(np.asarray(audio, dtype=np.float32).reshape(-1))
    with torch.no_grad():
        mel = _mel(int(sample_rate))(wave)  # (n_mels, frames)
    log_mel = torch.log(mel.clamp_min(LOG_FLOOR)).T.contiguous().numpy()
    return dct(log_mel, type=2, norm="ortho", axis=1)[:, 1 : N_CEPSTRA + 1]


def dtw_path_cost(cost: np.ndarray) -> tuple[float, int]:
    """Minimum total cost of a monotonic alignment through `cost` (n, m) and its path length."""
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, n + 1):
        row = cost[i - 1]
        prev = total[i - 1]
        best_diag_up = np.minimum(prev[:-1], prev[1:])  # from (i-1, j-1) or (i-1, j)
        current = total[i]
        for j in range(1, m + 1):
            current[j] = row[j - 1] + min(best_diag_up[j - 1], current[j - 1])
    # Backtrack to count the path length (the mean is taken over aligned frame pairs).
    i, j, length = n, m, 1
    while i > 1 or j > 1:
        options = ((total[i - 1, j - 1], i - 1, j - 1), (total[i - 1, j], i - 1, j), (total[i, j - 1], i, j - 1))
        _, i, j = min(options, key=lambda o: o[0])
        length += 1
    return float(total[n, m]), length


def mcd_dtw(audio: np.ndarray, reference: np.ndarray, sample_rate: int = 16_000) -> float:
    """MCD-DTW (dB) of `audio` against `reference`, both float32 mono at `sample_rate`."""
    a, b = mel_cepstrum(audio, sample_rate), mel_cepstrum(reference, sample_rate)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("MCD-DTW needs two non-empty signals")
    cost = _MCD_SCALE * np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))
    total, length = dtw_path_cost(cost)
    return total / length

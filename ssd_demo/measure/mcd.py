"""Mel-cepstral distortion after dynamic time warping (MCD-DTW), in dB.

Both signals -> 80-bin natural-log mel magnitudes (the codec's analysis) -> DCT-II
(orthonormal) -> cepstral coefficients 1..24 (c0, the loudness, is left out). Frames are
aligned with DTW on Euclidean cepstral distance, and the distortion
(10 / ln 10) * sqrt(2 * sum_d (c_d - c'_d)^2) is averaged over the alignment path.
Lower is better; it measures spectral closeness, so it compares systems against the same
reference rather than giving an absolute quality scale.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.fft import dct

from ..speech.codec import CodecConfig, MelFeatures

N_CEPSTRA = 24
_MCD_SCALE = 10.0 / np.log(10.0) * np.sqrt(2.0)


@functools.lru_cache(maxsize=4)
def _features(config: CodecConfig) -> MelFeatures:
    return MelFeatures(config)


def mel_cepstrum(audio: np.ndarray, config: CodecConfig = CodecConfig()) -> np.ndarray:
    log_mel = _features(config).log_mel(audio)
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


def mcd_dtw(audio: np.ndarray, reference: np.ndarray, config: CodecConfig = CodecConfig()) -> float:
    """MCD-DTW (dB) of `audio` against `reference`, both float32 mono at config.sample_rate."""
    a, b = mel_cepstrum(audio, config), mel_cepstrum(reference, config)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("MCD-DTW needs two non-empty signals")
    cost = _MCD_SCALE * np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))
    total, length = dtw_path_cost(cost)
    return total / length

"""What the statistical tests share: a chi-square goodness-of-fit test against an exactly enumerated
distribution, marginals of such a distribution, and how many samples a test draws.

Sample counts scale with the environment variable SSD_TEST_SAMPLES (a positive number, default 1 = full
power, as CI runs): SSD_TEST_SAMPLES=0.25 draws a quarter of every statistical test's samples for a quicker
local run, SSD_TEST_SAMPLES=4 four times as many for a deeper check. Seeds stay fixed, so a run is
deterministic at any scale. The significance thresholds do not move with the scale: the fit test
(p > 1e-3) stays valid at any sample count because cells expected below 5 counts are pooled, and a test
that also checks its own power (telling the draft's distribution apart at p < 1e-6) names the fewest
samples with which that check still holds by a wide margin; `sample_count` never goes below it.
"""

from __future__ import annotations

import os

import numpy as np
from scipy.stats import chisquare

SCALE_VARIABLE = "SSD_TEST_SAMPLES"


def sample_scale() -> float:
    """The factor SSD_TEST_SAMPLES sets (1.0 when unset)."""
    raw = os.environ.get(SCALE_VARIABLE, "").strip()
    if not raw:
        return 1.0
    try:
        scale = float(raw)
    except ValueError:
        raise ValueError(f"{SCALE_VARIABLE}={raw!r}: expected a positive number such as 0.25 or 1") from None
    if not scale > 0 or scale == float("inf"):
        raise ValueError(f"{SCALE_VARIABLE}={raw!r}: expected a positive number such as 0.25 or 1")
    return scale


def sample_count(n: int, minimum: int = 100) -> int:
    """The sample count for a test written for `n` samples: n scaled by SSD_TEST_SAMPLES, never below
    `minimum` (the fewest with which the test keeps its power) nor below 1; at full power exactly n."""
    return max(int(round(n * sample_scale())), min(minimum, n), 1)


def marginal(joint: dict, positions: slice) -> dict:
    """The distribution of `positions` of each outcome under a joint {outcome tuple: probability}."""
    out: dict = {}
    for seq, p in joint.items():
        key = seq[positions]
        out[key] = out.get(key, 0.0) + p
    return out


def chi_square_p(samples: list[tuple[int, ...]], expected: dict) -> float:
    """Goodness of fit; cells expected below 5 counts are pooled so the test stays valid."""
    n = len(samples)
    counts: dict = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    observed, wanted, pool_obs, pool_exp = [], [], 0, 0.0
    for key, p in expected.items():
        if p * n >= 5:
            observed.append(counts.get(key, 0))
            wanted.append(p * n)
        else:
            pool_obs += counts.get(key, 0)
            pool_exp += p * n
    pool_obs += sum(c for key, c in counts.items() if key not in expected)
    if pool_exp == 0 and pool_obs > 0:
        return 0.0  # an outcome the target gives probability zero was produced
    if pool_exp > 0:
        observed.append(pool_obs)
        wanted.append(pool_exp)
    observed, wanted = np.array(observed, dtype=float), np.array(wanted)
    wanted *= observed.sum() / wanted.sum()
    return float(chisquare(observed, wanted).pvalue)

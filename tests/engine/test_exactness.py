"""beta = 0 speculative sampling must reproduce the target's distribution exactly.

The target's joint distribution over the first six new tokens is enumerated exactly
(one batched forward over all V^6 continuations); speculative samples from fixed seeds
are compared with it by a chi-square test on the joint of tokens 1-3 AND of tokens 4-6.
Later positions catch rollback and bonus-token bugs that first-token tests miss. Seeds
are fixed, so the test is deterministic; each case also checks the test's power by
rejecting the draft's own distribution.
"""

from __future__ import annotations

import numpy as np
import pytest

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from support.exactness import NEW, PROMPT, VOCAB, exact_joint, make_draft
from support.stats import chi_square_p, marginal, sample_count
from support.tiny_models import tiny_llama

pytestmark = pytest.mark.stats

CASES = {
    "unrelated-temp0.7-topk3-K1": ("unrelated", dict(temperature=0.7, top_k=3, draft_len=1)),
    "unrelated-temp1.3-topp0.8-K2": ("unrelated", dict(temperature=1.3, top_p=0.8, draft_len=2)),
    "unrelated-temp1-mask-K4": ("unrelated", dict(temperature=1.0, draft_len=4, allowed_token_ids=[0, 1, 3])),
    # One id at its temperature-1 probability, the others tempered among themselves (a voice's phoneme-end marker).
    "unrelated-temp0.5-topk3-untempered-K3": ("unrelated", dict(temperature=0.5, top_k=3, draft_len=3,
                                                                untempered_token_ids=[2])),
    # A draft close to the target: most blocks are fully accepted, exercising the bonus
    # token and the draft's two-token catch-up after it.
    "related-temp1-K4": ("related", dict(temperature=1.0, draft_len=4)),
    # Adaptive K and the confidence stop decide from the past only: still exact.
    "related-adaptive-K6": ("related", dict(temperature=0.8, draft_len=6, adaptive_draft_len=True, adaptive_threshold=0.3)),
    # ... and so does K chosen from measured verify costs, which may pick K = 0 (an AR step) in a round.
    "related-calibrated-K6": ("related", dict(temperature=1.0, draft_len=6, adaptive_draft_len=True, cost_ratio=0.2,
                                              verify_costs=(1.0, 1.1, 1.25, 1.45, 1.7, 2.0, 2.4))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_sampling_matches_target_distribution(case):
    kind, settings = CASES[case]
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    draft = make_draft(kind)
    config = DecodingConfig(max_new_tokens=NEW, beta=0.0, acceptance="ssd", **settings)
    target_joint = exact_joint(target, config)
    draft_joint = exact_joint(draft, config)
    runs = [speculative_generate(target, draft, PROMPT, config.with_(seed=seed))
            for seed in range(sample_count(1500, minimum=300))]  # fewer: the power check weakens
    samples = [tuple(r.tokens) for r in runs]
    assert all(len(s) == NEW for s in samples)
    alpha = np.mean([r.stats.acceptance_rate for r in runs])
    low, high = (0.05, 0.8) if kind == "unrelated" else (0.8, 0.999)
    assert low < alpha < high, f"{kind} draft: acceptance {alpha:.2f} outside the intended range"
    for positions in (slice(0, 3), slice(3, 6)):
        picked = [s[positions] for s in samples]
        p_target = chi_square_p(picked, marginal(target_joint, positions))
        assert p_target > 1e-3, f"{case} tokens {positions}: speculative output differs from the target (p={p_target:.2e})"
        if kind == "unrelated":  # power check: the same test must tell the draft's distribution apart
            p_draft = chi_square_p(picked, marginal(draft_joint, positions))
            assert p_draft < 1e-6, f"{case}: the test cannot tell target from draft (p={p_draft:.2e})"


def test_autoregressive_sampling_matches_target_distribution():
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    config = DecodingConfig(max_new_tokens=3, temperature=0.9, top_p=0.9)
    expected = marginal(exact_joint(target, config.with_(max_new_tokens=NEW)), slice(0, 3))
    samples = [tuple(autoregressive_generate(target, PROMPT, config.with_(seed=s)).tokens)
               for s in range(sample_count(1000))]
    assert chi_square_p(samples, expected) > 1e-3

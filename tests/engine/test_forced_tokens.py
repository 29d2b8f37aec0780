"""Forced tokens (a schedule of tokens the decoder inserts itself) keep both decoders exact.

The schedule here mimics the embedded voice's phoneme markers: token 0 plays "next phoneme" and is
followed by a forced marker (4); two 1s in a row force a 3. The target's joint distribution over the
first four *sampled* tokens is enumerated exactly (the forced tokens are part of every prefix) and
speculative samples are compared with it by chi-square tests, as in test_exactness.
"""

from __future__ import annotations

import pytest

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from support.stats import chi_square_p, marginal, sample_count
from support.forced_tokens import FREE, PROMPT, SAMPLED, VOCAB, Markers, exact_joint, sampled_only
from support.tiny_models import related_draft as related_draft_of
from support.tiny_models import tiny_llama


def related_draft():
    return related_draft_of(VOCAB)


CASES = {
    "unrelated-K1": ("unrelated", dict(draft_len=1)),
    "unrelated-K3-temp0.8": ("unrelated", dict(draft_len=3, temperature=0.8)),
    "related-K4": ("related", dict(draft_len=4)),
    # K chosen per round from measured costs (K = 0 rounds among them), as the embedded voice runs with
    # --adaptive-draft-len: still exact with the schedule's tokens.
    "related-calibrated-K4": ("related", dict(draft_len=4, adaptive_draft_len=True, cost_ratio=0.2,
                                              verify_costs=(1.0, 1.1, 1.25, 1.45, 1.7))),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.stats
def test_speculative_with_forced_tokens_matches_target_distribution(case):
    kind, settings = CASES[case]
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    draft = tiny_llama(seed=2, vocab=VOCAB, init=0.2) if kind == "unrelated" else related_draft()
    config = DecodingConfig(max_new_tokens=2 * SAMPLED, beta=0.0, allowed_token_ids=FREE, **settings)
    target_joint = exact_joint(target, config)
    draft_joint = exact_joint(draft, config)
    samples = []
    for seed in range(sample_count(1500)):
        result = speculative_generate(target, draft, PROMPT, config.with_(seed=seed), forced=Markers())
        sampled = sampled_only(result.tokens)
        assert result.stats.forced_tokens == len(result.tokens) - len(sampled) == sum(len(r.forced) for r in result.steps)
        assert sum(len(r.committed) for r in result.steps) == len(result.tokens)
        samples.append(tuple(sampled[:SAMPLED]))
    assert all(len(s) == SAMPLED for s in samples)
    for positions in (slice(0, 2), slice(2, 4)):
        picked = [s[positions] for s in samples]
        p_target = chi_square_p(picked, marginal(target_joint, positions))
        assert p_target > 1e-3, f"{case} tokens {positions}: differs from the target (p={p_target:.2e})"
        if kind == "unrelated":
            assert chi_square_p(picked, marginal(draft_joint, positions)) < 1e-6, "test has no power"


@pytest.mark.stats
def test_autoregressive_with_forced_tokens_matches_target_distribution():
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    config = DecodingConfig(max_new_tokens=2 * SAMPLED, temperature=1.0, allowed_token_ids=FREE)
    expected = marginal(exact_joint(target, config), slice(0, 3))
    samples = []
    for seed in range(sample_count(1000)):
        tokens = autoregressive_generate(target, PROMPT, config.with_(seed=seed), forced=Markers()).tokens
        samples.append(tuple(sampled_only(tokens)[:3]))
    assert chi_square_p(samples, expected) > 1e-3


@pytest.mark.parametrize("static_cache", [True, False])
@pytest.mark.parametrize("draft_len", [1, 2, 5])
def test_greedy_with_forced_tokens_equals_autoregressive(draft_len, static_cache):
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.5, layers=2, width=16)
    config = DecodingConfig(max_new_tokens=40, temperature=0.0, draft_len=draft_len, allowed_token_ids=FREE)
    ar = autoregressive_generate(target, PROMPT, config, static_cache=static_cache, forced=Markers())
    for draft in (target, tiny_llama(seed=7, vocab=VOCAB, init=0.5)):
        spec = speculative_generate(target, draft, PROMPT, config, static_cache=static_cache, forced=Markers())
        assert spec.tokens == ar.tokens
        assert spec.stats.forced_tokens == ar.stats.forced_tokens > 0
        # Caches hold exactly the committed prefix but the pending tokens after every round.
        for record in spec.steps:
            assert record.target_cache_len <= len(PROMPT[0]) + sum(
                len(r.committed) for r in spec.steps[: spec.steps.index(record) + 1])
    sampled = sampled_only(ar.tokens)
    assert ar.stats.new_tokens - ar.stats.forced_tokens == len(sampled)


class EndAfterThreeZeros:
    """Each 0 forces a marker; the third 0 forces the end token instead (like the voice's last phoneme)."""

    def initial_state(self):
        return 0

    def advance(self, state, token):
        if token != 0:
            return state, ()
        return state + 1, ((3,) if state + 1 == 3 else (4,))


def test_forced_end_token_stops_both_decoders():
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.5)
    config = DecodingConfig(max_new_tokens=200, temperature=1.0, draft_len=4, allowed_token_ids=FREE, eos_token_id=3)
    for seed in range(20):
        for result in (autoregressive_generate(target, PROMPT, config.with_(seed=seed), forced=EndAfterThreeZeros()),
                       speculative_generate(target, target, PROMPT, config.with_(seed=seed), forced=EndAfterThreeZeros())):
            assert result.stats.finish_reason == "eos"
            assert result.tokens[-1] == 3 and result.tokens.count(0) == 3 and result.tokens.count(4) == 2

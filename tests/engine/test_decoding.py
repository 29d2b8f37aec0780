"""Greedy equivalence, edge cases, tolerance, seeds and cache bookkeeping of the engine."""

from __future__ import annotations

import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate, compare_runs, predicted_speedup, speculative_generate
from support.tiny_models import onednn_call_rows, tiny_llama, with_logit_bias

PROMPT = torch.tensor([[3, 1, 4, 1, 5]])
VOCAB = 32


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=11, vocab=VOCAB, layers=2, width=16, init=0.3)


@pytest.fixture(scope="module")
def unrelated():
    return tiny_llama(seed=12, vocab=VOCAB, layers=1, width=16, init=0.3)


def greedy(**changes) -> DecodingConfig:
    return DecodingConfig(**{"temperature": 0.0, "max_new_tokens": 40, **changes})


@pytest.mark.parametrize("draft_len", [1, 2, 3, 4, 5, 6, 7, 8, 64])
def test_greedy_speculative_equals_greedy_ar(target, unrelated, draft_len):
    config = greedy(draft_len=draft_len)
    reference = autoregressive_generate(target, PROMPT, config).tokens
    assert len(reference) == 40
    same = speculative_generate(target, target, PROMPT, config)
    other = speculative_generate(target, unrelated, PROMPT, config)
    assert same.tokens == reference
    assert other.tokens == reference
    # draft == target: every drafted token is kept, each full round yields K + 1 tokens.
    assert same.stats.acceptance_rate == 1.0
    full_rounds = [s for s in same.steps if len(s.drafted) == draft_len]
    assert all(s.accepted == draft_len and s.next_kind == "bonus" for s in full_rounds)
    if draft_len < 40:
        assert same.stats.mean_tokens_per_call > min(draft_len + 1, 40) * 0.6
    assert other.stats.acceptance_rate < 0.5


@pytest.mark.parametrize("draft_len", [1, 4, 8])
def test_greedy_equality_holds_with_verify_calls_on_onednn(target, unrelated, draft_len, monkeypatch):
    from ssd_demo.engine import kernels

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch build")
    monkeypatch.setattr(kernels, "kernel_threshold", lambda model: 2)  # one-row steps stay on BLAS
    onednn_rows = onednn_call_rows(monkeypatch)
    config = greedy(draft_len=draft_len)
    reference = autoregressive_generate(target, PROMPT, config).tokens
    assert onednn_rows and min(onednn_rows) >= 2  # the prompt's prefill (one-row steps: BLAS)
    onednn_rows.clear()
    assert speculative_generate(target, unrelated, PROMPT, config).tokens == reference
    assert speculative_generate(target, target, PROMPT, config).tokens == reference
    assert draft_len + 1 in onednn_rows  # verify calls ran on oneDNN


def test_all_rejected_still_exact(target):
    # A draft that always proposes token 0, which the target is pushed never to prefer.
    biased_target = with_logit_bias(tiny_llama(seed=11, vocab=VOCAB, layers=2, width=16, init=0.3), {0: -50.0})
    stubborn = with_logit_bias(tiny_llama(seed=13, vocab=VOCAB, width=16), {0: 50.0})
    config = greedy(draft_len=4)
    result = speculative_generate(biased_target, stubborn, PROMPT, config)
    assert result.tokens == autoregressive_generate(biased_target, PROMPT, config).tokens
    assert result.stats.accepted_tokens == 0
    assert all(s.next_kind == "replacement" for s in result.steps if s.drafted)
    sampled = speculative_generate(biased_target, stubborn, PROMPT, config.with_(temperature=1.0))
    assert sampled.stats.accepted_tokens == 0 and 0 not in sampled.tokens


def _first_new_token_position(tokens: list[int], minimum: int) -> int:
    for i, token in enumerate(tokens):
        if i >= minimum and token not in tokens[:i]:
            return i
    raise AssertionError("no suitable token")


@pytest.mark.parametrize("where", ["mid-block", "bonus"])
def test_end_token_stops_generation(target, where):
    reference = autoregressive_generate(target, PROMPT, greedy()).tokens
    position = _first_new_token_position(reference, minimum=2)
    eos = reference[position]
    # With draft == target every block is accepted: choose K so the end token is drafted
    # inside the first block, or is exactly its bonus token.
    draft_len = position + 2 if where == "mid-block" else position
    config = greedy(draft_len=draft_len, eos_token_id=eos)
    result = speculative_generate(target, target, PROMPT, config)
    assert result.tokens == reference[: position + 1]
    assert result.stats.finish_reason == "eos"
    last = result.steps[-1]
    if where == "mid-block":
        assert last.drafted[-1] == eos and last.next_kind == "none"
        assert len(last.drafted) == position + 1  # drafting stopped at the end token
    else:
        assert last.next_kind == "bonus" and last.next_token == eos
    assert autoregressive_generate(target, PROMPT, config).tokens == result.tokens


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 7, 13])
def test_max_new_tokens_never_exceeded(target, unrelated, max_new_tokens):
    for draft in (target, unrelated):
        for temperature in (0.0, 1.0):
            config = DecodingConfig(draft_len=4, max_new_tokens=max_new_tokens, temperature=temperature, seed=1)
            result = speculative_generate(target, draft, PROMPT, config)
            assert len(result.tokens) == max_new_tokens
            assert all(len(s.drafted) <= min(4, max_new_tokens - 1) for s in result.steps)
            assert result.stats.finish_reason == "length"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cache_lengths_track_committed_tokens(target, unrelated, temperature):
    config = DecodingConfig(draft_len=3, max_new_tokens=30, temperature=temperature, seed=4)
    for draft in (target, unrelated):
        result = speculative_generate(target, draft, PROMPT, config)
        committed = PROMPT.shape[1]
        for step in result.steps:
            committed += len(step.emitted)
            # Everything but the pending last token is cached by the target; the draft lags by
            # at most two tokens (the last drafted one and the bonus).
            assert step.target_cache_len == committed - 1
            assert committed - 2 <= step.draft_cache_len <= committed - 1
        assert committed == PROMPT.shape[1] + len(result.tokens)


def test_allowed_token_mask_is_never_violated(target, unrelated):
    allowed = [2, 3, 5, 7, 11, 13, 17]
    for temperature in (0.0, 0.8, 1.5):
        config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=temperature, allowed_token_ids=allowed, seed=2)
        for result in (
            speculative_generate(target, unrelated, PROMPT, config),
            speculative_generate(target, unrelated, PROMPT, config.with_(beta=0.5)),
            autoregressive_generate(target, PROMPT, config),
        ):
            assert set(result.tokens) <= set(allowed)
            assert all(set(s.drafted) <= set(allowed) for s in result.steps)


def test_tolerance_raises_acceptance_and_beta_one_accepts_everything(target, unrelated):
    def acceptance(beta: float) -> float:
        config = DecodingConfig(draft_len=4, max_new_tokens=60, temperature=1.0, beta=beta)
        runs = [speculative_generate(target, unrelated, PROMPT, config.with_(seed=s)) for s in range(6)]
        return sum(r.stats.accepted_tokens for r in runs) / sum(r.stats.drafted_tokens for r in runs)

    rates = [acceptance(beta) for beta in (0.0, 0.2, 0.5, 1.0)]
    assert rates == sorted(rates) and rates[0] < rates[2]
    assert rates[-1] == 1.0
    # "exact" ignores beta altogether.
    exact = DecodingConfig(draft_len=4, max_new_tokens=30, beta=0.7, acceptance="exact", seed=3)
    assert speculative_generate(target, unrelated, PROMPT, exact).tokens == speculative_generate(
        target, unrelated, PROMPT, exact.with_(beta=0.0)
    ).tokens


def test_same_seed_same_output_and_global_rng_untouched(target, unrelated):
    config = DecodingConfig(draft_len=3, max_new_tokens=30, temperature=1.0, seed=123)
    state = torch.get_rng_state()
    first = speculative_generate(target, unrelated, PROMPT, config)
    second = speculative_generate(target, unrelated, PROMPT, config)
    assert torch.equal(state, torch.get_rng_state())
    assert first.tokens == second.tokens and first.stats.seed == 123
    other = speculative_generate(target, unrelated, PROMPT, config.with_(seed=124))
    assert other.tokens != first.tokens
    ar = autoregressive_generate(target, PROMPT, config)
    assert ar.tokens == autoregressive_generate(target, PROMPT, config).tokens
    drawn = speculative_generate(target, unrelated, PROMPT, config.with_(seed=None))
    assert drawn.stats.seed >= 0  # the seed actually used is reported


def test_statistics_are_consistent(target, unrelated):
    config = DecodingConfig(draft_len=4, max_new_tokens=50, temperature=1.0, seed=9)
    result = speculative_generate(target, unrelated, PROMPT, config)
    stats = result.stats
    assert sum(len(s.emitted) for s in result.steps) == len(result.tokens) == stats.new_tokens
    assert stats.drafted_tokens == sum(len(s.drafted) for s in result.steps)
    assert stats.accepted_tokens == sum(s.accepted for s in result.steps)
    assert stats.target_calls == stats.rounds + 1  # plus the prompt prefill
    assert stats.draft_calls == sum(s.draft_calls for s in result.steps) + 1
    assert 0 <= stats.alpha <= 1 and 0 <= stats.acceptance_rate <= 1
    assert stats.wall_seconds >= stats.draft_seconds + stats.verify_seconds
    times = [s.end_seconds for s in result.steps]
    assert times == sorted(times)
    ar = autoregressive_generate(target, PROMPT, config)
    assert ar.stats.rounds == ar.stats.new_tokens == 50 and ar.stats.drafted_tokens == 0
    report = compare_runs(ar, result)
    assert report.measured > 0 and report.predicted > 0 and report.cost_ratio > 0
    assert result.to_dict()["steps"][0]["emitted"] == result.steps[0].emitted


def test_predicted_speedup_formula():
    assert predicted_speedup(0.0, 4, 0.0) == pytest.approx(1.0)
    assert predicted_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    assert predicted_speedup(0.5, 3, 0.1) == pytest.approx((1 - 0.5**4) / (0.5 * 1.3))
    assert predicted_speedup(0.5, 3, 0.1, verify_ratio=2.0) == pytest.approx((1 - 0.5**4) / (0.5 * 2.3))


def test_bad_inputs_raise_clear_errors(target):
    other_vocab = tiny_llama(seed=1, vocab=VOCAB + 1)
    config = DecodingConfig(max_new_tokens=5)
    with pytest.raises(ValueError, match="share a vocabulary"):
        speculative_generate(target, other_vocab, PROMPT, config)
    with pytest.raises(ValueError, match=r"shape \[1, T\]"):
        speculative_generate(target, target, torch.tensor([1, 2, 3]), config)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        autoregressive_generate(target, torch.tensor([[VOCAB + 5]]), config)
    with pytest.raises(ValueError, match="allowed_token_ids"):
        autoregressive_generate(target, PROMPT, config.with_(allowed_token_ids=[1, VOCAB + 3]))


def test_single_token_prompt(target, unrelated):
    config = greedy(draft_len=3, max_new_tokens=10)
    prompt = torch.tensor([[7]])
    assert speculative_generate(target, unrelated, prompt, config).tokens == autoregressive_generate(target, prompt, config).tokens

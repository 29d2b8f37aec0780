"""Repetition-aware sampling (CosyVoice 2's RAS) as a prefix-dependent distribution: it is what the
official draw-and-redraw procedure produces, and both decoders stay exact with it (chi-square tests
against the target's exactly enumerated joint, as in test_exactness)."""

from __future__ import annotations

import itertools

import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.engine.repetition_aware import RepetitionAwareSampling
from support.stats import chi_square_p, marginal, sample_count
from support.exactness import NEW, PROMPT, VOCAB, exact_joint, make_draft
from support.tiny_models import tiny_llama

# Small enough that every rule matters on 4 tokens: a token seen in the last 2 is over-repeated, the
# nucleus keeps at most 3, and token 3 (a stop id here) cannot come before 3 tokens were generated.
RAS = RepetitionAwareSampling(top_p=0.8, top_k=3, win_size=2, tau_r=0.5, masked_until_min_len=(3,), min_len=3)


def nucleus_draw(scores: torch.Tensor, ras: RepetitionAwareSampling, generator: torch.Generator) -> int:
    """The official `nucleus_sampling`, written out plainly: the most likely tokens while their mass is under
    top_p and they are fewer than top_k, then one of them drawn by its probability."""
    values, order = torch.sort(torch.softmax(scores, dim=-1), descending=True, stable=True)
    kept, mass = [], 0.0
    for value, index in zip(values.tolist(), order.tolist()):
        if mass < ras.top_p and len(kept) < ras.top_k:
            mass += value
            kept.append((index, value))
        else:
            break
    return kept[int(torch.multinomial(torch.tensor([v for _, v in kept]), 1, generator=generator))][0]


def official_draw(scores: torch.Tensor, prefix: list[int], ras: RepetitionAwareSampling,
                  generator: torch.Generator) -> int:
    """The procedure as CosyVoice 2 runs it (its loop and `ras_sampling`), written out plainly: the
    stop ids' scores at -inf while early, a nucleus draw, and when the drawn token is over-repeated,
    its score at -inf and a draw from the full distribution."""
    scores = scores.clone()
    if len(prefix) < ras.min_len:
        scores[list(ras.masked_until_min_len)] = float("-inf")
    token = nucleus_draw(scores, ras, generator)
    if prefix[-ras.win_size:].count(token) >= ras.win_size * ras.tau_r:
        scores[token] = float("-inf")
        token = int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator))
    return token


@pytest.mark.parametrize("prefix", [[], [0], [0, 1], [2, 2, 0, 1], [0, 0, 1, 0]])
@pytest.mark.stats
def test_the_distribution_is_what_the_official_procedure_draws(prefix):
    scores = torch.tensor([1.2, 0.9, 0.1, 0.6])
    expected = RAS(scores[None], [prefix])[0]
    assert torch.isclose(expected.sum(), torch.tensor(1.0))
    generator = torch.Generator().manual_seed(0)
    draws = [(official_draw(scores, prefix, RAS, generator),) for _ in range(sample_count(6000))]
    assert chi_square_p(draws, {(i,): float(p) for i, p in enumerate(expected)}) > 1e-3
    if len(prefix) < RAS.min_len:
        assert expected[3] == 0  # a stop id before min_len


def test_the_redraw_never_returns_the_repeated_token():
    # Token 0 holds the whole nucleus (87 % of the mass) and was just generated: the official re-draw
    # (since February 2026) excludes it, so the utterance cannot stall on it.
    scores = torch.tensor([3.0, 0.0, 0.0, 0.0])
    q = RAS(scores[None], [[1, 0, 0]])[0]
    assert q[0] == 0
    assert torch.allclose(q[1:], torch.full((3,), 1 / 3))


def test_a_nearly_certain_repeated_token_is_still_redrawn_exactly():
    # Token 0 holds all but 2e-9 of the mass: 1 - f(0) rounds to 0 in float32, the re-draw must not.
    scores = torch.tensor([20.0, 0.0, 0.0, -1.0])
    q = RAS(scores[None], [[2, 1, 0]])[0]
    expected = torch.softmax(torch.tensor([float("-inf"), 0.0, 0.0, -1.0]), dim=-1)
    assert q[0] == 0 and torch.allclose(q, expected) and torch.isclose(q.sum(), torch.tensor(1.0))


def ras_joint(model) -> dict[tuple[int, ...], float]:
    """P(first NEW tokens) under AR sampling with RAS, each position on its own prefix."""
    sequences = list(itertools.product(range(VOCAB), repeat=NEW))
    inputs = torch.cat([PROMPT.expand(len(sequences), -1), torch.tensor(sequences)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=inputs).logits[:, PROMPT.shape[1] - 1 : -1].float()  # [S, NEW, V]
    rows = RAS(logits.reshape(-1, VOCAB), [list(s[:i]) for s in sequences for i in range(NEW)])
    probs = rows.reshape(len(sequences), NEW, VOCAB)
    picked = probs.gather(-1, torch.tensor(sequences)[..., None])[..., 0].double().prod(dim=-1)
    return {s: float(p) for s, p in zip(sequences, picked)}


@pytest.mark.parametrize("kind", ["unrelated", "related"])
@pytest.mark.stats
def test_speculative_sampling_with_ras_matches_the_target(kind):
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    draft = make_draft(kind)
    config = DecodingConfig(max_new_tokens=NEW, draft_len=3)
    joint = ras_joint(target)
    plain = exact_joint(target, config)  # the same target without RAS: the test must tell them apart
    samples = [tuple(speculative_generate(target, draft, PROMPT, config.with_(seed=seed),
                                          prefix_distribution=RAS).tokens)
               for seed in range(sample_count(1500, minimum=300))]  # fewer: the power check weakens
    assert all(len(s) == NEW for s in samples)
    assert not any(3 in s[:RAS.min_len] for s in samples)
    for positions in (slice(0, 3), slice(3, 6)):
        picked = [s[positions] for s in samples]
        p = chi_square_p(picked, marginal(joint, positions))
        assert p > 1e-3, f"{kind} tokens {positions}: differs from the target with RAS (p={p:.2e})"
        assert chi_square_p(picked, marginal(plain, positions)) < 1e-6, "test has no power"


@pytest.mark.stats
def test_autoregressive_sampling_with_ras_matches_the_target():
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    config = DecodingConfig(max_new_tokens=NEW)
    samples = [tuple(autoregressive_generate(target, PROMPT, config.with_(seed=seed), prefix_distribution=RAS).tokens)
               for seed in range(sample_count(1000))]
    assert chi_square_p([s[:3] for s in samples], marginal(ras_joint(target), slice(0, 3))) > 1e-3


def test_ras_refuses_a_config_that_truncates_too():
    target = tiny_llama(seed=1, vocab=VOCAB, init=0.2)
    for settings in (dict(temperature=0.7), dict(top_k=2), dict(top_p=0.5)):
        with pytest.raises(ValueError, match="does its own truncation"):
            autoregressive_generate(target, PROMPT, DecodingConfig(max_new_tokens=2, **settings),
                                    prefix_distribution=RAS)
    with pytest.raises(ValueError, match="invalid repetition-aware"):
        RepetitionAwareSampling(top_k=0)


# The release-era procedure (the code CosyVoice 2 was released with, which the SSD paper ran): the re-draw may
# return the over-repeated token, and while early a draw of any stop id (2 and 3 here) is thrown away and the
# whole draw made again.
RELEASE = RepetitionAwareSampling(top_p=0.8, top_k=3, win_size=2, tau_r=0.5, redrawn_until_min_len=(2, 3), min_len=3,
                                  redraw_may_repeat=True)


def release_draw(scores: torch.Tensor, prefix: list[int], ras: RepetitionAwareSampling,
                 generator: torch.Generator) -> int:
    """The release-era loop written out plainly: a nucleus draw, a re-draw from the full distribution (the
    repeated token included) when the drawn token is over-repeated, all of it again while early and the
    token a stop id (the official gives up after 100 tries)."""
    for _ in range(101):
        token = nucleus_draw(scores, ras, generator)
        if prefix[-ras.win_size:].count(token) >= ras.win_size * ras.tau_r:
            token = int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator))
        if len(prefix) >= ras.min_len or token not in ras.redrawn_until_min_len:
            return token
    raise RuntimeError("only stop ids were drawn")


@pytest.mark.parametrize("prefix", [[], [0], [0, 1], [1, 0, 0], [2, 2, 0, 1], [0, 0, 1, 0]])
@pytest.mark.stats
def test_the_release_era_distribution_is_what_its_procedure_draws(prefix):
    scores = torch.tensor([1.2, 0.9, 1.0, 0.6])  # a stop id (2) in the nucleus: redrawing differs from masking
    expected = RELEASE(scores[None], [prefix])[0]
    assert torch.isclose(expected.sum(), torch.tensor(1.0))
    generator = torch.Generator().manual_seed(0)
    draws = [(release_draw(scores, prefix, RELEASE, generator),) for _ in range(sample_count(6000))]
    assert chi_square_p(draws, {(i,): float(p) for i, p in enumerate(expected)}) > 1e-3
    if len(prefix) < RELEASE.min_len:
        assert expected[2] == expected[3] == 0


def test_release_era_rules_differ_from_masking_before_the_draw():
    scores = torch.tensor([[1.0, 0.0, 1.5, -5.0]])
    masked = RepetitionAwareSampling(top_p=0.8, top_k=3, win_size=2, tau_r=0.5, masked_until_min_len=(2, 3), min_len=3)
    released, before = RELEASE(scores, [[]])[0], masked(scores, [[]])[0]
    # The stop id 2 fills most of the nucleus, leaving token 1 out of it: redrawn after the nucleus, only token 0
    # is left; masked before it, token 1 gets in.
    assert torch.equal(released, torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert before[1] > 0.2 and before[2] == before[3] == 0
    # The release-era re-draw may give the repeated token back (0 just seen twice: redrawn from everything).
    late = RELEASE(scores, [[1, 0, 0, 0]])[0]
    full = torch.softmax(scores[0], dim=-1)
    nucleus = torch.tensor([full[0], 0.0, full[2], 0.0]) / (full[0] + full[2])  # tokens 2 and 0
    assert torch.allclose(late, nucleus[2] * torch.eye(4)[2] + nucleus[0] * full) and late[0] > 0


def test_release_era_rules_mask_the_stop_ids_when_only_they_can_be_drawn():
    # The official loop raises after 100 stop draws; here the stop ids are masked instead.
    scores = torch.tensor([[0.0, 0.5, 0.0, 20.0]])
    q = RELEASE(scores, [[]])[0]
    assert q[2] == q[3] == 0 and torch.isclose(q.sum(), torch.tensor(1.0))
    fallback = RepetitionAwareSampling(top_p=0.8, top_k=3, win_size=2, tau_r=0.5, masked_until_min_len=(2, 3),
                                       min_len=3, redraw_may_repeat=True)
    assert torch.allclose(q, fallback(scores, [[]])[0])

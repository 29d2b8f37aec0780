"""Processed distributions and acceptance rules on hand-made vectors."""

import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.rules import Block, make_rule
from ssd_demo.errors import InvalidSettingError
from ssd_demo.engine.sampling import allowed_mask, probabilities, processed_scores, sample
from support.tiny_models import tiny_llama

LOGITS = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]]))


def probs(**settings):
    config = DecodingConfig(**settings)
    return probabilities(processed_scores(LOGITS, config, allowed_mask(config, 4, torch.device("cpu"))), config)[0]


def test_temperature_top_k_top_p_and_mask():
    assert torch.allclose(probs(), torch.tensor([0.4, 0.3, 0.2, 0.1]))
    assert torch.allclose(probs(top_k=2), torch.tensor([4 / 7, 3 / 7, 0, 0]))
    # top_p = 0.6: 0.4 alone is below 0.6, so the second token is kept, the rest dropped.
    assert torch.allclose(probs(top_p=0.6), torch.tensor([4 / 7, 3 / 7, 0, 0]))
    assert torch.allclose(probs(top_p=0.7), torch.tensor([4 / 7, 3 / 7, 0, 0]))
    assert torch.allclose(probs(top_p=0.05), torch.tensor([1.0, 0, 0, 0]))
    hot = probs(temperature=0.5)
    assert torch.allclose(hot, torch.tensor([0.16, 0.09, 0.04, 0.01]) / 0.30)
    assert torch.allclose(probs(allowed_token_ids=[1, 3]), torch.tensor([0, 0.75, 0, 0.25]))
    assert torch.equal(probs(temperature=0.0, allowed_token_ids=[2, 3]), torch.tensor([0.0, 0, 1, 0]))


def test_untempered_ids_keep_their_probability_and_the_others_are_tempered_among_themselves():
    # Token 3 keeps its 0.1; the others share 0.9 as 0.4^2 : 0.3^2 : 0.2^2 (temperature 0.5), or top-k among them.
    others = torch.tensor([0.16, 0.09, 0.04]) / 0.29 * 0.9
    assert torch.allclose(probs(temperature=0.5, untempered_token_ids=[3]), torch.cat([others, torch.tensor([0.1])]))
    assert torch.allclose(probs(temperature=0.5, top_k=1, untempered_token_ids=[3]), torch.tensor([0.9, 0, 0, 0.1]))
    assert torch.allclose(probs(temperature=1.0, untempered_token_ids=[1]), probs())  # nothing to undo at 1
    # The mask first: an untempered id outside it stays at 0; one alone in its row takes everything.
    outside = probs(temperature=0.5, untempered_token_ids=[3], allowed_token_ids=[0, 1])
    assert torch.allclose(outside, torch.tensor([0.16, 0.09, 0, 0]) / 0.25)
    assert torch.allclose(probs(temperature=0.5, untempered_token_ids=[0], allowed_token_ids=[0]),
                          torch.tensor([1.0, 0, 0, 0]))
    assert torch.equal(probs(temperature=0.0, untempered_token_ids=[3]), torch.tensor([1.0, 0, 0, 0]))  # greedy
    with pytest.raises(InvalidSettingError, match="vocabulary has 4 ids"):
        probs(temperature=0.5, untempered_token_ids=[9])
    for bad in ([-1], [3, 3], [True], iter([3]), 3, None, ["3"]):
        with pytest.raises(InvalidSettingError, match="untempered_token_ids must be distinct token ids"):
            DecodingConfig(untempered_token_ids=bad)
    # Nearly all the mass on the untempered id: the others keep their tiny share, not a rounding of 1 - p.
    tiny = torch.log(torch.tensor([[1e-9, 2e-9, 0.0, 1.0]]).clamp_min(1e-30))
    config = DecodingConfig(temperature=0.5, untempered_token_ids=[3])
    shares = probabilities(processed_scores(tiny, config, None), config)[0]
    assert torch.allclose(shares[:2].double() / 3e-9, torch.tensor([0.2, 0.8], dtype=torch.float64), rtol=1e-3)


def test_sampler_frequencies():
    generator = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.0, 0.3, 0.2]]).expand(20000, -1)
    counts = torch.bincount(sample(p, generator), minlength=4).float() / 20000
    assert counts[1] == 0
    assert torch.allclose(counts, p[0], atol=0.015)


def _block(p_rows, q_rows, drafted):
    q = torch.tensor(q_rows)
    return Block(torch.tensor(drafted), torch.tensor(p_rows), q, torch.log(q))


def test_exact_and_tolerance_acceptance_and_residual():
    block = _block([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0]], [[0.25, 0.25, 0.5], [0.2, 0.4, 0.4], [1, 0, 0]], [0, 1])
    exact = make_rule(DecodingConfig(acceptance="exact"))
    assert torch.allclose(exact.accept_probability(block), torch.tensor([0.5, 0.5]))
    assert torch.allclose(exact.expected_acceptance(block), torch.tensor([0.5, 0.6]))
    assert torch.allclose(exact.residual(block, 0), torch.tensor([0.0, 0.0, 1.0]))
    ssd = make_rule(DecodingConfig(beta=0.3))
    assert torch.allclose(ssd.accept_probability(block), torch.tensor([0.8, 0.8]))
    assert torch.allclose(ssd.expected_acceptance(block), torch.tensor([0.8, 0.84]))
    assert torch.allclose(make_rule(DecodingConfig(beta=1.0)).accept_probability(block), torch.ones(2))
    # Identical distributions leave an all-zero residual: fall back to q instead of dividing by zero.
    same = _block([[0.5, 0.5, 0.0]], [[0.5, 0.5, 0.0], [1, 0, 0]], [0])
    assert torch.allclose(exact.residual(same, 0), torch.tensor([0.5, 0.5, 0.0]))


def test_topk_rule():
    block = _block([[0.1, 0.1, 0.8]], [[0.5, 0.3, 0.2], [1, 0, 0]], [2])
    assert make_rule(DecodingConfig(acceptance="topk", topk_tolerance=2)).accept_probability(block).item() == pytest.approx(0.25)
    assert make_rule(DecodingConfig(acceptance="topk", topk_tolerance=3)).accept_probability(block).item() == 1.0


def test_topk_one_under_greedy_is_exact_greedy():
    target = tiny_llama(seed=21, vocab=24, layers=2, width=16, init=0.3)
    draft = tiny_llama(seed=22, vocab=24, width=16, init=0.3)
    prompt = torch.tensor([[1, 2, 3]])
    config = DecodingConfig(temperature=0.0, max_new_tokens=30, draft_len=3, acceptance="topk", topk_tolerance=1)
    assert speculative_generate(target, draft, prompt, config).tokens == autoregressive_generate(target, prompt, config).tokens

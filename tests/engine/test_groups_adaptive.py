"""Coarse-grained (pcg) acceptance and adaptive draft length."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.rules import build_groups
from ssd_demo.engine.sampling import probabilities, processed_scores
from support.stats import chi_square_p, sample_count
from support.tiny_models import tiny_llama

VOCAB = 8
CLUSTERS = [[0, 1], [2, 3], [4, 5], [6, 7]]
PROMPT = torch.tensor([[1, 4, 6]])


def clustered_target():
    """A target whose input embeddings form four tight pairs: groups at theta = 0.9 are those pairs."""
    model = tiny_llama(seed=31, vocab=VOCAB, width=16, init=0.2)
    generator = torch.Generator().manual_seed(0)
    centres = torch.randn(len(CLUSTERS), 16, generator=generator)
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        for centre, members in zip(centres, CLUSTERS):
            for token in members:
                weight[token] = centre + 0.01 * torch.randn(16, generator=generator)
    return model


def cluster_of(token: int) -> int:
    return token // 2


@pytest.mark.slow
def test_groups_are_sparse_symmetric_and_scale():
    target = clustered_target()
    groups = build_groups(target.get_input_embeddings().weight, 0.9)
    dense = groups.membership.to_dense()
    assert torch.equal(dense, dense.T)
    assert groups.sizes.tolist() == [2.0] * VOCAB
    probs = torch.softmax(torch.randn(3, VOCAB), dim=-1)
    assert torch.allclose(groups.group_mass(probs).sum(dim=-1), torch.ones(3))
    assert build_groups(target.get_input_embeddings().weight, 1.01).pairs == VOCAB  # singletons
    # 20k random 64-d embeddings: blockwise, sparse, well within memory.
    big = build_groups(torch.randn(20_000, 64), 0.5)
    assert big.pairs < 20_000 * 50


def test_pcg_with_theta_above_one_is_exact_speculative_sampling():
    target = clustered_target()
    draft = tiny_llama(seed=32, vocab=VOCAB, width=16, init=0.2)
    config = DecodingConfig(draft_len=3, max_new_tokens=20, temperature=1.0)
    for seed in range(5):
        exact = speculative_generate(target, draft, PROMPT, config.with_(acceptance="exact", seed=seed))
        pcg = speculative_generate(target, draft, PROMPT, config.with_(acceptance="pcg", pcg_theta=1.01, seed=seed))
        assert pcg.tokens == exact.tokens


@pytest.mark.stats
def test_pcg_is_exact_at_group_level():
    target = clustered_target()
    draft = tiny_llama(seed=33, vocab=VOCAB, width=16, init=0.2)
    config = DecodingConfig(draft_len=2, max_new_tokens=2, temperature=1.0, acceptance="pcg", pcg_theta=0.9)
    runs = [speculative_generate(target, draft, PROMPT, config.with_(seed=s)) for s in range(sample_count(1500))]
    samples = [r.tokens for r in runs]
    pcg_acceptance = np.mean([r.stats.acceptance_rate for r in runs])
    with torch.no_grad():
        first = probabilities(processed_scores(target(input_ids=PROMPT).logits[0, -1:], config, None), config)[0]
        second = {}
        for token in range(VOCAB):
            logits = target(input_ids=torch.cat([PROMPT, torch.tensor([[token]])], dim=1)).logits[0, -1:]
            second[token] = probabilities(processed_scores(logits, config, None), config)[0]
    # Position 1: the group of the first token follows the target's group marginal.
    expected_first = {(c,): float(first[members].sum()) for c, members in enumerate(CLUSTERS)}
    assert chi_square_p([(cluster_of(s[0]),) for s in samples], expected_first) > 1e-3
    # Position 2: given the emitted first token, its group follows the target's conditional.
    counts = {t: sum(1 for s in samples if s[0] == t) for t in range(VOCAB)}
    expected_second = {
        (t, c): counts[t] / len(samples) * float(second[t][members].sum())
        for t in range(VOCAB) for c, members in enumerate(CLUSTERS)
    }
    assert chi_square_p([(s[0], cluster_of(s[1])) for s in samples], expected_second) > 1e-3
    # Tokens themselves are NOT the target's distribution inside a group, and the looser rule
    # keeps more draft tokens than exact acceptance does.
    exact_acceptance = np.mean([
        speculative_generate(target, draft, PROMPT, config.with_(acceptance="exact", seed=s)).stats.acceptance_rate
        for s in range(sample_count(300))
    ])
    assert pcg_acceptance > exact_acceptance


def test_adaptive_draft_length_stays_within_bounds_and_adapts():
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    unrelated = tiny_llama(seed=12, vocab=32, width=16, init=0.3)
    config = DecodingConfig(draft_len=6, adaptive_draft_len=True, max_new_tokens=60, cost_ratio=0.1, seed=0)
    good = speculative_generate(target, target, PROMPT, config)
    poor = speculative_generate(target, unrelated, PROMPT, config)
    for result in (good, poor):
        assert all(len(s.drafted) <= 6 for s in result.steps)
        assert len(result.tokens) == 60
    assert max(len(s.drafted) for s in good.steps) == 6
    assert np.mean([len(s.drafted) for s in poor.steps]) < np.mean([len(s.drafted) for s in good.steps])
    greedy = config.with_(temperature=0.0)
    assert speculative_generate(target, unrelated, PROMPT, greedy).tokens == autoregressive_generate(target, PROMPT, greedy).tokens
    # The confidence threshold stops a block early but never below one drafted token.
    cautious = speculative_generate(target, unrelated, PROMPT, config.with_(adaptive_threshold=0.9))
    assert all(len(s.drafted) >= 1 for s in cautious.steps[:-1])
    with pytest.raises(ValueError, match="cost_ratio"):
        DecodingConfig(cost_ratio=-1.0)


def test_a_backends_acoustic_embeddings_define_the_groups():
    from ssd_demo.rules import GroupRule, groups_for, make_rule
    from ssd_demo.speech.synthesis import Synthesizer

    model = tiny_llama(seed=40, vocab=VOCAB, width=16, init=0.2)  # input embeddings: no structure
    assert groups_for(model.get_input_embeddings().weight, 0.9, None).sizes.tolist() == [1.0] * VOCAB
    acoustic = torch.zeros(VOCAB, 3)
    for c, members in enumerate(CLUSTERS):
        acoustic[members, c % 3] = 1.0 + c  # pairs point the same way
    acoustic[6:8] = torch.tensor([1.0, 1.0, 1.0])
    assert groups_for(acoustic, 0.9, None).sizes.tolist() == [2.0] * VOCAB

    class AcousticBackend:  # only what Synthesizer.rule reads
        def acoustic_embeddings(self, vocab_size):
            return acoustic[:vocab_size]

    synth = Synthesizer(AcousticBackend(), model, {"same": model})
    rule = synth.rule(DecodingConfig(acceptance="pcg", pcg_theta=0.9))
    assert isinstance(rule, GroupRule) and rule.groups.sizes.tolist() == [2.0] * VOCAB
    assert not hasattr(model, "ssd_acoustic_embeddings")  # the table is handed in, never attached
    with pytest.raises(ValueError, match="needs a token embedding table"):
        make_rule(DecodingConfig(acceptance="pcg"))


def test_adaptive_choice_uses_per_position_acceptance():
    from ssd_demo.engine.adaptive import AcceptanceHistory, choose_draft_len

    steady = AcceptanceHistory()
    for _ in range(200):  # a draft that stays right: long blocks pay
        steady.record([0.95] * 8)
    assert choose_draft_len(steady, 8, 0.1) == 8
    decaying = AcceptanceHistory()
    for _ in range(200):  # same mean acceptance over the block, but the draft drifts after two tokens
        decaying.record([0.95, 0.9, 0.2, 0.2])
    assert choose_draft_len(decaying, 8, 0.1) == 2
    assert 1 <= choose_draft_len(AcceptanceHistory(), 8, 0.1) <= 8  # the prior alone gives a bounded, reproducible choice


def test_a_rarely_tried_block_length_is_not_stuck_at_the_prior():
    # Rounds mostly drafted 2 tokens (positions 3-4 reached by only a few early rounds): positions 3-4 take
    # the estimate of position 2, not the prior of 0.6, so K = 4 wins where its verify costs little more.
    from ssd_demo.engine.adaptive import AcceptanceHistory, choose_draft_len

    history = AcceptanceHistory()
    for _ in range(3):
        history.record([0.8, 0.8, 0.6, 0.6])
    for _ in range(50):
        history.record([0.8, 0.8])
    costs = (1.0, 1.40, 1.68, 2.00, 2.04)  # measured on an AMD EPYC core for a random 12x512 / 2x256 pair
    assert choose_draft_len(history, 4, 0.087, verify_costs=costs) == 4  # shrinking to 0.6 chose 2


def test_measured_verify_costs_choose_k_and_fall_back_to_ar_steps():
    from ssd_demo.engine.adaptive import AcceptanceHistory, choose_draft_len

    history = AcceptanceHistory()
    for _ in range(50):
        history.record([0.9, 0.9, 0.9, 0.9])
    cheap = (1.0, 1.1, 1.2, 1.3, 1.4)  # a CPU with AMX: verifying 5 tokens costs 1.4 steps
    assert choose_draft_len(history, 4, 0.1, verify_costs=cheap) == 4
    steep = (1.0, 2.0, 3.0, 4.0, 5.0)  # AVX2 only: verify cost grows with every row
    assert choose_draft_len(history, 4, 0.1, verify_costs=steep) == 0  # no K pays: plain AR steps
    assert choose_draft_len(history, 4, 0.1) >= 1  # without measured costs K is at least 1, as before
    # K = 0 rounds record nothing; the decoder probes with K = 1 now and then, and stays exact.
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    unrelated = tiny_llama(seed=12, vocab=32, width=16, init=0.3)
    config = DecodingConfig(draft_len=4, adaptive_draft_len=True, verify_costs=steep, max_new_tokens=60, seed=0)
    result = speculative_generate(target, unrelated, PROMPT, config)
    drafted = [len(s.drafted) for s in result.steps]
    assert len(result.tokens) == 60 and drafted.count(0) > 40 and 0 < sum(drafted) < 10
    greedy = config.with_(temperature=0.0)
    assert speculative_generate(target, unrelated, PROMPT, greedy).tokens == \
        autoregressive_generate(target, PROMPT, greedy).tokens
    with pytest.raises(ValueError, match="verify_costs"):
        DecodingConfig(verify_costs=(1.0, -2.0))


def test_probes_back_off_while_no_k_pays():
    """Where no K pays, the K = 1 probes come ever less often (16, 32, 64, ... rounds apart, at most 256):
    a machine where drafting does not pay loses next to nothing to them. Exactness is the test above's."""
    from ssd_demo.engine.adaptive import PROBE_EVERY, PROBE_MAX_EVERY

    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    unrelated = tiny_llama(seed=12, vocab=32, width=16, init=0.3)
    steep = (1.0, 2.0, 3.0, 4.0, 5.0)
    config = DecodingConfig(draft_len=4, adaptive_draft_len=True, verify_costs=steep, max_new_tokens=700, seed=0,
                            eos_token_id=None)
    result = speculative_generate(target, unrelated, PROMPT, config)
    probes = [i for i, s in enumerate(result.steps) if s.drafted]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(result.tokens) == 700 and len(probes) < 700 // PROBE_EVERY // 3
    assert gaps == sorted(gaps) and gaps[-1] <= PROBE_MAX_EVERY + 1 and gaps[-1] > 4 * PROBE_EVERY


def test_costs_are_measured_on_this_machine_and_cached():
    from ssd_demo.engine.calibration import calibrated_costs, measure_costs

    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    draft = tiny_llama(seed=12, vocab=32, width=16, init=0.3)
    costs = measure_costs(target, draft, repeats=2, measured_draft_lens=(1, 2, 4), max_draft_len=6)
    assert len(costs.verify) == 7 and costs.verify[0] == 1.0 and list(costs.verify) == sorted(costs.verify)
    assert costs.draft > 0 and costs.target_step_seconds > 0
    assert costs.round_cost(2) == pytest.approx(2 * costs.draft + costs.verify[2])
    assert calibrated_costs(target, draft) is calibrated_costs(target, draft)
    # What was timed is kept: K = 1, 2, 4; the rest is filled in, and a kept cost is never below its timing.
    assert [k for k, _ in costs.measured_verify] == [1, 2, 4]
    assert [costs.verify_origin(k) for k in (3, 5, 6)] == ["filled in"] * 3
    for k, timed in costs.measured_verify:
        assert costs.verify[k] >= timed and costs.verify_origin(k) == ("measured" if costs.verify[k] == timed
                                                                        else "raised")

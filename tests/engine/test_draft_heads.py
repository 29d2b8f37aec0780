"""Draft heads (proposals from the target's own hidden state): exact at beta = 0, greedy-equivalent,
forced tokens, one target call per round, strict save/load, and the training recipe learns."""

from __future__ import annotations

from support.paths import REPOSITORY

import pytest
import torch

from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
from ssd_demo.engine.kv import cached_lm
from ssd_demo.engine.draft_heads import DraftHeads, HeadsConfig
from ssd_demo.training.heads import evaluate_heads, train_heads_on_sequences
from support.stats import chi_square_p, marginal, sample_count
from support.exactness import NEW, PROMPT, VOCAB, exact_joint
from support.forced_tokens import FREE, Markers, SAMPLED, sampled_only
from support.forced_tokens import VOCAB as FORCED_VOCAB
from support.forced_tokens import PROMPT as FORCED_PROMPT
from support.forced_tokens import exact_joint as forced_joint
from support.tiny_models import tiny_llama


def random_heads(width: int, seed: int = 5) -> DraftHeads:
    torch.manual_seed(seed)
    return DraftHeads(HeadsConfig(hidden=width, inner=4 * width, blocks=2)).eval()


def trained_heads(target, width: int = 8) -> DraftHeads:
    """Heads fitted to the target's own samples (on-policy), so most blocks are accepted."""
    heads = random_heads(width)
    sequences = [PROMPT[0].tolist() + autoregressive_generate(
        target, PROMPT, DecodingConfig(max_new_tokens=12, temperature=1.0, seed=s)).tokens for s in range(256)]
    train_heads_on_sequences(heads, target, sequences, steps=300, lr=3e-3)
    return heads


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=1, vocab=VOCAB, init=0.2)


@pytest.fixture(scope="module")
def fitted(target):
    return trained_heads(target)


@pytest.mark.parametrize("kind,settings", [
    ("random", dict(temperature=1.0, draft_len=3)),
    ("random", dict(temperature=0.7, top_k=3, draft_len=2)),
    ("trained", dict(temperature=1.0, draft_len=4)),
    ("trained", dict(temperature=1.3, top_p=0.8, draft_len=4, allowed_token_ids=[0, 1, 3])),
])
@pytest.mark.stats
def test_heads_sampling_matches_target_distribution(target, fitted, kind, settings):
    heads = fitted if kind == "trained" else random_heads(8)
    config = DecodingConfig(max_new_tokens=NEW, beta=0.0, acceptance="ssd", **settings)
    joint = exact_joint(target, config)
    runs = [speculative_generate(target, heads, PROMPT, config.with_(seed=seed)) for seed in range(sample_count(1500))]
    samples = [tuple(r.tokens) for r in runs]
    assert all(len(s) == NEW for s in samples)
    rate = sum(r.stats.acceptance_rate for r in runs) / len(runs)
    if kind == "trained":
        assert rate > 0.85, f"trained heads accept only {rate:.2f}: the bonus path is barely exercised"
        assert any(r.next_kind == "bonus" for run in runs for r in run.steps)
    assert any(r.next_kind == "replacement" for run in runs for r in run.steps)
    for positions in (slice(0, 3), slice(3, 6)):
        picked = [s[positions] for s in samples]
        p = chi_square_p(picked, marginal(joint, positions))
        assert p > 1e-3, f"{kind} heads, tokens {positions}: output differs from the target (p={p:.2e})"


@pytest.mark.stats
def test_heads_with_forced_tokens_match_target_distribution():
    target = tiny_llama(seed=1, vocab=FORCED_VOCAB, init=0.2)
    heads = random_heads(8, seed=9)
    config = DecodingConfig(max_new_tokens=2 * SAMPLED, beta=0.0, allowed_token_ids=FREE, draft_len=3)
    joint = forced_joint(target, config)
    samples = []
    for seed in range(sample_count(1500)):
        result = speculative_generate(target, heads, FORCED_PROMPT, config.with_(seed=seed), forced=Markers())
        samples.append(tuple(sampled_only(result.tokens)[:SAMPLED]))
    for positions in (slice(0, 2), slice(2, 4)):
        p = chi_square_p([s[positions] for s in samples], marginal(joint, positions))
        assert p > 1e-3, f"tokens {positions}: differs from the target (p={p:.2e})"


@pytest.mark.parametrize("static_cache", [True, False])
@pytest.mark.parametrize("draft_len", [1, 3, 8])
def test_greedy_heads_equal_greedy_ar_and_cost_one_target_call_per_round(static_cache, draft_len):
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    config = DecodingConfig(temperature=0.0, max_new_tokens=40, draft_len=draft_len)
    ar = autoregressive_generate(target, prompt, config, static_cache=static_cache)
    spec = speculative_generate(target, random_heads(16), prompt, config, static_cache=static_cache)
    assert spec.tokens == ar.tokens
    assert spec.stats.target_calls == spec.stats.rounds + 1  # the prefill, then one verify per round
    hooks = target.get_output_embeddings()._forward_pre_hooks
    assert not hooks, "the hidden-state hook must not outlive the run"
    # Forced tokens too, with both forwards.
    forced_target = tiny_llama(seed=1, vocab=FORCED_VOCAB, init=0.5, layers=2, width=16)
    forced_config = DecodingConfig(max_new_tokens=40, temperature=0.0, draft_len=draft_len, allowed_token_ids=FREE)
    want = autoregressive_generate(forced_target, FORCED_PROMPT, forced_config, static_cache=static_cache,
                                   forced=Markers())
    got = speculative_generate(forced_target, random_heads(16), FORCED_PROMPT, forced_config,
                               static_cache=static_cache, forced=Markers())
    assert got.tokens == want.tokens and got.stats.forced_tokens == want.stats.forced_tokens > 0


def test_single_token_prompt_and_the_hidden_state_the_forward_keeps():
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    config = DecodingConfig(temperature=0.0, max_new_tokens=12, draft_len=3)
    prompt = torch.tensor([[7]])
    assert (speculative_generate(target, random_heads(16), prompt, config).tokens
            == autoregressive_generate(target, prompt, config).tokens)
    # Both forwards keep the input of the output layer, the state the heads start from.
    ids = [3, 1, 4, 1, 5]
    for static in (True, False):
        lm = cached_lm(target, 64, static_cache=static, keep_hidden=True)
        with torch.inference_mode():
            logits = lm.forward(ids)
            assert lm.hidden.shape == (5, 16) and lm.hidden_from == 0
            torch.testing.assert_close(target.lm_head(lm.hidden), logits, atol=1e-5, rtol=1e-5)
            lm.forward([2], last_only=True)
        assert lm.hidden.shape == (1, 16) and lm.hidden_from == 5
        lm.close()


def test_heads_refuse_a_target_of_another_width_and_load_strictly(tmp_path):
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    with pytest.raises(ValueError, match="8-wide hidden states but the target.s are 16"):
        speculative_generate(target, random_heads(8), torch.tensor([[1, 2]]), DecodingConfig(max_new_tokens=4))
    heads = random_heads(16)
    heads.save(tmp_path / "heads", extra={"note": "test"})
    loaded = DraftHeads.load(tmp_path / "heads")
    for name, tensor in heads.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor)
    from safetensors.torch import load_file, save_file
    weights = load_file(tmp_path / "heads" / "heads.safetensors")
    weights.pop(next(iter(weights)))
    save_file(weights, tmp_path / "heads" / "heads.safetensors")
    with pytest.raises(RuntimeError, match="Missing key"):
        DraftHeads.load(tmp_path / "heads")


def test_heads_refuse_a_target_they_were_not_trained_on(tmp_path):
    """Same width, other weights: heads that record their target refuse another one (at load of a voice
    and in the decoder), and the record survives a float16 save as the voice export does."""
    trained_on = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    other = tiny_llama(seed=12, vocab=32, layers=2, width=16, init=0.3)
    from ssd_demo.engine.draft_heads import target_fingerprint
    heads = random_heads(16)
    heads.made_for = target_fingerprint(trained_on)
    heads.to(torch.float16).save(tmp_path / "heads")
    loaded = DraftHeads.load(tmp_path / "heads")
    assert loaded.made_for == target_fingerprint(trained_on) == target_fingerprint(trained_on.half().float())
    config = DecodingConfig(max_new_tokens=4, seed=1)
    speculative_generate(trained_on, loaded, torch.tensor([[1, 2]]), config)  # its own target: fine
    with pytest.raises(ValueError, match="trained on another target"):
        speculative_generate(other, loaded, torch.tensor([[1, 2]]), config)
    with torch.no_grad():  # a target changed in place (fine-tuned further) is another target too
        trained_on.get_output_embeddings().weight.add_(0.5)
    with pytest.raises(ValueError, match="trained on another target"):
        speculative_generate(trained_on, loaded, torch.tensor([[1, 2]]), config)


def test_the_shipped_heads_were_trained_on_the_shipped_target():
    from ssd_demo.engine.draft_heads import target_fingerprint
    from transformers import AutoModelForCausalLM
    voice = REPOSITORY / "assets" / "embedded"
    if not (voice / "draft_heads").exists():
        pytest.skip("this voice has no heads")
    heads = DraftHeads.load(voice / "draft_heads")
    target = AutoModelForCausalLM.from_pretrained(voice / "target", local_files_only=True)
    assert heads.made_for == target_fingerprint(target)


@pytest.mark.train
def test_training_raises_the_heads_expected_acceptance(target):
    sequences = [PROMPT[0].tolist() + autoregressive_generate(
        target, PROMPT, DecodingConfig(max_new_tokens=12, temperature=1.0, seed=s)).tokens for s in range(64)]
    ids = torch.tensor(sequences)
    labels = ids.clone()
    labels[:, 0] = -100
    batch = [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}]
    heads = random_heads(8)
    before = evaluate_heads(heads, target, batch, unroll=3)
    train_heads_on_sequences(heads, target, sequences, steps=150, lr=3e-3, unroll=3)
    after = evaluate_heads(heads, target, batch, unroll=3)
    assert len(after["expected_acceptance"]) == 3
    assert after["loss"] < before["loss"]
    assert min(after["expected_acceptance"]) > max(before["expected_acceptance"][0], 0.9)


def test_fast_step_computes_the_module_step():
    heads = random_heads(16)
    embedding = torch.randn(32, 16)
    from ssd_demo.engine.draft_heads import fast_step
    fast = fast_step(heads, embedding)
    assert fast_step(heads, embedding) is fast  # built once
    state = torch.randn(16)
    with torch.no_grad():
        for token in (0, 7, 31):
            torch.testing.assert_close(fast(state, token), heads.step(state, embedding[token]), atol=1e-5, rtol=1e-5)
        half = fast_step(heads, embedding.half())  # follows the target's dtype
        assert half(state.half(), 3).dtype == torch.float16

"""The lean static-cache draft step computes what transformers computes, with rollback by position."""

import pytest
import torch

from ssd_demo import DecodingConfig, speculative_generate
from ssd_demo.decoding import CachedLM, _draft_lm
from ssd_demo.fast_draft import StaticDraftLM, supports
from tiny_models import tiny_llama


def test_same_logits_as_transformers_through_prefill_steps_rollback_and_growth():
    model = tiny_llama(seed=3, vocab=50, layers=2, width=32, init=0.3)
    reference, lean = CachedLM(model), StaticDraftLM(model, capacity=4)  # capacity grows on demand
    sequence = torch.randint(0, 50, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    steps = [(0, 5, False), (5, 6, True), (6, 8, True), ("cut", 4), (4, 9, False), (9, 10, True), ("cut", 7),
             (7, 30, True)]
    for step in steps:
        if step[0] == "cut":
            reference.truncate(step[1])
            lean.truncate(step[1])
            continue
        begin, end, last = step
        expected = reference.forward(sequence[begin:end], last_only=last)
        got = lean.forward(sequence[begin:end], last_only=last)
        assert torch.allclose(expected, got, atol=1e-5), step
        assert reference.length == lean.length == end


def test_used_for_llama_drafts_only_and_can_be_switched_off(monkeypatch):
    model = tiny_llama(seed=4, vocab=40, layers=1, width=16)
    assert supports(model) and isinstance(_draft_lm(model, 64), StaticDraftLM)
    monkeypatch.setenv("SSD_DEMO_PLAIN_DRAFT", "1")
    assert isinstance(_draft_lm(model, 64), CachedLM)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_tokens_with_either_draft_path(monkeypatch, temperature):
    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    draft = tiny_llama(seed=12, vocab=32, layers=1, width=16, init=0.3)
    config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=temperature, seed=5)
    prompt = torch.tensor([[1, 2, 3]])
    lean = speculative_generate(target, draft, prompt, config).tokens
    monkeypatch.setenv("SSD_DEMO_PLAIN_DRAFT", "1")
    assert speculative_generate(target, draft, prompt, config).tokens == lean

"""Tiny random causal LMs built locally (no download) for engine tests."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(seed: int, vocab: int = 4, layers: int = 1, width: int = 8, init: float = 1.0, heads: int = 2,
               kv_heads: int = 1, max_positions: int = 256, **config) -> LlamaForCausalLM:
    """A random Llama, the tests' one builder; a large init range gives peaky, model-specific distributions.
    `config`: any other LlamaConfig field (biases, tied embeddings, rope scaling, another MLP width)."""
    torch.manual_seed(seed)
    settings = dict(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                    num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                    initializer_range=init, tie_word_embeddings=False)
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config})).eval()


def with_logit_bias(model: LlamaForCausalLM, bias: dict[int, float]) -> LlamaForCausalLM:
    """Give the output layer a bias, to make chosen tokens (un)likely while caches stay real."""
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        for token, value in bias.items():
            head.bias[token] = value
    model.lm_head = head
    return model


def check_same_logits(reference, lean, sequence: list[int], steps, atol: float, rtol: float = 1e-5) -> float:
    """Run two cached forwards through the same calls and check that every call gives the same logits.

    `steps` are (begin, end, last_only) calls on `sequence` and ("cut", n) rollbacks to length n.
    Returns the largest logit seen, so callers can check that the comparison was not between near-zeros.
    """
    peak = 0.0
    for step in steps:
        if step[0] == "cut":
            reference.truncate(step[1])
            lean.truncate(step[1])
            continue
        begin, end, last = step
        expected = reference.forward(sequence[begin:end], last_only=last).float()
        got = lean.forward(sequence[begin:end], last_only=last).float()
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, msg=lambda message: f"{step}: {message}")
        assert reference.length == lean.length == end
        peak = max(peak, expected.abs().max().item())
    return peak


def onednn_call_rows(monkeypatch) -> list[int]:
    """Rows of every call that reaches oneDNN's packed matmul from now on (so a test knows it ran)."""
    rows, real = [], torch.ops.mkldnn._linear_pointwise

    def spy(x, *args):
        rows.append(x.shape[0])
        return real(x, *args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    return rows


def related_draft(vocab: int) -> LlamaForCausalLM:
    """A draft close to `tiny_llama(1, vocab, init=0.2)`: the same weights nudged by small seeded noise, so that
    most drafted blocks are accepted (the bonus token and the catch-up after it are exercised)."""
    draft = tiny_llama(seed=1, vocab=vocab, init=0.2)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return draft


def check_same_decoding_after(switch, temperature: float) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """Decode a tiny pair (speculative and AR) on the lean forward, then again after `switch()` puts another forward
    in its place: the same tokens and the same accepted counts per round. Returns (target, draft)."""
    from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate

    target = tiny_llama(seed=11, vocab=32, layers=2, width=16, init=0.3)
    draft = tiny_llama(seed=12, vocab=32, layers=1, width=16, init=0.3)
    config = DecodingConfig(draft_len=3, max_new_tokens=40, temperature=temperature, seed=5)
    prompt = torch.tensor([[1, 2, 3]])
    lean, lean_ar = speculative_generate(target, draft, prompt, config), autoregressive_generate(target, prompt, config)
    switch()
    other = speculative_generate(target, draft, prompt, config)
    assert other.tokens == lean.tokens
    assert [s.accepted for s in other.steps] == [s.accepted for s in lean.steps]
    assert autoregressive_generate(target, prompt, config).tokens == lean_ar.tokens
    return target, draft

"""A lean decode step for small Llama-family drafts, with a static KV cache rolled back by position.

Why by hand: a small draft (1-2 layers, 256 wide) spends most of a transformers forward call in
per-call machinery (argument handling, mask construction, cache objects, output dataclasses), not in
arithmetic, and speculative decoding calls the draft K times per round. This module runs the same
weights through the same modules' maths (RMSNorm, rotary embedding, attention, gated MLP) in a few
tensor operations, in the style of gpt-fast: preallocated key/value buffers, and rollback is just
moving the position pointer. It is used for drafts only: the target and plain AR decoding go through
transformers. Exactness does not depend on it either way: acceptance uses the probabilities the
draft actually sampled from, whatever computed them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED = ("LlamaForCausalLM",)


def supports(model) -> bool:
    """Plain Llama causal LMs with full attention (no sliding window, no custom attention code)."""
    config = model.config
    return (
        type(model).__name__ in SUPPORTED
        and getattr(config, "sliding_window", None) is None
        and config.num_attention_heads % config.num_key_value_heads == 0
        and not model.training
    )


class StaticDraftLM:
    """Same interface as decoding.CachedLM: `length`, `forward(ids, last_only)`, `truncate(n)`, `calls`."""

    def __init__(self, model, capacity: int = 512):
        self.model = model
        self.calls = 0
        self._pos = 0
        core = model.model
        config = model.config
        self._layers = list(core.layers)
        self._heads = config.num_attention_heads
        self._kv_heads = config.num_key_value_heads
        self._head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        weight = self.model.lm_head.weight
        shape = (len(self._layers), 1, self._kv_heads, capacity, self._head_dim)
        keys = torch.zeros(shape, dtype=weight.dtype, device=weight.device)
        values = torch.zeros_like(keys)
        if getattr(self, "_keys", None) is not None:  # grow: keep what is cached
            keys[..., : self._pos, :] = self._keys[..., : self._pos, :]
            values[..., : self._pos, :] = self._values[..., : self._pos, :]
        self._keys, self._values = keys, values

    @property
    def length(self) -> int:
        return self._pos

    def truncate(self, length: int) -> None:
        self._pos = min(self._pos, max(length, 0))  # rollback = moving the pointer

    @torch.inference_mode()
    def forward(self, ids, last_only: bool = False) -> torch.Tensor:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        device = self._keys.device
        if not torch.is_tensor(ids):
            ids = torch.tensor(ids, dtype=torch.long, device=device)
        ids = ids.view(-1)
        n, start = ids.shape[0], self._pos
        end = start + n
        if end > self._keys.shape[3]:
            self._allocate(max(2 * self._keys.shape[3], end))
        core = self.model.model
        positions = torch.arange(start, end, device=device)
        hidden = core.embed_tokens(ids)[None]  # [1, n, d]
        cos, sin = core.rotary_emb(hidden, positions[None])
        # Causal mask over cached + new positions; a single new token may attend to everything.
        mask = None if n == 1 else torch.arange(end, device=device)[None, :] <= positions[:, None]
        for index, layer in enumerate(self._layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(1, n, self._heads, self._head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(1, n, self._kv_heads, self._head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(1, n, self._kv_heads, self._head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            self._keys[index, :, :, start:end] = k
            self._values[index, :, :, start:end] = v
            out = F.scaled_dot_product_attention(
                q, self._keys[index, :, :, :end], self._values[index, :, :, :end],
                attn_mask=mask, scale=attn.scaling, enable_gqa=self._kv_heads != self._heads,
            )
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(1, n, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        hidden = core.norm(hidden[:, -1:] if last_only else hidden)
        self._pos = end
        self.calls += 1
        return self.model.lm_head(hidden)[0]

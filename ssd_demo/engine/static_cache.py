"""A lean cached forward for Llama-family models (and Qwen2): a static KV cache rolled back by position.

Why by hand: a small model (a 1-2 layer draft, or a 12 x 256 target on a CPU) spends most of a
transformers forward call in per-call machinery (argument handling, mask construction, cache
objects, output dataclasses), not in arithmetic, and speculative decoding makes many short calls:
K draft steps and one verify call per round. This module runs the same weights through the same
modules' maths (RMSNorm, rotary embedding, attention, gated MLP) in a few tensor operations, in the
style of gpt-fast: preallocated key/value buffers, and rollback is just moving the position pointer.

It serves the target as well as the draft, in both decoders, so our autoregressive baseline runs the
same code as the verify call, each call on the matmul kernel timed fastest here for its row count
(`kernels.kernel_choice`), and speedups over it stay honest. Logits match
transformers' to float rounding (tests check it); exactness of speculative sampling never depends
on it, since acceptance uses the probabilities each model actually produced. Models it does not
support (other architectures, sliding windows, training mode) go through transformers' own
forward with a DynamicCache (`kv.CachedLM`).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

from . import kernels

# Qwen2 is Llama's maths plus biases on the query/key/value projections (and, for CosyVoice 2's speech
# LM, on the output layer), which the step below adds where a layer has them. PlainLlamaForCausalLM is a shipped
# voice's Llama loaded without transformers (`models.plain_llama`), under transformers' module names.
SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM", "PlainLlamaForCausalLM")
#: Rotary scalings whose tables depend on the position alone.
STATIC_ROPE_TYPES = ("default", "linear", "llama3")
#: Activation modules that compute F.silu (transformers' and torch's).
SILU = ("SiLUActivation", "SiLU")


def supports(model) -> bool:
    """Plain Llama and Qwen2 causal LMs with full attention (no sliding window, no custom attention code)."""
    config = model.config
    return (
        type(model).__name__ in SUPPORTED
        and getattr(config, "sliding_window", None) is None
        and all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ())
        and config.num_attention_heads % config.num_key_value_heads == 0
        and not model.training
    )


#: "0" turns the lean forward off everywhere (`kv.cached_lm` then uses transformers' own forward).
STATIC_CACHE_ENV = "SSD_DEMO_STATIC_CACHE"


def serves(model, static_cache: bool | None = None) -> bool:
    """Whether `kv.cached_lm` runs this model through the lean forward (`static_cache=None`: as
    `SSD_DEMO_STATIC_CACHE` says)."""
    if static_cache is None:
        static_cache = os.environ.get(STATIC_CACHE_ENV, "1") != "0"
    return static_cache and is_model_config(getattr(model, "config", None)) and supports(model)


def is_model_config(config) -> bool:
    """A transformers model config, or a plain Llama's (`models.plain_llama`): the configs the lean forward reads.
    (Without transformers imported no object can be one of its configs, so this never imports it.)"""
    if type(config).__name__ == "PlainLlamaConfig":
        return True
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(config, transformers.PreTrainedConfig)


def describe_kernels(model, static_cache: bool | None = None) -> str:
    """Which matmul kernel serves which calls (rows = tokens per call) of this model here, and why, for reports
    (`kv.describe_kernels` says so of CUDA graphs first)."""
    if not serves(model, static_cache):
        return "transformers' own forward" if is_model_config(getattr(model, "config", None)) else (
            "its own forward")
    if kernels.packed_weights(model) is None:
        return "the model's own matmuls (no packed copy: not on a CPU, or over 300 M parameters)"
    return kernels.kernel_choice(model).describe()


class _Modules:
    """A layer's own projection modules, called like `kernels.PackedLinear` (the unpacked path: GPUs, big models);
    several modules' outputs are concatenated, as the packed copy fuses them."""

    def __init__(self, *modules):
        self.modules = modules

    def __call__(self, x: torch.Tensor, onednn_from: int) -> torch.Tensor:
        if len(self.modules) == 1:
            return self.modules[0](x)
        return torch.cat([module(x) for module in self.modules], dim=-1)


class _Layer:
    """What one decoder layer's step reads, gathered once per forward object (no module attribute lookups
    per call): its projections (packed or its own modules), norms, activation and KV cache views."""

    def __init__(self, layer, packed: "kernels.PackedLayer | None"):
        attn, mlp = layer.self_attn, layer.mlp
        self.input_norm = _NormWeights(layer.input_layernorm)
        self.post_norm = _NormWeights(layer.post_attention_layernorm)
        if packed is not None:
            self.linears = (packed.qkv, packed.o, packed.gate_up, packed.down)
        else:
            self.linears = (_Modules(attn.q_proj, attn.k_proj, attn.v_proj), _Modules(attn.o_proj),
                            _Modules(mlp.gate_proj, mlp.up_proj), _Modules(mlp.down_proj))
        # SiLU (Llama's, Qwen2's) in place on the gate's half of the fused output: one allocation fewer.
        self.act = (lambda gate: F.silu(gate, inplace=True)) if type(mlp.act_fn).__name__ in SILU else mlp.act_fn
        self.scaling = attn.scaling
        self.keys = self.values = None  # [1, kv_heads, capacity, head_dim] views, set by `StaticCacheLM._allocate`


class _NormWeights:
    """An RMSNorm module, and in float32 its weight as [w, w] for the layer norm of [x, -x] (`StaticCacheLM`)."""

    def __init__(self, norm):
        self.module = norm
        self.eps = norm.variance_epsilon
        self.mirrored = torch.cat([norm.weight.detach()] * 2) if norm.weight.dtype == torch.float32 else None


class StaticCacheLM:
    """Implements `kv.CachedForward` (like `kv.CachedLM`): `length`, `forward`, `truncate`, `calls`.

    In float32 the residual stream is kept as [h, -h] ([n, 2d]): RMSNorm is then one layer_norm call on it
    (`_normalise`), and each residual sum is added to one half and subtracted from the other, the same bits
    as h + delta (negation is exact). Half precision keeps h and the norm modules' own order of casts.
    """

    def __init__(self, model, capacity: int = 512, pack: bool = True, onednn_from: int | None = None):
        self.model = model
        self.calls = 0
        self._pos = 0
        # The final hidden state of the last forward's logits rows (read by draft heads; a reference, no copy).
        self.hidden: torch.Tensor | None = None
        self.hidden_from = 0
        core = model.model
        config = model.config
        self._heads, self._kv_heads, self._head_dim = attention_shape(config)
        self._packed = kernels.packed_weights(model) if pack else None
        # Calls with at least this many rows use the oneDNN kernel (None: as measured for this machine).
        self._onednn_from = kernels.NEVER
        if self._packed is not None:
            wanted = kernels.kernel_threshold(model) if onednn_from is None else onednn_from
            # (building the oneDNN copies is a no-op when they are there)
            if wanted == kernels.NEVER or kernels.onednn_copies(self._packed, wanted=True):
                self._onednn_from = wanted
        self._layers = [_Layer(layer, None if self._packed is None else self._packed[0][index])
                        for index, layer in enumerate(core.layers)]
        self._final_norm = _NormWeights(core.norm)
        self._mirrored = self._final_norm.mirrored is not None  # float32
        # Rotary tables depend on the position only (unless the scaling adapts to the sequence length, as
        # "dynamic" rope does), so they are computed once per capacity instead of once per call.
        self._static_rope = getattr(core.rotary_emb, "rope_type", "default") in STATIC_ROPE_TYPES
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
        for index, layer in enumerate(self._layers):
            layer.keys, layer.values = keys[index], values[index]
        if self._static_rope:
            positions = torch.arange(capacity, device=weight.device)[None]
            cos, sin = self.model.model.rotary_emb(keys.new_zeros(1, 1, 1), positions)
            self._cos, self._sin_signed = cos[0, :, None, :], signed_sine(sin[0, :, None, :])  # [capacity, 1, head_dim]

    @property
    def length(self) -> int:
        return self._pos

    def truncate(self, length: int) -> None:
        self._pos = min(self._pos, max(length, 0))  # rollback = moving the pointer

    def close(self) -> None:
        """Nothing to release (the buffers go with the object); here for `kv.CachedForward`."""

    def _normalise(self, norm: _NormWeights, stream: torch.Tensor) -> torch.Tensor:
        """Llama's RMSNorm, x / sqrt(mean(x^2) + eps) * w; in float32 the layer norm of the stream [x, -x].

        Why: layer_norm is one kernel on the CPU, while rms_norm (and the module) run four or five
        (pow, sum, div, mul). The layer norm of [x, -x] has mean 0 and variance mean(x^2) with the eps
        in the same place, so its first half is RMSNorm's x / sqrt(mean(x^2) + eps), to float rounding,
        and with the weight [w, w] the product by w happens in the same kernel (the same bits as after it).
        Measured against F.rms_norm, interleaved on one core (two runs): the 12-layer target's step and
        5-token verify 3.5-9% faster, a one-layer draft step 0-5%.
        """
        if self._mirrored:
            width = stream.shape[-1]
            return torch.layer_norm(stream, (width,), norm.mirrored, None, norm.eps, False)[:, : width // 2]
        return norm.module(stream)  # half precision: the module's own order of casts

    def _add(self, stream: torch.Tensor, halves: tuple[torch.Tensor, torch.Tensor] | None,
             delta: torch.Tensor) -> torch.Tensor:
        """The residual sum stream + delta (in float32 in place on the stream [h, -h], through its `halves`)."""
        if halves is not None:
            halves[0].add_(delta)
            halves[1].sub_(delta)
            return stream
        return stream + delta

    @torch.inference_mode()
    def forward(self, ids, last_only: bool = False) -> torch.Tensor:
        device = self._keys.device
        if not torch.is_tensor(ids):
            ids = torch.tensor(ids, dtype=torch.long, device=device)
        ids = ids.view(-1)
        n, start = ids.shape[0], self._pos
        end = start + n
        if end > self._keys.shape[3]:
            self._allocate(max(2 * self._keys.shape[3], end))
        core = self.model.model
        hidden = core.embed_tokens(ids)  # [n, d]
        positions = None if n == 1 and self._static_rope else torch.arange(start, end, device=device)
        if self._static_rope:
            cos, sin = self._cos[start:end], self._sin_signed[start:end]
        else:
            cos, sin = core.rotary_emb(hidden[None], positions[None])
            cos, sin = cos[0, :, None, :], signed_sine(sin[0, :, None, :])
        # Causal mask over cached + new positions; a single new token may attend to everything.
        mask = None if n == 1 else torch.arange(end, device=device)[None, :] <= positions[:, None]
        stream = torch.cat([hidden, -hidden], dim=-1) if self._mirrored else hidden
        halves = stream.chunk(2, dim=-1) if self._mirrored else None
        onednn_from = self._onednn_from
        for layer in self._layers:
            qkv, o, gate_up, down = layer.linears
            attended = self._attend(layer, qkv(self._normalise(layer.input_norm, stream), onednn_from),
                                    cos, sin, start, end, mask)
            stream = self._add(stream, halves, o(attended, onednn_from))
            projected = gate_up(self._normalise(layer.post_norm, stream), onednn_from)
            width = projected.shape[-1] // 2
            activated = layer.act(projected[:, :width]).mul_(projected[:, width:])  # act(gate) * up
            stream = self._add(stream, halves, down(activated, onednn_from))
        hidden = self._normalise(self._final_norm, stream[-1:] if last_only else stream)
        self._pos = end
        self.calls += 1
        self.hidden, self.hidden_from = hidden, end - hidden.shape[0]
        if self._packed is not None:
            return self._packed[1](hidden, onednn_from)
        return self.model.lm_head(hidden)

    def _attend(self, layer: _Layer, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int, end: int,
                mask: torch.Tensor | None) -> torch.Tensor:
        """Attention of the n new rows ([n, q|k|v] projections) over the cache, after writing their keys and
        values into it: [n, heads * head_dim].

        The rotary embedding rotates queries and keys together, as two products: the half-swapped copy
        times a sign-folded sine table gives rotate_half's bits with one kernel instead of four.
        """
        n = qkv.shape[0]
        heads, kv_heads, head_dim = self._heads, self._kv_heads, self._head_dim
        rotated = heads + kv_heads
        qk = qkv[:, : rotated * head_dim].view(n, rotated, head_dim)
        swapped = qk.view(n, rotated, 2, head_dim // 2).flip(2).view(n, rotated, head_dim)
        qk = (qk * cos).add_(swapped.mul_(sin))  # = qk * cos + rotate_half(qk) * sin
        layer.keys[0, :, start:end] = qk[:, heads:].transpose(0, 1)
        layer.values[0, :, start:end] = qkv[:, rotated * head_dim :].view(n, kv_heads, head_dim).transpose(0, 1)
        out = F.scaled_dot_product_attention(
            qk[:, :heads].transpose(0, 1)[None], layer.keys[:, :, :end], layer.values[:, :, :end],
            attn_mask=mask, scale=layer.scaling, enable_gqa=kv_heads != heads,
        )
        return out[0].transpose(0, 1).reshape(n, heads * head_dim)


def attention_shape(config) -> tuple[int, int, int]:
    """(query heads, key/value heads, head width) of a Llama-family config."""
    heads = config.num_attention_heads
    return heads, config.num_key_value_heads, getattr(config, "head_dim", None) or config.hidden_size // heads


def signed_sine(sin: torch.Tensor) -> torch.Tensor:
    """The sine table with its first half negated: rotate_half(x) * sin == swap_halves(x) * signed_sine(sin)."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


kernels.time_with(StaticCacheLM)  # the kernel probe times this forward

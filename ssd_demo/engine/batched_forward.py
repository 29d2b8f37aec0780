"""A batched cached forward for Llama-family models: the new tokens of many requests in one call, every
request in its own row of the KV cache at its own length (the continuous-batching engine's, `engine.batching`).

Why by hand: transformers' forward pads a batch to one length and rebuilds its masks and cache objects per call,
and the lean forward (`static_cache`) serves one request. Here the maths are the lean forward's (RMSNorm, rotary
embedding, grouped attention, gated MLP), arranged so that a row's numbers never depend on the other rows, so a
seeded request decodes the same tokens alone or among others (batch invariance):
- every matrix product runs on a multiple of 4 rows (zero rows pad it): with fewer rows the CPU's BLAS takes
  another kernel that sums in another order, while from 4 rows on a row's bits depend neither on how many rows
  there are nor on where it sits (oneDNN's matmul, used where this torch has it, needed no padding on an AMD EPYC
  with AVX-512, but the padding costs little and keeps other CPUs safe);
- attention runs row by row, each over exactly its own positions (one call per row and layer). One call for all
  rows over a span masked past each row's own was 8-15 % faster with one thread, but a row's bits then changed
  with the other rows where rows feed several tokens (a sampled one and those a schedule forces), and with more
  threads (measured).
`tests/engine/test_batching.py` checks both on the machine it runs on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels
from .static_cache import STATIC_ROPE_TYPES, attention_shape, signed_sine, supports

#: Rows a matrix product always runs on a multiple of (see the module's docstring).
ROW_MULTIPLE = 4


def batches(model) -> bool:
    """Whether `BatchedLM` runs this model: a Llama or Qwen2 `static_cache` runs, with position-only rotary tables."""
    rotary = getattr(model.model, "rotary_emb", None)
    return supports(model) and getattr(rotary, "rope_type", "default") in STATIC_ROPE_TYPES


class _Linear:
    """One projection as the batched step runs it: oneDNN's packed weight where this torch has oneDNN (1.4x BLAS's
    speed for the 4-16 rows of a batch's products, measured on an AMD EPYC with one thread), else BLAS's [in, out]
    matrix."""

    def __init__(self, linear: kernels.PackedLinear):
        self.weight_t, self.bias, self.onednn = linear.weight_t, linear.bias, None
        if torch.backends.mkldnn.is_available():
            try:
                linear.pack_onednn()  # (shared with the lean forward where it uses oneDNN too)
                self.onednn = linear.onednn
            except (RuntimeError, AttributeError):  # this build's oneDNN cannot: BLAS serves
                pass

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [n, in] -> [n, out]."""
        if self.onednn is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.onednn, self.bias, "none", [], "")
        return torch.mm(x, self.weight_t) if self.bias is None else torch.addmm(self.bias, x, self.weight_t)


class _Layer:
    """One decoder layer as the batched step reads it: its projections (q|k|v and gate|up fused), its norms'
    weights."""

    def __init__(self, layer, packed: kernels.PackedLayer):
        self.qkv, self.o, self.gate_up, self.down = (_Linear(linear) for linear in
                                                     (packed.qkv, packed.o, packed.gate_up, packed.down))
        self.input_norm = (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
        self.post_norm = (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
        self.scaling = layer.self_attn.scaling


def _padded(x: torch.Tensor) -> torch.Tensor:
    """x [n, d] with zero rows after it up to a multiple of `ROW_MULTIPLE` (see the module's docstring)."""
    missing = -x.shape[0] % ROW_MULTIPLE
    return torch.cat([x, x.new_zeros(missing, x.shape[1])]) if missing else x


def _rms_norm(x: torch.Tensor, norm: tuple[torch.Tensor, float]) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), norm[0], norm[1])


class KVRows:
    """Rows of KV cache, each a request's past at its own length, with the rotary tables for their positions: what
    both batched steps keep (`BatchedLM`; `onnx_batched.OnnxBatchedLM`, whose graph reads and writes them in place).

    Rows are the caller's to arrange: a step reads the first B rows, so a caller keeps its live requests in rows
    0..B-1 (`move` copies a row into another when one leaves). `lengths[row]` is the positions cached in a row.
    """

    def __init__(self, model, rows: int, capacity: int):
        self.model = model
        self.heads, self.kv_heads, self.head_dim = attention_shape(model.config)
        self.device = model.lm_head.weight.device
        self.lengths: list[int] = []
        self.keys: torch.Tensor | None = None  # [layers, rows, kv_heads, capacity, head_dim], as self.values
        self.values: torch.Tensor | None = None
        self.reserve(rows, capacity)

    @property
    def rows(self) -> int:
        return 0 if self.keys is None else self.keys.shape[1]

    @property
    def capacity(self) -> int:
        return 0 if self.keys is None else self.keys.shape[3]

    @torch.inference_mode()
    def reserve(self, rows: int, capacity: int) -> None:
        """At least `rows` rows of at least `capacity` positions (what is cached is kept; the buffers are new)."""
        if rows <= self.rows and capacity <= self.capacity:
            return
        rows, capacity = max(rows, self.rows), max(capacity, self.capacity)
        shape = (len(self.model.model.layers), rows, self.kv_heads, capacity, self.head_dim)
        keys, values = torch.zeros(shape, device=self.device), torch.zeros(shape, device=self.device)
        if self.keys is not None:
            keys[:, : self.rows, :, : self.capacity] = self.keys
            values[:, : self.rows, :, : self.capacity] = self.values
        self.keys, self.values = keys, values
        self.lengths += [0] * (rows - len(self.lengths))
        cos, sin = self.model.model.rotary_emb(torch.zeros(1, 1, 1, device=self.device),
                                               torch.arange(capacity, device=self.device)[None])
        self._cos, self._sin = cos[0].contiguous(), signed_sine(sin[0]).contiguous()  # [capacity, head_dim]

    @torch.inference_mode()
    def move(self, source: int, destination: int) -> None:
        """Row `source`'s cache into row `destination` (its old content is dropped)."""
        length = self.lengths[source]
        self.keys[:, destination, :, :length] = self.keys[:, source, :, :length]
        self.values[:, destination, :, :length] = self.values[:, source, :, :length]
        self.lengths[destination] = length


class BatchedLM(KVRows):
    """Torch's batched step over `KVRows`: `prefill` fills a row, `step` advances rows 0..B-1 by their new tokens
    (one, or a few where a schedule forces some)."""

    def __init__(self, model, rows: int = 4, capacity: int = 512):
        if not batches(model):
            raise ValueError(f"{type(model).__name__} is not a model the batched forward runs (a Llama or Qwen2 "
                             "with full attention and a position-only rotary embedding, in eval mode)")
        core = model.model
        with torch.inference_mode():
            # The lean forward's packed copy where it keeps one (CPU models), else one of our own.
            packed_layers, head = kernels.packed_weights(model) or kernels.pack(model)
            self._layers = [_Layer(layer, packed) for layer, packed in zip(core.layers, packed_layers)]
            self._head = _Linear(head)
        self._embed, self._norm = core.embed_tokens, (core.norm.weight, core.norm.variance_epsilon)
        super().__init__(model, rows, capacity)

    @torch.inference_mode()
    def prefill(self, row: int, ids: list[int]) -> None:
        """Row `row`'s cache from position 0: the `ids` (a prompt), causally. Always computed alone, the same way."""
        self.lengths[row] = 0
        if not ids:
            return
        count = len(ids)
        positions = torch.arange(count, device=self.keys.device)

        def attend(index: int, layer: _Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.keys[index, row, :, :count] = k.transpose(0, 1)
            self.values[index, row, :, :count] = v.transpose(0, 1)
            out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                                 v.transpose(0, 1)[None], is_causal=True, scale=layer.scaling,
                                                 enable_gqa=self.kv_heads != self.heads)
            return out[0].transpose(0, 1).reshape(count, -1)

        self._layers_over(torch.tensor(ids, device=self.keys.device), positions, attend)
        self.lengths[row] = count

    @torch.inference_mode()
    def step(self, ids: list[list[int]]) -> torch.Tensor:
        """Logits [B, vocab] after the new tokens of rows 0..B-1: `ids[b]` (one token or more: a sampled token and the
        ones a schedule forces after it) go into row b after its cache; each row's logits are its last token's."""
        rows, device = len(ids), self.keys.device
        counts, starts = [len(new) for new in ids], self.lengths[:rows]
        if min(counts) < 1:
            raise ValueError("every row needs at least one new token")
        if max(start + count for start, count in zip(starts, counts)) > self.capacity:
            raise ValueError(f"a row is full: its tokens would pass the {self.capacity} positions of its cache")
        firsts = [sum(counts[:row]) for row in range(rows)]  # where each row's tokens start among all new ones
        positions = torch.tensor([start + j for start, count in zip(starts, counts) for j in range(count)],
                                 device=device)
        owners = torch.tensor([row for row, count in enumerate(counts) for _ in range(count)], device=device)
        attend = self._attend(starts, counts, owners, positions)
        stream = self._layers_over(torch.tensor([token for new in ids for token in new], device=device), positions,
                                   attend)
        for row, count in enumerate(counts):
            self.lengths[row] += count
        last = stream[[first + count - 1 for first, count in zip(firsts, counts)]]  # [B, d]
        return self._head(_rms_norm(_padded(last), self._norm))[:rows]

    def _attend(self, starts: list[int], counts: list[int], owners: torch.Tensor, positions: torch.Tensor):
        """Attention row by row, each over exactly its own positions: the same call alone or in a batch, whatever
        the thread count."""
        device = owners.device
        firsts = [sum(counts[:row]) for row in range(len(counts))]
        masks = [None if count == 1 else  # a row's new tokens see its cache and the new tokens before them
                 torch.arange(start + count, device=device)[None] <= torch.arange(start, start + count,
                                                                                  device=device)[:, None]
                 for start, count in zip(starts, counts)]
        gqa = self.kv_heads != self.heads

        def attend(index: int, layer: _Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.keys[index, owners, :, positions] = k
            self.values[index, owners, :, positions] = v
            keys, values = self.keys[index], self.values[index]
            return torch.cat([
                F.scaled_dot_product_attention(
                    q[first:first + count].transpose(0, 1)[None], keys[row:row + 1, :, :start + count],
                    values[row:row + 1, :, :start + count], attn_mask=mask, scale=layer.scaling, enable_gqa=gqa,
                )[0].transpose(0, 1).reshape(count, -1)
                for row, (first, count, start, mask) in enumerate(zip(firsts, counts, starts, masks))])

        return attend

    def _layers_over(self, ids: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:
        """The decoder layers over `ids` [n] at `positions` [n]; `attend(layer index, layer, q, k, v)` writes the keys
        and values where they belong and returns the attention's output [n, heads * hd]. Returns the last layer's
        output [n, d] (before the final norm)."""
        count = ids.shape[0]
        padded = -(-count // ROW_MULTIPLE) * ROW_MULTIPLE
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        cos, sin = self._cos[positions][:, None], self._sin[positions][:, None]  # [n, 1, hd]
        stream = _padded(self._embed(ids))
        attended = stream.new_zeros(padded, heads * head_dim)  # rows past `count` stay zero
        rotated = heads + kv_heads
        for index, layer in enumerate(self._layers):
            qkv = layer.qkv(_rms_norm(stream, layer.input_norm))[:count]
            qk = qkv[:, : rotated * head_dim].view(count, rotated, head_dim)
            swapped = qk.view(count, rotated, 2, head_dim // 2).flip(2).view(count, rotated, head_dim)
            qk = (qk * cos).add_(swapped.mul_(sin))  # = qk * cos + rotate_half(qk) * sin
            values = qkv[:, rotated * head_dim:].view(count, kv_heads, head_dim)
            attended[:count] = attend(index, layer, qk[:, :heads], qk[:, heads:], values)
            stream = stream + layer.o(attended)
            gate, up = layer.gate_up(_rms_norm(stream, layer.post_norm)).chunk(2, dim=-1)
            stream = stream + layer.down(F.silu(gate).mul_(up))
        return stream[:count]

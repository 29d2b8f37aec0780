"""The lean forward's maths (`static_cache`) as one ONNX graph with the model's weights inside, for `onnx_forward`.

Built with onnx's helper (no exporter to trace through): per layer RMSNorm, the fused q|k|v projection, rotary
embedding, attention over the cached keys and values plus the new ones, the output projection, the gated MLP; then
the final norm and the output layer. The graph reads the KV cache as inputs and returns the new rows' keys and
values, so the cache stays in the caller's buffers and rollback is moving a pointer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .onnx_graph import GraphBuilder
from .static_cache import attention_shape


def build_graph(model):
    """The model's cached forward as an ONNX graph (weights included).

    Inputs: ids [n], cos / sin [n, 1, head_dim] (the rotary tables at the new positions, sine sign-folded as in
    `static_cache.signed_sine`), mask [heads * n, n] (0 / -inf: causal among the new rows; every cached row is
    visible), first_out [1] (the first row whose logits are returned), and per layer i the cached keys `k{i}`
    and values `v{i}` [T, kv_heads * head_dim]. Outputs: logits and the final hidden state of rows first_out..n,
    and per layer the new rows' keys `nk{i}` and values `nv{i}` [n, kv_heads * head_dim].
    """
    config, core = model.config, model.model
    shape = _Shape(*attention_shape(config))
    g = GraphBuilder()
    ids = g.input("ids", g.i64, ["n"])
    for name in ("cos", "sin"):
        g.input(name, g.f32, ["n", 1, shape.head_dim])
    g.input("mask", g.f32, ["hn", "n"])
    g.input("first_out", g.i64, [1])
    shape.constants(g)
    x = g.op("Gather", [g.constant("embed", core.embed_tokens.weight), ids])  # [n, d]
    for i, layer in enumerate(core.layers):
        x = _layer(g, shape, x, layer, i)
    x = g.op("Slice", [x, "first_out", "end", "axis0"])
    hidden = g.output(g.rms_norm(x, core.norm.weight, core.norm.variance_epsilon, "norm_out"), "hidden",
                      ["m", config.hidden_size])
    g.output(g.linear(hidden, (model.lm_head,), "head"), "logits", ["m", model.lm_head.out_features])
    return g.model("cached_forward")


@dataclass(frozen=True)
class _Shape:
    heads: int
    kv_heads: int
    head_dim: int

    def constants(self, g: GraphBuilder) -> None:
        """The shapes, splits and masks the layers' nodes read, as named constants."""
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        kv_width = kv_heads * head_dim
        for name, value in {
            "split_v": [(heads + kv_heads) * head_dim, kv_width], "rows_heads_dim": [0, heads + kv_heads, head_dim],
            "halves": [head_dim // 2, head_dim // 2], "split_qk": [heads, kv_heads], "rows_kv_width": [0, kv_width],
            "grouped": [kv_heads, -1, 1, head_dim], "block_rows": [-1, kv_width],
            "blocks": [kv_heads, -1, kv_heads, head_dim], "per_head": [heads, -1, head_dim],
            "rows_width": [0, heads * head_dim], "axis0": [0], "axis1": [1], "axis2": [2],
            "end": [np.iinfo(np.int64).max],
        }.items():
            g.constant(name, np.array(value, np.int64))
        # [kv_heads, 1, kv_heads, 1]: keeps each query group's own kv head's columns (block diagonal)
        g.constant("diagonal", np.eye(kv_heads, dtype=np.float32).reshape(kv_heads, 1, kv_heads, 1))


def _layer(g: GraphBuilder, shape: _Shape, x: str, layer, i: int) -> str:
    """One decoder layer on the stream x [n, d]: attention (writing the new rows' keys and values as outputs),
    then the gated MLP, each added to the stream."""
    attn, mlp = layer.self_attn, layer.mlp
    norm = layer.input_layernorm
    qkv = g.linear(g.rms_norm(x, norm.weight, norm.variance_epsilon, f"norm_in{i}"),
                   (attn.q_proj, attn.k_proj, attn.v_proj), f"qkv{i}")
    x = g.op("Add", [x, g.linear(_attention(g, shape, qkv, float(attn.scaling), i), (attn.o_proj,), f"o{i}")])
    norm = layer.post_attention_layernorm
    projected = g.linear(g.rms_norm(x, norm.weight, norm.variance_epsilon, f"norm_post{i}"),
                         (mlp.gate_proj, mlp.up_proj), f"gate_up{i}")
    gate, up = g.op("Split", [projected], outs=2, axis=1, num_outputs=2)
    activated = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])  # silu(gate) * up
    return g.op("Add", [x, g.linear(activated, (mlp.down_proj,), f"down{i}")])


def _attention(g: GraphBuilder, shape: _Shape, qkv: str, scaling: float, i: int) -> str:
    """Attention of the n new rows ([n, q|k|v] projections) over layer i's cached rows and themselves:
    [n, heads * head_dim]. The rotary embedding is the lean forward's two products (`static_cache._attend`)."""
    kv_width = shape.kv_heads * shape.head_dim
    qk, v = g.op("Split", [qkv, "split_v"], outs=2, axis=1)
    qk = g.op("Reshape", [qk, "rows_heads_dim"])  # [n, heads + kv_heads, head_dim]
    first, second = g.op("Split", [qk, "halves"], outs=2, axis=2)
    swapped = g.op("Concat", [second, first], axis=2)
    qk = g.op("Add", [g.op("Mul", [qk, "cos"]), g.op("Mul", [swapped, "sin"])])  # qk * cos + rotate_half(qk) * sin
    q, k = g.op("Split", [qk, "split_qk"], outs=2, axis=1)
    k = g.output(g.op("Reshape", [k, "rows_kv_width"]), f"nk{i}", ["n", kv_width])  # [n, kv_width]
    v = g.output(v, f"nv{i}", ["n", kv_width])
    cached_k, cached_v = (g.input(f"{kind}{i}", g.f32, ["T", kv_width]) for kind in "kv")
    # Why block-diagonal queries: the cache rows hold every kv head side by side ([T, kv_width], so that a
    # length is one contiguous slice); one matmul against all of them, with each query group's other heads'
    # columns zeroed, scores every head without splitting the cache per head (kv_heads times the flops of
    # a tiny product, fewer calls).
    q = g.op("Reshape", [g.op("Transpose", [q], perm=[1, 0, 2]), "grouped"])  # [kv_heads, group * n, 1, head_dim]
    q = g.op("Reshape", [g.op("Mul", [q, "diagonal"]), "block_rows"])  # [heads * n, kv_width]
    scores_cached = g.op("Gemm", [q, cached_k], transB=1, alpha=scaling)  # [heads * n, T]
    scores_new = g.op("Gemm", [q, k, "mask"], transB=1, alpha=scaling)  # [heads * n, n]
    weights = g.op("Softmax", [g.op("Concat", [scores_cached, scores_new], axis=1)], axis=1)
    length = g.op("Shape", [cached_k], start=0, end=1)
    mixed = g.op("Add", [g.op("MatMul", [g.op("Slice", [weights, "axis0", length, "axis1"]), cached_v]),
                         g.op("MatMul", [g.op("Slice", [weights, length, "end", "axis1"]), v])])  # [heads*n, kv_width]
    mixed = g.op("ReduceSum", [g.op("Mul", [g.op("Reshape", [mixed, "blocks"]), "diagonal"]), "axis2"], keepdims=0)
    return g.op("Reshape", [g.op("Transpose", [g.op("Reshape", [mixed, "per_head"])], perm=[1, 0, 2]), "rows_width"])

"""The batched step (`batched_forward`'s contract) as one ONNX Runtime graph, for the continuous-batching engine.

Why: a batch step of the embedded target spends most of its time in small calls (12 layers of products, norms,
and attention over every row's own cache), where torch pays dispatch per operation and its attention kernel
suits long queries, not a row's one new token. ONNX Runtime runs the whole step in one C++ call: MLAS for the
products and its GroupQueryAttention operator, which attends each row over its own length in place in the
caller's KV buffers. On an AMD EPYC (one thread) that made the step 2.5x (1 row) to 1.7x (32 rows) faster than
torch's (`docs/benchmarks.md`).

The price: that operator takes several new tokens per row only for a batch of one, so a step feeds one token a
row (`max_new = 1`): a token a schedule forces rides in a step of its own instead of with the one sampled
before it (the engine samples a row only once it has fed all it committed).

Batch invariance (a seeded request decodes the same tokens alone or among others): every row's products and its
attention are computed the same way whatever the other rows are; measured bit for bit by
`tests/engine/test_batching.py` on the machine it runs on. The session runs on one intra-op thread.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import torch

from . import machine_cache, onnx_graph
from .batched_forward import KVRows
from .onnx_forward import MAX_PARAMETERS
from .onnx_graph import GraphBuilder, new_session
from .static_cache import STATIC_ROPE_TYPES, attention_shape, supports as lean_supports


def available(model) -> bool:
    """Whether this forward runs the model: ONNX Runtime installed, a CPU Llama or Qwen2 the lean forward serves,
    with a position-only rotary embedding, heads of a multiple of 8 dimensions (GroupQueryAttention's rule) and
    weights that fit one graph (`onnx_forward.MAX_PARAMETERS`)."""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    return (importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
            and lean_supports(model) and getattr(rotary, "rope_type", "default") in STATIC_ROPE_TYPES
            and model.lm_head.weight.device.type == "cpu" and attention_shape(model.config)[2] % 8 == 0
            and sum(parameter.numel() for parameter in model.parameters()) <= MAX_PARAMETERS)


def build_graph(model):
    """The batched step as a graph: ids [B, S] (S > 1 only for B = 1), cos / sin [B, S, 1, head_dim] at the new
    positions, seqlens [B] (each row's length after the new tokens, minus one), total [1] (the longest such
    length), per layer i the KV buffers `pk{i}` / `pv{i}` [B, kv_heads, capacity, head_dim], written in place
    (bound again as the outputs `nk{i}` / `nv{i}`). Output: logits [B, 1, vocab] after each row's last token."""
    from onnx import TensorProto, helper

    heads, kv_heads, head_dim = attention_shape(model.config)
    core, g = model.model, GraphBuilder()
    ids = g.input("ids", g.i64, ["B", "S"])
    for name in ("cos", "sin"):
        g.input(name, g.f32, ["B", "S", 1, head_dim])
    for name in ("seqlens", "total"):
        g.input(name, TensorProto.INT32, ["B"] if name == "seqlens" else [1])
    for name, value in {"q_heads": [0, 0, heads, head_dim], "kv_heads": [0, 0, kv_heads, head_dim],
                        "q_flat": [0, 0, heads * head_dim], "kv_flat": [0, 0, kv_heads * head_dim],
                        "halves": [head_dim // 2, head_dim // 2], "last": [-1],
                        "split_qkv": [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]}.items():
        g.constant(name, np.array(value, np.int64))

    def rotated(x: str, per_head: str, flat: str) -> str:  # x * cos + rotate_half(x) * sin, per head
        x = g.op("Reshape", [x, per_head])
        first, second = g.op("Split", [x, "halves"], outs=2, axis=3)
        swapped = g.op("Concat", [second, first], axis=3)
        return g.op("Reshape", [g.op("Add", [g.op("Mul", [x, "cos"]), g.op("Mul", [swapped, "sin"])]), flat])

    cache = ["B", kv_heads, "T", head_dim]
    x = g.op("Gather", [g.constant("embed", core.embed_tokens.weight), ids])  # [B, S, d]
    for i, layer in enumerate(core.layers):
        attn, mlp, norm = layer.self_attn, layer.mlp, layer.input_layernorm
        qkv = g.linear(g.rms_norm(x, norm.weight, norm.variance_epsilon, f"norm_in{i}"),
                       (attn.q_proj, attn.k_proj, attn.v_proj), f"qkv{i}")
        q, k, v = g.op("Split", [qkv, "split_qkv"], outs=3, axis=2)
        past = [g.input(f"p{kind}{i}", g.f32, cache) for kind in "kv"]
        out, new_k, new_v = g.op("GroupQueryAttention", [rotated(q, "q_heads", "q_flat"),
                                                         rotated(k, "kv_heads", "kv_flat"), v, *past, "seqlens", "total"],
                                 outs=3, domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads,
                                 scale=float(attn.scaling))
        g.output(new_k, f"nk{i}", cache)
        g.output(new_v, f"nv{i}", cache)
        x = g.op("Add", [x, g.linear(out, (attn.o_proj,), f"o{i}")])
        norm = layer.post_attention_layernorm
        projected = g.linear(g.rms_norm(x, norm.weight, norm.variance_epsilon, f"norm_post{i}"),
                             (mlp.gate_proj, mlp.up_proj), f"gate_up{i}")
        gate, up = g.op("Split", [projected], outs=2, axis=2, num_outputs=2)
        activated = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])  # silu(gate) * up
        x = g.op("Add", [x, g.linear(activated, (mlp.down_proj,), f"down{i}")])
    last = g.rms_norm(g.op("Gather", [x, "last"], axis=1), core.norm.weight, core.norm.variance_epsilon, "norm_out")
    g.output(g.linear(last, (model.lm_head,), "head"), "logits", ["B", 1, model.lm_head.out_features])
    proto = g.model("batched_step")
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return proto


def graph_bytes(model) -> bytes:
    """The serialized graph, kept on this machine by the weights' values and this module's source."""
    key = machine_cache.digest(machine_cache.signature(model), "batched",
                               machine_cache.source_digest(onnx_graph, sys.modules[__name__]),
                               *model.parameters())
    return machine_cache.graph(key, lambda: build_graph(model).SerializeToString())


class OnnxBatchedLM(KVRows):
    """The batched step over `batched_forward.KVRows` through ONNX Runtime (`prefill`, `step`, as `BatchedLM`);
    `step` takes one new token a row (`max_new`)."""

    max_new = 1

    def __init__(self, model, rows: int = 4, capacity: int = 512):
        if not available(model):
            raise ValueError(f"{type(model).__name__} is not a model the ONNX Runtime batched step runs")
        self._layers = len(model.model.layers)
        self._vocab = model.lm_head.out_features
        self._session = new_session(graph_bytes(model), threads=1)
        # rows (first, count) -> a binding with their KV buffers and logits bound (about 0.5 ms a step to rebind)
        self._bindings: dict[tuple[int, int], tuple[object, torch.Tensor]] = {}
        super().__init__(model, rows, capacity)

    def reserve(self, rows: int, capacity: int) -> None:
        before = self.keys
        super().reserve(rows, capacity)
        if self.keys is not before:
            self._bindings.clear()  # they point at the buffers reserve replaced

    def prefill(self, row: int, ids: list[int]) -> None:
        """Row `row`'s cache from position 0: the `ids` (a prompt), causally."""
        self.lengths[row] = 0
        if ids:
            self._run(row, [list(ids)])
            self.lengths[row] = len(ids)

    def step(self, ids: list[list[int]]) -> torch.Tensor:
        """Logits [B, vocab] after one new token in each of rows 0..B-1 (`ids[b]` = [token])."""
        if any(len(new) != 1 for new in ids):
            raise ValueError("this batched step takes exactly one new token a row")
        if max(self.lengths[: len(ids)]) + 1 > self.capacity:
            raise ValueError(f"a row is full: its tokens would pass the {self.capacity} positions of its cache")
        logits = self._run(0, ids)
        for row in range(len(ids)):
            self.lengths[row] += 1
        return logits

    def _run(self, first: int, ids: list[list[int]]) -> torch.Tensor:
        """One call over rows first..first+B-1, each fed its `ids` at its own length (B = 1 where S > 1)."""
        rows, count = len(ids), len(ids[0])
        starts = torch.tensor(self.lengths[first:first + rows])
        positions = starts[:, None] + torch.arange(count)[None]  # [B, S]
        # (kept in locals until the call returns: the binding reads them in place)
        inputs = {"ids": np.asarray(ids, dtype=np.int64), "cos": self._cos[positions][:, :, None].numpy(),
                  "sin": self._sin[positions][:, :, None].numpy(),
                  "seqlens": (starts + count - 1).to(torch.int32).numpy(),
                  "total": np.array([int(starts.max()) + count], dtype=np.int32)}
        binding, logits = self._binding(first, rows)
        for name, value in inputs.items():
            binding.bind_cpu_input(name, value)
        self._session.run_with_iobinding(binding)
        return logits[:, 0].clone()

    def _binding(self, first: int, rows: int) -> tuple[object, torch.Tensor]:
        """A binding of rows first..first+rows-1's KV buffers (read and written in place) and of a logits buffer."""
        kept = self._bindings.get((first, rows))
        if kept is None:
            binding = self._session.io_binding()
            for layer in range(self._layers):
                for kind, buffers in (("k", self.keys), ("v", self.values)):
                    buffer = buffers[layer, first:first + rows]  # contiguous: the graph reads and writes it in place
                    for name in (f"p{kind}{layer}", f"n{kind}{layer}"):
                        bind = binding.bind_input if name[0] == "p" else binding.bind_output
                        bind(name, "cpu", 0, np.float32, list(buffer.shape), buffer.data_ptr())
            logits = torch.empty(rows, 1, self._vocab)
            binding.bind_output("logits", "cpu", 0, np.float32, list(logits.shape), logits.data_ptr())
            kept = self._bindings[(first, rows)] = (binding, logits)
        return kept

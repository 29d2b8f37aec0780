"""The batched step (`batched_forward`'s contract) as one ONNX Runtime graph, for the continuous-batching engine.

Why: a batch step of the embedded target spends most of its time in small calls (12 layers of products, norms,
and attention over every row's own cache), where torch pays dispatch per operation and its attention kernel
suits long queries, not a row's one new token. ONNX Runtime runs the whole step in one C++ call: MLAS for the
products and its GroupQueryAttention operator, which attends each row over its own length in place in the
caller's KV buffers. On an AMD EPYC (one thread) that made the step 2.5x (1 row) to 1.7x (32 rows) faster than
torch's (`docs/benchmarks.md`).

That operator takes several new tokens a row only for a batch of one. So a step attends one token for each of the
B rows in one call, and a row with several (a sampled token and the ones a schedule forces after it: the embedded
voice's next phonemes) in a slot of its own: a batch of one beside the B, its tokens still in the step's products.
A graph per count of slots in use (0 to `SLOTS`), so a step pays only for the slots it uses (about 1.3 ms each
on an AMD EPYC, against a full step for each forced token when they went in one a step). A row with several tokens
that finds no slot waits for a later step (the engine samples a row only once it has fed all it committed).

Batch invariance (a seeded request decodes the same tokens alone or among others): every row's products and its
attention are computed the same way whatever the other rows are (a row's several tokens always in a slot, its one
token always among the B); measured bit for bit by `tests/engine/test_batching.py` on the machine it runs on. The
sessions run on one intra-op thread.
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

#: Rows per step whose tokens after the first (the ones a schedule forces after a sampled token) go in with it.
SLOTS = 2
#: The token a waiting or slotted row feeds among the B: its key and value land past its own tokens, unread.
WAIT_TOKEN = 0


def available(model) -> bool:
    """Whether this forward runs the model: ONNX Runtime installed, a CPU Llama or Qwen2 the lean forward serves,
    with a position-only rotary embedding, heads of a multiple of 8 dimensions (GroupQueryAttention's rule) and
    weights that fit one graph (`onnx_forward.MAX_PARAMETERS`)."""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    return (importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
            and lean_supports(model) and getattr(rotary, "rope_type", "default") in STATIC_ROPE_TYPES
            and model.lm_head.weight.device.type == "cpu" and attention_shape(model.config)[2] % 8 == 0
            and sum(parameter.numel() for parameter in model.parameters()) <= MAX_PARAMETERS)


def build_graph(model, slots: int):
    """The batched step as a graph, with `slots` slots. The new tokens of all rows go through the products together,
    flat: ids [1, N], cos / sin [1, N, 1, head_dim] at their positions, in this order: one token for each row 0..B-1,
    then each slot's tokens (`sizes` [1 + slots]: B, then each slot's count). Attention: the rows' tokens through one
    GroupQueryAttention over the B rows (`seqlens` [B]: each row's length after its token, minus one; `total` [1]:
    the longest such length), each slot's through one over its row alone (`seqlens{e}`, `total{e}` [1]). KV buffers,
    written in place (bound again as the outputs `n...`): the rows' `pk{i}` / `pv{i}` [B, kv_heads, capacity,
    head_dim] for layer i, each slot's row's `pk{i}s{e}` / `pv{i}s{e}` [1, ...]. Output: logits [1, B, vocab] after
    each row's last token (`last_index` [B], among the N).

    A row in a slot also has a token among the B (the caller's stand-in, which writes past the slot's tokens), so
    the two attentions may run in either order: what the stand-in reads and writes is never used (its output is
    dropped, its key and value overwritten by the row's next token)."""
    from onnx import TensorProto, helper

    heads, kv_heads, head_dim = attention_shape(model.config)
    core, g = model.model, GraphBuilder()
    ids = g.input("ids", g.i64, [1, "N"])
    for name in ("cos", "sin"):
        g.input(name, g.f32, [1, "N", 1, head_dim])
    g.input("sizes", g.i64, [1 + slots])
    g.input("last_index", g.i64, ["B"])
    for name, shape in [("seqlens", ["B"]), ("total", [1])] + [(f"{kind}{e}", [1]) for e in range(slots)
                                                               for kind in ("seqlens", "total")]:
        g.input(name, TensorProto.INT32, shape)
    for name, value in {"q_heads": [0, 0, heads, head_dim], "kv_heads": [0, 0, kv_heads, head_dim],
                        "q_flat": [0, 0, heads * head_dim], "kv_flat": [0, 0, kv_heads * head_dim],
                        "q_rows": [-1, 1, heads * head_dim], "kv_rows": [-1, 1, kv_heads * head_dim],
                        "tokens": [1, -1, heads * head_dim], "halves": [head_dim // 2, head_dim // 2],
                        "split_qkv": [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]}.items():
        g.constant(name, np.array(value, np.int64))

    def rotated(x: str, per_head: str, flat: str) -> str:  # x * cos + rotate_half(x) * sin, per head
        x = g.op("Reshape", [x, per_head])
        first, second = g.op("Split", [x, "halves"], outs=2, axis=3)
        swapped = g.op("Concat", [second, first], axis=3)
        return g.op("Reshape", [g.op("Add", [g.op("Mul", [x, "cos"]), g.op("Mul", [swapped, "sin"])]), flat])

    def attend(q: str, k: str, v: str, layer: int, tag: str, lengths: list[str]) -> str:
        """GroupQueryAttention over KV buffers read and written in place (its outputs are the graph's)."""
        cache = [1 if tag else "B", kv_heads, "T", head_dim]
        past = [g.input(f"p{kind}{layer}{tag}", g.f32, cache) for kind in "kv"]
        out, new_k, new_v = g.op("GroupQueryAttention", [q, k, v, *past, *lengths], outs=3, domain="com.microsoft",
                                 num_heads=heads, kv_num_heads=kv_heads, scale=float(attn.scaling),
                                 names=[None, f"nk{layer}{tag}", f"nv{layer}{tag}"])
        g.outputs += [helper.make_tensor_value_info(name, g.f32, cache) for name in (new_k, new_v)]
        return out

    x = g.op("Gather", [g.constant("embed", core.embed_tokens.weight), ids])  # [1, N, d]
    for i, layer in enumerate(core.layers):
        attn, mlp, norm = layer.self_attn, layer.mlp, layer.input_layernorm
        qkv = g.linear(g.rms_norm(x, norm.weight, norm.variance_epsilon, f"norm_in{i}"),
                       (attn.q_proj, attn.k_proj, attn.v_proj), f"qkv{i}")
        q, k, v = g.op("Split", [qkv, "split_qkv"], outs=3, axis=2)
        q, k = rotated(q, "q_heads", "q_flat"), rotated(k, "kv_heads", "kv_flat")
        # [rows' tokens, slot 0's, ...]
        q, k, v = ([part] if not slots else g.op("Split", [part, "sizes"], outs=1 + slots, axis=1)
                   for part in (q, k, v))
        rows = attend(g.op("Reshape", [q[0], "q_rows"]), g.op("Reshape", [k[0], "kv_rows"]),
                      g.op("Reshape", [v[0], "kv_rows"]), i, "", ["seqlens", "total"])  # [B, 1, heads * hd]
        outs = [g.op("Reshape", [rows, "tokens"])]
        for e in range(slots):
            outs.append(attend(q[1 + e], k[1 + e], v[1 + e], i, f"s{e}", [f"seqlens{e}", f"total{e}"]))
        out = g.op("Concat", outs, axis=1) if slots else outs[0]  # [1, N, heads * hd]
        x = g.op("Add", [x, g.linear(out, (attn.o_proj,), f"o{i}")])
        norm = layer.post_attention_layernorm
        projected = g.linear(g.rms_norm(x, norm.weight, norm.variance_epsilon, f"norm_post{i}"),
                             (mlp.gate_proj, mlp.up_proj), f"gate_up{i}")
        gate, up = g.op("Split", [projected], outs=2, axis=2, num_outputs=2)
        activated = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])  # silu(gate) * up
        x = g.op("Add", [x, g.linear(activated, (mlp.down_proj,), f"down{i}")])
    last = g.rms_norm(g.op("Gather", [x, "last_index"], axis=1), core.norm.weight, core.norm.variance_epsilon,
                      "norm_out")
    g.output(g.linear(last, (model.lm_head,), "head"), "logits", [1, "B", model.lm_head.out_features])
    proto = g.model("batched_step")
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return proto


def graph_bytes(model, slots: int) -> bytes:
    """The serialized graph, kept on this machine by the weights' values and this module's source."""
    key = machine_cache.digest(machine_cache.signature(model), "batched", str(slots),
                               machine_cache.source_digest(onnx_graph, sys.modules[__name__]),
                               *model.parameters())
    return machine_cache.graph(key, lambda: build_graph(model, slots).SerializeToString())


class OnnxBatchedLM(KVRows):
    """The batched step over `batched_forward.KVRows` through ONNX Runtime (`prefill`, `step`, as `BatchedLM`).

    A step takes every new token of a row whose tokens fit: one, or several in one of up to `SLOTS` slots (a graph
    for each count of slots in use, so a step pays only for those). A row whose several tokens find no slot waits
    this step (its length stays; its logits are not its own): rows take slots in turn."""

    def __init__(self, model, rows: int = 4, capacity: int = 512):
        if not available(model):
            raise ValueError(f"{type(model).__name__} is not a model the ONNX Runtime batched step runs")
        self._layers = len(model.model.layers)
        self._vocab = model.lm_head.out_features
        # slots -> session, all built now (a slot count first needed mid-decode would cost that step a build)
        self._sessions = {slots: new_session(graph_bytes(model, slots), threads=1) for slots in range(SLOTS + 1)}
        # (slots, first row, rows) -> a binding with their KV buffers and logits bound (about 0.5 ms a step to
        # rebind), and the row each slot's buffers are bound to there
        self._bindings: dict[tuple[int, int, int], tuple[object, torch.Tensor, list[int]]] = {}
        self._turn = 0  # which row comes first for a slot (in turn, so that no row waits long)
        super().__init__(model, rows, capacity)

    def reserve(self, rows: int, capacity: int) -> None:
        before = self.keys
        super().reserve(rows, capacity)
        if self.keys is not before:
            self._bindings.clear()  # they point at the buffers reserve replaced

    def prefill(self, row: int, ids: list[int]) -> None:
        """Row `row`'s cache from position 0: the `ids` (a prompt), causally."""
        self.lengths[row] = 0
        if len(ids) + (len(ids) > 1) > self.capacity:  # (+1: its stand-in among the rows writes past it)
            raise ValueError(f"a prompt of {len(ids)} tokens does not fit a row of {self.capacity} positions")
        if ids:
            self._run(row, [list(ids)], [0] if len(ids) > 1 else [])
            self.lengths[row] = len(ids)

    def step(self, ids: list[list[int]]) -> torch.Tensor:
        """Logits [B, vocab] after the new tokens of rows 0..B-1 (`ids[b]`: a sampled token and the ones a schedule
        forced after it), for the rows that took theirs; a row that waits keeps its length."""
        if min(len(new) for new in ids) < 1:
            raise ValueError("every row needs at least one new token")
        # (+1 for a row in a slot: its token among the rows writes past its own)
        if max(length + len(new) + (len(new) > 1) for length, new in zip(self.lengths, ids)) > self.capacity:
            raise ValueError(f"a row is full: its tokens would pass the {self.capacity} positions of its cache")
        several = sorted((row for row, new in enumerate(ids) if len(new) > 1),
                         key=lambda row: (row - self._turn) % len(ids))
        slotted = several[:SLOTS]
        if len(several) > SLOTS:  # the next step's slots go first to the rows after the last served
            self._turn = (slotted[-1] + 1) % len(ids)
        logits = self._run(0, ids, slotted)
        for row, new in enumerate(ids):
            if len(new) == 1 or row in slotted:
                self.lengths[row] += len(new)
        return logits

    def _run(self, first: int, ids: list[list[int]], slotted: list[int]) -> torch.Tensor:
        """One call over rows first..first+B-1: the rows `slotted` (indices among the B, at most `SLOTS`) take all
        their tokens in slots, every other row with one token takes it, and a row with several left out waits."""
        rows = len(ids)
        starts = self.lengths[first:first + rows]
        slotted = self._kept_in_place(first, rows, slotted)
        # among the rows: a row's one token at its length; a slotted row's stand-in past its tokens (the slot writes
        # them); a waiting row's at its length (its next token overwrites it)
        seqlens = [start + len(new) if row in slotted else start for row, (start, new) in enumerate(zip(starts, ids))]
        flat = [new[0] if len(new) == 1 else WAIT_TOKEN for new in ids]
        positions = list(seqlens)
        last_index = list(range(rows))
        for row in slotted:
            last_index[row] = len(flat) + len(ids[row]) - 1
            flat += ids[row]
            positions += range(starts[row], starts[row] + len(ids[row]))
        positions = torch.tensor(positions)
        # (kept in locals until the call returns: the binding reads them in place)
        inputs = {"ids": np.asarray([flat], dtype=np.int64), "cos": self._cos[positions][None, :, None].numpy(),
                  "sin": self._sin[positions][None, :, None].numpy(),
                  "last_index": np.asarray(last_index, dtype=np.int64),
                  "seqlens": np.asarray(seqlens, dtype=np.int32), "total": np.array([max(seqlens) + 1], np.int32)}
        if slotted:
            inputs["sizes"] = np.asarray([rows] + [len(ids[row]) for row in slotted], dtype=np.int64)
        for e, row in enumerate(slotted):
            inputs[f"seqlens{e}"] = np.array([starts[row] + len(ids[row]) - 1], np.int32)
            inputs[f"total{e}"] = np.array([starts[row] + len(ids[row])], np.int32)
        binding, logits = self._binding(first, rows, [first + row for row in slotted])
        for name, value in inputs.items():
            binding.bind_cpu_input(name, value)
        self._sessions[len(slotted)].run_with_iobinding(binding)
        return logits[0].clone()

    def _kept_in_place(self, first: int, rows: int, slotted: list[int]) -> list[int]:
        """`slotted` ordered so that a row whose buffers a slot is already bound to keeps that slot (rebinding a
        slot costs about 0.2 ms)."""
        kept = self._bindings.get((len(slotted), first, rows))
        if kept is None:
            return slotted
        bound = [row - first for row in kept[2]]
        order = [row if row in slotted else None for row in bound]
        others = iter(row for row in slotted if row not in order)
        return [row if row is not None else next(others) for row in order]

    def _binding(self, first: int, rows: int, slot_rows: list[int]) -> tuple[object, torch.Tensor]:
        """A binding of rows first..first+rows-1's KV buffers and the slots' rows' (read and written in place) and of
        a logits buffer."""
        key = (len(slot_rows), first, rows)
        kept = self._bindings.get(key)
        if kept is None:
            binding = self._sessions[len(slot_rows)].io_binding()
            self._bind_rows(binding, "", first, rows)
            logits = torch.empty(1, rows, self._vocab)
            binding.bind_output("logits", "cpu", 0, np.float32, list(logits.shape), logits.data_ptr())
            kept = self._bindings[key] = (binding, logits, [-1] * len(slot_rows))
        binding, logits, bound = kept
        for e, row in enumerate(slot_rows):
            if bound[e] != row:
                self._bind_rows(binding, f"s{e}", row, 1)
                bound[e] = row
        return binding, logits

    def _bind_rows(self, binding, tag: str, first: int, rows: int) -> None:
        """Bind rows first..first+rows-1's KV buffers to the graph's inputs and outputs named with `tag`."""
        for layer in range(self._layers):
            for kind, buffers in (("k", self.keys), ("v", self.values)):
                buffer = buffers[layer, first:first + rows]  # contiguous: the graph reads and writes it in place
                for name in (f"p{kind}{layer}{tag}", f"n{kind}{layer}{tag}"):
                    bind = binding.bind_input if name[0] == "p" else binding.bind_output
                    bind(name, "cpu", 0, np.float32, list(buffer.shape), buffer.data_ptr())

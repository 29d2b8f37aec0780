"""The draft heads' step (`draft_heads.FastStep`) and the target's output layer as one ONNX Runtime graph.

Why: where the target's forward runs on ONNX Runtime (`onnx_forward`, chosen because it is faster on this CPU),
the heads' draft steps are the next cost of a round: per drafted token two residual blocks and the output layer,
a dozen small torch calls. As one graph on MLAS (the embedded voice, an AMD EPYC core with AVX2): 0.21 vs 0.38 ms
a step with its weights in cache, 0.56 vs 0.94 ms after the target's call has evicted them. Same maths as
`FastStep` (its rearranged weights: the token half of each block's up projection looked up per token), then the
logits of the new state, so a draft step is one call.
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np
import torch

from . import kernels, machine_cache, onnx_graph
from .draft_heads import DraftHeads, fast_step
from .onnx_forward import OnnxForward
from .onnx_graph import GraphBuilder, new_session


def build_graph(step, output_weight: torch.Tensor, output_bias: torch.Tensor | None):
    """Inputs: state [1, d], token [1] (int64). Outputs: next_state [1, d] (the heads' state after the token) and
    logits [1, V] (the output layer on it). `step`: the heads' `FastStep` (its float32 rearranged weights)."""
    g = GraphBuilder()
    width = output_weight.shape[1]
    state = g.input("state", g.f32, [1, width])
    token = g.input("token", g.i64, [1])
    ones = torch.ones(width)  # the state norm's weight is folded into the matrix
    for i, (up_state, table, down, down_bias, eps) in enumerate(step.layers):
        normed = g.rms_norm(state, ones, eps, f"ones{i}")
        inner = g.op("Add", [g.op("MatMul", [normed, g.constant(f"up{i}", up_state)]),
                             g.op("Gather", [g.constant(f"table{i}", table), token])])  # [1, inner]
        activated = g.op("Mul", [inner, g.op("Sigmoid", [inner])])  # silu
        state = g.op("Add", [state, g.op("Add", [g.op("MatMul", [activated, g.constant(f"down{i}", down)]),
                                                 g.constant(f"down_bias{i}", down_bias)])])
    state = g.output(state, "next_state", [1, width])
    logits = g.op("MatMul", [state, g.constant("head", output_weight.T)])
    if output_bias is not None:
        logits = g.op("Add", [logits, g.constant("head_bias", output_bias)])
    g.output(logits, "logits", [1, output_weight.shape[0]])
    return g.model("draft_heads_step")


class OnnxHeadsStep:
    """`step(state [d], token) -> (state [d], logits [1, V])` through the heads' ONNX Runtime session."""

    def __init__(self, session):
        self._session = session

    def __call__(self, state: torch.Tensor, token: int) -> tuple[torch.Tensor, torch.Tensor]:
        state, logits = self._session.run(
            None, {"state": state.detach().numpy().reshape(1, -1), "token": np.array([token], np.int64)})
        return torch.from_numpy(state[0]), torch.from_numpy(logits)


# heads -> {intra-op threads: (fingerprint of the heads, embedding and output layer, session)}
_SESSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def heads_step(heads: DraftHeads, target, target_lm) -> OnnxHeadsStep | None:
    """The heads' step on ONNX Runtime where the target's own forward runs there (`onnx_forward.choice` found it
    faster on this machine; float32 on a CPU), else None (the torch `FastStep` serves)."""
    if not isinstance(target_lm, OnnxForward):
        return None
    embedding = target.get_input_embeddings().weight.detach()
    output = target.get_output_embeddings()
    bias = getattr(output, "bias", None)
    threads = target_lm.threads  # the target's forward's, which the probe chose for this machine
    fingerprint = (kernels.weights_fingerprint(heads), kernels.weights_fingerprint(target))
    with _LOCK:
        cached = _SESSIONS.setdefault(heads, {}).get(threads)
        if cached is None or cached[0] != fingerprint:
            cached = (fingerprint, new_session(_graph_bytes(heads, embedding, output.weight, bias), threads))
            _SESSIONS[heads][threads] = cached
        return OnnxHeadsStep(cached[1])


def _graph_bytes(heads: DraftHeads, embedding: torch.Tensor, output_weight: torch.Tensor,
                 output_bias: torch.Tensor | None) -> bytes:
    """The heads' serialized graph, kept on this machine (`machine_cache.graph`: keyed by every value the graph
    holds and the builders' source) or built."""
    step = fast_step(heads, embedding)
    tensors = [part for layer in step.layers for part in layer]  # the rearranged weights and each block's eps
    key = machine_cache.digest(machine_cache.source_digest(onnx_graph, sys.modules[__name__]),
                               *tensors, output_weight, output_bias)
    return machine_cache.graph(key, lambda: build_graph(step, output_weight, output_bias).SerializeToString())

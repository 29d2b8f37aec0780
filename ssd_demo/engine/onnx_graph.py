"""Building ONNX graphs from torch weights, and running them: what `onnx_forward` and `onnx_heads` share.

Why by hand with onnx's helper rather than an exporter: the graphs are a few dozen nodes per layer of maths the
lean forward already spells out (`static_cache`), the cache layout is ours (numpy buffers read in place), and
a hand-built graph has no tracing to go wrong on a model's Python control flow.
"""

from __future__ import annotations

import numpy as np
import torch

OPSET = 23  # RMSNormalization


class GraphBuilder:
    """An ONNX graph being built from torch weights: onnx.helper's nodes with generated names, weights as
    initializers (float32, stored as given), inputs and outputs as declared."""

    def __init__(self):
        from onnx import TensorProto

        self.nodes, self.initializers, self.inputs, self.outputs = [], [], [], []
        self.f32, self.i64 = TensorProto.FLOAT, TensorProto.INT64

    def input(self, name: str, kind, shape: list) -> str:
        from onnx import helper

        self.inputs.append(helper.make_tensor_value_info(name, kind, shape))
        return name

    def output(self, value: str, name: str, shape: list) -> str:
        """Declare `value` a graph output called `name` (through an Identity node)."""
        from onnx import helper

        self.nodes.append(helper.make_node("Identity", [value], [name]))
        self.outputs.append(helper.make_tensor_value_info(name, self.f32, shape))
        return name

    def constant(self, name: str, value) -> str:
        from onnx import numpy_helper

        value = value.detach().float().numpy() if torch.is_tensor(value) else np.asarray(value)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, args: list[str], outs: int = 1, names: list[str | None] | None = None, **attributes):
        """A node; its outputs' names are generated, or `names` (None: generated)."""
        from onnx import helper

        names = [name or f"{kind.lower()}{len(self.nodes)}_{i}" for i, name in enumerate(names or [None] * outs)]
        self.nodes.append(helper.make_node(kind, args, names, **attributes))
        return names[0] if outs == 1 else names

    def linear(self, x: str, modules, name: str) -> str:
        """x @ [W1 | W2 | ...] (+ biases): fused projections, weights stored [in, out] for MLAS."""
        y = self.op("MatMul", [x, self.constant(name, torch.cat([m.weight for m in modules]).T)])
        if any(m.bias is not None for m in modules):
            bias = torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in modules])
            y = self.op("Add", [y, self.constant(name + "_bias", bias)])
        return y

    def rms_norm(self, x: str, weight: torch.Tensor, eps: float, name: str) -> str:
        return self.op("RMSNormalization", [x, self.constant(name, weight)], axis=-1, epsilon=float(eps))

    def model(self, name: str):
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.initializers)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ssd_demo")
        proto.ir_version = 10
        return proto


def new_session(proto, threads: int | None = None):
    """An ONNX Runtime session of the graph `proto` (a ModelProto, or one serialized: bytes) on the CPU, with
    `threads` intra-op threads (default: torch's current thread count)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only
    # No busy-waiting between calls when several threads serve a call: a decoding run alternates with torch's
    # own work (sampling, acceptance) and other requests' threads, which a spinning pool would slow.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    serialized = proto if isinstance(proto, bytes) else proto.SerializeToString()
    return onnxruntime.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])

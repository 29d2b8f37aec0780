"""Which matmul kernel serves the lean forward's calls on this machine, and the packed weights it runs on.

Why: a small model's decode step is dominated by how each matmul is called, not by its arithmetic. The
lean forward (`static_cache.StaticCacheLM`) multiplies by copies of the weights packed for that: fused
projections, transposed for BLAS, and on demand a copy in oneDNN's blocked layout, which can be faster
for the 3-16 rows of a verify call and slower for the one row of a decode step. Which kernel serves which
row count is timed once per model and thread count here (`kernel_choice`), or fixed by SSD_DEMO_MATMUL,
so the AR baseline gets the faster kernel too and speedups over it stay honest.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field

import torch
from ..errors import InputError
from . import machine_cache

log = logging.getLogger(__name__)

# Packed weights cost one more copy of the model (two while oneDNN serves some calls), so they are built only
# for CPU models up to this size (the small models whose decode steps are dominated by how each matmul is
# called; 1.2 GB a copy at the limit in float32).
PACK_MAX_PARAMETERS = 300_000_000
#: Below this size a forward is all per-call overhead and the matmul kernel makes no difference: no probe.
PROBE_MIN_PARAMETERS = 1_000_000
#: Rows timed by the kernel probe; a call with more rows than the last uses the last one's choice.
PROBE_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
#: "auto" (default): the faster forward (`onnx_forward`) and, in the lean forward, the faster kernel for each row
#: count, measured on this machine; "blas" or "onednn": the lean forward, always that kernel; "onnxruntime": ONNX
#: Runtime's forward wherever it can serve (elsewhere the lean forward's kernels as with "auto").
KERNEL_ENV = "SSD_DEMO_MATMUL"
NEVER = 1 << 30  # a row count no call reaches
#: oneDNN serves only where it makes the probed calls at least this much cheaper in total than BLAS: a smaller
#: gain is within what a busy machine moves, and a wrong switch costs far more (a probe under contention once
#: chose oneDNN on an AMD EPYC, where it made AR steps 9.3 ms against BLAS's 5.5).
SWITCH_MARGIN = 0.05


@dataclass
class PackedLinear:
    """One projection packed for the BLAS matmul ([in, out]) and, on demand, in oneDNN's blocked layout.

    Why two: on a CPU whose BLAS is tuned for one row (a decode step) but slow for the 3-16 rows of a
    verify call, oneDNN's packed matmul can be faster there (AMD EPYC, one thread: a 12 x 256 Llama's
    5-token verify 9.5 -> 7.6 ms), and slower for one or two rows. Which kernel serves which row count is
    measured per machine (`kernel_choice`), so the AR baseline gets the faster kernel too. The oneDNN copy
    is a third copy of the weights, so it exists only while some calls use it.
    """

    weight_t: torch.Tensor  # [in, out]
    bias: torch.Tensor | None
    onednn: torch.Tensor | None = None  # oneDNN-packed [out, in], while some calls use it

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> "PackedLinear":
        weight = weight.detach()
        return cls(weight.T.contiguous(), None if bias is None else bias.detach())

    def pack_onednn(self) -> None:
        """Build the oneDNN copy (raises RuntimeError / AttributeError where this build's oneDNN cannot)."""
        if self.onednn is None:
            self.onednn = torch.ops.mkldnn._reorder_linear_weight(self.weight_t.T.contiguous())

    def __call__(self, x: torch.Tensor, onednn_from: int) -> torch.Tensor:
        """x [n, in] -> [n, out], through oneDNN when n >= onednn_from."""
        if x.shape[0] >= onednn_from and self.onednn is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.onednn, self.bias, "none", [], "")
        return torch.mm(x, self.weight_t) if self.bias is None else torch.addmm(self.bias, x, self.weight_t)


@dataclass
class PackedLayer:
    """One decoder layer's projections, fused (q|k|v, gate|up).

    Why: on a CPU, BLAS's `x @ W_t` with a contiguous [in, out] matrix runs 1.3-2x faster than
    `F.linear(x, W)` for the 1-9 rows a decode or verify call has (measured with one thread,
    512-1408 wide), and one fused matmul replaces three (or two) small calls.
    """

    qkv: PackedLinear
    o: PackedLinear
    gate_up: PackedLinear
    down: PackedLinear


def _cat_bias(*linears) -> torch.Tensor | None:
    if all(linear.bias is None for linear in linears):
        return None
    return torch.cat([linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)
                      for linear in linears])


def pack(model) -> tuple[list[PackedLayer], PackedLinear]:
    """A packed copy of the model's weights (`packed_weights` keeps one per model where packing pays)."""
    layers = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(PackedLayer(
            qkv=PackedLinear.of(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                           _cat_bias(attn.q_proj, attn.k_proj, attn.v_proj)),
            o=PackedLinear.of(attn.o_proj.weight, attn.o_proj.bias),
            gate_up=PackedLinear.of(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                               _cat_bias(mlp.gate_proj, mlp.up_proj)),
            down=PackedLinear.of(mlp.down_proj.weight, mlp.down_proj.bias),
        ))
    return layers, PackedLinear.of(model.lm_head.weight, model.lm_head.bias)


# model -> (fingerprint of its weights, packed copy); rebuilt when any weight is replaced or updated in place.
_PACKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def weights_fingerprint(model) -> tuple:
    """Changes when any weight is replaced or updated in place (for copies built from the weights)."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def packed_weights(model) -> tuple[list[PackedLayer], PackedLinear] | None:
    """The model's packed weights (cached per model), or None where packing does not pay."""
    weight = model.lm_head.weight
    if weight.device.type != "cpu" or sum(p.numel() for p in model.parameters()) > PACK_MAX_PARAMETERS:
        return None
    fingerprint = weights_fingerprint(model)
    cached = _PACKED.get(model)
    if cached is None or cached[0] != fingerprint:
        cached = (fingerprint, pack(model))
        _PACKED[model] = cached
    return cached[1]


def drop_packed_weights(model) -> None:
    """Forget the model's packed copy (another forward serves it); `packed_weights` builds it again if asked."""
    _PACKED.pop(model, None)


def kernel_setting() -> str:
    """`SSD_DEMO_MATMUL`, checked: "auto" (also when unset or empty), "blas", "onednn" or "onnxruntime", in any
    case."""
    raw = os.environ.get(KERNEL_ENV, "")
    choice = raw.strip().lower() or "auto"
    if choice not in ("auto", "blas", "onednn", "onnxruntime"):
        raise InputError(f"{KERNEL_ENV} must be auto, blas, onednn or onnxruntime; got {raw!r}")
    return choice


@dataclass(frozen=True)
class KernelChoice:
    """Which matmul serves a model's lean forward calls here, and how that was decided (for reports)."""

    onednn_from: int  # calls with at least this many rows use oneDNN (`NEVER`: BLAS serves every call)
    why: str
    kept: bool = field(default=False, compare=False)  # timed in an earlier run on this machine (`machine_cache`)
    settled: bool = field(default=True, compare=False)  # two probes agreed, or one found BLAS faster: kept

    def describe(self) -> str:
        if self.onednn_from == NEVER:
            kernels = "BLAS matmuls"
        elif self.onednn_from == 1:
            kernels = "oneDNN matmuls"
        else:
            kernels = f"BLAS matmuls below {self.onednn_from} rows, oneDNN from {self.onednn_from}"
        kept = "; timed in an earlier run on this machine" if self.kept else ""
        return f"{kernels} ({self.why}{kept})"


# model -> {threads: probed choice}; timing depends on the shapes, not on the weights' values.
_PROBED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PROBE_LOCK = threading.Lock()


def packed_linears(packed: tuple[list[PackedLayer], PackedLinear]) -> list[PackedLinear]:
    layers, head = packed
    return [linear for layer in layers for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [head]


def onednn_copies(packed: tuple[list[PackedLayer], PackedLinear], wanted: bool) -> bool:
    """Build (`wanted`) or drop the oneDNN copies of packed weights; False where this oneDNN cannot pack them."""
    linears = packed_linears(packed)
    if not wanted:
        for linear in linears:
            linear.onednn = None
        return False
    try:
        for linear in linears:
            linear.pack_onednn()
    except (AttributeError, RuntimeError) as error:  # a build whose oneDNN lacks the op or the shape
        log.warning("oneDNN could not pack the weights here (%s): BLAS serves every call", error)
        onednn_copies(packed, wanted=False)
        return False
    return True


def _onednn_usable(model) -> str | None:
    """None where oneDNN can serve this model's matmuls here, else why not."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return "no oneDNN in this torch build, or torch.backends.mkldnn disabled"
    if model.lm_head.weight.dtype != torch.float32:
        return f"{model.lm_head.weight.dtype} weights: oneDNN is used for float32 only"
    return None


def kernel_choice(model) -> KernelChoice:
    """Which kernel serves which calls of this model's lean forward, on this machine.

    `SSD_DEMO_MATMUL` = "blas" / "onednn" fixes it; by default ("auto") it is timed here once per model
    and thread count (`measure_kernel_threshold`: 1-2 s for a 10 M-parameter model, fewer repeats
    for big ones); models under `PROBE_MIN_PARAMETERS` keep BLAS. Any oneDNN failure means BLAS, said so.
    The oneDNN copies of the weights exist only while the choice uses them.
    """
    setting = kernel_setting()
    packed = packed_weights(model)
    if packed is None:
        return KernelChoice(NEVER, "no packed weights for this model: its own matmuls")
    unusable = _onednn_usable(model)
    parameters = sum(p.numel() for p in model.parameters())
    if setting == "blas":
        choice = KernelChoice(NEVER, f"set by {KERNEL_ENV}")
    elif unusable:
        choice = KernelChoice(NEVER, unusable)
    elif setting == "onednn":
        choice = KernelChoice(1, f"set by {KERNEL_ENV}")
    elif parameters < PROBE_MIN_PARAMETERS:
        choice = KernelChoice(NEVER, "too small a model to time the kernels")
    else:
        key = torch.get_num_threads()  # (only float32 weights get this far)
        with _PROBE_LOCK:
            per_model = _PROBED.setdefault(model, {})
            if key not in per_model:
                per_model[key] = _kept(model, key) or _measured(model, key, repeats=7 if parameters < 50_000_000 else 3)
            choice = per_model[key]
    if choice.onednn_from != NEVER and not onednn_copies(packed, wanted=True):
        return KernelChoice(NEVER, "oneDNN could not pack the weights here")
    if choice.onednn_from == NEVER:
        onednn_copies(packed, wanted=False)
    return choice


#: The machine cache's name for this module's choices.
CACHE_KIND = "kernels"


def _kept(model, threads: int) -> KernelChoice | None:
    """The choice timed for a model of this signature in an earlier run on this machine, if it was kept."""
    value = machine_cache.get(CACHE_KIND, machine_cache.signature(model), threads)
    try:
        onednn_from = int(value["onednn_from"])
        return KernelChoice(onednn_from, str(value["why"]), kept=True) if onednn_from >= 1 else None
    except (TypeError, KeyError, ValueError):
        return None


def _measured(model, threads: int, repeats: int) -> KernelChoice:
    """Time the kernels here, and keep the answer for the next run where the probes agreed."""
    try:
        decided = _probe(model, repeats=repeats)
    except RuntimeError as error:  # oneDNN packed but unable to run here: BLAS
        log.warning("oneDNN matmul failed in the kernel probe (%s): BLAS serves every call", error)
        return KernelChoice(NEVER, "oneDNN failed here")
    if decided.settled:
        machine_cache.put(CACHE_KIND, machine_cache.signature(model), threads,
                          {"onednn_from": decided.onednn_from, "why": decided.why})
    return decided


def _probe(model, repeats: int) -> KernelChoice:
    """Time the kernels; a switch to oneDNN is timed again and kept only when the second probe agrees (from the
    later of the two switch points): one probe disturbed by a busy machine cannot make the slower kernel stick."""
    first = measure_kernel_threshold(model, repeats=repeats)
    if first == NEVER:
        return KernelChoice(NEVER, "the faster per row count, timed here")
    second = measure_kernel_threshold(model, repeats=repeats)
    if second == NEVER:
        return KernelChoice(NEVER, "two probes disagreed (a busy machine?): BLAS", settled=False)
    return KernelChoice(max(first, second), "the faster per row count, timed here twice")


#: The lean forward the probe times: `static_cache.StaticCacheLM`, registered by that module when it loads
#: (`time_with`). It asks this module for its kernel, so this module does not import it.
_lean_forward = None


def time_with(lean_forward) -> None:
    """Register the lean forward the kernel probe times (called once, by `static_cache`)."""
    global _lean_forward
    _lean_forward = lean_forward


def kernel_threshold(model) -> int:
    """Rows from which the packed oneDNN matmul serves this model's calls (`NEVER`: the BLAS one always)."""
    return kernel_choice(model).onednn_from


def measure_kernel_threshold(model, context: int = 64, repeats: int = 7, rows: tuple[int, ...] = PROBE_ROWS) -> int:
    """Time the model's forward over 1..16 new tokens (after `context` cached ones) with each kernel,
    interleaved so that a machine slowing down slows both, and pick the switch point from the medians
    (`threshold_from`). Raises RuntimeError where oneDNN cannot pack or run this model here."""
    StaticCacheLM = _lean_forward
    if StaticCacheLM is None:
        raise RuntimeError("no lean forward to time (ssd_demo.engine.static_cache registers it when it loads)")
    packed = packed_weights(model)
    if packed is None or not onednn_copies(packed, wanted=True):
        raise RuntimeError("no oneDNN copy of the weights to time")
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (context + max(rows),), generator=torch.Generator().manual_seed(0))
    lms = {kernel: StaticCacheLM(model, context + max(rows), onednn_from=kernel) for kernel in (NEVER, 1)}
    for lm in lms.values():
        lm.forward(ids[:context])
    times: dict[tuple[int, int], list[float]] = {(n, kernel): [] for n in rows for kernel in lms}
    for repeat in range(repeats + 1):  # the first round warms up and is not kept
        for n in rows:
            for kernel, lm in (lms.items() if repeat % 2 else reversed(lms.items())):
                lm.truncate(context)
                started = time.perf_counter()
                lm.forward(ids[context : context + n])
                if repeat:
                    times[(n, kernel)].append(time.perf_counter() - started)
    return threshold_from({n: (statistics.median(times[(n, NEVER)]), statistics.median(times[(n, 1)]))
                           for n in rows})


def threshold_from(seconds: dict[int, tuple[float, float]], margin: float = SWITCH_MARGIN) -> int:
    """{rows: (BLAS time, oneDNN time)} -> the row count from which oneDNN serves: the one that makes the
    measured calls cheapest in total, if that total is at least `margin` below BLAS alone (`NEVER`: BLAS
    serves all). One switch point, not a choice per size, so that one noisy size can neither flip a single
    row count nor push the switch far up."""
    sizes = sorted(seconds)

    def total(threshold: int) -> float:
        return sum(seconds[n][1] if n >= threshold else seconds[n][0] for n in sizes)

    best = min([NEVER, *reversed(sizes)], key=total)  # ties go to the later switch (BLAS)
    return best if total(best) < (1 - margin) * total(NEVER) else NEVER


def weight_bytes(model) -> int:
    """Bytes of the model's weights (every parameter once; a decode step reads all but the input embeddings)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


#: The largest buffer `weight_stream_seconds` reads; bigger models' times are scaled up from it.
STREAM_MAX_BYTES = 1 << 30


def weight_stream_seconds(model, repeats: int = 15, threads: int | None = None) -> float:
    """Median time to read a buffer the size of the model's weights once (a sum over it), on the model's device
    (on a CPU with `threads` threads, default the current count: give the count the model's forward runs on, or
    two cores' read is set against one core's step): the floor under a decode step, which reads every weight once
    (for reports next to step times). Weights over `STREAM_MAX_BYTES` are timed on a buffer of that size and scaled
    (memory-bound: linear)."""
    if threads is not None and threads != torch.get_num_threads():
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return weight_stream_seconds(model, repeats)
        finally:
            torch.set_num_threads(before)
    size = weight_bytes(model)
    device = next(model.parameters()).device
    buffer = torch.ones(min(size, STREAM_MAX_BYTES) // 4, dtype=torch.float32, device=device)
    cuda = device.type == "cuda"
    times = []
    for repeat in range(repeats + 2):  # two warm-up reads
        if cuda:
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        buffer.sum()
        if cuda:
            torch.cuda.synchronize(device)
        if repeat >= 2:
            times.append(time.perf_counter() - started)
    return statistics.median(times) * size / (4 * buffer.numel())

"""The lean forward's maths as one ONNX Runtime graph: a whole decode, draft or verify call in one C++ call.

Why: on a CPU a small model's call is dominated by how its matmuls are called and by the per-operation
dispatch between them, not by arithmetic. On an AMD EPYC core with AVX2 only, torch's MKL matmuls run the
one row of a decode step at 1.6x the time it takes to stream the weights, and the 2-8 rows of a verify call
far slower (small-M sgemm at ~11 % of the core's peak), so a verify call cost 1.9 decode steps and capped
speculation. ONNX Runtime's MLAS prepacks the weights once for its own kernels, which serve 1-8 rows at
nearly the cost of one, and runs the whole graph without returning to Python: the 12 x 256 embedded target,
one core, 1 row 3.4 vs 4.6 ms, 5 rows 4.5 vs 8.8 ms (docs/benchmarks.md). On other CPUs (an Intel Xeon with
AMX) torch may be the faster one, so `choice` times both here and the faster serves (SSD_DEMO_MATMUL fixes it).

The graph is built from the model's own weights (`onnx_llama.build_graph`). The KV cache stays in
this process, in numpy buffers the graph reads without a copy ([tokens, kv_heads * head_dim] per layer, sliced
to the cached length); the graph returns the new rows' keys and values, which are written after the call, so
rollback is moving the position pointer, as in the lean forward. Logits match the lean forward's to float
rounding (another library's kernels: not bit for bit); exactness of speculative sampling never depends on it.
"""

from __future__ import annotations

import importlib.util
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from . import kernels, machine_cache, onnx_graph, onnx_llama
from .onnx_graph import new_session
from .onnx_llama import build_graph
from .static_cache import (SILU, STATIC_ROPE_TYPES, StaticCacheLM, attention_shape, serves as lean_forward_serves,
                           signed_sine)

#: The setting (SSD_DEMO_MATMUL) that makes this forward serve every model it supports.
SETTING = "onnxruntime"
#: The graph holds a copy of the weights in one protobuf (2 GB at most); past this size a call is mostly
#: arithmetic anyway, and torch serves.
MAX_PARAMETERS = 100_000_000
#: Below this size neither forward is timed and the lean one serves (toy models; timing them costs more than
#: they could gain). A one-layer draft of 0.3 M parameters is timed: per-call cost is most of its step.
PROBE_MIN_PARAMETERS = 100_000
#: Rows timed by the probe: a decode or draft step, and the verify calls of K = 1..7.
PROBE_ROWS = (1, 2, 3, 4, 5, 6, 8)
#: This forward serves only where it is no slower for one row (the AR baseline must not lose) and at least this
#: much faster over all the probed row counts, in two probes.
MARGIN = 0.05


def supports(model) -> str | None:
    """None where this forward can serve the model, else why not."""
    if not lean_forward_serves(model, True):
        if getattr(model, "training", False):
            return "a model in training mode"
        if getattr(getattr(model, "config", None), "sliding_window", None) is not None:
            return "sliding-window attention"
        return "not a plain Llama or Qwen2 with full attention"
    weight = model.lm_head.weight
    if weight.device.type != "cpu" or any(p.dtype != torch.float32 for p in model.parameters()):
        return f"{weight.dtype} weights on {weight.device.type}: ONNX Runtime serves float32 (every weight) on a CPU"
    if sum(p.numel() for p in model.parameters()) > MAX_PARAMETERS:
        return f"over {MAX_PARAMETERS // 1_000_000} M parameters"
    if getattr(model.model.rotary_emb, "rope_type", "default") not in STATIC_ROPE_TYPES:
        return f"a rotary scaling other than {', '.join(STATIC_ROPE_TYPES)}"
    if any(type(layer.mlp.act_fn).__name__ not in SILU for layer in model.model.layers):
        return "an activation other than SiLU"
    for package in ("onnx", "onnxruntime"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed"
    return None


# model -> {intra-op threads: (weights fingerprint, session)}; sessions are safe to run from several threads at once.
_SESSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def session(model, threads: int | None = None):
    """The model's ONNX Runtime session with `threads` intra-op threads (default: as `choice` decided for the
    current torch thread count), built once (~0.3 s for 10 M parameters) and rebuilt when a weight is replaced
    or updated in place."""
    threads = choice(model).threads if threads is None else threads
    fingerprint = kernels.weights_fingerprint(model)
    cached = _SESSIONS.get(model, {}).get(threads)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    with _SESSIONS_LOCK:
        cached = _SESSIONS.setdefault(model, {}).get(threads)
        if cached is None or cached[0] != fingerprint:
            cached = (fingerprint, new_session(graph_bytes(model), threads))
            _SESSIONS[model][threads] = cached
        return cached[1]


# model -> (weights fingerprint, serialized graph): one build per model, whatever the thread counts of its sessions.
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def graph_bytes(model) -> bytes:
    """The model's serialized graph: kept on this machine (`machine_cache.graph`, keyed by the weights' values, the
    model's signature and the builder's source) or built (importing onnx: 1-2 s for the embedded target)."""
    fingerprint = kernels.weights_fingerprint(model)
    cached = _GRAPHS.get(model)
    if cached is None or cached[0] != fingerprint:
        key = machine_cache.digest(machine_cache.signature(model), machine_cache.source_digest(onnx_graph, onnx_llama),
                                   *model.parameters())
        cached = (fingerprint, machine_cache.graph(key, lambda: build_graph(model).SerializeToString()))
        _GRAPHS[model] = cached
    return cached[1]


class OnnxForward:
    """Implements `kv.CachedForward` (like `static_cache.StaticCacheLM`) through the model's ONNX Runtime session."""

    def __init__(self, model, capacity: int = 512, threads: int | None = None):
        self.model = model
        self.calls = 0
        self._pos = 0
        self.hidden: torch.Tensor | None = None
        self.hidden_from = 0
        # ONNX Runtime's intra-op threads for this model's calls (explicit inside the probe, which holds choice's lock)
        self.threads = choice(model).threads if threads is None else threads
        self._session = session(model, self.threads)
        heads, kv_heads, head_dim = attention_shape(model.config)
        self._heads, self._kv_width = heads, kv_heads * head_dim
        self._layers = len(model.model.layers)
        self._vocab = model.get_input_embeddings().weight.shape[0]
        self._outputs = ["logits", "hidden"] + [f"n{kind}{i}" for i in range(self._layers) for kind in "kv"]
        self._masks: dict[int, np.ndarray] = {}
        self._keys = self._values = None
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        keys = np.zeros((self._layers, capacity, self._kv_width), np.float32)
        values = np.zeros_like(keys)
        if self._keys is not None:  # grow: keep what is cached
            keys[:, : self._pos], values[:, : self._pos] = self._keys[:, : self._pos], self._values[:, : self._pos]
        self._keys, self._values = keys, values
        positions = torch.arange(capacity)[None]
        with torch.inference_mode():
            cos, sin = self.model.model.rotary_emb(torch.zeros(1, 1, 1), positions)
        self._cos, self._sin = cos[0, :, None, :].float().numpy(), signed_sine(sin[0, :, None, :]).float().numpy()

    @property
    def length(self) -> int:
        return self._pos

    def truncate(self, length: int) -> None:
        self._pos = min(self._pos, max(length, 0))  # rollback = moving the pointer

    def close(self) -> None:
        """Nothing to release (the session is shared per model); here for `kv.CachedForward`."""

    def _mask(self, n: int) -> np.ndarray:
        mask = self._masks.get(n)
        if mask is None:
            causal = np.triu(np.full((n, n), -np.inf, np.float32), 1)
            mask = self._masks[n] = np.tile(causal, (self._heads, 1))
        return mask

    def forward(self, ids, last_only: bool = False) -> torch.Tensor:
        ids = ids.detach().cpu().view(-1).numpy() if torch.is_tensor(ids) else np.asarray(ids)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or not ids.size:
            raise ValueError(f"expected a non-empty list of token ids, got an array of shape {ids.shape} ({ids.dtype})")
        if ids.min() < 0 or ids.max() >= self._vocab:  # ONNX Runtime's Gather would take -1 as the last id
            raise IndexError(f"token id {int(ids.min() if ids.min() < 0 else ids.max())} is outside the model's "
                             f"vocabulary (0-{self._vocab - 1})")
        ids = ids.astype(np.int64, copy=False)
        n, start = ids.shape[0], self._pos
        end = start + n
        if end > self._keys.shape[1]:
            self._allocate(max(2 * self._keys.shape[1], end))
        feed = {"ids": ids, "cos": self._cos[start:end], "sin": self._sin[start:end], "mask": self._mask(n),
                "first_out": np.array([n - 1 if last_only else 0], np.int64)}
        for i in range(self._layers):
            feed[f"k{i}"], feed[f"v{i}"] = self._keys[i, :start], self._values[i, :start]
        logits, hidden, *new = self._session.run(self._outputs, feed)
        for i in range(self._layers):
            self._keys[i, start:end], self._values[i, start:end] = new[2 * i], new[2 * i + 1]
        self._pos = end
        self.calls += 1
        self.hidden, self.hidden_from = torch.from_numpy(hidden), end - hidden.shape[0]
        return torch.from_numpy(logits)


@dataclass(frozen=True)
class Choice:
    """Whether this forward serves a model here, with how many intra-op threads, and why (for reports)."""

    serves: bool
    why: str
    threads: int = 1
    #: read from this machine's cache (`machine_cache`), timed in an earlier run
    kept: bool = field(default=False, compare=False)
    #: two probes agreed (a disagreement is not kept: the next run times again)
    settled: bool = field(default=True, compare=False)


# model -> {(set by the setting, torch threads): Choice}; timing depends on the shapes, not on the weights' values.
_CHOICES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CHOICE_LOCK = threading.Lock()


def choice(model) -> Choice:
    """Whether ONNX Runtime serves this model's cached forward here: as SSD_DEMO_MATMUL says ("onnxruntime":
    wherever supported; "blas" / "onednn": never), or by default timed against the lean forward once per model
    and thread count (`serves_from`, two probes that must agree; 3-5 s for the 10 M-parameter embedded target,
    the lean forward's own kernel probe included). With several torch threads, ONNX Runtime runs as many intra-op
    threads only where two probes found them faster than one (`_probe_threads`), under the setting too."""
    setting = kernels.kernel_setting()
    unsupported = supports(model)
    if unsupported:
        return Choice(False, unsupported)
    timed = sum(p.numel() for p in model.parameters()) >= PROBE_MIN_PARAMETERS
    if setting == SETTING and not timed:
        return Choice(True, f"set by {kernels.KERNEL_ENV}", torch.get_num_threads())
    if setting != "auto" and setting != SETTING:
        return Choice(False, f"{kernels.KERNEL_ENV}={setting}")
    if not timed:
        return Choice(False, "too small a model to time the forwards")
    decided = probed(model)
    if decided is not None:
        return decided
    with _CHOICE_LOCK:  # one probe at a time: two at once would time each other
        per_model = _CHOICES.setdefault(model, {})
        key = _choice_key()
        if key not in per_model:
            per_model[key] = _kept(model, key) or _measured(model, setting, key)
            if per_model[key].serves:
                kernels.drop_packed_weights(model)  # the lean forward's copy, built for the probe, is not needed
        return per_model[key]


def probed(model) -> Choice | None:
    """The choice already made for this model under torch's current thread count (and the setting), without
    timing anything; None where none was made."""
    return _CHOICES.get(model, {}).get(_choice_key())


def _choice_key() -> tuple[bool, int]:
    return kernels.kernel_setting() == SETTING, torch.get_num_threads()


#: The machine cache's name for this module's choices.
CACHE_KIND = "onnx_forward"


def _kept(model, key: tuple[bool, int]) -> Choice | None:
    """The choice timed for a model of this signature in an earlier run on this machine, if it was kept."""
    value = machine_cache.get(CACHE_KIND, machine_cache.signature(model), *key)
    try:
        threads = int(value["threads"])
        if not 1 <= threads <= key[1]:
            return None
        return Choice(bool(value["serves"]), str(value["why"]), threads, kept=True)
    except (TypeError, KeyError, ValueError):
        return None


def _measured(model, setting: str, key: tuple[bool, int]) -> Choice:
    """Time the choice here, and keep it for the next run where the probes agreed."""
    decided = _set_by_setting(model) if setting == SETTING else _probe(model)
    if decided.settled:
        machine_cache.put(CACHE_KIND, machine_cache.signature(model), *key,
                          {"serves": decided.serves, "why": decided.why, "threads": decided.threads})
    return decided


def _set_by_setting(model) -> Choice:
    threads, pool = _probe_threads(model)
    return Choice(True, f"{pool}set by {kernels.KERNEL_ENV}", threads)


def _probe(model) -> Choice:
    threads, pool = _probe_threads(model)
    first = time_forwards(model, threads=threads)
    if not serves_from(first):
        return Choice(False, f"{pool}timed here: " + _compare(first) + ", the lean forward is faster")
    second = time_forwards(model, threads=threads)
    if not serves_from(second):
        return Choice(False, f"{pool}two probes disagreed (a busy machine?): the lean forward", settled=False)
    return Choice(True, f"{pool}timed here twice: " + _compare(second), threads)


def _probe_threads(model) -> tuple[int, str]:
    """ONNX Runtime's intra-op threads for this model under torch's current count N, and why ("" for N = 1, else a
    clause ending in "; "): N only where two probes find N threads faster than one by `serves_from`'s rule.

    Why: an intra-op pool that does not spin (`onnx_graph.new_session`) wakes its threads for every parallel
    operation of a call. On a 2-core AMD EPYC (AVX-512) that made the embedded target's one-row call slower with
    two threads than with one (1.6-1.8 vs 1.4-1.6 ms); with the lean forward then chosen, AR was 1.4x slower while
    verify calls barely changed, and speculative decoding looked 1.94x faster than AR where it is 1.66x
    (docs/benchmarks.md)."""
    threads = torch.get_num_threads()
    if threads == 1:
        return 1, ""
    for _ in range(2):
        seconds = time_forwards(model, threads=threads, against_one_thread=True)
        timed = _compare(seconds, f"{threads} threads", "1 thread")
        if not serves_from(seconds):
            return 1, f"{_threads(threads)} not faster than 1 by the probe's rule: {timed}; "
    return threads, f"{_threads(threads)} timed faster than 1 twice: {timed}; "


def _threads(count: int) -> str:
    return f"{count} intra-op thread{'s' if count > 1 else ''}"


def _compare(seconds: dict[int, tuple[float, float]], challenger: str = "", incumbent: str = "the lean forward") -> str:
    one = seconds[1]
    totals = [sum(pair[k] for pair in seconds.values()) for k in (0, 1)]
    return (f"1 row {one[1] * 1e3:.2f} vs {one[0] * 1e3:.2f} ms, {min(seconds)}-{max(seconds)} rows "
            f"{totals[1] * 1e3:.1f} vs {totals[0] * 1e3:.1f} ms {'with ' + challenger + ' ' if challenger else ''}"
            f"against {incumbent}")


def serves_from(seconds: dict[int, tuple[float, float]], margin: float = MARGIN) -> bool:
    """{rows: (lean time, ONNX Runtime time)} -> whether ONNX Runtime serves: at least `margin` faster for one row
    (the AR baseline's call, which must get the faster path, or speedups over it are inflated), or no slower for one
    row and at least `margin` faster over all the timed row counts.

    Why one row alone may decide: with two torch threads the lean forward's few-row calls (oneDNN) came within 5 %
    of ONNX Runtime's on one thread while its one-row call was 50 % slower, and a rule on the total alone flipped
    between runs on a busy 2-core machine, and with it AR's speed."""
    lean_one, onnx_one = seconds[1]
    if onnx_one <= (1 - margin) * lean_one:
        return True
    return onnx_one <= lean_one and sum(s[1] for s in seconds.values()) < (1 - margin) * sum(
        s[0] for s in seconds.values())


def time_forwards(model, context: int = 64, repeats: int = 7, rows: tuple[int, ...] = PROBE_ROWS,
                  threads: int | None = None, against_one_thread: bool = False) -> dict[int, tuple[float, float]]:
    """Median seconds of a call of each row count after `context` cached tokens: {rows: (lean, ONNX Runtime)}
    with ONNX Runtime on `threads` intra-op threads (default torch's), interleaved so that a machine slowing down
    slows both (the lean forward on the kernel chosen for it here). `against_one_thread`: ONNX Runtime on one
    thread in place of the lean forward, {rows: (1 thread, `threads`)}."""
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (context + max(rows),), generator=torch.Generator().manual_seed(0))
    capacity = context + max(rows)
    incumbent = OnnxForward(model, capacity, threads=1) if against_one_thread else StaticCacheLM(model, capacity)
    forwards = (incumbent, OnnxForward(model, capacity, threads=threads or torch.get_num_threads()))
    for forward in forwards:
        forward.forward(ids[:context])
    times: dict[tuple[int, int], list[float]] = {(n, k): [] for n in rows for k in (0, 1)}
    # With several torch threads, torch's OpenMP workers spin for a while after each of its calls, on cores
    # (on a 2-vCPU machine, hyperthreads of one core) that the next call needs: each timed call is therefore the
    # second of two in a row, so that it meets the machine as it would in a run of such calls, not the other
    # forward's leftovers (interleaved call by call, ONNX Runtime's one thread timed 10-30 % slower).
    calls = 2 if torch.get_num_threads() > 1 else 1
    for repeat in range(repeats + 1):  # the first round warms up and is not kept
        for n in rows:
            for k in ((0, 1) if repeat % 2 else (1, 0)):
                for _ in range(calls):
                    forwards[k].truncate(context)
                    started = time.perf_counter()
                    forwards[k].forward(ids[context : context + n], last_only=n == 1)
                if repeat:
                    times[(n, k)].append(time.perf_counter() - started)
    return {n: (statistics.median(times[(n, 0)]), statistics.median(times[(n, 1)])) for n in rows}


def serves(model, static_cache: bool | None = None) -> bool:
    """Whether `kv.cached_lm` runs this model through ONNX Runtime here (a model the lean forward serves,
    `static_cache` read as there; `choice` says the rest)."""
    return lean_forward_serves(model, static_cache) and choice(model).serves


def describe(model) -> str:
    decided = choice(model)
    kept = "; timed in an earlier run on this machine" if decided.kept else ""
    return (f"ONNX Runtime's graph of the whole forward, MLAS matmuls, {_threads(decided.threads)} "
            f"({decided.why}{kept})")


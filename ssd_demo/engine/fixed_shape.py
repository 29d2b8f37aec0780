"""A cached forward whose calls of one row count always have the same shapes, replayed as CUDA graphs on a GPU.

Why: on a GPU a decode step of a Llama launches some ten kernels per layer from Python, one after another, and
at one token per step the GPU mostly waits for the launches (an H200, a Llasa-8B-shaped target in bfloat16:
25.7 ms per step against 3.7 ms to stream its weights once). A CUDA graph launches the whole step at once.
A graph replays fixed shapes at fixed addresses, so this forward (gpt-fast's layout) attends over the whole
preallocated cache with a mask instead of slicing it to the current length, writes keys and values with
`index_copy_` at positions held in a device tensor, and reads ids and positions from buffers it owns. One
graph is captured per (row count, last_only) on first use: the decode step, the draft step, the K+1-token
verify; longer calls (prompts) run the same maths without a graph. SSD_DEMO_CUDA_GRAPHS=0 turns it off (the
eager lean forward then serves CUDA models too).

The maths is the lean forward's (`static_cache.StaticCacheLM`: RMSNorm, rotary embedding, attention, gated
MLP through the layers' own modules), so logits match transformers' to float rounding; exactness of
speculative sampling never depends on it, since acceptance uses the probabilities each model produced.
Caches (and the graphs captured on them) are kept per model between runs (`FixedShapeLM.lease`), since
capturing costs more than a short run's decoding.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .static_cache import STATIC_ROPE_TYPES, attention_shape, serves as lean_forward_serves, signed_sine

log = logging.getLogger(__name__)

#: "0" turns CUDA graphs off (the lean eager step then serves CUDA models too, e.g. to compare).
CUDA_GRAPHS_ENV = "SSD_DEMO_CUDA_GRAPHS"
#: Calls of up to this many rows are captured (decode, draft and verify steps); longer ones (prompts) run eagerly.
MAX_GRAPH_ROWS = 16
#: Eager runs of a new shape before its capture (lets the libraries pick and cache their kernels first).
WARMUP_RUNS = 2
#: Idle forwards kept per model for the next runs (each holds a KV cache and its graphs): at least this many, and
#: as many as were ever in use at once (a server's concurrency comes back; recapturing costs more than a run).
KEEP_IDLE = 2
#: One capture at a time in the process (PyTorch's allocator supports no more), whichever thread captures.
_CAPTURE_LOCK = threading.Lock()


def serves(model, static_cache: bool | None = None) -> bool:
    """Whether `kv.cached_lm` runs this model through CUDA graphs: a model the lean forward serves
    (`static_cache.serves`, which also reads SSD_DEMO_STATIC_CACHE), on a CUDA device, with a rotary table that
    depends on the position alone, unless SSD_DEMO_CUDA_GRAPHS=0."""
    if os.environ.get(CUDA_GRAPHS_ENV, "1") == "0" or not lean_forward_serves(model, static_cache):
        return False
    return (model.lm_head.weight.device.type == "cuda"
            and getattr(model.model.rotary_emb, "rope_type", "default") in STATIC_ROPE_TYPES)


class _Graph:
    """One captured call: the graph and the buffers it reads (ids, positions) and writes (logits, hidden)."""

    def __init__(self, graph, ids: torch.Tensor, positions: torch.Tensor, logits: torch.Tensor, hidden: torch.Tensor):
        self.graph, self.ids, self.positions, self.logits, self.hidden = graph, ids, positions, logits, hidden


@dataclass
class _Kept:
    """A model's idle forwards, and how many are out now and at most so far."""

    idle: list = field(default_factory=list)
    leased: int = 0
    peak: int = 0


class FixedShapeLM:
    """Implements `kv.CachedForward` (`length`, `forward`, `truncate`, `calls`, `hidden`, `close`) with fixed shapes.

    `graphs=None`: capture CUDA graphs when the model is on a CUDA device (False: the same maths, eagerly,
    on any device; tests run it so on the CPU).
    """

    _kept: "weakref.WeakKeyDictionary[object, _Kept]" = weakref.WeakKeyDictionary()
    _kept_lock = threading.Lock()

    def __init__(self, model, capacity: int = 512, graphs: bool | None = None):
        self.model = model
        self.calls = 0
        self._pos = 0
        self.hidden: torch.Tensor | None = None
        self.hidden_from = 0
        self._heads, self._kv_heads, self._head_dim = attention_shape(model.config)
        self._device = model.lm_head.weight.device
        self._graphs_on = self._device.type == "cuda" if graphs is None else graphs
        self._graphs: dict[tuple[int, bool], _Graph] = {}
        self._pool = None
        # Warm-up and capture run on one stream of this forward's own (made at the first capture): cuBLAS keeps a
        # workspace per stream for good, allocated on its first use, which must be outside any graph's memory pool.
        self._stream = None
        # The weights the graphs read, by address: a graph holds pointers, not references.
        self._weights = _weights_key(model)
        self._keys = None
        self._allocate(capacity)

    @classmethod
    def lease(cls, model, capacity: int) -> "FixedShapeLM":
        """An idle forward of this model with at least `capacity` positions (its graphs kept), emptied; or a new
        one. `close()` hands it back. Several threads may decode with one model: each gets its own."""
        weights = _weights_key(model)
        with cls._kept_lock:
            kept = cls._kept.setdefault(model, _Kept())
            kept.leased += 1
            kept.peak = max(kept.peak, kept.leased)
            idle = kept.idle
            idle[:] = [lm for lm in idle if lm._weights == weights]  # moved or cast since: its graphs read old memory
            for index, lm in enumerate(idle):
                if lm.capacity >= capacity:
                    del idle[index]
                    lm.model, lm._pos, lm.calls, lm.hidden = model, 0, 0, None
                    return lm
        return cls(model, capacity)

    def close(self) -> None:
        """Hand this forward back to its model's idle list (the most recent are kept, `KEEP_IDLE` or the most ever
        in use at once). While idle it holds no reference to the model, so the list goes when the model does."""
        with self._kept_lock:
            if self.model is None:
                return  # closed already
            kept = self._kept.setdefault(self.model, _Kept())
            kept.leased = max(kept.leased - 1, 0)
            kept.idle.append(self)
            del kept.idle[:-max(KEEP_IDLE, kept.peak)]
            self.model = None

    @property
    def capacity(self) -> int:
        return self._keys.shape[3]

    def _allocate(self, capacity: int) -> None:
        """KV buffers [layers, 1, kv_heads, capacity, head_dim] (what is cached is kept when growing), the rotary
        tables and positions for them. New buffers move every address: the graphs are dropped."""
        weight = self.model.lm_head.weight
        shape = (len(self.model.model.layers), 1, self._kv_heads, capacity, self._head_dim)
        keys = torch.zeros(shape, dtype=weight.dtype, device=self._device)
        values = torch.zeros_like(keys)
        if self._keys is not None:
            keys[..., : self._pos, :] = self._keys[..., : self._pos, :]
            values[..., : self._pos, :] = self._values[..., : self._pos, :]
        self._keys, self._values = keys, values
        self._positions = torch.arange(capacity, device=self._device)
        cos, sin = self.model.model.rotary_emb(keys.new_zeros(1, 1, 1), self._positions[None])
        self._cos, self._sin_signed = cos[0, :, None, :], signed_sine(sin[0, :, None, :])  # [capacity, 1, head_dim]
        self._graphs.clear()
        self._pool = None  # a fresh pool for the new graphs

    @property
    def length(self) -> int:
        return self._pos

    def truncate(self, length: int) -> None:
        self._pos = min(self._pos, max(length, 0))  # rollback = moving the pointer; later positions are masked

    @torch.inference_mode()
    def forward(self, ids, last_only: bool = False) -> torch.Tensor:
        if not torch.is_tensor(ids):
            ids = torch.tensor(ids, dtype=torch.long, device=self._device)
        ids = ids.view(-1).to(self._device)
        n, start = ids.shape[0], self._pos
        if start + n > self.capacity:
            self._allocate(max(2 * self.capacity, start + n))
        positions = self._positions[start : start + n]
        if self._graphs_on and n <= MAX_GRAPH_ROWS:
            logits, hidden = self._replay(ids, positions, last_only)
        else:
            logits, hidden = self._step(ids, positions, last_only)
        self._pos = start + n
        self.calls += 1
        self.hidden, self.hidden_from = hidden, self._pos - hidden.shape[0]
        return logits

    def _replay(self, ids: torch.Tensor, positions: torch.Tensor, last_only: bool):
        """The call through its graph (captured now if new); copies of the graph's outputs, which its next
        replay overwrites (a decoder keeps each draft step's logits)."""
        graph = self._graphs.get((ids.shape[0], last_only))
        if graph is None:
            graph = self._capture(ids, positions, last_only)
            if graph is None:
                return self._step(ids, positions, last_only)
        else:
            graph.ids.copy_(ids)
            graph.positions.copy_(positions)
        graph.graph.replay()
        return graph.logits.clone(), graph.hidden.clone()

    def _capture(self, ids: torch.Tensor, positions: torch.Tensor, last_only: bool) -> _Graph | None:
        """Capture this call's graph, its inputs already in place (the warm-up runs compute the call itself and
        write the same keys and values the replay writes). None, graphs off for this forward, if capture fails.

        The graphs of one forward share a memory pool, replayed in any order: safe here because the only tensors
        that outlive a capture are each graph's own inputs and outputs, kept alive by its `_Graph`."""
        ids, positions = ids.clone(), positions.clone()
        device = self._device
        try:
            if self._stream is None:
                self._stream = torch.cuda.Stream(device)
            # The outer stream context puts this thread back on its stream even if capture fails half-way.
            with _CAPTURE_LOCK, torch.cuda.device(device), torch.cuda.stream(torch.cuda.current_stream(device)):
                self._stream.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(self._stream):
                    for _ in range(WARMUP_RUNS):
                        self._step(ids, positions, last_only)
                torch.cuda.current_stream(device).wait_stream(self._stream)
                graph = torch.cuda.CUDAGraph()
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                # thread_local: other threads (server workers) may keep launching work while this one captures
                with torch.cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"):
                    logits, hidden = self._step(ids, positions, last_only)
        except RuntimeError as error:
            log.warning("CUDA graph capture failed (%s); this forward runs without graphs", error)
            self._graphs_on = False
            return None
        captured = self._graphs[(ids.shape[0], last_only)] = _Graph(graph, ids, positions, logits, hidden)
        return captured

    def _step(self, ids: torch.Tensor, positions: torch.Tensor, last_only: bool):
        """(logits [n or 1, V], final hidden state of those rows) of ids [n] at positions [n] (device tensors),
        after writing their keys and values into the cache. Every shape depends on n alone."""
        core = self.model.model
        n = ids.shape[0]
        hidden = core.embed_tokens(ids)  # [n, d]
        cos, sin = self._cos[positions], self._sin_signed[positions]  # [n, 1, head_dim]
        # Each query head h reads kv head h // group: queries are regrouped per kv head, [kv, group * n, head_dim],
        # rows ordered (g, i), so the [n, capacity] causal mask repeats group times.
        group = self._heads // self._kv_heads
        mask = (self._positions[None, :] <= positions[:, None]).repeat(group, 1)  # [group * n, capacity]
        for index, layer in enumerate(core.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            query = _rotate(attn.q_proj(x).view(n, self._heads, self._head_dim), cos, sin)
            key = _rotate(attn.k_proj(x).view(n, self._kv_heads, self._head_dim), cos, sin)
            value = attn.v_proj(x).view(n, self._kv_heads, self._head_dim)
            keys, values = self._keys[index], self._values[index]  # [1, kv_heads, capacity, head_dim]
            keys[0].index_copy_(1, positions, key.transpose(0, 1))
            values[0].index_copy_(1, positions, value.transpose(0, 1))
            grouped = query.view(n, self._kv_heads, group, self._head_dim).permute(1, 2, 0, 3)
            out = F.scaled_dot_product_attention(
                grouped.reshape(1, self._kv_heads, group * n, self._head_dim), keys, values,
                attn_mask=mask, scale=attn.scaling)  # [1, kv_heads, group * n, head_dim]
            out = out.view(self._kv_heads, group, n, self._head_dim).permute(2, 0, 1, 3)
            hidden = hidden + attn.o_proj(out.reshape(n, self._heads * self._head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        hidden = core.norm(hidden[-1:] if last_only else hidden)
        return self.model.lm_head(hidden), hidden


def _weights_key(model) -> tuple:
    """Where and as what the model's weights are now (a graph replays reads of these addresses)."""
    return tuple((p.data_ptr(), p.dtype, p.device) for p in model.parameters())


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """The rotary embedding of x [n, heads, head_dim]: x * cos + rotate_half(x) * sin (rotate_half = the halves
    swapped, the first negated, folded into the sine table's sign)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([x[..., half:], x[..., :half]], dim=-1) * sin_signed

"""A lean cached forward for Llama-family models (and Qwen2): a static KV cache rolled back by position.

Why by hand: a small model (a 1-2 layer draft, or a 12 x 256 target on a CPU) spends most of a
transformers forward call in per-call machinery (argument handling, mask construction, cache
objects, output dataclasses), not in arithmetic, and speculative decoding makes many short calls:
K draft steps and one verify call per round. This module runs the same weights through the same
modules' maths (RMSNorm, rotary embedding, attention, gated MLP) in a few tensor operations, in the
style of gpt-fast: preallocated key/value buffers, and rollback is just moving the position pointer.

It serves the target as well as the draft, in both decoders, so our autoregressive baseline runs the
same code as the verify call, each call on the matmul kernel timed fastest here for its row count
(`kernel_choice`), and speedups over it stay honest. Logits match
transformers' to float rounding (tests check it); exactness of speculative sampling never depends
on it, since acceptance uses the probabilities each model actually produced. Models it does not
support (other architectures, sliding windows, training mode) go through transformers' own
forward with a DynamicCache (`decoding.CachedLM`).
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedConfig
from transformers.models.llama.modeling_llama import rotate_half

log = logging.getLogger(__name__)

# Qwen2 is Llama's maths plus biases on the query/key/value projections (and, for CosyVoice 2's speech
# LM, on the output layer), which the step below adds where a layer has them.
SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM")
#: Rotary scalings whose tables depend on the position alone.
STATIC_ROPE_TYPES = ("default", "linear", "llama3")


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


# Packed weights cost one more copy of the model (two while oneDNN serves some calls), so they are built only
# for CPU models up to this size (the small models whose decode steps are dominated by how each matmul is
# called; 1.2 GB a copy at the limit in float32).
PACK_MAX_PARAMETERS = 300_000_000
#: Below this size a forward is all per-call overhead and the matmul kernel makes no difference: no probe.
PROBE_MIN_PARAMETERS = 1_000_000
#: Rows timed by the kernel probe; a call with more rows than the last uses the last one's choice.
PROBE_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
#: "auto" (default): the faster kernel for each row count, measured on this machine; "blas" or "onednn": always that one.
KERNEL_ENV = "SSD_DEMO_MATMUL"
NEVER = 1 << 30  # a row count no call reaches


@dataclass
class _Linear:
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
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> "_Linear":
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
        return x @ self.weight_t if self.bias is None else torch.addmm(self.bias, x, self.weight_t)


@dataclass
class _PackedLayer:
    """One decoder layer's projections, fused (q|k|v, gate|up).

    Why: on a CPU, BLAS's `x @ W_t` with a contiguous [in, out] matrix runs 1.3-2x faster than
    `F.linear(x, W)` for the 1-9 rows a decode or verify call has (measured with one thread,
    512-1408 wide), and one fused matmul replaces three (or two) small calls.
    """

    qkv: _Linear
    o: _Linear
    gate_up: _Linear
    down: _Linear


def _cat_bias(*linears) -> torch.Tensor | None:
    if all(linear.bias is None for linear in linears):
        return None
    return torch.cat([linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)
                      for linear in linears])


def _pack(model) -> tuple[list[_PackedLayer], _Linear]:
    layers = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(_PackedLayer(
            qkv=_Linear.of(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                           _cat_bias(attn.q_proj, attn.k_proj, attn.v_proj)),
            o=_Linear.of(attn.o_proj.weight, attn.o_proj.bias),
            gate_up=_Linear.of(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                               _cat_bias(mlp.gate_proj, mlp.up_proj)),
            down=_Linear.of(mlp.down_proj.weight, mlp.down_proj.bias),
        ))
    return layers, _Linear.of(model.lm_head.weight, model.lm_head.bias)


# model -> (fingerprint of its weights, packed copy); rebuilt when any weight is replaced or updated in place.
_PACKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fingerprint(model) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def packed_weights(model) -> tuple[list[_PackedLayer], _Linear] | None:
    """The model's packed weights (cached per model), or None where packing does not pay."""
    weight = model.lm_head.weight
    if weight.device.type != "cpu" or sum(p.numel() for p in model.parameters()) > PACK_MAX_PARAMETERS:
        return None
    fingerprint = _fingerprint(model)
    cached = _PACKED.get(model)
    if cached is None or cached[0] != fingerprint:
        cached = (fingerprint, _pack(model))
        _PACKED[model] = cached
    return cached[1]


#: "0" turns the lean forward off everywhere (`decoding.cached_lm` then uses transformers' own forward).
STATIC_CACHE_ENV = "SSD_DEMO_STATIC_CACHE"


def serves(model, static_cache: bool | None = None) -> bool:
    """Whether `decoding.cached_lm` runs this model through the lean forward (`static_cache=None`: as
    `SSD_DEMO_STATIC_CACHE` says)."""
    if static_cache is None:
        static_cache = os.environ.get(STATIC_CACHE_ENV, "1") != "0"
    return static_cache and isinstance(getattr(model, "config", None), PreTrainedConfig) and supports(model)


def kernel_setting() -> str:
    """`SSD_DEMO_MATMUL`, checked: "auto" (also when unset or empty), "blas" or "onednn", in any case."""
    raw = os.environ.get(KERNEL_ENV, "")
    choice = raw.strip().lower() or "auto"
    if choice not in ("auto", "blas", "onednn"):
        raise ValueError(f"{KERNEL_ENV} must be auto, blas or onednn; got {raw!r}")
    return choice


@dataclass(frozen=True)
class KernelChoice:
    """Which matmul serves a model's lean forward calls here, and how that was decided (for reports)."""

    onednn_from: int  # calls with at least this many rows use oneDNN (`NEVER`: BLAS serves every call)
    why: str

    def describe(self) -> str:
        if self.onednn_from == NEVER:
            kernels = "BLAS matmuls"
        elif self.onednn_from == 1:
            kernels = "oneDNN matmuls"
        else:
            kernels = f"BLAS matmuls below {self.onednn_from} rows, oneDNN from {self.onednn_from}"
        return f"{kernels} ({self.why})"


# model -> {threads: probed choice}; timing depends on the shapes, not on the weights' values.
_PROBED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PROBE_LOCK = threading.Lock()


def _linears(packed: tuple[list[_PackedLayer], _Linear]) -> list[_Linear]:
    layers, head = packed
    return [linear for layer in layers for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [head]


def _onednn_copies(packed: tuple[list[_PackedLayer], _Linear], wanted: bool) -> bool:
    """Build (`wanted`) or drop the oneDNN copies of packed weights; False where this oneDNN cannot pack them."""
    linears = _linears(packed)
    if not wanted:
        for linear in linears:
            linear.onednn = None
        return False
    try:
        for linear in linears:
            linear.pack_onednn()
    except (AttributeError, RuntimeError) as error:  # a build whose oneDNN lacks the op or the shape
        log.warning("oneDNN could not pack the weights here (%s): BLAS serves every call", error)
        _onednn_copies(packed, wanted=False)
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
                try:
                    per_model[key] = KernelChoice(
                        measure_kernel_threshold(model, repeats=7 if parameters < 50_000_000 else 3),
                        "the faster per row count, timed here")
                except RuntimeError as error:  # oneDNN packed but unable to run here: BLAS
                    log.warning("oneDNN matmul failed in the kernel probe (%s): BLAS serves every call", error)
                    per_model[key] = KernelChoice(NEVER, "oneDNN failed here")
            choice = per_model[key]
    if choice.onednn_from != NEVER and not _onednn_copies(packed, wanted=True):
        return KernelChoice(NEVER, "oneDNN could not pack the weights here")
    if choice.onednn_from == NEVER:
        _onednn_copies(packed, wanted=False)
    return choice


def kernel_threshold(model) -> int:
    """Rows from which the packed oneDNN matmul serves this model's calls (`NEVER`: the BLAS one always)."""
    return kernel_choice(model).onednn_from


def prepare_kernels(*models, static_cache: bool | None = None) -> None:
    """Run the kernel probe now for the models the lean forward will serve, so that no timed call pays for
    it (a no-op once measured; models it does not serve are skipped)."""
    for model in models:
        if serves(model, static_cache):
            kernel_choice(model)


def describe_kernels(model, static_cache: bool | None = None) -> str:
    """Which matmul kernel serves which calls (rows = tokens per call) of this model here, and why, for reports."""
    if not serves(model, static_cache):
        return "transformers' own forward" if isinstance(getattr(model, "config", None), PreTrainedConfig) else (
            "its own forward")
    if packed_weights(model) is None:
        return "the model's own matmuls (no packed copy: not on a CPU, or over 300 M parameters)"
    return kernel_choice(model).describe()


def measure_kernel_threshold(model, context: int = 64, repeats: int = 7, rows: tuple[int, ...] = PROBE_ROWS) -> int:
    """Time the model's forward over 1..16 new tokens (after `context` cached ones) with each kernel,
    interleaved so that a machine slowing down slows both, and pick the switch point from the medians
    (`threshold_from`). Raises RuntimeError where oneDNN cannot pack or run this model here."""
    packed = packed_weights(model)
    if packed is None or not _onednn_copies(packed, wanted=True):
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


def threshold_from(seconds: dict[int, tuple[float, float]]) -> int:
    """{rows: (BLAS time, oneDNN time)} -> the row count from which oneDNN serves: the one that makes the
    measured calls cheapest in total (`NEVER` when BLAS alone does). One switch point, not a choice per
    size, so that one noisy size can neither flip a single row count nor push the switch far up."""
    sizes = sorted(seconds)

    def total(threshold: int) -> float:
        return sum(seconds[n][1] if n >= threshold else seconds[n][0] for n in sizes)

    return min([NEVER, *reversed(sizes)], key=total)  # ties go to the later switch (BLAS)


class StaticCacheLM:
    """Implements `decoding.CachedForward` (like `decoding.CachedLM`): `length`, `forward`, `truncate`, `calls`."""

    def __init__(self, model, capacity: int = 512, pack: bool = True, onednn_from: int | None = None):
        self.model = model
        self.calls = 0
        self._pos = 0
        # The final hidden state of the last forward's logits rows (read by draft heads; a reference, no copy).
        self.hidden: torch.Tensor | None = None
        self.hidden_from = 0
        core = model.model
        config = model.config
        self._layers = list(core.layers)
        self._heads = config.num_attention_heads
        self._kv_heads = config.num_key_value_heads
        self._head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self._packed = packed_weights(model) if pack else None
        # Calls with at least this many rows use the oneDNN kernel (None: as measured for this machine).
        self._onednn_from = NEVER
        if self._packed is not None:
            wanted = kernel_threshold(model) if onednn_from is None else onednn_from
            if wanted == NEVER or _onednn_copies(self._packed, wanted=True):  # (a no-op when they are there)
                self._onednn_from = wanted
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
        if self._static_rope:
            positions = torch.arange(capacity, device=weight.device)[None]
            cos, sin = self.model.model.rotary_emb(keys.new_zeros(1, 1, 1), positions)
            self._cos, self._sin = cos[0, :, None, :], sin[0, :, None, :]  # [capacity, 1, head_dim]

    @property
    def length(self) -> int:
        return self._pos

    def truncate(self, length: int) -> None:
        self._pos = min(self._pos, max(length, 0))  # rollback = moving the pointer

    def close(self) -> None:
        """Nothing to release (the buffers go with the object); here for `decoding.CachedForward`."""

    @staticmethod
    def _norm(norm, hidden: torch.Tensor) -> torch.Tensor:
        """Llama's RMSNorm, x / sqrt(mean(x^2) + eps) * w; in float32 through layer_norm.

        Why: layer_norm is one kernel on the CPU, while rms_norm (and the module) run four or five
        (pow, sum, div, mul). The layer norm of [x, -x] has mean 0 and variance mean(x^2) with the eps
        in the same place, so its first half is RMSNorm's x / sqrt(mean(x^2) + eps), to float rounding.
        Measured against F.rms_norm, interleaved on one core (two runs): the 12-layer target's step and
        5-token verify 3.5-9% faster, a one-layer draft step 0-5%.
        """
        if hidden.dtype == torch.float32:
            width = hidden.shape[-1]
            mirrored = torch.cat([hidden, -hidden], dim=-1)
            normalised = F.layer_norm(mirrored, (2 * width,), eps=norm.variance_epsilon)[..., :width]
            return normalised * norm.weight
        return norm(hidden)  # half precision: the module's own order of casts

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
        positions = torch.arange(start, end, device=device)
        hidden = core.embed_tokens(ids)  # [n, d]
        if self._static_rope:
            cos, sin = self._cos[start:end], self._sin[start:end]
        else:
            cos, sin = core.rotary_emb(hidden[None], positions[None])
            cos, sin = cos[0, :, None, :], sin[0, :, None, :]
        # Causal mask over cached + new positions; a single new token may attend to everything.
        mask = None if n == 1 else torch.arange(end, device=device)[None, :] <= positions[:, None]
        heads, kv_heads, head_dim = self._heads, self._kv_heads, self._head_dim
        q_width, kv_width = heads * head_dim, kv_heads * head_dim
        for index, layer in enumerate(self._layers):
            attn = layer.self_attn
            x = self._norm(layer.input_layernorm, hidden)
            if self._packed is not None:
                packed = self._packed[0][index]
                qk, v = packed.qkv(x, self._onednn_from).split([q_width + kv_width, kv_width], dim=-1)
            else:
                qk, v = torch.cat([attn.q_proj(x), attn.k_proj(x)], dim=-1), attn.v_proj(x)
            # Queries and keys rotated together: one rotary application per layer instead of two.
            qk = qk.view(n, heads + kv_heads, head_dim)
            qk = qk * cos + rotate_half(qk) * sin
            q = qk[:, :heads].transpose(0, 1)[None]
            k = qk[:, heads:].transpose(0, 1)[None]
            v = v.view(n, kv_heads, head_dim).transpose(0, 1)[None]
            self._keys[index, :, :, start:end] = k
            self._values[index, :, :, start:end] = v
            out = F.scaled_dot_product_attention(
                q, self._keys[index, :, :, :end], self._values[index, :, :, :end],
                attn_mask=mask, scale=attn.scaling, enable_gqa=kv_heads != heads,
            )
            out = out[0].transpose(0, 1).reshape(n, q_width)
            if self._packed is not None:
                hidden = hidden + packed.o(out, self._onednn_from)
                x = self._norm(layer.post_attention_layernorm, hidden)
                gate, up = packed.gate_up(x, self._onednn_from).chunk(2, dim=-1)
                hidden = hidden + packed.down(layer.mlp.act_fn(gate) * up, self._onednn_from)
            else:
                hidden = hidden + attn.o_proj(out)
                hidden = hidden + layer.mlp(self._norm(layer.post_attention_layernorm, hidden))
        hidden = self._norm(core.norm, hidden[-1:] if last_only else hidden)
        self._pos = end
        self.calls += 1
        self.hidden, self.hidden_from = hidden, end - hidden.shape[0]
        if self._packed is not None:
            return self._packed[1](hidden, self._onednn_from)
        return self.model.lm_head(hidden)

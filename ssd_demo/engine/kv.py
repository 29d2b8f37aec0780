"""A model's forward over its own KV cache, which a decoder can cut back to any shorter length.

Both decoders keep each model's past in such a cache and roll it back after a rejection. Implementations:
the lean static-cache forward (`static_cache.StaticCacheLM`) for the plain Llamas it supports (on a GPU its
fixed-shape variant replayed as CUDA graphs, `fixed_shape.FixedShapeLM`; on a CPU where it is timed faster, the
same maths as one ONNX Runtime graph, `onnx_forward.OnnxForward`), and transformers' own forward over a
`DynamicCache` (`CachedLM`) for every other model; `cached_lm` chooses.
"""

from __future__ import annotations

import inspect
from typing import Protocol

import torch

from . import fixed_shape, kernels, onnx_forward
from .draft_heads import OutputInputCapture
from .static_cache import StaticCacheLM, describe_kernels as describe_lean_kernels, serves as lean_forward_serves


class CachedForward(Protocol):
    """A model's forward over its own KV cache: what both decoders call (`CachedLM`, `StaticCacheLM`)."""

    calls: int
    # With keep_hidden: the input of the output layer (the final hidden state) of the last forward's
    # logits rows, [rows, d], and the cache position of its first row.
    hidden: torch.Tensor | None
    hidden_from: int

    @property
    def length(self) -> int:
        """Tokens in the cache."""

    def forward(self, ids: list[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Feed `ids` after the cached ones; logits [n, V] (or [1, V] with last_only)."""

    def truncate(self, length: int) -> None:
        """Cut the cache back to its first `length` tokens."""

    def close(self) -> None:
        """Release what the forward attached to its model (hooks)."""


class CachedLM:
    """A causal LM and its KV cache, which can be cut back to any shorter length."""

    def __init__(self, model, keep_hidden: bool = False):
        from transformers import DynamicCache  # deferred: a voice on the lean forward never imports transformers

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.calls = 0
        self.hidden, self.hidden_from = None, 0
        self._capture = OutputInputCapture(model) if keep_hidden else None
        # transformers 5.x renamed `past_key_values` to `cache`; accept models of either vintage.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def forward(self, ids: list[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Feed `ids` after the cached ones; return logits [n, V] (or [1, V] with last_only)."""
        device = self.model.device
        if not torch.is_tensor(ids):
            ids = torch.tensor(ids, dtype=torch.long, device=device)
        out = self.model(
            input_ids=ids.view(1, -1),
            use_cache=True,
            logits_to_keep=1 if last_only else 0,
            **{self._cache_arg: self.cache},
        )
        self.calls += 1
        if self._capture is not None:
            self.hidden = self._capture.hidden[0]
            self.hidden_from = self.length - self.hidden.shape[0]
        return out.logits[0]

    def truncate(self, length: int) -> None:
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)  # transformers 5.x: a negative count drops tokens from the end

    def close(self) -> None:
        """Remove the hidden-state hook from the model (it outlives this run otherwise)."""
        if self._capture is not None:
            self._capture.close()


def cached_lm(model, capacity: int, static_cache: bool | None = None, keep_hidden: bool = False) -> CachedForward:
    """A model's cached forward: the lean static-cache step for plain Llamas (on CUDA replayed as CUDA graphs; on
    a CPU through ONNX Runtime where that is faster here), else transformers'. Call its `close()` when done (a
    CUDA-graphed forward goes back to its model's idle list).

    `static_cache=None` follows the SSD_DEMO_STATIC_CACHE environment variable ("0" turns the
    lean step off everywhere, e.g. to compare against transformers' own forward). `keep_hidden`:
    the forward keeps the final hidden state of its logits rows (draft heads read it); the lean
    step always does, at no cost.
    """
    if fixed_shape.serves(model, static_cache):
        return fixed_shape.FixedShapeLM.lease(model, capacity)
    if onnx_forward.serves(model, static_cache):
        return onnx_forward.OnnxForward(model, capacity)
    if lean_forward_serves(model, static_cache):
        return StaticCacheLM(model, capacity)
    if type(model).__name__ == "PlainLlamaForCausalLM":  # loaded without transformers: its forward is transformers'
        model = model.to_transformers()
    return CachedLM(model, keep_hidden=keep_hidden)


def prepare_kernels(*models, static_cache: bool | None = None) -> None:
    """Decide now which forward and kernel serve each model (timing them where needed, and building ONNX Runtime's
    session), so that no timed call pays for it (a no-op once decided; other models are skipped)."""
    for model in models:
        if onnx_forward.serves(model, static_cache):
            onnx_forward.session(model)  # built by the probe, or here where the setting chose it untimed
        elif lean_forward_serves(model, static_cache):
            kernels.kernel_choice(model)


def forward_threads(model, static_cache: bool | None = None) -> int:
    """CPU threads this model's cached forward runs on here: ONNX Runtime's intra-op count where it serves (timed,
    `onnx_forward.choice`), else torch's."""
    if onnx_forward.serves(model, static_cache):
        return onnx_forward.choice(model).threads
    return torch.get_num_threads()


def describe_kernels(model, static_cache: bool | None = None) -> str:
    """What serves this model's cached forward here, for reports: CUDA graphs, ONNX Runtime, or which matmul kernel
    serves which calls of the lean forward and why (`static_cache.describe_kernels`), or transformers' own forward."""
    if fixed_shape.serves(model, static_cache):
        return "CUDA graphs of the fixed-shape forward (the model's own matmuls)"
    if onnx_forward.serves(model, static_cache):
        return onnx_forward.describe(model)
    lean = describe_lean_kernels(model, static_cache)
    refused = onnx_forward.supports(model) if kernels.kernel_setting() == onnx_forward.SETTING else None
    if refused and lean_forward_serves(model, static_cache):
        return f"{lean}; {kernels.KERNEL_ENV}={onnx_forward.SETTING}, but ONNX Runtime cannot serve it: {refused}"
    timed = onnx_forward.probed(model)  # timed against the lean forward here and refused: say so, with the times
    if timed is not None and not timed.serves and lean_forward_serves(model, static_cache):
        return f"{lean}; ONNX Runtime's forward not chosen ({timed.why})"
    return lean

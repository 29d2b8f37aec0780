"""Which engine runs the speech LM: ours (in this process, one request at a time; the default) or vLLM (its own
process and environment, continuous batching, the path for batches and for GPU serving).

    synth = use_engine(presets.load_preset("llasa-1b-3b"), "vllm")   # same Synthesizer API, LM on vLLM
    synth.render_batch(texts)                                        # vLLM only: all texts in one batch

`SSD_DEMO_ENGINE=vllm` chooses vLLM wherever the engine is not named explicitly (`engine_choice()`).
Without the vLLM environment everything runs on ours, and choosing vLLM is a clear `UserError`.
"""

from __future__ import annotations

import os

from ..errors import InputError
from .vllm_process import VllmUnavailableError, require_vllm_python, vllm_python

ENGINES = ("ours", "vllm")
ENGINE_VARIABLE = "SSD_DEMO_ENGINE"

#: Model families whose LMs the vLLM engine serves (Llasa presets and custom Llama/Qwen2 pairs).
VLLM_BACKENDS = ("llasa",)

__all__ = ["ENGINES", "ENGINE_VARIABLE", "VllmUnavailableError", "engine_choice", "environment_engine", "use_engine",
           "vllm_available"]


def vllm_available() -> bool:
    """Whether the vLLM environment exists (it is not started)."""
    return vllm_python() is not None


def engine_choice(explicit: str | None = None) -> str:
    """The engine asked for: `explicit` when given, else SSD_DEMO_ENGINE, else ours."""
    choice = (explicit or os.environ.get(ENGINE_VARIABLE, "") or "ours").strip().lower()
    if choice not in ENGINES:
        source = "engine" if explicit else ENGINE_VARIABLE
        raise InputError(f"{source}={choice!r}: choose one of {', '.join(ENGINES)}")
    return choice


def use_engine(synthesizer, engine: str | None = None):
    """`synthesizer` on the engine asked for: on ours, a plain `Synthesizer`; on vLLM, a `VllmSynthesizer` for
    the same voice (an InputError for a voice vLLM does not serve, a VllmUnavailableError without vLLM)."""
    wrapped = getattr(synthesizer, "on_vllm", False)
    if engine_choice(engine) == "ours":
        return synthesizer.unwrapped() if wrapped else synthesizer
    if wrapped:
        return synthesizer
    require_vllm_python()  # a clear error before anything starts
    from .vllm_engine import VllmSynthesizer

    return VllmSynthesizer.wrap(synthesizer)


def environment_engine(synthesizer):
    """SSD_DEMO_ENGINE applied where it can be: with `vllm`, a voice vLLM serves moves there (the library's
    loaders call this, so the app needs no change); other voices stay on ours."""
    if engine_choice() == "vllm" and getattr(synthesizer.backend, "name", "") in VLLM_BACKENDS:
        return use_engine(synthesizer, "vllm")
    return synthesizer

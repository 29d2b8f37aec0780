"""Which engine runs the speech LM: ours or vLLM (`engine_choice`, `use_engine`, `environment_engine`)."""

from __future__ import annotations

import os

from ...errors import InputError
from .worker import VLLM_BACKENDS, VllmUnavailableError, require_vllm_python, vllm_python

ENGINES = ("ours", "vllm")
ENGINE_VARIABLE = "SSD_DEMO_ENGINE"


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
    from .synthesizer import VllmSynthesizer

    return VllmSynthesizer.wrap(synthesizer)


def environment_engine(synthesizer):
    """SSD_DEMO_ENGINE applied where it can be: with `vllm`, a voice vLLM serves moves there (the library's
    loaders call this, so the app needs no change); other voices stay on ours."""
    if engine_choice() == "vllm" and synthesizer.backend.name in VLLM_BACKENDS:
        return use_engine(synthesizer, "vllm")
    return synthesizer

"""The registry of model pairs the app, CLI and API can load by name.

A preset is a target, one or more drafts that share its vocabulary, and the backend
that turns text into prompts and tokens into audio. The embedded voice is always
first (it works offline on a CPU); other families register themselves here.
Only one preset is kept resident at a time, because real pairs take gigabytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .synthesis import Synthesizer


@dataclass(frozen=True)
class Preset:
    key: str  # stable identifier used by the CLI and the API
    label: str  # shown in the UI
    description: str
    licence: str
    drafts: tuple[str, ...]  # draft names, in the order the UI lists them
    default_draft: str
    # Builds the Synthesizer; receives the device string ("cpu", "cuda", ...) or None for automatic.
    loader: Callable[[str | None], Synthesizer] = field(repr=False, compare=False)
    needs_download: bool = False  # True when weights come from the Hugging Face Hub


_REGISTRY: dict[str, Preset] = {}
_resident: dict[str, Synthesizer] = {}
_lock = threading.Lock()


def register(preset: Preset) -> None:
    if preset.default_draft not in preset.drafts:
        raise ValueError(f"preset {preset.key!r}: default draft {preset.default_draft!r} is not one of its drafts")
    _REGISTRY[preset.key] = preset


def list_presets() -> list[Preset]:
    _register_builtin()
    return list(_REGISTRY.values())


def get_preset(key: str) -> Preset:
    _register_builtin()
    try:
        return _REGISTRY[key]
    except KeyError:
        raise KeyError(f"unknown preset {key!r}; available: {', '.join(_REGISTRY)}") from None


def load_preset(key: str, device: str | None = None) -> Synthesizer:
    """Load (or reuse) a preset's synthesizer; loading another one first frees the current one."""
    preset = get_preset(key)
    with _lock:
        if key not in _resident:
            _resident.clear()  # one pair resident at a time
            _resident[key] = preset.loader(device)
        return _resident[key]


def _register_builtin() -> None:
    if "embedded" in _REGISTRY:
        return

    def load_embedded(device: str | None) -> Synthesizer:
        from .backends.embedded import load_synthesizer

        return load_synthesizer(device=device)

    register(
        Preset(
            key="embedded",
            label="Embedded voice (offline, CPU)",
            description=(
                "A small codec-token TTS trained on eSpeak NG speech, shipped with the demo: "
                "a 12-layer target and two drafts (SSD-style layer subset, distilled)."
            ),
            licence="Apache-2.0 (weights trained by this project on eSpeak NG output)",
            drafts=("distilled", "layers"),
            default_draft="distilled",
            loader=load_embedded,
        )
    )

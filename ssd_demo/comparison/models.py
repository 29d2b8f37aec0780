"""The models behind a comparison: `load` a preset (a readable `ModelLoadError` when it fails) on the
preferred device, `warm_up` its decoders once, and the backend's names for token ids. The pipeline that
uses them is `pipeline` (prepare once, then run).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import torch

from ..errors import ModelLoadError
from ..backends.registry import Preset, get_preset, load_preset
from ..speech.synthesis import Synthesizer

#: progress(fraction in [0, 1], description); gr.Progress instances fit this shape.
ProgressFn = Callable[..., object]

WARM_UP_TEXT = "Warm up."


def preferred_device() -> str | None:
    """"cuda" when a GPU is visible (a Space, a workstation), else None (the loader's CPU default)."""
    return "cuda" if torch.cuda.is_available() else None


def load(preset_key: str, progress: ProgressFn | None = None, owner: str | None = None) -> tuple[Preset, Synthesizer]:
    """Load a preset (`owner`: the session whose custom pairs count), turning any failure into a
    ModelLoadError with a readable message."""
    preset = get_preset(preset_key, owner)  # KeyError names the available presets

    def report(fraction: float, message: str) -> None:
        # Loading is the first tenth of a run's progress bar.
        if progress is not None:
            progress(0.1 * min(max(float(fraction), 0.0), 1.0), desc=f"Loading the model: {message}")

    try:
        return preset, load_preset(preset_key, device=preferred_device(), progress=report, owner=owner)
    except Exception as error:  # noqa: BLE001 - any loader failure is reported the same way
        hint = " (it needs files from the Hugging Face Hub; check the network or the local cache)" if preset.needs_download else ""
        raise ModelLoadError(f"Could not load the model preset '{preset.label}'{hint}: {error}") from error


_warmed: "weakref.WeakKeyDictionary[Synthesizer, set[str]]" = weakref.WeakKeyDictionary()
_warm_lock = threading.Lock()


def warm_up(synthesizer: Synthesizer, draft: str) -> bool:
    """Run both decoders once on a short text so the timed runs skip first-call costs.

    Done once per loaded synthesizer and draft (kernels, allocator pools and lazy
    imports settle on the first call). Returns True when it ran.
    """
    with _warm_lock:
        done = _warmed.setdefault(synthesizer, set())
        if draft in done:
            return False
        config = synthesizer.config(max_new_tokens=8, seed=0)
        synthesizer.synthesize(WARM_UP_TEXT, mode="ar", config=config)
        synthesizer.synthesize(WARM_UP_TEXT, mode="speculative", config=config, draft=draft)
        done.add(draft)
        return True


def token_label_for(synthesizer: Synthesizer) -> Callable[[int], str]:
    """The backend's own token names (e.g. codec code numbers, phonemes; by default the ids)."""
    return synthesizer.backend.token_label

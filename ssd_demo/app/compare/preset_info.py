"""What the page says about presets and the machine: example texts, each preset's control
defaults, its description and licence, and the device note."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ...backends.embedded import DEFAULT_PATH as EMBEDDED_VOICE
from ...comparison import ProgressFn, load
from ...config import DecodingConfig
from ...backends.registry import MODEL_JOB_LOCK, Preset, get_preset, preset_availability

EXAMPLE_TEXTS = (
    "Speculative decoding lets a small draft model guess ahead while the large model checks its work.",
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A tolerance of zero keeps the output exactly the same as the target model's.",
)

MAX_EXAMPLES = 6


def example_texts() -> list[str]:
    """Example sentences for the page: the embedded voice's own (held-out) examples when shipped."""
    texts = list(EXAMPLE_TEXTS[:1])
    try:
        shipped = (EMBEDDED_VOICE / "examples.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        shipped = []
    texts += [line.strip() for line in shipped if line.strip()]
    if len(texts) == 1:
        texts = list(EXAMPLE_TEXTS)
    return texts[:MAX_EXAMPLES]


@dataclass(frozen=True)
class PresetDefaults:
    """What the controls should show for one preset."""

    key: str
    drafts: tuple[str, ...]
    default_draft: str
    config: DecodingConfig
    max_text_chars: int


FALLBACK_MAX_TEXT_CHARS = 300


def preset_defaults(preset_key: str, load_models: bool = True, progress: ProgressFn | None = None,
                    owner: str | None = None) -> PresetDefaults:
    """The preset's drafts and decoding defaults; loads the models to read them unless told not to."""
    if load_models:
        with MODEL_JOB_LOCK:
            return _preset_defaults(preset_key, load_models, progress, owner)
    return _preset_defaults(preset_key, load_models, progress, owner)


def _preset_defaults(preset_key: str, load_models: bool, progress: ProgressFn | None,
                     owner: str | None) -> PresetDefaults:
    preset = get_preset(preset_key, owner)
    if load_models:
        _, synthesizer = load(preset_key, progress, owner=owner)
        config = synthesizer.config()
        max_chars = int(synthesizer.backend.max_text_chars)
    else:
        config, max_chars = DecodingConfig(), FALLBACK_MAX_TEXT_CHARS
    return PresetDefaults(
        key=preset.key,
        drafts=tuple(preset.drafts),
        default_draft=preset.default_draft,
        config=config,
        max_text_chars=max_chars,
    )


def preset_markdown(preset: Preset) -> str:
    """Label, description, licence and (without touching the network) whether the weights are here."""
    lines = [f"**{preset.label}** — {preset.description}", f"Licence: {preset.licence}"]
    if preset.needs_download:
        try:
            lines.append(f"Weights: {preset_availability(preset.key, preset.owner)[1]}")
        except Exception:  # noqa: BLE001 - the note is informative only
            lines.append("Weights: downloaded from the Hugging Face Hub on first use.")
        if getattr(preset, "recommended_device", "cpu") != "cpu":
            lines.append(f"Recommended device: {preset.recommended_device}.")
    return "  \n".join(lines)


def device_note() -> str:
    if torch.cuda.is_available():
        return f"Running on CUDA ({torch.cuda.get_device_name(0)})."
    return f"Running on the CPU ({os.cpu_count()} cores visible, {_threads(torch.get_num_threads())})."


def _threads(count: int) -> str:
    return f"{count} torch thread{'' if count == 1 else 's'}"

"""The presets the demo ships with: the embedded voice first (offline, CPU), then the Hub's Llasa pairs and
CosyVoice 2. The registry registers them once, when the presets are first listed; each loader
imports its backend only when the preset is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..models.hub import DEFAULT_REVISION, LoadOptions
from .preset import Preset

if TYPE_CHECKING:
    from ..speech.synthesis import Synthesizer

LLASA_1B = "HKUSTAudio/Llasa-1B"
LLASA_3B = "HKUSTAudio/Llasa-3B"
LLASA_8B = "HKUSTAudio/Llasa-8B"


def _llasa_loader(target: str, draft: str) -> Callable[..., Synthesizer]:
    def load(device: str | None, progress: Callable[[float, str], None] | None = None) -> Synthesizer:
        # deferred: a backend loads the text front end
        from .llasa_loading import DEFAULT_CODEC, DEFAULT_CODEC_REVISION, load_llasa_pair

        return load_llasa_pair(
            target,
            draft,
            target_revision=DEFAULT_REVISION,
            draft_revision=DEFAULT_REVISION,
            codec_ref=DEFAULT_CODEC,
            codec_revision=DEFAULT_CODEC_REVISION,
            draft_name="Llasa-1B",
            options=LoadOptions(device=device),
            progress=progress,
        )

    return load


def _cosyvoice2() -> Preset:
    from .cosyvoice2.backend import LICENCE  # deferred: a backend loads the text front end
    from .cosyvoice2.loading import REPO, load_from_hub, preflight

    return Preset(
        key="cosyvoice2-paper",
        label="CosyVoice 2 (paper setting; Hugging Face Hub, GPU)",
        description=(
            "The SSD paper's own system: CosyVoice2-0.5B speaks (Qwen2.5-0.5B speech LM, flow matching, HiFT, "
            "24 kHz), its bottom 2 + top 6 layers draft, K 3, beta 0.4, repetition-aware sampling as the official "
            "code does today (the server's SSD_COSYVOICE2_RULES=release: as the paper ran it). "
            "The draft is the untrained layer subset unless the server sets SSD_COSYVOICE2_DRAFT to a trained "
            "one (the paper trains its bottom layers and head first: `python -m ssd_demo train-draft "
            "--checkpoint PATH/TO/CosyVoice2-0.5B`); untrained, it accepts less than the paper's. "
            "Zero-shot: give a 3-10 s clip and its transcript (a clip alone: its voice only, the official "
            "cross-lingual mode); without one it imitates a synthetic eSpeak NG clip. No instruct mode yet. "
            f"Downloads about 3.1 GB of {REPO}; encoding a clip needs onnxruntime."
        ),
        licence=LICENCE,
        drafts=("layers",),
        default_draft="layers",
        loader=lambda device, progress=None: load_from_hub(device, progress),
        needs_download=True,
        repos=(REPO,),
        revision=DEFAULT_REVISION,
        sample_rate=24_000,
        codec="flow matching + HiFT",
        recommended_device="cuda",
        preflight=lambda: preflight(),
    )


def _llasa() -> list[Preset]:
    # deferred: the backends load the text front end
    from .llasa import LICENCE
    from .llasa_codec import DEFAULT_CODEC, DEFAULT_CODEC_REVISION

    common = dict(
        licence=LICENCE,
        drafts=("Llasa-1B",),
        default_draft="Llasa-1B",
        needs_download=True,
        revision=DEFAULT_REVISION,
        pins=((DEFAULT_CODEC, DEFAULT_CODEC_REVISION),),
        sample_rate=16_000,
        codec=DEFAULT_CODEC,
        gated=True,  # not verified for every size; gated repos ask for HF_TOKEN (hub.resolve says so)
        recommended_device="cuda",
    )
    presets = []
    for key, target, size, memory in (
        ("llasa-1b-3b", LLASA_3B, "3B", "about 15 GB"),
        ("llasa-1b-8b", LLASA_8B, "8B", "about 28 GB"),
    ):
        presets.append(
            Preset(
                key=key,
                label=f"Llasa-1B -> Llasa-{size} (Hugging Face Hub, GPU)",
                description=(
                    f"Llasa-{size} speaks, Llasa-1B drafts: Llama-based TTS models that share one vocabulary of "
                    "65,536 XCodec2 speech tokens (16 kHz), so the 1B model drafts with no training. "
                    "Voice cloning from a short clip and its transcript. Sampling: temperature 0.8, top-p 1. "
                    f"Downloads {LLASA_1B}, {target} and {DEFAULT_CODEC} (commit {DEFAULT_CODEC_REVISION[:7]}); "
                    f"needs {memory} of GPU memory "
                    "(bfloat16 LMs, float32 codec, with headroom)."
                ),
                loader=_llasa_loader(target, LLASA_1B),
                repos=(target, LLASA_1B, DEFAULT_CODEC),
                **common,
            )
        )
    return presets


def builtin_presets() -> list[Preset]:
    """The shipped presets, the embedded voice first (it stays at the top of every list)."""
    from .embedded import EmbeddedBackend, available_drafts, default_draft, load_synthesizer  # deferred: a backend

    def load_embedded(device: str | None) -> Synthesizer:
        return load_synthesizer(device=device)

    embedded = Preset(
        key="embedded",
        label="Embedded voice (offline, CPU)",
        description=(
            "A small codec-token TTS shipped with the demo, trained on speech rendered by Piper's "
            "en_US-joe-medium voice and decoded by that voice's own decoder: a 12-layer target and its drafts "
            "(distilled, SSD-style layer subset, and draft heads on the target's own hidden state)."
        ),
        licence=EmbeddedBackend.LICENCE,
        drafts=available_drafts(),
        default_draft=default_draft(),
        loader=load_embedded,
    )
    return [embedded, *_llasa(), _cosyvoice2()]

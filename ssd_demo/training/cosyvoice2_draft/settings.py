"""What a draft-training run is asked for: the presets it trains for and its recipe (`DraftRecipe`, `smoke_recipe`),
plain settings apart from the training code (torch), so that `python -m ssd_demo train-draft --help` shows the
defaults without loading torch."""

from __future__ import annotations

from dataclasses import dataclass

from ...backends.cosyvoice2 import PAPER_DRAFT_LAYERS
from ..recipe import StageConfig

PRESETS = ("cosyvoice2",)


@dataclass(frozen=True)
class DraftRecipe:
    """What `main` runs: the optimiser schedule (`StageConfig`; its batch_tokens is unused here) and the data.
    The defaults are a starting point for the released 0.5 B model, not settings tuned on it."""

    stage: StageConfig = StageConfig(steps=2000, lr=2e-4, warmup=100, weight_decay=0.01, checkpoint_every=200)
    batch_size: int = 16  # generated sequences per step
    texts: int = 1000  # built-in texts, when no --texts file is given
    held_out: int = 32  # the last texts' generations: never trained on, they measure acceptance
    max_new_tokens: int = 0  # a cap under the official 20 per text token; 0 = the official bound only
    #: The share of texts prompted zero-shot, as the app always speaks (`prompts.choose_voice`); the rest are
    #: cross-lingual ([sos, text, task], also how the official LM is trained).
    zero_shot_fraction: float = 0.8
    #: Of the zero-shot prompts, the share in the backend's default voice when the run has it (--default-voice);
    #: the others take an earlier generation of the run as their voice.
    default_voice_share: float = 0.25
    bottom: int = PAPER_DRAFT_LAYERS[0]
    top: int = PAPER_DRAFT_LAYERS[1]


def smoke_recipe() -> DraftRecipe:
    # Enough data and steps that the tiny draft reliably closes most of its gap to the smoke target.
    return DraftRecipe(stage=StageConfig(steps=60, lr=3e-3, warmup=4, weight_decay=0.0, checkpoint_every=20),
                       batch_size=8, texts=48, held_out=8, max_new_tokens=24)

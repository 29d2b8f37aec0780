"""Load a CosyVoice 2 checkpoint folder (laid out as the Hub repository) into a `Synthesizer`.

Every weight file loads strictly into our modules; the folder is checked first, so a missing file
is named before minutes of loading. The draft is the SSD paper's: the target's bottom 2 and top 6
layers, untrained unless a trained draft's weights are given (`draft_state`, in our unified
layout, as `training` writes them).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...errors import ModelLoadError
from ...synthesis import Synthesizer
from .backend import CosyVoice2Backend
from .frontend import PromptEncoders, VoiceFeatures, load_text_tokenizer
from .llm import BACKBONE_FOLDER, LLM_FILE, build_speech_lm, layer_draft, layout_of, load_speech_lm, materialise

FLOW_FILE, HIFT_FILE = "flow.pt", "hift.pt"
REQUIRED = (LLM_FILE, FLOW_FILE, HIFT_FILE, f"{BACKBONE_FOLDER}/config.json")
DRAFT_NAME = "layers"  # the paper's layer-subset draft
PAPER_DRAFT_LAYERS = (2, 6)  # bottom, top


def missing_files(folder: str | Path) -> list[str]:
    folder = Path(folder)
    return [name for name in REQUIRED if not (folder / name).is_file()]


def load_cosyvoice2(folder: str | Path, default_voice: VoiceFeatures, device: str = "cpu",
                    dtype: torch.dtype = torch.float32, draft_state: dict[str, torch.Tensor] | None = None,
                    flow_config=None, hift_config=None) -> Synthesizer:
    """The speech LM (target), the paper's layer draft, the flow model and HiFT, all from `folder`.

    `flow_config` / `hift_config` default to the released model's; tests pass tiny ones."""
    from .flow import FlowConfig, load_flow
    from .hift import HiFTConfig, load_hift

    folder = Path(folder)
    missing = missing_files(folder)
    if missing:
        raise ModelLoadError(f"{folder}: not a complete CosyVoice 2 checkpoint folder (missing {', '.join(missing)})")
    target = load_speech_lm(folder, dtype=dtype, device=device)
    draft = layer_draft(target, *PAPER_DRAFT_LAYERS)
    if draft_state is not None:  # its own tensors (the untrained draft's are the target's)
        try:
            draft = materialise(build_speech_lm(draft.config, device="meta"), draft_state, device)
        except RuntimeError as error:
            raise ModelLoadError(f"the trained draft does not fit this target's layer draft ({error})") from None
    try:
        flow = load_flow(folder / FLOW_FILE, flow_config or FlowConfig(), device=device)
        hift = load_hift(folder / HIFT_FILE, hift_config or HiFTConfig(), device=device)
    except (ValueError, RuntimeError, OSError) as error:
        raise ModelLoadError(f"{folder}: {error}") from None
    backend = CosyVoice2Backend(tokenizer=load_text_tokenizer(folder), layout=layout_of(target), flow=flow, hift=hift,
                                default_voice=default_voice, encoders=PromptEncoders(folder, device=device))
    return Synthesizer(backend, target, {DRAFT_NAME: draft}, default_draft=DRAFT_NAME)


__all__ = ["DRAFT_NAME", "REQUIRED", "load_cosyvoice2", "missing_files"]

"""Load a CosyVoice 2 checkpoint folder (laid out as the Hub repository) into a `Synthesizer`.

Every weight file loads strictly into our modules; the folder is checked first, so a missing file
is named before minutes of loading. The draft is the SSD paper's: the target's bottom 2 and top 6
layers, untrained unless a trained draft's weights are given (`draft_state`, in our unified
layout, as `training` writes them).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ...errors import InvalidSettingError, ModelLoadError
from . import PAPER_DRAFT_LAYERS
from ...models.hub import LoadOptions, auto_device, resolve, use_only
from ...speech.synthesis import Synthesizer
from .backend import SAMPLING_RULES, CosyVoice2Backend
from .text_norm import NORMALISER_MODES, check_mode
from .frontend import (SPEAKER_ENCODER_FILE, SPEECH_TOKENIZER_FILE, PromptEncoders, VoiceFeatures, load_text_tokenizer,
                       text_tokens)
from .llm import BACKBONE_FOLDER, LLM_FILE, build_speech_lm, layer_draft, layout_of, load_speech_lm, materialise

REPO = "FunAudioLLM/CosyVoice2-0.5B"
FLOW_FILE, HIFT_FILE = "flow.pt", "hift.pt"
REQUIRED = (LLM_FILE, FLOW_FILE, HIFT_FILE, f"{BACKBONE_FOLDER}/config.json")
DRAFT_NAME = "layers"  # the paper's layer-subset draft
TRAINED_DRAFT_ENV = "SSD_COSYVOICE2_DRAFT"  # a trained draft for the preset: file, folder or Hub repo
TRAINED_DRAFT_FILE = "draft.safetensors"
TEXT_ENV = "SSD_COSYVOICE2_TEXT"  # the preset's text normaliser: "default" or "official" (text_norm.NORMALISER_MODES)
RULES_ENV = "SSD_COSYVOICE2_RULES"  # the preset's sampling rules: "head" (default) or "release" (backend.SAMPLING_RULES)


def missing_files(folder: str | Path) -> list[str]:
    folder = Path(folder)
    return [name for name in REQUIRED if not (folder / name).is_file()]


def load_cosyvoice2(folder: str | Path, default_voice: VoiceFeatures | None, device: str = "cpu",
                    dtype: torch.dtype = torch.float32, draft_state: dict[str, torch.Tensor] | None = None,
                    flow_config=None, hift_config=None, rules: str = "head",
                    text_normalizer: str = "default") -> Synthesizer:
    """The speech LM (target), the paper's layer draft, the flow model and HiFT, all from `folder`.

    `default_voice`: the voice spoken without a clip of the user's (None: set it on the backend before use).
    `rules`: the official sampling code followed, "head" or "release" (the paper's; `backend.SAMPLING_RULES`).
    `flow_config` / `hift_config` default to the released model's; tests pass tiny ones."""
    from .flow import FlowConfig, load_flow
    from .hift import HiFTConfig, load_hift

    folder = Path(folder)
    check_mode(text_normalizer)  # before minutes of loading
    if rules not in SAMPLING_RULES:
        raise InvalidSettingError(f"CosyVoice 2 sampling rules must be one of {', '.join(SAMPLING_RULES)}; got {rules!r}")
    missing = missing_files(folder)
    if missing:
        raise ModelLoadError(f"{folder}: not a complete CosyVoice 2 checkpoint folder (missing {', '.join(missing)})")
    target = load_speech_lm(folder, dtype=dtype, device=device)
    draft = layer_draft(target, *PAPER_DRAFT_LAYERS)
    if draft_state is not None:  # its own tensors (the untrained draft's are the target's)
        own = draft.state_dict()
        unexpected = sorted(set(draft_state) - set(own))
        if unexpected:
            raise ModelLoadError(f"the trained draft holds tensors a layer draft does not have: {', '.join(unexpected[:5])}")
        try:  # tensors the draft file leaves out (the frozen ones) are the target's
            draft = materialise(build_speech_lm(draft.config, device="meta"), {**own, **draft_state}, device)
        except RuntimeError as error:
            raise ModelLoadError(f"the trained draft does not fit this target's layer draft ({error})") from None
    try:
        flow = load_flow(folder / FLOW_FILE, flow_config or FlowConfig(), device=device)
        hift = load_hift(folder / HIFT_FILE, hift_config or HiFTConfig(), device=device)
    except (ValueError, RuntimeError, OSError) as error:
        raise ModelLoadError(f"{folder}: {error}") from None
    backend = CosyVoice2Backend(tokenizer=load_text_tokenizer(folder), layout=layout_of(target), flow=flow, hift=hift,
                                default_voice=default_voice, encoders=PromptEncoders(folder, device=device),
                                rules=rules, text_normalizer=text_normalizer)
    return Synthesizer(backend, target, {DRAFT_NAME: draft}, default_draft=DRAFT_NAME)


# What the Hub preset fetches (about 3.1 GB): not the backbone's own model.safetensors (llm.pt holds those
# weights), nor the optional TensorRT estimator or the batched tokenizer.
HUB_PATTERNS = [LLM_FILE, FLOW_FILE, HIFT_FILE, SPEECH_TOKENIZER_FILE, SPEAKER_ENCODER_FILE, "cosyvoice2.yaml",
                f"{BACKBONE_FOLDER}/*.json", f"{BACKBONE_FOLDER}/*.txt"]
METADATA = ["cosyvoice2.yaml", f"{BACKBONE_FOLDER}/*.json"]
use_only(REPO, HUB_PATTERNS)  # download commands in messages fetch these files only
#: The voice imitated when a visitor gives no clip: a synthetic eSpeak NG rendering of this sentence
#: (no recording of a person ships with the demo; a clip of one's own gives a natural voice).
DEFAULT_PROMPT_TEXT = "This is the default voice prompt, a synthetic voice made by a formant synthesiser."


def preflight(revision: str | None = None, options: LoadOptions = LoadOptions()) -> Path:
    """The small files only (configs, tokenizer): says what is missing before the big download."""
    folder = resolve(REPO, revision, options, METADATA)
    if not (folder / BACKBONE_FOLDER / "config.json").is_file():
        raise ModelLoadError(f"{REPO}: no {BACKBONE_FOLDER}/config.json in the snapshot (an incomplete download?)")
    return folder


def default_voice(encoders: PromptEncoders, tokenizer) -> VoiceFeatures:
    """The features of the eSpeak NG clip of DEFAULT_PROMPT_TEXT, through the checkpoint's encoders."""
    from ...text import espeak
    from .text_norm import normalize_english

    rendering = espeak.synthesize(DEFAULT_PROMPT_TEXT)
    return encoders.encode(rendering.audio, espeak.SAMPLE_RATE,
                           text_tokens(tokenizer, normalize_english(DEFAULT_PROMPT_TEXT)))


def trained_draft_state(ref: str, options: LoadOptions = LoadOptions()) -> dict[str, torch.Tensor]:
    """A trained layer draft (`train-draft`'s draft.safetensors): a file, a folder holding it, or a Hub repo."""
    from safetensors.torch import load_file

    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / TRAINED_DRAFT_FILE
    elif not path.is_file():
        path = resolve(ref, None, options, [TRAINED_DRAFT_FILE, "draft.json"]) / TRAINED_DRAFT_FILE
    if not path.is_file():
        raise ModelLoadError(f"{ref}: no {TRAINED_DRAFT_FILE} (written by `python -m ssd_demo train-draft`)")
    return load_file(str(path))


def load_from_hub(device: str | None = None, progress=None, revision: str | None = None,
                  options: LoadOptions = LoadOptions(), draft: str | None = None, rules: str | None = None,
                  text_normalizer: str | None = None) -> Synthesizer:
    """The preset: the checkpoint from the Hub (or the local cache when offline) and the paper's draft,
    trained when `draft` (or the SSD_COSYVOICE2_DRAFT environment variable) names one, else untrained;
    sampling as the official code does today unless `rules` (or SSD_COSYVOICE2_RULES) is "release"; text read
    the project's way unless `text_normalizer` (or SSD_COSYVOICE2_TEXT) is "official"."""
    draft = draft or os.environ.get(TRAINED_DRAFT_ENV) or None
    rules = rules or os.environ.get(RULES_ENV, "").strip() or "head"
    if rules not in SAMPLING_RULES:
        raise InvalidSettingError(f"{RULES_ENV} must be one of {', '.join(SAMPLING_RULES)}; got {rules!r}")
    text_normalizer = text_normalizer or os.environ.get(TEXT_ENV, "").strip() or "default"
    if text_normalizer not in NORMALISER_MODES:
        raise InvalidSettingError(f"{TEXT_ENV} must be one of {', '.join(NORMALISER_MODES)}; got {text_normalizer!r}")
    draft_state = trained_draft_state(draft, options) if draft else None
    folder = resolve(REPO, revision, options, HUB_PATTERNS, progress)
    placed = auto_device(device or options.device)
    # float32 unless asked otherwise, on a GPU too: the official default (fp16=False); bfloat16 would change
    # the logits and so the sampled tokens.
    dtype = options.dtype or torch.float32
    synthesizer = load_cosyvoice2(folder, None, device=str(placed), dtype=dtype, draft_state=draft_state, rules=rules,
                                  text_normalizer=text_normalizer)
    backend = synthesizer.backend
    backend.default_voice = default_voice(backend.encoders, backend.tokenizer)
    return synthesizer


__all__ = ["DEFAULT_PROMPT_TEXT", "DRAFT_NAME", "RULES_ENV", "TEXT_ENV",
           "TRAINED_DRAFT_ENV", "trained_draft_state", "HUB_PATTERNS", "REPO", "REQUIRED", "load_cosyvoice2", "load_from_hub",
           "missing_files", "preflight"]

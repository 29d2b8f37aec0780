"""CosyVoice 2's speech language model as a plain causal LM that our decoders drive unchanged.

The official `Qwen2LM` (in `llm.pt`) is a Qwen2 backbone called with input embeddings that it puts
together itself: a learned start vector, the Qwen embeddings of the text tokens, a learned task
vector, then speech-token embeddings from a table of its own; a biased linear layer (not Qwen's
head) turns the last hidden state into scores over 6,561 speech tokens and three stop ids. Our
decoders speak token ids, so we fold the three tables into one input vocabulary:

    [0, 6564)          speech tokens 0..6560, end of speech 6561, 6562, fill 6563 (speech table)
    6564, 6565         start (sos) and task vectors
    6566 + t           text token t of the Qwen tokenizer (Qwen's embedding table)

Speech ids come first so that a sampled id is its own input id (the decoders feed it back), and
the output layer stays 6,564 wide instead of 158 k. The result is a stock `Qwen2ForCausalLM` whose
`config.vocab_size` is the output width (6,564), whose embedding table is longer, and whose
`lm_head` is the official decoder with its bias: the same arithmetic as the official forward, so
logits agree to float rounding (`parity_llm` checks it on shared random weights), and the lean
static-cache step serves it as it serves Llamas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ...errors import ModelLoadError

SPEECH_TOKENS = 6561
BACKBONE_FOLDER = "CosyVoice-BlankEN"
LLM_FILE = "llm.pt"
# What the official tokenizer adds to Qwen's (CosyVoice 2's `CosyVoice2Tokenizer`), in its order: the
# ids they get depend on it, and text that spells them (e.g. "[breath]") must map to the same ids.
ADDED_SPECIAL_TOKENS = (
    "<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>", "[noise]",
    "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>",
    "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]",
)
# The backbone's shapes (Qwen2.5-0.5B, as in CosyVoice-BlankEN/config.json): for random-weight runs in
# the real shapes when the checkpoint is not at hand.
REAL_BACKBONE = dict(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, use_sliding_window=False, hidden_act="silu",
)
# Official tensor names in llm.pt, grouped by where they go.
_BACKBONE_PREFIX = "llm.model.model."
_UNUSED_QWEN_HEAD = "llm.model.lm_head.weight"  # Qwen's own head: never called by CosyVoice 2


@dataclass(frozen=True)
class SpeechVocabLayout:
    """Where each kind of token lives in the unified input vocabulary (module docstring)."""

    text_rows: int  # rows of Qwen's embedding table (151,936 for Qwen2.5-0.5B)
    speech_tokens: int = SPEECH_TOKENS

    @property
    def speech_rows(self) -> int:  # speech tokens + end + two more stop ids = the output width
        return self.speech_tokens + 3

    @property
    def end_of_speech(self) -> int:
        return self.speech_tokens

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return tuple(range(self.speech_tokens, self.speech_tokens + 3))

    @property
    def sos_id(self) -> int:
        return self.speech_rows

    @property
    def task_id(self) -> int:
        return self.speech_rows + 1

    @property
    def text_offset(self) -> int:
        return self.speech_rows + 2

    @property
    def input_rows(self) -> int:
        return self.text_offset + self.text_rows

    def prompt_ids(self, text_tokens: list[int], prompt_speech: list[int] = ()) -> list[int]:
        """[sos, text (prompt transcript + text, Qwen ids), task, prompt speech tokens], as the official
        zero-shot input; generated speech tokens follow."""
        for token in text_tokens:
            if not 0 <= token < self.text_rows:
                raise ValueError(f"text token {token} is outside the model's {self.text_rows} text rows")
        for token in prompt_speech:
            if not 0 <= token < self.speech_tokens:
                raise ValueError(f"prompt speech token {token} is not one of the {self.speech_tokens} speech tokens")
        return [self.sos_id, *(self.text_offset + t for t in text_tokens), self.task_id, *prompt_speech]

    def to_dict(self) -> dict:
        return {"text_rows": self.text_rows, "speech_tokens": self.speech_tokens}


def layout_of(model) -> SpeechVocabLayout:
    """The layout a unified model was built with (recorded in its config)."""
    recorded = getattr(model.config, "cosyvoice2_layout", None)
    if not recorded:
        raise ModelLoadError("not a CosyVoice 2 speech LM (its config records no speech vocabulary layout)")
    return SpeechVocabLayout(**recorded)


def speech_lm_config(backbone_config, layout: SpeechVocabLayout, num_layers: int | None = None,
                     dtype: torch.dtype = torch.float32):
    """The unified model's Qwen2Config: the backbone's, with the output width and layout recorded."""
    from transformers import Qwen2Config

    config = Qwen2Config.from_dict(backbone_config.to_dict())
    config.vocab_size = layout.speech_rows  # the logits' width
    config.tie_word_embeddings = False  # the decoder is not the embedding table
    config.cosyvoice2_layout = layout.to_dict()
    config.architectures = ["Qwen2ForCausalLM"]
    if num_layers is not None:
        config.num_hidden_layers = num_layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:num_layers]
    config.dtype = dtype
    return config


def build_speech_lm(config, device: str | torch.device = "cpu"):
    """The unified model for `config` (from `speech_lm_config`), randomly initialised, or with
    `device="meta"` weightless (for `materialise`, so loading a checkpoint never allocates twice)."""
    from transformers import Qwen2ForCausalLM

    layout = SpeechVocabLayout(**config.cosyvoice2_layout)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
        model.model.embed_tokens = nn.Embedding(layout.input_rows, config.hidden_size)
        model.lm_head = nn.Linear(config.hidden_size, layout.speech_rows, bias=True)
    return model.to(config.dtype).eval()


def materialise(model, state: dict[str, torch.Tensor], device: str | torch.device = "cpu"):
    """Give a weightless (meta) unified model `state` as its weights, strictly: every parameter must
    come from `state` and every tensor of `state` must be used."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    dtype = model.config.dtype
    model.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()}, strict=True, assign=True)
    with torch.device(device):  # the rotary tables are buffers computed from the config, not weights
        model.model.rotary_emb = Qwen2RotaryEmbedding(model.config)
    return model.eval()


def official_to_unified(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], SpeechVocabLayout]:
    """llm.pt's tensors under our names (the three input tables stacked in the layout's order)."""
    required = ("speech_embedding.weight", "llm_embedding.weight", _BACKBONE_PREFIX + "embed_tokens.weight",
                "llm_decoder.weight", "llm_decoder.bias")
    missing = [name for name in required if name not in state]
    if missing:
        raise ModelLoadError(f"not a CosyVoice 2 llm.pt: no {', '.join(missing)}")
    speech, start_task = state["speech_embedding.weight"], state["llm_embedding.weight"]
    text = state[_BACKBONE_PREFIX + "embed_tokens.weight"]
    layout = SpeechVocabLayout(text_rows=text.shape[0], speech_tokens=speech.shape[0] - 3)
    if start_task.shape[0] != 2 or state["llm_decoder.weight"].shape[0] != speech.shape[0]:
        raise ModelLoadError(
            f"not a CosyVoice 2 llm.pt: {start_task.shape[0]} start/task vectors (2 expected), decoder "
            f"{state['llm_decoder.weight'].shape[0]} wide for {speech.shape[0]} speech rows"
        )
    mapped = {
        "model.embed_tokens.weight": torch.cat([speech, start_task, text]),
        "lm_head.weight": state["llm_decoder.weight"],
        "lm_head.bias": state["llm_decoder.bias"],
    }
    unexpected = []
    for name, tensor in state.items():
        if name in required or name == _UNUSED_QWEN_HEAD:
            continue
        if name.startswith(_BACKBONE_PREFIX):
            mapped["model." + name[len(_BACKBONE_PREFIX):]] = tensor
        else:
            unexpected.append(name)
    if unexpected:
        raise ModelLoadError(f"llm.pt holds tensors a CosyVoice 2 speech LM does not have: {', '.join(sorted(unexpected)[:5])}")
    return mapped, layout


def unified_to_official(model) -> dict[str, torch.Tensor]:
    """The inverse of `official_to_unified`: a unified model's weights under llm.pt's names (for
    fixtures and the parity check; Qwen's unused head is written as the official files have it)."""
    layout = layout_of(model)
    state = model.state_dict()
    table = state.pop("model.embed_tokens.weight")
    out = {
        "llm_embedding.weight": table[layout.sos_id: layout.text_offset].clone(),
        "speech_embedding.weight": table[: layout.speech_rows].clone(),
        _BACKBONE_PREFIX + "embed_tokens.weight": table[layout.text_offset:].clone(),
        "llm_decoder.weight": state.pop("lm_head.weight"),
        "llm_decoder.bias": state.pop("lm_head.bias"),
    }
    out[_UNUSED_QWEN_HEAD] = out[_BACKBONE_PREFIX + "embed_tokens.weight"]  # tied in Qwen2.5-0.5B
    for name, tensor in state.items():
        out[_BACKBONE_PREFIX + name[len("model."):]] = tensor
    return out


def load_speech_lm(folder: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """The official checkpoint folder (llm.pt + CosyVoice-BlankEN/config.json) -> the unified model,
    every weight from llm.pt (strict: a missing, extra or misshapen tensor is an error)."""
    from transformers import Qwen2Config

    folder = Path(folder)
    weights, config_file = folder / LLM_FILE, folder / BACKBONE_FOLDER / "config.json"
    for needed in (weights, config_file):
        if not needed.is_file():
            raise ModelLoadError(f"{folder}: no {needed.relative_to(folder)} (is this a CosyVoice 2 checkpoint folder?)")
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
        mapped, layout = official_to_unified(state)
    except (RuntimeError, ValueError, OSError) as error:
        raise ModelLoadError(f"{weights}: cannot be read as CosyVoice 2's speech LM ({error})") from None
    backbone = Qwen2Config.from_dict(json.loads(config_file.read_text()))
    layers = sum(1 for name in mapped if name.endswith(".self_attn.q_proj.weight"))
    if layers != backbone.num_hidden_layers:
        raise ModelLoadError(f"{weights}: {layers} layers, but {config_file.name} says {backbone.num_hidden_layers}")
    model = build_speech_lm(speech_lm_config(backbone, layout, dtype=dtype), device="meta")
    try:
        return materialise(model, mapped, device)
    except RuntimeError as error:
        raise ModelLoadError(f"{weights}: does not match {BACKBONE_FOLDER}/config.json ({_first_lines(error)})") from None


def layer_draft(target, bottom: int = 2, top: int = 6):
    """The SSD paper's draft: the target's bottom `bottom` and top `top` layers on the same tables.

    Untrained, it holds the target's own tensors (no copy of the 0.5 B weights; training copies what
    it changes: the paper trains the bottom layers and the head).
    """
    n = target.config.num_hidden_layers
    if bottom < 1 or top < 0 or bottom + top > n:
        raise ValueError(f"cannot take bottom {bottom} + top {top} layers from a {n}-layer target")
    chosen = list(range(bottom)) + list(range(n - top, n))
    config = speech_lm_config(target.config, layout_of(target), num_layers=len(chosen), dtype=target.config.dtype)
    if getattr(target.config, "layer_types", None):
        config.layer_types = [target.config.layer_types[i] for i in chosen]
    state = {}
    for name, tensor in target.state_dict().items():
        if name.startswith("model.layers."):
            index, rest = name[len("model.layers."):].split(".", 1)
            if int(index) in chosen:
                state[f"model.layers.{chosen.index(int(index))}.{rest}"] = tensor
        else:
            state[name] = tensor
    return materialise(build_speech_lm(config, device="meta"), state, target.device)


def _first_lines(error: Exception, lines: int = 3) -> str:
    return " ".join(str(error).strip().splitlines()[:lines])


__all__ = [
    "ADDED_SPECIAL_TOKENS", "REAL_BACKBONE", "SPEECH_TOKENS", "SpeechVocabLayout", "build_speech_lm", "layer_draft", "layout_of",
    "load_speech_lm", "materialise", "official_to_unified", "speech_lm_config", "unified_to_official",
]

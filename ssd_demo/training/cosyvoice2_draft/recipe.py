"""What a draft-training run is: its recipe, the files it keeps in OUT, and the target it distils.

The recipe's defaults are a starting point for the released 0.5 B model; `smoke_recipe` and `smoke_target`
are a tiny random stand-in that trains in seconds, for tests and CI.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...backends.cosyvoice2.llm import SpeechVocabLayout, build_speech_lm, layout_of, speech_lm_config
from .settings import PRESETS, DraftRecipe, smoke_recipe  # noqa: F401 - the recipe's settings, imported from here too

#: What a run keeps in OUT: the cached generations, the training checkpoint, the exported draft, the report.
GENERATIONS_FILE = "generations.pt"
CHECKPOINT_FILE = "draft_checkpoint.pt"
DRAFT_FILE = "draft.safetensors"
SUMMARY_FILE = "draft.json"


def save_atomic(obj, path: Path) -> None:
    """`torch.save` through a temporary file, for the generations cache and the checkpoint."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)  # atomic: an interruption never leaves a torn file


@dataclass
class Target:
    """The frozen target, its vocabulary layout, its text tokenizer (called as Hugging Face tokenizers are:
    a list of texts in, {"input_ids": [...]} out; the backend builds prompts with it) and what identifies it."""

    model: object
    layout: SpeechVocabLayout
    tokenizer: object
    source: dict = field(default_factory=dict)

    def tokenize(self, text: str) -> list[int]:
        from ...backends.cosyvoice2.frontend import text_tokens

        return text_tokens(self.tokenizer, text)


class WordHashTokenizer:
    """The smoke target's tokenizer: one token per word, a hash of it."""

    def __init__(self, rows: int):
        self.rows = rows

    def __call__(self, texts: list[str]) -> dict[str, list[list[int]]]:
        return {"input_ids": [[zlib.crc32(word.encode()) % self.rows for word in text.split()] for text in texts]}


# -- the targets ----------------------------------------------------------------------------------

SMOKE_LAYOUT = SpeechVocabLayout(text_rows=64, speech_tokens=61)  # 64 outputs: 61 speech tokens, 3 stop ids


def smoke_target(seed: int = 0) -> Target:
    """A tiny random 10-layer CosyVoice 2 speech LM with a word-hash text tokenizer. The two layers the
    paper's draft skips (2 and 3 of 10) get no attention output and a strong MLP: they act token by token,
    a gap that the draft's trained bottom layers can learn to close, so a few seconds of training show."""
    from transformers import Qwen2Config

    backbone = Qwen2Config(vocab_size=SMOKE_LAYOUT.text_rows, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=10, num_attention_heads=2, num_key_value_heads=1,
                           max_position_embeddings=256, initializer_range=0.1, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = build_speech_lm(speech_lm_config(backbone, SMOKE_LAYOUT))
    with torch.no_grad():
        model.lm_head.bias.normal_(0, 0.3)
        model.lm_head.bias[SMOKE_LAYOUT.speech_tokens:] = -4.0  # stop ids unlikely: the tiny model speaks a while
        for skipped in model.model.layers[2:4]:
            skipped.self_attn.o_proj.weight.zero_()
            skipped.mlp.down_proj.weight.mul_(5.0)

    return Target(model, SMOKE_LAYOUT, WordHashTokenizer(SMOKE_LAYOUT.text_rows), {"target": "smoke", "target_seed": seed})


def checkpoint_target(folder: Path, device: str) -> Target:
    """The official checkpoint folder's speech LM (float32 weights; autocast lowers the precision) and tokenizer."""
    from ...backends.cosyvoice2.frontend import load_text_tokenizer
    from ...backends.cosyvoice2.llm import load_speech_lm

    model = load_speech_lm(folder, dtype=torch.float32, device=device)
    return Target(model, layout_of(model), load_text_tokenizer(folder), {"target": Path(folder).name})

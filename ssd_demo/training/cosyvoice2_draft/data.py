"""`--data FILE`: the paper's loss, cross-entropy on speech a user has, instead of distillation.

The file is JSON Lines, one utterance a line, its speech already tokenized with CosyVoice 2's speech
tokenizer (`speech_tokenizer_v2.onnx`, 25 tokens a second; ids 0-6560):

    {"text": "The cat sat on the mat.", "speech_tokens": [1234, 88, ...]}
    {"text": "...", "speech_tokens": [...], "prompt_text": "a voice clip's transcript", "prompt_speech_tokens": [...]}

A line without a prompt is prompted cross-lingually ([sos, text, task]: how the official LM is trained);
with `prompt_text` and `prompt_speech_tokens` it is prompted zero-shot in that voice, as the app speaks. The
prompt is the backend's own (`prompts.backend_prompt`); the utterance's speech tokens and the end of speech
follow it, and the draft learns to predict each of them (next-token cross-entropy, `draft.LOSSES`).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from ...errors import InputError
from .prompts import CROSS_LINGUAL, backend_prompt, text_ids, voice_of


def read_data(path: Path, target) -> list[dict]:
    """The file's utterances as training examples: {"prompt", "generated" (the speech tokens and the end of
    speech), "text_count", "voice"}, in the file's order."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    layout = target.layout
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: not JSON ({error})") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError(f"{where}: expected an object with \"text\" and \"speech_tokens\"")
        speech = _speech_tokens(record.get("speech_tokens"), layout, where, "speech_tokens")
        if not speech:
            raise InputError(f"{where}: \"speech_tokens\" is empty")
        voice, kind = CROSS_LINGUAL, "cross_lingual"
        if "prompt_text" in record or "prompt_speech_tokens" in record:
            prompt_speech = _speech_tokens(record.get("prompt_speech_tokens"), layout, where, "prompt_speech_tokens")
            if not isinstance(record.get("prompt_text"), str) or not prompt_speech:
                raise InputError(f"{where}: a voice prompt needs both \"prompt_text\" and \"prompt_speech_tokens\"")
            voice, kind = voice_of(text_ids(target, record["prompt_text"]), prompt_speech), "data"
        try:
            prompt, count = backend_prompt(target, record["text"], voice)
        except ValueError as error:  # the backend's TextError: nothing to say, markup, too long
            raise InputError(f"{where}: {error}") from None
        examples.append({"prompt": prompt, "generated": speech + [layout.end_of_speech], "text_count": count,
                         "voice": {"kind": kind}})
    return examples


def data_fingerprint(path: Path) -> int:
    return zlib.crc32(path.read_bytes())


def _speech_tokens(value, layout, where: str, name: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and 0 <= t < layout.speech_tokens for t in value):
        raise InputError(f"{where}: \"{name}\" must be a list of speech token ids from 0 to {layout.speech_tokens - 1}")
    return list(value)

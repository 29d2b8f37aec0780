"""The training prompts, built by the backend itself, and the voices a run prompts with.

The app always speaks zero-shot: [sos, transcript + text, task, the clip's speech tokens]. Every training
prompt is built by `CosyVoice2Backend.prompt_ids` (the same normalisation, tokenizer and layout as the app),
with the voice as its default voice: a voice with a transcript gives the zero-shot prompt, a voice without
one the cross-lingual [sos, text, task]. The LM reads only a voice's transcript and speech tokens, so a
voice here needs no encoders: an earlier generation of the same run is one (its text as the transcript, its
speech tokens as the clip's), and so is the backend's default voice when the run has it. A generation cut
short by --max-new-tokens says less than its transcript; without a cap (the default) most end with a stop id.
"""

from __future__ import annotations

import random

import torch

from ...backends.cosyvoice2.backend import CosyVoice2Backend
from ...backends.cosyvoice2.frontend import VoiceFeatures

SPEECH_TOKENS_PER_SECOND = 25
#: The longest voice prompt the app takes (its `max_prompt_seconds`), in speech tokens.
MAX_VOICE_TOKENS = int(CosyVoice2Backend.max_prompt_seconds * SPEECH_TOKENS_PER_SECOND)


def voice_of(transcript_tokens, speech_tokens) -> VoiceFeatures:
    """A voice as the speech LM sees it (transcript and speech tokens; no mel, no speaker embedding)."""
    return VoiceFeatures(tuple(int(t) for t in transcript_tokens), tuple(int(t) for t in speech_tokens),
                         torch.zeros(0, 80), torch.zeros(0))


#: No voice in the LM: the official cross-lingual input [sos, text, task].
CROSS_LINGUAL = voice_of((), ())


def backend_prompt(target, text: str, voice: VoiceFeatures = CROSS_LINGUAL) -> tuple[list[int], int]:
    """(prompt ids, text tokens) exactly as the backend builds them for `text` spoken in `voice`."""
    backend = CosyVoice2Backend(tokenizer=target.tokenizer, layout=target.layout, flow=None, hift=None,
                                default_voice=voice)
    prompt = backend.prompt_ids(text)
    return list(prompt), prompt.text_count


def text_ids(target, text: str) -> list[int]:
    """`text`'s text tokens as the backend reads a text (or a voice's transcript): normalised, tokenized."""
    prompt, count = backend_prompt(target, text)
    return [token - target.layout.text_offset for token in prompt[1: 1 + count]]


def generated_voice(item: dict, layout) -> VoiceFeatures:
    """An earlier generation as a voice: its text as the transcript, its speech tokens (no stop id) as the clip."""
    speech = [t for t in item["generated"] if t < layout.speech_tokens]
    return voice_of(item["text_ids"], speech)


def usable_as_voice(item: dict, layout) -> bool:
    speech = sum(t < layout.speech_tokens for t in item["generated"])
    return 0 < speech <= MAX_VOICE_TOKENS


def choose_voice(items: list[dict], index: int, seed: int, zero_shot_fraction: float,
                 default_voice: VoiceFeatures | None, default_voice_share: float, layout) -> tuple[VoiceFeatures, dict]:
    """Text `index`'s voice, from its own seed and the generations before it (so the same however often the
    run stopped): zero-shot with `zero_shot_fraction`, then the default voice (when there is one) with
    `default_voice_share`, else an earlier generation; cross-lingual otherwise, or while none is usable yet.
    Returns (voice, its record: {"kind": "cross_lingual" | "default" | "generation", "from": index})."""
    rng = random.Random(seed * 1_000_003 + index)
    if rng.random() >= zero_shot_fraction:
        return CROSS_LINGUAL, {"kind": "cross_lingual"}
    if default_voice is not None and rng.random() < default_voice_share:
        return default_voice, {"kind": "default"}
    candidates = [j for j in range(index) if usable_as_voice(items[j], layout)]
    if not candidates:
        return CROSS_LINGUAL, {"kind": "cross_lingual"}
    source = rng.choice(candidates)
    return generated_voice(items[source], layout), {"kind": "generation", "from": source}


def prompt_mix(items: list[dict]) -> dict[str, int]:
    """How many prompts of each kind: cross-lingual, zero-shot with the default voice, with a generation's
    (or, with --data, a data line's) voice."""
    mix = {"cross_lingual": 0, "default": 0, "generation": 0}
    for item in items:
        kind = item.get("voice", {"kind": "cross_lingual"})["kind"]
        mix[kind] = mix.get(kind, 0) + 1
    return mix

"""A tiny, deterministic stand-in voice for tests that must not depend on trained weights.

Two small random `LlamaForCausalLM` models built locally from fixed seeds (a target and
a one-layer draft, plus an exact copy of the target as a second draft whose every token
is accepted), a character-level "text front end", and a "codec" that turns each speech
token into a short tone. Nothing is downloaded; building it takes well under a second.
"""

from __future__ import annotations

import numpy as np
import torch
from support import tiny_models
from transformers import LlamaForCausalLM

from ssd_demo.config import DecodingConfig
from ssd_demo.backends.registry import Preset, register
from ssd_demo.speech.backend import Backend
from ssd_demo.speech.synthesis import Synthesizer, TextError

FIRST_CHAR = 32  # printable ASCII ' '..'~' -> ids 0..94
TEXT_IDS = 95
SEPARATOR_ID = 96  # ends the text, starts the speech
SPEECH_OFFSET = 100
SPEECH_TOKENS = 64
EOS_ID = SPEECH_OFFSET + SPEECH_TOKENS  # 164
VOCAB_SIZE = 168
TOKEN_SECONDS = 0.04
TOY_KEY = "toy"


class ToyBackend(Backend):
    """Characters in, one 40 ms tone per speech token out (every hook at its default)."""

    name = "toy"
    sample_rate = 16_000
    max_text_chars = 120
    eos_token_id = EOS_ID
    licence = "MIT (random test weights)"

    def __init__(self, max_new_tokens: int = 48):
        self.max_new_tokens = max_new_tokens

    def allowed_token_ids(self) -> list[int]:
        return list(range(SPEECH_OFFSET, SPEECH_OFFSET + SPEECH_TOKENS)) + [EOS_ID]

    def default_config(self) -> DecodingConfig:
        return DecodingConfig(draft_len=3, beta=0.2, temperature=1.0, max_new_tokens=self.max_new_tokens, seed=0)

    def prompt_ids(self, text: str, voice_prompt=None) -> list[int]:
        text = text.strip()
        if not text:
            raise TextError("The text is empty: type a sentence to synthesise.")
        if len(text) > self.max_text_chars:
            raise TextError(f"The text is {len(text)} characters long; the limit is {self.max_text_chars}.")
        bad = sorted({c for c in text if not FIRST_CHAR <= ord(c) < FIRST_CHAR + TEXT_IDS})
        if bad:
            raise TextError(f"The toy voice only reads printable ASCII; cannot read {''.join(bad)!r}.")
        # Tiny random models barely attend to the text, so end the prompt with a speech token
        # derived from the whole text: different texts then give different token streams.
        primer = SPEECH_OFFSET + sum((i + 1) * ord(c) for i, c in enumerate(text)) % SPEECH_TOKENS
        return [ord(c) - FIRST_CHAR for c in text] + [SEPARATOR_ID, primer]

    def tokens_to_audio(self, tokens: list[int]) -> np.ndarray:
        speech = [t - SPEECH_OFFSET for t in tokens if SPEECH_OFFSET <= t < SPEECH_OFFSET + SPEECH_TOKENS]
        n = int(self.sample_rate * TOKEN_SECONDS)
        time = np.arange(n) / self.sample_rate
        envelope = np.hanning(n)
        tones = [0.3 * envelope * np.sin(2 * np.pi * (150 + 12 * code) * time) for code in speech]
        return np.concatenate(tones).astype(np.float32) if tones else np.zeros(n, dtype=np.float32)


def tiny_llama(layers: int, seed: int, hidden: int = 32) -> LlamaForCausalLM:
    model = tiny_models.tiny_llama(seed, vocab=VOCAB_SIZE, layers=layers, width=hidden, init=0.02)
    # Random init gives near-uniform outputs; sharper logits make acceptance vary like a real
    # pair's, and a zero end-token row keeps utterances a few dozen tokens long.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        model.lm_head.weight[EOS_ID] = 0.0
    return model.eval()


def build_toy_synthesizer(max_new_tokens: int = 48) -> Synthesizer:
    target = tiny_llama(layers=2, seed=1234)
    small = tiny_llama(layers=1, seed=99)
    copy = tiny_llama(layers=2, seed=1234)  # same seed, same weights: every drafted token is accepted
    return Synthesizer(ToyBackend(max_new_tokens), target, {"small": small, "copy": copy}, default_draft="small")


def register_toy_preset(key: str = TOY_KEY, max_new_tokens: int = 48) -> Preset:
    """Register the toy voice in the preset registry (idempotent) and return its preset."""
    preset = Preset(
        key=key,
        label="Toy voice (tests)",
        description="Random tiny models and tone 'audio' for fast tests.",
        licence="MIT",
        drafts=("small", "copy"),
        default_draft="small",
        loader=lambda device: build_toy_synthesizer(max_new_tokens),
    )
    register(preset)
    return preset

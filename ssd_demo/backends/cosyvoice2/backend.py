"""CosyVoice 2 as a `synthesis.Backend`: prompts, the official length and sampling rules, token2wav.

Zero-shot is how CosyVoice 2 is used: every utterance imitates a voice prompt (a clip and its
transcript). The prompt is [sos, transcript + text tokens, task, the clip's speech tokens]; the speech
LM continues with speech tokens until a stop id, at least 2 and at most 20 per text token (the
official bounds); sampling is repetition-aware (RAS) with the official settings, handed to both
decoders as a prefix distribution so that exact speculative sampling stays exact. The flow model
then turns the generated tokens, conditioned on the clip's tokens, mel and speaker embedding, into a
mel spectrogram, and HiFT into 24 kHz audio.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np
import torch

from ... import text as text_frontend
from ...config import DecodingConfig
from ...errors import InvalidSettingError, TextError
from ...repetition_aware import RepetitionAwareSampling
from ...synthesis import TextChunk, VoicePrompt
from .frontend import PromptEncoders, VoiceFeatures, text_tokens
from .llm import SpeechVocabLayout

LICENCE = "CosyVoice 2 weights: Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B)"
MIN_TOKEN_TEXT_RATIO, MAX_TOKEN_TEXT_RATIO = 2, 20  # speech tokens per text token, as the official inference


def spell_out_numbers(text: str) -> str:
    """Every run of digits as words ("1955" -> "one thousand, nine hundred and fifty-five"), as the
    official front end does for English when no normaliser package is installed: the model was trained on
    spoken-form text. (With the optional `wetext` normaliser installed, the official front end also reads
    dates, currencies and units; that is not reproduced here.)"""
    import inflect

    engine = inflect.engine()
    return re.sub(r"\d+", lambda match: engine.number_to_words(match.group(0)), text)


@dataclass
class CosyVoice2Backend:
    tokenizer: object
    layout: SpeechVocabLayout
    flow: object  # flow.CosyVoice2Flow
    hift: object  # hift.HiFTVocoder
    default_voice: VoiceFeatures
    encoders: PromptEncoders | None = None
    name: str = "cosyvoice2"
    sample_rate: int = 24000
    max_text_chars: int = 3000
    #: Text tokens per chunk, as the official front end splits paragraphs (at most 80 tokens).
    chunk_tokens: int = 80
    licence: str = LICENCE
    supports_voice_prompt: bool = True
    max_prompt_seconds: float = 10.0  # 3-10 s is how CosyVoice 2 is prompted (its tokenizer takes up to 30 s)
    ras: RepetitionAwareSampling = field(default_factory=RepetitionAwareSampling)
    flow_steps: int = 10
    _voices: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._remember(self.default_voice)

    # -- Backend protocol -------------------------------------------------------------

    @property
    def eos_token_id(self) -> int:
        return self.layout.end_of_speech

    def allowed_token_ids(self) -> list[int]:
        return list(range(self.layout.speech_rows))  # every output id: speech tokens and the three stop ids

    def default_config(self) -> DecodingConfig:
        # RAS replaces temperature / top-k / top-p (it truncates itself); the paper's SSD setting.
        return DecodingConfig(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=MAX_TOKEN_TEXT_RATIO * self.chunk_tokens,
                              eos_token_id=list(self.layout.stop_ids), draft_len=3, beta=0.4, acceptance="ssd")

    def prompt_ids(self, text: str, voice_prompt: VoicePrompt | None = None) -> list[int]:
        voice = self.voice(voice_prompt)
        tokens = self._text_tokens(spell_out_numbers(text))
        return self.layout.prompt_ids(list(voice.transcript_tokens) + tokens, voice.speech_tokens)

    def plan_generation(self, prompt: list[int], config: DecodingConfig, voice_prompt: VoicePrompt | None = None):
        """The official length bounds for this prompt's text, and RAS (with the end id masked until the
        minimum) unless greedy decoding was asked for: (config, prefix distribution or None)."""
        voice = self.voice(voice_prompt)
        text_count = prompt.index(self.layout.task_id) - 1 - len(voice.transcript_tokens)
        config = config.with_(max_new_tokens=min(config.max_new_tokens, MAX_TOKEN_TEXT_RATIO * text_count + 1))
        if config.temperature == 0:
            return config, None
        if config.temperature != 1.0 or config.top_k or config.top_p < 1.0:
            raise InvalidSettingError(
                "CosyVoice 2 samples the way it was published (repetition-aware sampling with top-p 0.8 and top-k 25 "
                f"built in): leave temperature at 1 (or 0 for greedy), top-k at 0 and top-p at 1; got temperature "
                f"{config.temperature}, top-k {config.top_k}, top-p {config.top_p}")
        ras = RepetitionAwareSampling(self.ras.top_p, self.ras.top_k, self.ras.win_size, self.ras.tau_r,
                                      stop_ids=(self.layout.end_of_speech,), min_len=MIN_TOKEN_TEXT_RATIO * text_count)
        return config, ras

    def split_text(self, text: str) -> list[TextChunk]:
        text = self._check_text(text)
        count = lambda piece: len(text_tokens(self.tokenizer, piece))  # noqa: E731
        if count(text) <= self.chunk_tokens:
            return [TextChunk(text)]
        return [TextChunk(c.text, c.pause_after_ms) for c in text_frontend.split_text(text, budget=self.chunk_tokens, count=count)]

    def tokens_to_audio(self, tokens: list[int], prompt_ids: list[int] | None = None) -> np.ndarray:
        speech = [t for t in tokens if t < self.layout.speech_tokens]  # stop ids are not sounds
        if not speech:
            return np.zeros(0, dtype=np.float32)
        voice = self.default_voice if prompt_ids is None else self._voice_of(prompt_ids)
        with torch.inference_mode():
            mel = self.flow.inference(speech, voice.speech_tokens, voice.mel, voice.speaker_embedding,
                                      n_timesteps=self.flow_steps)
            # The vocoder's noise from a fixed seed (the official draws from torch's global generator):
            # the same tokens give the same audio, so AR and speculative runs compare on their tokens.
            generator = torch.Generator(device=mel.device).manual_seed(0)
            audio = self.hift.inference(mel, generator=generator)
        audio = audio[0] if isinstance(audio, tuple) else audio
        return audio.reshape(-1).float().cpu().numpy()

    # -- voice prompts ------------------------------------------------------------------

    def voice(self, voice_prompt: VoicePrompt | None) -> VoiceFeatures:
        """The default voice, or a clip's features (encoded once per clip and transcript)."""
        if voice_prompt is None:
            return self.default_voice
        key = hashlib.sha1(np.ascontiguousarray(voice_prompt.audio, dtype=np.float32).tobytes()
                           + f"{voice_prompt.sample_rate}|{voice_prompt.transcript}".encode()).hexdigest()
        if key not in self._voices:
            if self.encoders is None:
                raise TextError("this CosyVoice 2 setup cannot encode a new voice prompt (no prompt encoders)")
            transcript = self._text_tokens(voice_prompt.transcript, what="voice prompt transcript")
            features = self.encoders.encode(voice_prompt.audio, voice_prompt.sample_rate, transcript)
            self._voices[key] = self._remember(features)
        return self._voices[key]

    def _remember(self, features: VoiceFeatures) -> VoiceFeatures:
        self._voices[("tokens", features.speech_tokens)] = features
        return features

    def _voice_of(self, prompt_ids: list[int]) -> VoiceFeatures:
        speech = tuple(prompt_ids[prompt_ids.index(self.layout.task_id) + 1:])
        return self._voices.get(("tokens", speech), self.default_voice)

    # -- helpers ----------------------------------------------------------------------

    def _text_tokens(self, text: str, what: str = "text") -> list[int]:
        tokens = text_tokens(self.tokenizer, self._check_text(text, what))
        if not tokens:
            raise TextError(f"the {what} has nothing to say")
        return tokens

    def _check_text(self, text: str, what: str = "text") -> str:
        if not isinstance(text, str) or not text.strip():
            raise TextError(f"the {what} is empty")
        text = " ".join(text.split())
        if len(text) > self.max_text_chars:
            raise TextError(f"the {what} has {len(text)} characters; the limit is {self.max_text_chars}")
        if "<|" in text and "|>" in text:
            raise TextError(f"the {what} contains token markup like '<|...|>'; remove it")
        return text


__all__ = ["CosyVoice2Backend", "LICENCE"]

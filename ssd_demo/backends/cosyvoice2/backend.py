"""CosyVoice 2 as a `synthesis.Backend`: prompts, the official length and sampling rules, token2wav.

Zero-shot is how CosyVoice 2 is used: every utterance imitates a voice prompt (a clip and its
transcript). The prompt is [sos, transcript + text tokens, task, the clip's speech tokens]; the speech
LM continues with speech tokens until a stop id, at least 2 and at most 20 per text token (the
official bounds; how the minimum is kept is `SAMPLING_RULES`); sampling is repetition-aware (RAS) with the official settings, handed to both
decoders as a prefix distribution so that exact speculative sampling stays exact. The flow model
then turns the generated tokens, conditioned on the clip's tokens, mel and speaker embedding, into a
mel spectrogram, and HiFT into 24 kHz audio.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ...config import DecodingConfig
from ...errors import InvalidSettingError, ModelLoadError, TextError
from ...engine.repetition_aware import RepetitionAwareSampling
from ...speech.backend import Backend
from ...speech.synthesis import TextChunk, VoicePrompt
from .frontend import PromptEncoders, VoiceFeatures, text_tokens
from .llm import SpeechVocabLayout
from .text_norm import (NORMALISER_MODES, check_mode, clean_text, has_words, normalize, normalize_english, speakable_chunks,
                        split_paragraph)


LICENCE = "CosyVoice 2 weights: Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B)"
MIN_TOKEN_TEXT_RATIO, MAX_TOKEN_TEXT_RATIO = 2, 20  # speech tokens per text token, as the official inference
#: Which official sampling code the backend follows; the two differ in how the minimum length is kept and in
#: RAS's re-draw.
#: "head": the official code since 2026-02-11 (commit 0e62489, "simply code"): before the minimum length only
#:   the end id (6561) is masked, before the draw, so the two other stop ids (6562, 6563) may end an utterance
#:   early; RAS's re-draw excludes the over-repeated token (since 2026-02-04, commit f2ddcbe, "fix ras").
#: "release": the code CosyVoice 2 was released with and the SSD paper ran: before the minimum length a draw of
#:   any stop id (6561-6563) is thrown away and drawn again, so none can come early; RAS's re-draw may
#:   return the over-repeated token. For reproducing the paper's numbers.
SAMPLING_RULES = ("head", "release")


@dataclass(frozen=True)
class EndMaskedUntilMinLength:
    """The model's own distribution with the given stop ids out of reach until `min_len` tokens (the
    official bound, which its RAS path applies too): what greedy decoding takes the argmax of."""

    masked_until_min_len: tuple[int, ...]
    min_len: int

    def __call__(self, scores: torch.Tensor, prefixes: list[list[int]]) -> torch.Tensor:
        scores = scores.float().clone()
        for row, prefix in enumerate(prefixes):
            if len(prefix) < self.min_len:
                scores[row, list(self.masked_until_min_len)] = float("-inf")
        return torch.softmax(scores, dim=-1)


class VoicedPrompt(list):
    """A prompt's ids (a plain list to every decoder) carrying the voice it was built for and the number of
    its text tokens. Ids alone do not name a voice: a clip without a transcript puts none of itself in
    the LM's prompt, so two such clips give the same ids for the same text, and token2wav must still
    condition each on its own clip."""

    __slots__ = ("voice", "text_count")

    def __init__(self, ids, voice: VoiceFeatures, text_count: int):
        super().__init__(ids)
        self.voice, self.text_count = voice, text_count

    def __reduce__(self):  # pickled (a worker process) with its voice, not as a bare list
        return VoicedPrompt, (list(self), self.voice, self.text_count)


DEFAULT_VOICE_KEY = "default"


@dataclass
class CosyVoice2Backend(Backend):
    tokenizer: object
    layout: SpeechVocabLayout
    flow: object  # flow.CosyVoice2Flow
    hift: object  # hift.HiFTVocoder
    default_voice: VoiceFeatures | None  # spoken without a clip of the user's
    encoders: PromptEncoders | None = None
    name: str = "cosyvoice2"
    sample_rate: int = 24000
    max_text_chars: int = 3000
    #: Text tokens per chunk, as the official front end splits paragraphs (80, or longer while under 60).
    chunk_tokens: int = 80
    licence: str = LICENCE
    supports_voice_prompt: bool = True
    max_prompt_seconds: float = 10.0  # 3-10 s is how CosyVoice 2 is prompted (its tokenizer takes up to 30 s)
    ras: RepetitionAwareSampling = field(default_factory=RepetitionAwareSampling)
    flow_steps: int = 10
    #: The official sampling code followed (SAMPLING_RULES): "head" (today's) or "release" (the paper's).
    rules: str = "head"
    #: How text is read (NORMALISER_MODES): "default" (the project's English readings) or "official" (the
    #: official procedure, `wetext` for English too, for reproducing published numbers). Chinese goes through
    #: `wetext` in both; the default reads prices without trailing zeros and keeps a space before a Latin word.
    text_normalizer: str = "default"
    text_normalizers = NORMALISER_MODES  # a class attribute, not a field
    #: Clips kept encoded, and prompts whose voice is remembered for token2wav (least recently used go).
    max_voices: int = 16
    max_prompts: int = 256
    _voices: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    #: (prompt ids, voice key) -> (voice, text tokens): for callers that pass a prompt on as a plain list.
    _prompt_voices: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    #: Chunks `split_text` gave, already spoken form: `prompt_ids` does not normalise them again (the official
    #: never does).
    _spoken: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)  # both caches; requests run concurrently

    def __post_init__(self) -> None:
        if self.rules not in SAMPLING_RULES:
            raise InvalidSettingError(f"CosyVoice 2 sampling rules must be one of {', '.join(SAMPLING_RULES)}; got {self.rules!r}")
        check_mode(self.text_normalizer)

    # -- Backend --------------------------------------------------------------------

    @property
    def eos_token_id(self) -> tuple[int, ...]:
        return self.layout.stop_ids  # any of the three ends the utterance, as in the official loop

    def allowed_token_ids(self) -> list[int]:
        return list(range(self.layout.speech_rows))  # every output id: speech tokens and the three stop ids

    def default_config(self) -> DecodingConfig:
        # RAS replaces temperature / top-k / top-p (it truncates itself); the paper's SSD setting. The length
        # is bounded per chunk by its text (plan_generation); this cap only bounds a chunk of 100+ tokens.
        return DecodingConfig(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=2048,
                              eos_token_id=list(self.layout.stop_ids), draft_len=3, beta=0.4, acceptance="ssd")

    def split_text(self, text: str, text_normalizer: str | None = None) -> list[TextChunk]:
        """The official front end (`speakable_chunks`, in `text_normalizer`'s mode, else the backend's); chunks
        follow each other with no added pause (the official joins their audio as it comes)."""
        mode = check_mode(text_normalizer or self.text_normalizer)
        count = lambda piece: len(text_tokens(self.tokenizer, piece))  # noqa: E731
        chunks = speakable_chunks(self._check_text(text), count, max_tokens=self.chunk_tokens, mode=mode)
        if not chunks:
            raise TextError(_nothing_to_say("text"))
        with self._lock:
            for chunk in chunks:
                self._spoken[chunk] = None
                self._spoken.move_to_end(chunk)
            while len(self._spoken) > self.max_prompts:
                self._spoken.popitem(last=False)
        return [TextChunk(chunk) for chunk in chunks]

    def prompt_ids(self, text: str, voice_prompt: VoicePrompt | None = None) -> VoicedPrompt:
        """[sos, transcript + text, task, the clip's speech tokens]; a voice prompt without a transcript
        is used as the official cross-lingual mode does: the clip's voice in the flow model only.

        The ids come back as a `VoicedPrompt`, which carries its voice to `plan_generation` and
        `tokens_to_audio` (two clips without transcripts give equal ids for the same text)."""
        key = self._voice_key(voice_prompt)
        voice = self.voice(voice_prompt)
        tokens = self._text_tokens(text)
        llm_speech = voice.speech_tokens if voice.transcript_tokens else ()
        prompt = VoicedPrompt(self.layout.prompt_ids(list(voice.transcript_tokens) + tokens, llm_speech), voice, len(tokens))
        with self._lock:
            record_key = (tuple(prompt), key)
            self._prompt_voices[record_key] = (voice, len(tokens))
            self._prompt_voices.move_to_end(record_key)
            while len(self._prompt_voices) > self.max_prompts:
                self._prompt_voices.popitem(last=False)
        return prompt

    def plan_generation(self, prompt: list[int], config: DecodingConfig, voice_prompt: VoicePrompt | None = None):
        """The official length bounds for this prompt's text (2 to 20 speech tokens per text token) and
        RAS with the minimum kept as `rules` says (SAMPLING_RULES: "head" masks the end id only, "release"
        keeps every stop id out); greedy (temperature 0, our addition: the official always samples) takes
        the argmax under the same minimum. Returns (config, prefix distribution)."""
        _, text_count = self._prompt_record(prompt, voice_prompt)
        config = config.with_(max_new_tokens=min(config.max_new_tokens, MAX_TOKEN_TEXT_RATIO * text_count))
        min_len = min(MIN_TOKEN_TEXT_RATIO * text_count, config.max_new_tokens - 1)
        release = self.rules == "release"
        end = self.layout.stop_ids if release else (self.layout.end_of_speech,)
        if config.temperature == 0:
            return config, EndMaskedUntilMinLength(end, min_len)
        if config.temperature != 1.0 or config.top_k or config.top_p < 1.0:
            raise InvalidSettingError(
                "CosyVoice 2 samples the way it was published (repetition-aware sampling with top-p 0.8 and top-k 25 "
                f"built in): leave temperature at 1 (or 0 for greedy), top-k at 0 and top-p at 1; got temperature "
                f"{config.temperature}, top-k {config.top_k}, top-p {config.top_p}")
        if release:  # drawn again until not a stop id: their mass removed after RAS, not masked before it
            return config, replace(self.ras, masked_until_min_len=(), redrawn_until_min_len=end, redraw_may_repeat=True,
                                   min_len=min_len)
        return config, replace(self.ras, masked_until_min_len=end, min_len=min_len)

    def tokens_to_audio(self, tokens: list[int], prompt_ids: list[int] | None = None) -> np.ndarray:
        speech = [t for t in tokens if t < self.layout.speech_tokens]  # stop ids are not sounds
        if not speech:
            return np.zeros(0, dtype=np.float32)
        voice = self.default_voice if prompt_ids is None else self._prompt_record(prompt_ids)[0]
        with torch.inference_mode():
            mel = self.flow.inference(speech, voice.speech_tokens, voice.mel, voice.speaker_embedding,
                                      n_timesteps=self.flow_steps)
            # The vocoder's noise from a fixed seed (the official draws from torch's global generator):
            # the same tokens give the same audio, so AR and speculative runs compare on their tokens.
            generator = torch.Generator(device=mel.device).manual_seed(0)
            audio, _ = self.hift.inference(mel, generator=generator)
        return audio.reshape(-1).float().cpu().numpy()

    # -- voice prompts ------------------------------------------------------------------

    def voice(self, voice_prompt: VoicePrompt | None) -> VoiceFeatures:
        """The default voice, or a clip's features (encoded once per clip and transcript)."""
        if voice_prompt is None:
            if self.default_voice is None:
                raise ModelLoadError("this CosyVoice 2 setup has no default voice: give a voice clip and its transcript")
            return self.default_voice
        key = self._voice_key(voice_prompt)
        with self._lock:
            features = self._voices.get(key)
            if features is not None:
                self._voices.move_to_end(key)
                return features
        if self.encoders is None:
            raise ModelLoadError("this CosyVoice 2 setup has no prompt encoders, so it cannot take a new voice clip")
        transcript = voice_prompt.transcript.strip()
        tokens = self._text_tokens(transcript, "voice prompt transcript") if transcript else []
        features = self.encoders.encode(voice_prompt.audio, voice_prompt.sample_rate, tokens)  # outside the lock: slow
        with self._lock:
            self._voices[key] = features
            self._voices.move_to_end(key)
            while len(self._voices) > self.max_voices:
                self._voices.popitem(last=False)
        return features

    @staticmethod
    def _voice_key(voice_prompt: VoicePrompt | None) -> str:
        if voice_prompt is None:
            return DEFAULT_VOICE_KEY
        return hashlib.sha1(np.ascontiguousarray(voice_prompt.audio, dtype=np.float32).tobytes()
                            + f"{voice_prompt.sample_rate}|{voice_prompt.transcript}".encode()).hexdigest()

    def _prompt_record(self, prompt: list[int], voice_prompt: VoicePrompt | None = None) -> tuple[VoiceFeatures, int]:
        """The voice and text length of a prompt this backend built (token2wav needs that voice's clip):
        carried by the prompt itself, or, for a prompt passed on as a plain list, remembered under its ids
        and its voice (`voice_prompt`; when it is not known, the ids must belong to one voice only)."""
        if isinstance(prompt, VoicedPrompt):
            return prompt.voice, prompt.text_count
        ids = tuple(prompt)
        with self._lock:
            if voice_prompt is not None:
                record = self._prompt_voices.get((ids, self._voice_key(voice_prompt)))
                records = [] if record is None else [record]
            else:
                records = [record for (known, _), record in self._prompt_voices.items() if known == ids]
        if not records:
            raise ValueError("this prompt was not built by this CosyVoice 2 backend (or it was forgotten): "
                             "build it with prompt_ids() first")
        if len(records) > 1:
            raise ValueError("these prompt ids were built for more than one voice (clips without a transcript): "
                             "pass on the prompt prompt_ids() returned, which carries its voice")
        return records[0]

    # -- helpers ----------------------------------------------------------------------

    def _text_tokens(self, text: str, what: str = "text") -> list[int]:
        """The text checked as typed (its length before numbers become words), normalised, tokenised;
        refused as `split_text` refuses it: text without a word (punctuation alone) has nothing to say."""
        text = self._check_text(text, what)
        with self._lock:
            spoken = text if text in self._spoken else None
        spoken = spoken if spoken is not None else normalize(text, self.text_normalizer)
        tokens = text_tokens(self.tokenizer, spoken) if has_words(spoken) else []
        if not tokens:
            raise TextError(_nothing_to_say(what))
        return tokens

    def _check_text(self, text: str, what: str = "text") -> str:
        """Refusals only: the official English front end keeps the text's own spacing."""
        if text is not None and not isinstance(text, str):
            raise TextError(f"the {what} must be a string, got {type(text).__name__}")
        if not text or not text.strip():
            raise TextError(f"the {what} is empty")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (e.g. invalid UTF-8 on a command line)
            raise TextError(f"the {what} contains characters that are not valid Unicode") from None
        text = clean_text(text)  # never spoken; a tokenizer would keep them
        if len(text) > self.max_text_chars:
            raise TextError(f"the {what} has {len(text)} characters; the limit is {self.max_text_chars}")
        if "<|" in text and "|>" in text:
            raise TextError(f"the {what} contains token markup like '<|...|>'; remove it")
        return text


def _nothing_to_say(what: str) -> str:
    return f"the {what} has nothing to say (only punctuation)"


__all__ = ["CosyVoice2Backend", "EndMaskedUntilMinLength", "LICENCE", "NORMALISER_MODES", "SAMPLING_RULES",
           "VoicedPrompt",
           "normalize", "normalize_english",
           "speakable_chunks", "split_paragraph"]

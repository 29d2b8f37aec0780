"""Llasa (HKUSTAudio/Llasa-1B, -3B, -8B): Llama models that speak XCodec2 tokens.

The three sizes share one tokenizer: Llama 3's 128,256 text tokens, 8 Llasa control
tokens and 65,536 speech tokens `<|s_0|>` .. `<|s_65535|>`, one per XCodec2 code
(a single FSQ codebook, 50 codes per second at 16 kHz). So Llasa-1B can draft for the
larger ones with no training.

Prompt (as on the model cards): the tokenizer's chat template applied to
    user:      "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>{text}<|TEXT_UNDERSTANDING_END|>"
    assistant: "<|SPEECH_GENERATION_START|>"   (continue_final_message=True)
The model then writes speech tokens and ends with `<|SPEECH_GENERATION_END|>`.
Voice cloning puts the reference transcript before the text and the reference clip's
codes right after `<|SPEECH_GENERATION_START|>`, so the model continues that voice; as on
the model cards, the clip's codes are decoded together with the generated ones and the
clip's part of the waveform is then cut off.

Nothing here assumes the real ids: they are read from the tokenizer and the codec
config when the backend is built, so tiny test models with the same token names work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch
import torchaudio

from ..config import DecodingConfig
from .. import text as text_frontend
from ..errors import InputError, ModelLoadError, TextError
from ..speech.backend import Backend
from ..speech.streaming import CodecWindows, WindowCodec
from ..speech.synthesis import TextChunk, VoicePrompt

USER_PREFIX = "Convert the text to speech:"
TEXT_START = "<|TEXT_UNDERSTANDING_START|>"
TEXT_END = "<|TEXT_UNDERSTANDING_END|>"
SPEECH_START = "<|SPEECH_GENERATION_START|>"
SPEECH_END = "<|SPEECH_GENERATION_END|>"
#: Llasa's eight control tokens (they sit between the Llama vocabulary and the speech tokens).
CONTROL_TOKENS = (
    "<|TEXT_GENERATION_START|>",
    "<|TEXT_GENERATION_END|>",
    TEXT_START,
    TEXT_END,
    SPEECH_START,
    SPEECH_END,
    "<|SPEECH_UNDERSTANDING_START|>",
    "<|SPEECH_UNDERSTANDING_END|>",
)
LICENCE = "CC-BY-NC-4.0 (Llasa and XCodec2 weights: non-commercial use only)"
CODEC_SAMPLE_RATE = 16_000
#: Llasa was trained on sequences of at most 2048 tokens (prompt + speech).
MAX_CONTEXT = 2048
#: The Llama 3.2 chat template writes "Today Date: <today>" into every prompt; pinning the
#: template's own fallback date keeps prompts (and seeded outputs) the same on every day.
PINNED_DATE = "26 Jul 2024"

_MARKUP = re.compile(r"<\|[^|<>]{1,64}\|>")


def speech_token(code: int) -> str:
    return f"<|s_{code}|>"


@dataclass(frozen=True)
class SpeechVocab:
    """Where the speech tokens and the end token live in a Llasa-style tokenizer."""

    first_id: int  # id of <|s_0|>
    size: int  # number of speech tokens (= codec codebook size)
    end_id: int  # id of <|SPEECH_GENERATION_END|>

    def is_speech(self, token_id: int) -> bool:
        return self.first_id <= token_id < self.first_id + self.size

    def allowed_ids(self) -> list[int]:
        return list(range(self.first_id, self.first_id + self.size)) + [self.end_id]


def missing_llasa_tokens(tokenizer) -> list[str]:
    """Llasa token names that `tokenizer` lacks (empty list: Llasa-shaped)."""
    vocab = tokenizer.get_vocab()
    return [t for t in (*CONTROL_TOKENS, speech_token(0)) if t not in vocab]


def speech_vocab(tokenizer, codebook_size: int) -> SpeechVocab:
    """Locate the speech tokens; raises ValueError unless `<|s_0|>`..`<|s_{n-1}|>` are contiguous ids."""
    missing = missing_llasa_tokens(tokenizer)
    if missing:
        raise ModelLoadError(
            "this tokenizer is not a Llasa tokenizer: it lacks " + ", ".join(missing[:5])
            + (" ..." if len(missing) > 5 else "")
        )
    vocab = tokenizer.get_vocab()
    first = vocab[speech_token(0)]
    last_name = speech_token(codebook_size - 1)
    if vocab.get(last_name) != first + codebook_size - 1:
        raise ModelLoadError(
            f"the tokenizer's speech tokens do not match the codec: expected {last_name} at id "
            f"{first + codebook_size - 1} (codebook of {codebook_size} codes starting at {first}), "
            f"found {vocab.get(last_name)}"
        )
    return SpeechVocab(first_id=first, size=codebook_size, end_id=vocab[SPEECH_END])


def codec_codebook_size(codec) -> int:
    return int(np.prod(codec.config.quantization_levels))


def to_mono_float(audio: np.ndarray) -> np.ndarray:
    """Float32 mono in [-1, 1] from int PCM or float, mono or (samples, channels) / (channels, samples)."""
    audio = np.asarray(audio)
    if audio.ndim == 2:
        channel_axis = 0 if audio.shape[0] < audio.shape[1] else 1
        audio = audio.mean(axis=channel_axis)
    elif audio.ndim != 1:
        raise InputError(f"voice prompt audio must be 1-D or 2-D, got shape {audio.shape}")
    if np.issubdtype(audio.dtype, np.integer):
        audio = audio.astype(np.float32) / float(np.iinfo(audio.dtype).max)
    return np.clip(audio.astype(np.float32), -1.0, 1.0)


@dataclass
class LlasaBackend(Backend):
    """Llasa prompt format, speech-token mask and XCodec2 codec (a `Backend`)."""

    tokenizer: object
    codec: object  # transformers.Xcodec2Model
    feature_extractor: object  # transformers.Xcodec2FeatureExtractor
    name: str = "llasa"
    max_text_chars: int = 3000
    #: Longer text is spoken in chunks of whole sentences (phrases, words when a sentence is longer) of at
    #: most this many characters: about 20 s of speech, inside the 2,048-token context even after a 10 s
    #: voice prompt. Shorter text is one chunk, decoded exactly as the model card does.
    chunk_chars: int = 300
    # 10 s (501 codes) still leaves about 1,400 tokens (28 s) of speech in Llasa's 2048-token context.
    max_prompt_seconds: float = 10.0
    min_prompt_seconds: float = 0.5
    max_context: int = MAX_CONTEXT
    #: None renders today's date like the model card's code does; a string pins it.
    date_string: str | None = PINNED_DATE
    temperature: float = 0.8
    top_p: float = 1.0
    # As the model cards' max_length=2048: up to the context, which the Synthesizer cuts to what the
    # prompt leaves (result.generation.stats.finish_reason == "length" when a run reaches it).
    max_new_tokens: int = MAX_CONTEXT
    licence: str = LICENCE
    supports_voice_prompt: bool = True
    #: How `Synthesizer.stream` decodes codes window by window: 1 s windows, 0.5 s of context before and
    #: 0.2 s of lookahead after each, 40 ms crossfades (`ssd_demo.speech.streaming`).
    windows: CodecWindows = field(default_factory=CodecWindows)
    vocab: SpeechVocab = field(init=False)

    def __post_init__(self) -> None:
        self.vocab = speech_vocab(self.tokenizer, codec_codebook_size(self.codec))
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ModelLoadError("the Llasa tokenizer has no chat template; the prompt format cannot be built")

    # -- Backend --------------------------------------------------------------------

    @property
    def sample_rate(self) -> int:
        return int(getattr(self.codec.config, "sampling_rate", CODEC_SAMPLE_RATE))

    @property
    def eos_token_id(self) -> int:
        return self.vocab.end_id

    @property
    def hop_length(self) -> int:
        return int(self.codec.config.hop_length)

    def allowed_token_ids(self) -> list[int]:
        return self.vocab.allowed_ids()

    def default_config(self) -> DecodingConfig:
        # The model cards sample with temperature 0.8 and top_p 1 (no nucleus cut).
        return DecodingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=0,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.vocab.end_id,
            allowed_token_ids=self.allowed_token_ids(),
        )

    def prompt_text(
        self, text: str, voice_prompt: VoicePrompt | None = None, prompt_codes: list[int] | None = None
    ) -> str:
        """The prompt as a string: the chat template applied exactly as the model card does."""
        text = self._check_text(text)
        if voice_prompt is not None:
            transcript = self._check_text(voice_prompt.transcript, what="voice prompt transcript")
            text = _join_transcript(transcript, text)
            if prompt_codes is None:
                prompt_codes = self.encode_prompt(voice_prompt)
        speech_prefix = "".join(speech_token(c) for c in (prompt_codes or []))
        chat = [
            {"role": "user", "content": f"{USER_PREFIX}{TEXT_START}{text}{TEXT_END}"},
            {"role": "assistant", "content": f"{SPEECH_START}{speech_prefix}"},
        ]
        kwargs = {} if self.date_string is None else {"date_string": self.date_string}
        return self.tokenizer.apply_chat_template(chat, tokenize=False, continue_final_message=True, **kwargs)

    def prompt_ids(self, text: str, voice_prompt: VoicePrompt | None = None) -> list[int]:
        rendered = self.prompt_text(text, voice_prompt)
        # The template already wrote <|begin_of_text|>; adding special tokens again would double it.
        ids = list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
        budget = self.max_context - len(ids)
        if budget < 50:  # less than a second of speech left
            raise TextError(
                f"the prompt takes {len(ids)} of Llasa's {self.max_context} tokens, leaving no room for speech: "
                "shorten the text or the voice prompt"
            )
        return ids

    def tokens_to_codes(self, tokens: list[int]) -> list[int]:
        """Generated ids -> XCodec2 codes: stop at the end token, subtract the id of <|s_0|>."""
        codes = []
        for token in tokens:
            if token == self.vocab.end_id:
                break
            if not self.vocab.is_speech(token):
                raise ValueError(f"token id {token} is not a speech token (expected ids {self.vocab.first_id}.."
                                 f"{self.vocab.first_id + self.vocab.size - 1} or the end token)")
            codes.append(token - self.vocab.first_id)
        return codes

    def prompt_codes(self, prompt_ids: list[int]) -> list[int]:
        """The voice prompt's codes in a prompt: the speech tokens after <|SPEECH_GENERATION_START|>."""
        codes: list[int] = []
        for token in reversed(prompt_ids):
            if not self.vocab.is_speech(token):
                break
            codes.append(token - self.vocab.first_id)
        return codes[::-1]

    @torch.inference_mode()
    def codes_to_audio(self, codes: list[int], context: list[int] = ()) -> np.ndarray:
        """Waveform of `codes`; `context` codes are decoded before them and their samples cut off.

        Why the context: the codec's decoder is not causal, so the first frames of speech that
        continues a voice prompt sound right only when decoded after that prompt (the model cards
        decode prompt + generated codes and cut the prompt's part).
        """
        if not codes:
            return np.zeros(0, dtype=np.float32)
        device = next(self.codec.parameters()).device
        tensor = torch.tensor([*context, *codes], dtype=torch.long, device=device).view(1, 1, -1)
        audio = self.codec.decode(audio_codes=tensor).audio_values[0, 0, len(context) * self.hop_length :]
        return np.clip(audio.float().cpu().numpy(), -1.0, 1.0).astype(np.float32)

    def tokens_to_audio(self, tokens: list[int], prompt_ids: list[int] | None = None) -> np.ndarray:
        """Generated ids -> waveform; with `prompt_ids`, decoded after the voice prompt's codes they hold."""
        context = self.prompt_codes(prompt_ids) if prompt_ids is not None else []
        return self.codes_to_audio(self.tokens_to_codes(tokens), context)

    def window_codec(self, prompt_ids: list[int] | None = None) -> WindowCodec:
        """XCodec2 as streaming decodes it: windows of codes decoded as the tokens come (`WindowFeed`); a voice
        prompt's codes are the first window's context."""
        context = tuple(self.prompt_codes(prompt_ids)) if prompt_ids is not None else ()
        return WindowCodec(self.tokens_to_codes, lambda before, part: self.codes_to_audio(part, before),
                           self.hop_length, self.windows, context)

    # -- voice cloning ----------------------------------------------------------------

    def prepare_prompt_audio(self, voice_prompt: VoicePrompt) -> np.ndarray:
        """Mono float32 at the codec's rate, after checking the length limits."""
        audio = to_mono_float(voice_prompt.audio)
        if voice_prompt.sample_rate <= 0:
            raise InputError(f"voice prompt sample rate must be positive, got {voice_prompt.sample_rate}")
        seconds = len(audio) / voice_prompt.sample_rate
        if seconds > self.max_prompt_seconds:
            raise InputError(
                f"the voice prompt is {seconds:.1f} s long; the limit is {self.max_prompt_seconds:g} s "
                "(trim it to one or two sentences and give the matching transcript)"
            )
        if seconds < self.min_prompt_seconds:
            raise InputError(
                f"the voice prompt is {seconds:.2f} s long; it needs at least {self.min_prompt_seconds:g} s"
            )
        if voice_prompt.sample_rate != self.sample_rate:
            audio = torchaudio.functional.resample(
                torch.from_numpy(audio), voice_prompt.sample_rate, self.sample_rate
            ).numpy()
        return audio.astype(np.float32)

    def prompt_code_count(self, samples: int) -> int:
        """Codes the original XCodec2 encoder gives a clip: it pads by hop - samples % hop, so len // hop + 1."""
        return samples // self.hop_length + 1

    @torch.inference_mode()
    def encode_prompt(self, voice_prompt: VoicePrompt) -> list[int]:
        """The reference clip as XCodec2 codes (50 per second), as many as the original encoder gives."""
        audio = self.prepare_prompt_audio(voice_prompt)
        inputs = self.feature_extractor(audio, sampling_rate=self.sample_rate, return_tensors="pt")
        device = next(self.codec.parameters()).device
        dtype = next(self.codec.parameters()).dtype
        inputs = {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device)) for k, v in inputs.items()}
        codes = self.codec.encode(**inputs).audio_codes[0, 0]
        # transformers' extractor pads one sample, then to whole frames: the same frame count as the
        # original encoder for one clip. Its codes mask would drop the last, partly padded frame,
        # which the original (and so Llasa's training data) keeps.
        count = self.prompt_code_count(len(audio))
        if codes.shape[0] < count:
            raise ValueError(f"the codec gave {codes.shape[0]} codes for {len(audio)} samples; expected {count}")
        return [int(c) for c in codes[:count].tolist()]

    def split_text(self, text: str) -> list[TextChunk]:
        """Whole text when it fits one chunk, else sentence-sized chunks (joined, they give the text back)."""
        text = self._check_text(text)
        if len(text) <= self.chunk_chars:
            return [TextChunk(text)]
        chunks = text_frontend.split_text(text, budget=self.chunk_chars, count=len)
        return [TextChunk(c.text, c.pause_after_ms) for c in chunks]

    # -- helpers ----------------------------------------------------------------------

    def _check_text(self, text: str, what: str = "text") -> str:
        if not isinstance(text, str) or not text.strip():
            raise TextError(f"the {what} is empty")
        text = " ".join(text.split())
        if len(text) > self.max_text_chars:
            raise TextError(f"the {what} has {len(text)} characters; the limit is {self.max_text_chars}")
        if _MARKUP.search(text):
            # Tokens like <|s_12|> or <|eot_id|> would be read as control tokens, not text.
            raise TextError(f"the {what} contains token markup like {_MARKUP.search(text).group(0)!r}; remove it")
        return text


def _join_transcript(transcript: str, text: str) -> str:
    """The model card concatenates transcript and text; add a space between words of spaced scripts."""
    if transcript[-1].isascii() and text[0].isascii():
        return f"{transcript} {text}"
    return transcript + text

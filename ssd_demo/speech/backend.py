"""The backend contract: what a model family gives the `Synthesizer`, every hook declared here with its default.

A backend knows one model family (the embedded voice, Llasa, CosyVoice 2): how text becomes prompt ids, which
ids are speech tokens, and how generated ids become a waveform. It subclasses `Backend`, gives the five required
attributes and four required methods, and overrides only the hooks where it differs from the default; callers
call every hook plainly, never asking whether a backend has it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from .results import TextChunk, VoicePrompt

if TYPE_CHECKING:
    import torch

    from ..config import DecodingConfig
    from ..engine.run_state import ForcedTokens
    from .streaming import WindowCodec


class Backend(ABC):
    """What a model family must provide (the abstract members) and may change (the hooks, with their defaults).
    One module per family in `ssd_demo.backends`."""

    # -- required ------------------------------------------------------------------------------------------------
    name: str  # the family's name ("embedded", "llasa", "cosyvoice2"; the vLLM engine serves "llasa")
    sample_rate: int  # of the waveforms `tokens_to_audio` returns
    max_text_chars: int  # the longest text a request may give
    eos_token_id: int | tuple[int, ...]  # the id(s) that end an utterance
    licence: str  # the weights' licence, as reports and the app show it

    @abstractmethod
    def allowed_token_ids(self) -> list[int]:
        """Ids the LM may generate: speech tokens plus end of speech."""

    @abstractmethod
    def default_config(self) -> DecodingConfig:
        """Sampling settings the model was trained/published with."""

    @abstractmethod
    def prompt_ids(self, text: str, voice_prompt: VoicePrompt | None = None) -> list[int]:
        """Prompt token ids for `text`; raises TextError for text it cannot speak."""

    @abstractmethod
    def tokens_to_audio(self, tokens: list[int]) -> np.ndarray:
        """Generated ids (end token allowed) -> float32 mono waveform at `sample_rate`.

        Backends with voice cloning also take `prompt_ids=` (the prompt, voice prompt included), which
        `Synthesizer` passes when a voice prompt was given: their codecs decode the generated speech after the
        prompt's; so do backends whose `codec_reads_prompt` is true, for every chunk."""

    # -- hooks: each default is what a backend that does not override it gets ---------------------------------------
    #: Whether its codec reads each chunk's prompt (the embedded voice's codes relative to the phoneme being said):
    #: `Synthesizer` then passes `prompt_ids=` to `tokens_to_audio` and `window_codec` for every chunk.
    codec_reads_prompt: bool = False
    #: Whether it clones a voice prompt (a clip and its transcript); without, a voice prompt is refused.
    supports_voice_prompt: bool = False
    #: The longest voice prompt it takes, in seconds (None: only the app's own upload cap).
    max_prompt_seconds: float | None = None
    #: The context its model was trained on, prompt included (Llasa: 2048): the length limit is cut to fit.
    #: None: no bound but the length limit.
    max_context: int | None = None
    #: Modes it can read text in (CosyVoice 2: "default", "official"), passed to `split_text`; () for one way.
    text_normalizers: tuple[str, ...] = ()
    #: The mode it reads text in when none is asked for (one of `text_normalizers`).
    text_normalizer: str = "default"

    def split_text(self, text: str) -> list[TextChunk]:
        """`text` as the chunks decoded one after another (each with the pause after it). Default: one chunk, no
        pause. A backend with `text_normalizers` also takes `text_normalizer=` (None: its own)."""
        return [TextChunk(text)]

    def left_out(self, text: str) -> str:
        """What of `text` the voice will not speak (characters it cannot read), for the page to say. Default: ""."""
        return ""

    def plan_generation(self, prompt: list[int], config: DecodingConfig,
                        voice_prompt: VoicePrompt | None = None) -> tuple[DecodingConfig, object | None]:
        """This chunk's settings and its sampling, for both decoders alike: (config, prefix distribution or None)
        (CosyVoice 2: 2-20 speech tokens per text token, repetition-aware sampling as a distribution of the
        prefix). Default: the config unchanged, no prefix distribution (the config's own sampling)."""
        return config, None

    def forced_tokens(self, prompt: list[int]) -> ForcedTokens | None:
        """Tokens the decoders insert rather than sample, by position (the embedded voice's phoneme schedule; the
        `ForcedTokens` protocol of `engine.run_state`). Default: None, every token sampled."""
        return None

    def window_codec(self, prompt_ids: list[int] | None = None) -> WindowCodec | None:
        """The codec as streaming decodes it: windows of codes decoded while the LM goes on (`WindowCodec`;
        `prompt_ids` when a voice prompt was given). Default: None, each chunk's audio decoded once it is done."""
        return None

    def acoustic_embeddings(self, vocab_size: int) -> torch.Tensor | None:
        """[vocab_size, d]: what each token sounds like (the embedded voice: its codec centroids), for the pcg
        rule's groups. Default: None, the target's input embeddings are used (the PCG paper's choice)."""
        return None

    def token_label(self, token: int) -> str:
        """A token's name in the app's token view (a code number, a phoneme). Default: the id."""
        return str(token)

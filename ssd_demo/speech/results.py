"""What speaking a text is made of and gives back: the voice prompt, the text's chunks and their prompts (the
`Script` both decoders of a comparison share), and the results, per chunk and whole. Plain data; the work is
`synthesis.Synthesizer`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import DecodingConfig
from ..engine.results import GenerationResult


@dataclass
class VoicePrompt:
    """A reference clip to imitate (backends that support voice cloning)."""

    audio: np.ndarray  # float32 mono
    sample_rate: int
    transcript: str


@dataclass(frozen=True)
class TextChunk:
    """A piece of the text decoded on its own, and the silence that follows it in the audio."""

    text: str
    pause_after_ms: int = 0


@dataclass(frozen=True)
class Script:
    """A text as its backend speaks it: the chunks, and each chunk's prompt ids (voice prompt included).
    Built once (`Synthesizer.script`), it can be decoded any number of times: AR and speculative alike."""

    chunks: list[TextChunk]
    prompts: list[list[int]]


@dataclass
class ChunkResult:
    text: str
    generation: GenerationResult
    config: DecodingConfig  # as decoded: the chunk's seed, the length limit cut to the model's context
    start_sample: int  # where this chunk's audio starts in the joined audio
    end_sample: int
    lm_seconds: float
    codec_seconds: float

    @property
    def seed(self) -> int:
        """This chunk's decoding seed: the run's seed + the chunk's index."""
        return self.config.seed


@dataclass
class SynthesisResult:
    text: str
    mode: str  # "ar" | "speculative" | "draft" (the draft model alone)
    audio: np.ndarray  # float32 mono in [-1, 1]
    sample_rate: int
    generation: GenerationResult  # all chunks combined (see results.combine)
    config: DecodingConfig
    lm_seconds: float
    codec_seconds: float
    chunks: list[ChunkResult] = field(default_factory=list)
    #: A stream whose codec decoded while the LM ran (`Synthesizer.stream`): seconds from the start of decoding
    #: to its last audio. None where the codec decoded after the LM (then `total_seconds` is the wall time).
    wall_seconds: float | None = None

    @property
    def duration_seconds(self) -> float:
        return len(self.audio) / self.sample_rate if self.sample_rate else 0.0

    @property
    def total_seconds(self) -> float:
        """LM + codec seconds: the work done, whether or not the two overlapped."""
        return self.lm_seconds + self.codec_seconds

    @property
    def elapsed_seconds(self) -> float:
        """How long the run took until its last audio: the wall time when LM and codec overlapped, else both's sum."""
        return self.wall_seconds if self.wall_seconds is not None else self.total_seconds

    @property
    def real_time_factor(self) -> float:
        """Elapsed seconds per second of audio (< 1 is faster than real time)."""
        return self.elapsed_seconds / self.duration_seconds if self.duration_seconds > 0 else float("inf")

"""Audio as it is produced: the pieces a `Synthesizer.stream()` yields, and codec windows with overlap.

A stream yields `AudioPiece`s in order; joined end to end they are the whole clip (`synthesize`
gives the same samples for the same seed: it consumes the same stream with whole-chunk decoding).
Each piece says when it was ready (seconds since the stream started) and what it cost, so the time
to first audio and the real-time factor of every piece come with the audio.

A backend can stream inside a chunk, window by window (`CodecWindows`; the embedded voice and Llasa's XCodec2):
a window is decoded with `context` codes before it and `lookahead` codes after it (its decoder is not causal:
both sides shape a window's samples); the first `crossfade` samples of a window are blended linearly with the
previous window's lookahead, so joins carry no click. Windows may grow (`max_window`): the first is short, so that
first audio comes early, and later ones are longer, so that the context and lookahead decoded twice cost less.
Windowed samples differ from one whole-chunk decode by a small amount that the tests bound
(`tests/speech/test_streaming.py`); the tokens are identical. `WindowFeed` decodes the windows of a chunk whose
codes are still being generated: fed each round's tokens, it decodes every window whose lookahead has arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # synthesis imports this module
    from .synthesis import SynthesisResult


@dataclass
class AudioPiece:
    """One piece of a streamed clip: its samples (a chunk's pause included) and what it cost."""

    index: int  # 0, 1, ... in the order the pieces are played
    chunk_index: int  # the text chunk it belongs to
    text: str  # that chunk's text
    audio: np.ndarray  # float32 mono
    sample_rate: int
    start_sample: int  # where it starts in the whole clip
    ready_seconds: float  # since the stream started: when this piece could be played
    processing_seconds: float  # LM + codec seconds spent producing it
    tokens_so_far: int  # tokens generated up to the end of this piece's chunk (forced ones included)
    target_calls_so_far: int

    @property
    def duration_seconds(self) -> float:
        return len(self.audio) / self.sample_rate if self.sample_rate else 0.0

    @property
    def real_time_factor(self) -> float:
        """Processing seconds per second of this piece's audio (< 1: produced faster than it plays)."""
        return self.processing_seconds / self.duration_seconds if self.duration_seconds > 0 else float("inf")


class SynthesisStream:
    """Iterate for `AudioPiece`s; once exhausted, `result` is the whole `SynthesisResult`."""

    def __init__(self, pieces: Iterator[AudioPiece]) -> None:
        self._pieces = pieces
        self.pieces: list[AudioPiece] = []
        self.result: SynthesisResult | None = None

    def __iter__(self) -> "SynthesisStream":
        return self

    def __next__(self) -> AudioPiece:
        try:
            piece = next(self._pieces)
        except StopIteration as stop:  # the generator's return value is the whole result
            self.result = stop.value
            raise StopIteration from None
        self.pieces.append(piece)
        return piece

    def close(self) -> None:
        """Stop early (the rest is never decoded)."""
        self._pieces.close()

    def run(self) -> "SynthesisResult":
        """Consume the rest and return the whole result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    @property
    def time_to_first_audio(self) -> float | None:
        return self.pieces[0].ready_seconds if self.pieces else None

    def timing(self) -> dict:
        """The stream's latency figures (JSON-ready)."""
        return stream_timing(self.pieces)


def stream_timing(pieces: list[AudioPiece]) -> dict:
    """Time to first audio, when the last piece was ready, and each piece's timing."""
    return {
        "time_to_first_audio": pieces[0].ready_seconds if pieces else None,
        "time_to_last_audio": pieces[-1].ready_seconds if pieces else None,
        "pieces": [{"index": p.index, "chunk": p.chunk_index, "start_seconds": p.start_sample / p.sample_rate,
                    "duration_seconds": p.duration_seconds, "ready_seconds": p.ready_seconds,
                    "processing_seconds": p.processing_seconds,
                    "real_time_factor": p.real_time_factor if np.isfinite(p.real_time_factor) else None}
                   for p in pieces],
    }


def playback_schedule(pieces: list[AudioPiece]) -> list[tuple[float, float]]:
    """(start, end) seconds on the stream's own clock at which each piece plays, when playback starts
    with the first piece and never runs ahead of production: a piece starts when it is ready or when
    the previous one ends, whichever is later (a gap is a stall the listener hears)."""
    schedule, clock = [], 0.0
    for piece in pieces:
        start = max(piece.ready_seconds, clock)
        clock = start + piece.duration_seconds
        schedule.append((start, clock))
    return schedule


def measured_timeline(pieces: list[AudioPiece], sample_rate: int) -> np.ndarray:
    """The clip as a listener of the live stream heard it: silence until each piece was ready, then the
    piece (`playback_schedule`). The "replay at measured speed" track."""
    schedule = playback_schedule(pieces)
    if not pieces:
        return np.zeros(0, dtype=np.float32)
    total = int(round(schedule[-1][1] * sample_rate))
    track = np.zeros(total, dtype=np.float32)
    for piece, (start, _) in zip(pieces, schedule):
        offset = int(round(start * sample_rate))
        segment = piece.audio[: max(total - offset, 0)]
        track[offset : offset + len(segment)] = segment
    return track


@dataclass(frozen=True)
class CodecWindows:
    """How a codec backend decodes a growing list of codes window by window (see the module notes).

    window, context, lookahead: in codes (XCodec2: 50 codes per second, 320 samples each);
    crossfade: samples, at most lookahead * hop; max_window: codes, when windows grow (None: every window is
    `window` long). Growing windows start at W and grow by `growth` of what came before, up to `max_window` (the
    window starting at code s is max(W, s * growth) long): the first audio waits for W + lookahead codes, and later
    windows decode their context and lookahead less often. A window is ready before the audio before it has played
    only while codes come faster than real time by more than `growth` (1.5x for 0.5): a server whose streams share
    the CPU near real time needs a small growth, or its listeners hear gaps.
    """

    window: int = 50  # 1 s of speech per piece
    context: int = 25  # 0.5 s decoded before a window (cut off)
    lookahead: int = 10  # 0.2 s decoded after it: the first audio waits for W + lookahead codes
    crossfade: int = 640  # 40 ms at 16 kHz
    max_window: int | None = None
    growth: float = 0.5  # a growing window's length: this share of the codes before it

    def __post_init__(self) -> None:
        if self.window < 1 or self.context < 0 or self.lookahead < 0 or self.crossfade < 0:
            raise ValueError(f"codec windows need window >= 1 and non-negative context, lookahead, crossfade: {self}")
        if self.max_window is not None and self.max_window < self.window:
            raise ValueError(f"codec windows need max_window >= window: {self}")
        if self.growth < 0:
            raise ValueError(f"codec windows need a growth of at least 0: {self}")

    def length_at(self, start: int) -> int:
        """How many codes the window that starts at code `start` covers."""
        if self.max_window is None:
            return self.window
        return min(max(self.window, int(start * self.growth)), self.max_window)


def decode_windows(codes: list[int], decode: Callable[[list[int], list[int]], np.ndarray], hop: int,
                   spec: CodecWindows, prompt_codes: list[int] = (), final: bool = True,
                   start: int = 0, tail: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """Decode `codes` from window start `start` on: yields (samples to play, lookahead tail, next start).

    `decode(context_codes, codes)` returns the samples of `codes` decoded after `context_codes` (the
    backend's `codes_to_audio`). A window is decoded only when its lookahead codes exist, or when
    `final` says no more codes will come. `tail` is the previous window's decode of the samples after
    it (its lookahead), blended into the first `crossfade` samples of the next window. Feed the
    returned start and tail back in when more codes arrive.
    """
    n = len(codes)
    prompt_codes = list(prompt_codes)
    while start < n:
        end = min(start + spec.length_at(start), n)
        if end + spec.lookahead > n and not final:
            return
        ahead = min(end + spec.lookahead, n)
        left = max(start - spec.context, 0)
        # Before the first codes, the voice prompt's codes are the context (as in whole-clip decoding).
        context = prompt_codes[max(len(prompt_codes) - (spec.context - (start - left)), 0):] if start - left < spec.context else []
        samples = decode([*context, *codes[left:start]], list(codes[start:ahead]))
        body, after = samples[: (end - start) * hop], samples[(end - start) * hop :]
        if tail is not None and len(tail) and spec.crossfade:
            fade = min(spec.crossfade, len(tail), len(body))
            ramp = np.linspace(0.0, 1.0, fade + 2, dtype=np.float32)[1:-1]
            body = body.copy()
            body[:fade] = (1.0 - ramp) * tail[:fade] + ramp * body[:fade]
        tail = after[: spec.crossfade]
        start = end
        yield body.astype(np.float32), tail, start


@dataclass(frozen=True)
class WindowCodec:
    """A backend's codec as window decoding needs it (`Backend.window_codec`)."""

    codes: Callable[[list[int]], list[int]]  # generated ids -> codec codes, id by id (markers and the end dropped)
    decode: Callable[[list[int], list[int]], np.ndarray]  # (context codes, codes) -> the samples of codes
    hop: int  # samples per code
    spec: CodecWindows
    # The first windows' context: a voice prompt's codes, or a lead-in's (`backends.lead_in`), which the codes
    # function fills as the lead-in is generated, before any code of the chunk comes (read at every window).
    prompt_codes: Sequence[int] = ()


class WindowFeed:
    """One chunk's codec windows, decoded while its tokens are still being generated: `feed` each round's
    committed tokens and it yields the samples of every window whose lookahead has arrived (all that is left
    when `final`). Joined, the samples are `decode_windows` over all the codes at once."""

    def __init__(self, codec: WindowCodec) -> None:
        self.codec = codec
        self.codes: list[int] = []
        self.start = 0  # the next window's first code
        self.tail: np.ndarray | None = None  # the last window's lookahead samples, for the crossfade

    def feed(self, tokens: list[int], final: bool = False) -> Iterator[np.ndarray]:
        self.codes.extend(self.codec.codes(list(tokens)))
        spec = self.codec.spec
        if not final and len(self.codes) < self.start + spec.length_at(self.start) + spec.lookahead:
            return  # the next window's lookahead is not there yet (the common case: checked before any work)
        for samples, self.tail, self.start in decode_windows(self.codes, self.codec.decode, self.codec.hop, spec,
                                                             self.codec.prompt_codes, final, self.start, self.tail):
            yield samples

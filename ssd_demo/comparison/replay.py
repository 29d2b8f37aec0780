"""Both lanes on one clock where they could not decode at once: what each lane told its `LaneSink` is recorded
with when it told it (`Recording`), then both recordings are told to the race's sink together, each event at its
own lane's measured time from one start (`replay_at_pace`), so that the lane that was faster is seen and heard
first, as in a race run at once.

Where the lanes decode one after the other (one core, a custom pair, a model too large to load once per lane, one
GPU), streaming them as they decode would let the second lane start only when the first has ended, whatever their
speeds. A run decoded in one call, where nothing can stream out (ZeroGPU's worker), is recorded afterwards from
its chunks' times (`recording_of`, `replayed_pieces`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..engine.cancellation import StopCheck, check
from ..speech.streaming import AudioPiece
from ..speech.synthesis import SynthesisResult

#: The longest wait between two looks at `should_stop` while a replay waits for its next event (seconds).
STOP_EVERY = 0.05


@dataclass(frozen=True)
class Told:
    """One thing a lane told its sink, `at` seconds after that lane started."""

    at: float
    lane: str
    method: str  # "started" | "counted" | "piece" | "finished": the `LaneSink` method
    args: tuple


class Recording:
    """A `LaneSink` that keeps what each lane tells it and when, on that lane's own clock (from its `started`)."""

    def __init__(self) -> None:
        self.told: list[Told] = []
        self._starts: dict[str, float] = {}

    def _keep(self, lane: str, method: str, *args) -> None:
        start = self._starts.setdefault(lane, time.perf_counter())
        self.told.append(Told(time.perf_counter() - start, lane, method, args))

    def replaying(self) -> None:
        return None

    def started(self, lane: str) -> None:
        self._starts[lane] = time.perf_counter()
        self.told.append(Told(0.0, lane, "started", ()))  # both lanes from one start, AR's told first

    def counted(self, lane: str, tokens: int, calls: int, rejected: int = 0) -> None:
        self._keep(lane, "counted", tokens, calls, rejected)

    def piece(self, lane: str, piece: AudioPiece) -> None:
        self._keep(lane, "piece", piece)

    def finished(self, lane: str, result: SynthesisResult, seconds: float) -> None:
        self._keep(lane, "finished", result, seconds)


def recording_of(lane: str, result: SynthesisResult) -> list[Told]:
    """What a stream of `result` would have told, and when: each piece (with its counts) when it was ready, and
    the end when the run's LM and codec seconds had passed."""
    told = [Told(0.0, lane, "started", ())]
    for piece in replayed_pieces(result):
        told.append(Told(piece.ready_seconds, lane, "counted", (piece.tokens_so_far, piece.target_calls_so_far, 0)))
        told.append(Told(piece.ready_seconds, lane, "piece", (piece,)))
    end = max(result.total_seconds, told[-1].at)
    return [*told, Told(end, lane, "finished", (result, result.total_seconds))]


def replay_at_pace(told: Iterable[Told], sink, should_stop: StopCheck | None = None,
                   lanes: Sequence[str] = ()) -> None:
    """Tell `sink` (a `LaneSink`) everything in `told`, both lanes on one clock from now: each event when its
    lane's measured time has passed (ties in `lanes` order, then as recorded). Raises `Cancelled` between events
    when `should_stop` says so."""
    order = {lane: rank for rank, lane in enumerate(lanes)}
    ranked = sorted(enumerate(told), key=lambda item: (item[1].at, order.get(item[1].lane, len(order)), item[0]))
    check(should_stop)  # stopped while both decoded: nothing is shown as replayed
    sink.replaying()
    start = time.perf_counter()
    for _, event in ranked:
        while (left := event.at - (time.perf_counter() - start)) > 0:
            check(should_stop)
            time.sleep(min(left, STOP_EVERY))
        check(should_stop)
        getattr(sink, event.method)(event.lane, *event.args)


def replayed_pieces(result: SynthesisResult) -> list[AudioPiece]:
    """The pieces a stream of `result` would have yielded, one per chunk and one per pause, each ready
    when its chunk's LM and codec seconds had passed (what a decoded-at-once run can tell)."""
    pieces, clock, tokens, calls = [], 0.0, 0, 0
    for index, chunk in enumerate(result.chunks):
        clock += chunk.lm_seconds + chunk.codec_seconds
        tokens, calls = tokens + len(chunk.generation.tokens), calls + chunk.generation.stats.target_calls
        following = result.chunks[index + 1].start_sample if index + 1 < len(result.chunks) else chunk.end_sample
        spans = [(chunk.text, chunk.start_sample, chunk.end_sample, chunk.lm_seconds + chunk.codec_seconds),
                 ("", chunk.end_sample, following, 0.0)]
        for text, start, end, seconds in spans:
            if end > start or text:
                pieces.append(AudioPiece(index=len(pieces), chunk_index=index, text=text,
                                         audio=result.audio[start:end], sample_rate=result.sample_rate,
                                         start_sample=start, ready_seconds=clock, processing_seconds=seconds,
                                         tokens_so_far=tokens, target_calls_so_far=calls))
    return pieces

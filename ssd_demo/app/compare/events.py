"""The race as a stream of events, for any front end: no Gradio here.

`race_events` runs the race (`run_race`) in a worker thread and yields what happens, in order:
`Started` when a decoder begins, `Piece` for each audio piece as it is decoded (where the lanes decoded apart:
as both are replayed on one clock, `comparison.replay`), `Tick` whenever
`LIVE_EVERY` seconds pass without either (time to redraw the live counters), then one end: `Done` with
the comparison, `Failed` with the error, or `Stopped` with the race as far as it got when `should_stop`
said so (the page's Stop), for its final frame. Closing the iterator stops the decoding within one round (or
the replay between two events) and yields nothing more (nobody is reading).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from ...engine.cancellation import Cancelled, StopCheck
from ...comparison import Comparison, Request
from ...speech.streaming import AudioPiece
from ...speech.synthesis import SynthesisResult
from .race import Race, run_race

#: How often the live counters are redrawn while nothing else happens (seconds).
LIVE_EVERY = 0.25


@dataclass(frozen=True)
class Started:
    """A decoder's run began."""

    lane: str


@dataclass(frozen=True)
class Piece:
    """A piece of a decoder's audio, as soon as it is decoded."""

    lane: str
    piece: AudioPiece


@dataclass(frozen=True)
class Tick:
    """Nothing new for `LIVE_EVERY` seconds: the live counters (`race`) may have moved."""

    race: Race


@dataclass(frozen=True)
class Done:
    """Both runs finished."""

    comparison: Comparison
    race: Race


@dataclass(frozen=True)
class Failed:
    """The race could not run or broke off; `error` says why (a `UserError` for what the user can fix)."""

    error: BaseException


@dataclass(frozen=True)
class Stopped:
    """The race was stopped (`should_stop`) before both runs finished; `race` holds how far each got."""

    race: Race


Event = Started | Piece | Tick | Done | Failed | Stopped


class _Relay:
    """The pipeline's `LaneSink` for a threaded race: updates the race, and queues what the reader
    must see in order (starts and pieces; round counts are read from the race on each `Tick`)."""

    def __init__(self, race: Race, events: queue.Queue) -> None:
        self.race, self.events = race, events

    def replaying(self) -> None:
        self.race.replaying()

    def started(self, lane: str) -> None:
        self.race.started(lane)
        self.events.put(Started(lane))

    def counted(self, lane: str, tokens: int, calls: int, rejected: int = 0) -> None:
        self.race.counted(lane, tokens, calls, rejected)

    def piece(self, lane: str, piece: AudioPiece) -> None:
        self.race.piece(lane, piece)
        self.events.put(Piece(lane, piece))

    def finished(self, lane: str, result: SynthesisResult, seconds: float) -> None:
        self.race.finished(lane, result, seconds)


def race_events(request: Request, should_stop: StopCheck | None = None, race: Race | None = None,
                live_every: float = LIVE_EVERY) -> Iterator[Event]:
    """Race both decoders on `request` in a worker thread and yield its events (see the module's note).

    `race` is the live state to fill (a fresh one when None); `Tick`, `Done` and `Stopped` carry it."""
    race = race if race is not None else Race()
    events: queue.Queue = queue.Queue()
    closed = threading.Event()

    def stop() -> bool:
        return closed.is_set() or (should_stop is not None and should_stop())

    def work() -> None:  # the decoding runs here; the iterator only relays what it produces
        try:
            events.put(Done(run_race(request, race, stop, lanes=_Relay(race, events)), race))
        except BaseException as error:  # noqa: BLE001 - handed to the reader, which reports it
            events.put(Failed(error))

    threading.Thread(target=work, name="ssd-race", daemon=True).start()
    try:
        while True:
            try:
                event = events.get(timeout=live_every)
            except queue.Empty:
                yield Tick(race)
                continue
            if isinstance(event, Failed) and isinstance(event.error, Cancelled):
                race.stop()
                yield Stopped(race)
                return
            yield event
            if isinstance(event, (Done, Failed)):
                return
    finally:
        closed.set()  # a closed page or a cancel: the decoding thread stops within one round

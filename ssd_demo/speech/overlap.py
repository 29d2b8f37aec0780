"""A chunk decoded with its codec overlapping its language model: the LM in a thread of its own, and in the
caller's thread each codec window decoded as soon as the rounds have committed its codes (`WindowFeed`).

Why a thread: the engine's decoders are loops that return when the chunk is done, and the first audio should
not wait for that; the codec is a runtime call that releases the interpreter lock, so the two share a core
well (or use two). The tokens are the decoder's own: the codec only reads what each round committed.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import numpy as np

from ..engine.cancellation import StopCheck
from ..engine.generate import CommitCallback, RoundCallback
from .streaming import WindowFeed

#: generate(should_stop, on_round, on_commit) -> (GenerationResult, DecodingConfig, LM seconds): one chunk's LM.
ChunkLM = Callable[[StopCheck, RoundCallback, CommitCallback], tuple]


def overlapped_chunk(generate: ChunkLM, feed: WindowFeed, silence: Callable[[list[int]], np.ndarray],
                     should_stop: StopCheck | None = None, on_round: RoundCallback | None = None,
                     on_commit: CommitCallback | None = None) -> Generator[tuple, None, tuple]:
    """Yields (samples, codec seconds, 0.0, (the chunk's tokens, target calls) so far) for each codec window as
    its codes are committed, and returns what `generate` returned. A chunk with no speech at all yields
    `silence(tokens)` (the backend's audio of no codes). The LM's errors (`Cancelled` included) are raised here;
    closing this generator stops the LM within one round and waits for it."""
    rounds: queue.SimpleQueue = queue.SimpleQueue()  # each round's committed tokens, then the end
    closed = threading.Event()
    counts = [0, 0]  # the chunk's tokens and target calls after the last round

    def counted(tokens: int, calls: int) -> None:
        counts[:] = tokens, calls
        if on_round is not None:
            on_round(tokens, calls)

    def stop() -> bool:
        return closed.is_set() or (should_stop is not None and should_stop())

    def commit(record) -> None:
        rounds.put(record.committed)
        if on_commit is not None:
            on_commit(record)

    def decode() -> None:
        try:
            rounds.put(_Ended(generate(stop, counted, commit)))
        except BaseException as error:  # noqa: BLE001 - raised again in the reading thread
            rounds.put(_Ended(error=error))

    worker = threading.Thread(target=decode, name="ssd-lm", daemon=True)
    worker.start()
    try:
        ended = None
        while ended is None:
            tokens = []
            for item in _drain(rounds):  # what came since the last look: one feed for many rounds
                if isinstance(item, _Ended):
                    ended = item
                else:
                    tokens.extend(item)
            if ended is not None and ended.error is not None:
                raise ended.error
            for audio, seconds in timed(feed.feed(tokens, final=ended is not None)):
                yield audio, seconds, 0.0, tuple(counts)
        generation = ended.decoded[0]
        if not feed.codes:  # no speech at all
            yield (np.asarray(silence(generation.tokens), dtype=np.float32), 0.0, 0.0,
                   (len(generation.tokens), generation.stats.target_calls))
        return ended.decoded
    finally:
        closed.set()
        worker.join()


def timed(parts: Iterator[np.ndarray]) -> Iterator[tuple[np.ndarray, float]]:
    """(float32 samples, seconds it took to produce them) for each array a generator decodes as it is asked."""
    while True:
        start = time.perf_counter()
        try:
            part = next(parts)
        except StopIteration:
            return
        yield np.asarray(part, dtype=np.float32), time.perf_counter() - start


@dataclass
class _Ended:
    """The LM thread's last word: what `generate` returned, or the error it raised."""

    decoded: tuple | None = None
    error: BaseException | None = None


def _drain(items: queue.SimpleQueue) -> list:
    """Everything queued, waiting for the first item when there is none yet."""
    taken = [items.get()]
    while True:
        try:
            taken.append(items.get_nowait())
        except queue.Empty:
            return taken

"""Cooperative cancellation: long work asks a `StopCheck` once per round and stops with `Cancelled`.

Threads cannot be killed, and a web server that cancels a request only drops its answer: the decoding
loop itself has to notice. Both decoders call `should_stop()` once per round (AR: per token) and the
synthesizer between chunks, so a stopped run frees the model within one round.
"""

from __future__ import annotations

from collections.abc import Callable

#: Returns True when the work should stop now.
StopCheck = Callable[[], bool]


class Cancelled(Exception):
    """The caller stopped the run (the Stop button, a client's cancel); there is nothing to report."""


def never() -> bool:
    return False


def check(should_stop: StopCheck | None) -> None:
    """Raise `Cancelled` when `should_stop` says so (None: never)."""
    if should_stop is not None and should_stop():
        raise Cancelled("stopped")

"""New sessions per network address, for the study server and the listening tab alike.

One address may start `sessions_per_address()` new sessions an hour (SESSIONS_PER_ADDRESS, or
$SSD_DEMO_SESSIONS_PER_ADDRESS; 0 lifts the limit, e.g. behind a proxy that hides the raters' addresses), so
that a script cannot start sessions without end, each with fresh trials and fresh copies of the clips. A
rater id that already has a session of the study (compared case-insensitively, as the store compares rater
ids) is never held back: it resumes its session, or is told it has finished. The address is the caller's
(`jobs.client_address`: the peer, or the last X-Forwarded-For hop behind a trusted proxy only).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping

from ...listening.errors import ListeningError
from .. import jobs
from ...listening.records import SessionRecord
from ...listening.study_store import ListeningStore

SESSIONS_PER_ADDRESS = 60
SESSION_WINDOW_SECONDS = 3600
TOO_MANY_SESSIONS = ("Too many new sessions from your network address in the last hour. If you have started "
                     "this study, continue it in the same browser; otherwise try again later.")


class TooManySessionsError(ListeningError):
    """An address started as many new sessions as it may in the last hour."""


def sessions_per_address(environ: Mapping[str, str] | None = None) -> int:
    """SESSIONS_PER_ADDRESS, or $SSD_DEMO_SESSIONS_PER_ADDRESS when set to a whole number (0: no limit)."""
    value = (os.environ if environ is None else environ).get("SSD_DEMO_SESSIONS_PER_ADDRESS", "").strip()
    return int(value) if value.isdigit() else SESSIONS_PER_ADDRESS


class SessionStarts:
    """When each address started its new sessions, over the last SESSION_WINDOW_SECONDS (kept in memory: a
    restart forgets them)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._starts: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def start(self, store: ListeningStore, study: str, rater_id: str | None, address: str | None,
              begin: Callable[[], SessionRecord]) -> SessionRecord:
        """`begin()` (which starts or resumes the session) unless `address` is at its limit and the rater id has
        no session of `study` yet (TooManySessionsError); a session that `begin` newly made is counted."""
        limit = sessions_per_address()
        earlier = store.rater_sessions(study, rater_id)
        if address and limit and not earlier and self.recent(address) >= limit:
            raise TooManySessionsError(TOO_MANY_SESSIONS)
        session = begin()
        if address and session.session_id not in earlier:
            with self._lock:
                self._starts.setdefault(address, []).append(self._clock())
        return session

    def recent(self, address: str) -> int:
        """How many new sessions the address started in the last hour."""
        cutoff = self._clock() - SESSION_WINDOW_SECONDS
        with self._lock:
            recent = [t for t in self._starts.get(address, []) if t > cutoff]
            if recent:
                self._starts[address] = recent
            else:
                self._starts.pop(address, None)
            return len(recent)


def client_address(request) -> str | None:
    """The client's network address (None when unknown): the peer's, or the last X-Forwarded-For hop only
    behind a trusted proxy (`jobs.client_address`), so that a rater cannot claim a new address per session."""
    host = jobs.client_address(request) if request is not None else None
    return host if isinstance(host, str) and host else None

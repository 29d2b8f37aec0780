"""A clock the test moves by hand, for the stores' rules about time (`ssd_demo.listening.database.Clock`):
"too soon" then means too soon on this clock, whatever the machine's speed."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone


class ManualClock:
    """Starts at a fixed time and moves only when `advance` says so (thread-safe: a server thread reads it)."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

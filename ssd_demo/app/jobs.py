"""What the app does about model jobs in Gradio's queue: who may queue more, and whether a job was stopped.

Gradio has one queue size for every event, so a single client posting synthesis requests in a loop
would fill it and turn listening-test votes away ("Queue is full"). The app therefore sets a large queue
(see `ssd_demo.app.page.QUEUE_MAX_SIZE`) and limits model jobs itself: when a job reaches the model, it is dropped at
once if the same browser session already has `MAX_WAITING_PER_SESSION` more jobs waiting behind it, or
the same address `MAX_WAITING_PER_ADDRESS` (a conference room shares one address, so that cap is
larger). A flood then drains in milliseconds per job, and the client keeps only its newest requests.

Gradio cancels a stopped event's task, but a handler running in a worker thread keeps going; a handler
asks `stop_check()` for a function that turns True once Gradio no longer counts its event as running
(the page's Stop, a client's `job.cancel()`, a closed page) or once the same session called `/stop`
(`request_stop`), which is how an API client stops its own run.

The address is the peer's, or the last X-Forwarded-For hop where a proxy in front adds it (on a Space,
or with SSD_DEMO_TRUSTED_PROXY=1); otherwise a client could claim any address it likes.

Both read Gradio's queue (`Blocks._queue`), which has no public API for this; tests/app/test_app_jobs.py
fails if its shape changes.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Iterator

import gradio as gr
from gradio.context import LocalContext

from ..engine.cancellation import StopCheck, never
from ..errors import UserError

MAX_WAITING_PER_SESSION = 2
MAX_WAITING_PER_ADDRESS = 8


class BusyError(UserError):
    """Too many of this client's jobs are waiting for the model."""

    title = "Busy"


def behind_proxy(environ=None) -> bool:
    """Whether a proxy in front of the app adds X-Forwarded-For (a Space, or SSD_DEMO_TRUSTED_PROXY=1)."""
    env = os.environ if environ is None else environ
    flag = env.get("SSD_DEMO_TRUSTED_PROXY", "").strip().lower()
    return flag in ("1", "true", "yes") if flag else bool(env.get("SPACE_ID"))


def client_address(request, trust_forwarded: bool | None = None) -> str:
    """The client's address: the last X-Forwarded-For hop when a trusted proxy adds it, else the peer."""
    trust = behind_proxy() if trust_forwarded is None else trust_forwarded
    headers = getattr(request, "headers", None) or {}
    forwarded = headers.get("x-forwarded-for", "") if trust and hasattr(headers, "get") else ""
    if forwarded.strip():
        return forwarded.split(",")[-1].strip()
    client = getattr(request, "client", None)
    return getattr(client, "host", "") or ""


def _waiting_events(concurrency_id: str) -> Iterator:
    blocks = LocalContext.blocks.get(None)
    queue = getattr(blocks, "_queue", None)
    waiting = queue.event_queue_per_concurrency_id.get(concurrency_id) if queue is not None else None
    return iter(list(waiting.queue)) if waiting is not None else iter(())


class JobClock:
    """Recent model-job durations, for a "try again in about N s" that means something."""

    def __init__(self, keep: int = 20, default_seconds: float = 10.0) -> None:
        self._seconds: deque[float] = deque(maxlen=keep)
        self._default = default_seconds
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:  # completed jobs only (a refused one says nothing)
        with self._lock:
            self._seconds.append(float(seconds))

    def typical(self) -> float:
        with self._lock:
            return statistics.median(self._seconds) if self._seconds else self._default


CLOCK = JobClock()


def admit(request: gr.Request | None, concurrency_id: str) -> None:
    """Raise BusyError when this client already has too many model jobs waiting behind this one."""
    if request is None:  # called outside a Gradio event (tests, scripts)
        return
    session, address = request.session_hash, client_address(request)
    waiting = list(_waiting_events(concurrency_id))
    same_session = sum(1 for event in waiting if event.session_hash == session)
    same_address = sum(1 for event in waiting if client_address(event.request) == address)
    if same_session >= MAX_WAITING_PER_SESSION or same_address >= MAX_WAITING_PER_ADDRESS:
        wait = round(_jobs_that_will_run(waiting) * CLOCK.typical())
        raise BusyError(
            f"You already have {max(same_session, same_address)} requests waiting for the model, so this one was "
            f"dropped to let other visitors in. Your newest requests still run; try again in about {wait} s."
        )


def _jobs_that_will_run(waiting: list) -> int:
    """Of the waiting jobs, about how many will run: each session's and each address's excess is dropped
    when it comes up."""
    per_address: dict[str, dict[str, int]] = {}
    for event in waiting:
        sessions = per_address.setdefault(client_address(event.request), {})
        sessions[event.session_hash] = sessions.get(event.session_hash, 0) + 1
    return sum(min(sum(min(n, MAX_WAITING_PER_SESSION) for n in sessions.values()), MAX_WAITING_PER_ADDRESS)
               for sessions in per_address.values())


def distrust_forwarded_headers() -> None:
    """Keep uvicorn from taking a client's X-Forwarded-For as its address. By default it trusts the header
    from 127.0.0.1, so anyone connecting locally (or through a local proxy that passes the header on)
    could claim a new address per request; `client_address` reads the header itself, only behind a
    trusted proxy. An operator's own FORWARDED_ALLOW_IPS is left alone."""
    os.environ.setdefault("FORWARDED_ALLOW_IPS", "")


_STOPS: dict[str, float] = {}  # session -> when it last asked to stop (time.monotonic)
_STOPS_LOCK = threading.Lock()


def request_stop(request: gr.Request | None) -> None:
    """`/stop`: stop the runs this session started before now."""
    session = getattr(request, "session_hash", None)
    if session:
        with _STOPS_LOCK:
            _STOPS[session] = time.monotonic()
            if len(_STOPS) > 10_000:  # forget the oldest sessions
                for key in sorted(_STOPS, key=_STOPS.get)[:5_000]:
                    del _STOPS[key]


def stop_check(request: gr.Request | None = None) -> StopCheck:
    """Inside a Gradio handler: a check that turns True once Gradio stopped counting this event as running
    (the Stop button, a client's `job.cancel()`, a closed page) or once `request`'s session called `/stop`
    after the run joined the queue. Outside a handler: never."""
    blocks = LocalContext.blocks.get(None)
    event_id = LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return never
    # A stop counts from when the event joined the queue: a run stopped while it waited stops as it starts.
    event = next((event for job in list(queue.active_jobs) if job for event in job if event._id == event_id), None)
    session, started = getattr(request, "session_hash", None), getattr(event, "enqueue_time", time.monotonic())

    def stopped() -> bool:
        if session is not None and _STOPS.get(session, -1.0) >= started:
            return True
        return not any(event._id == event_id for job in list(queue.active_jobs) if job for event in job)

    return stopped


class timed_job:
    """`with timed_job():` records how long a model job took (for BusyError's estimate)."""

    def __enter__(self) -> "timed_job":
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            CLOCK.record(time.perf_counter() - self._started)

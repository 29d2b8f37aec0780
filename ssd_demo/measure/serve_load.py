"""A load test of the speech server (`python -m ssd_demo serve --bench`): many clients at once, as deployments
see them. Each level sends a bounded number of requests from `concurrency` clients over loopback (server-sent
events, so that every request reports its own tokens and acceptance) and reports per system: time to first
audio (P50/P95/P99, from sending the request to its first audio bytes), stalled streams (a player that starts at
the first audio would have run dry: a piece arrived later than the audio before it lasts, by more than
`STALL_TOLERANCE_S`), real-time factor (wall seconds per second of audio, median), tokens per second over the
level's wall time, acceptance, and refusals (429).
"""

from __future__ import annotations

import base64
import json
import math
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx
import numpy as np

from ..errors import InputError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: How late a piece may arrive after the audio before it has played out before the stream counts as stalled (what a
#: player's jitter buffer hides).
STALL_TOLERANCE_S = 0.1


@dataclass(frozen=True)
class Answer:
    """One request as the client saw it."""

    status: int
    first_audio: float | None  # seconds from sending to the first audio bytes
    seconds: float  # until the last event
    audio_bytes: int
    usage: dict | None  # the server's `ssd` figures of the finished run
    stalled: bool = False  # a player started at the first audio would have run dry before the end


@dataclass(frozen=True)
class LoadRow:
    system: str
    concurrency: int
    requests: int
    refused: int
    first_audio_p50: float
    first_audio_p95: float
    first_audio_p99: float
    real_time_factor: float  # median over requests: wall seconds / audio seconds
    tokens_per_second: float  # every request's tokens / the level's wall time
    acceptance: float | None  # mean over speculative requests
    stalled: int = 0  # served streams that would have run dry (`Answer.stalled`)


def ask(url: str, body: Mapping[str, object], sample_rate: int, timeout: float = 600.0) -> Answer:
    """One request to `/v1/audio/speech` as server-sent events."""
    started = time.perf_counter()
    first, received, usage, stalled = None, 0, None, False
    with httpx.stream("POST", url.rstrip("/") + "/v1/audio/speech", json={**body, "stream_format": "sse"},
                      timeout=timeout) as response:
        if response.status_code != 200:
            response.read()
            return Answer(response.status_code, None, time.perf_counter() - started, 0, None)
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            if event["type"] == "speech.audio.delta":
                now = time.perf_counter() - started
                first = first if first is not None else now
                # played out by now: the audio before this piece, from the first audio on
                stalled = stalled or now - first > received / 2 / sample_rate + STALL_TOLERANCE_S
                received += len(base64.b64decode(event["audio"]))
            elif event["type"] == "speech.audio.done":
                usage = event.get("ssd")
    return Answer(200, first, time.perf_counter() - started, received, usage, stalled)


def run_level(url: str, system: str, settings: Mapping[str, object], texts: Sequence[str], concurrency: int,
              requests: int, sample_rate: int, model: str, deadline: float) -> LoadRow:
    """`requests` requests (texts in turn) from `concurrency` clients; none is sent after `deadline`."""
    todo: queue.Queue[int] = queue.Queue()
    for index in range(requests):
        todo.put(index)
    answers: list[Answer] = []
    lock = threading.Lock()

    def client() -> None:
        while time.perf_counter() < deadline:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            body = {"model": model, "voice": "default", "input": texts[index % len(texts)], **settings}
            answer = ask(url, body, sample_rate)
            with lock:
                answers.append(answer)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return summarise(system, concurrency, answers, wall, sample_rate)


def summarise(system: str, concurrency: int, answers: Sequence[Answer], wall: float, sample_rate: int) -> LoadRow:
    served = [a for a in answers if a.status == 200 and a.first_audio is not None]
    firsts = np.array([a.first_audio for a in served]) if served else np.array([np.nan])
    rtfs = [a.seconds / (a.audio_bytes / 2 / sample_rate) for a in served if a.audio_bytes]
    tokens = sum(a.usage["output_tokens"] for a in served if a.usage)
    accepted = [a.usage["acceptance_rate"] for a in served if a.usage and a.usage["mode"] == "speculative"]
    return LoadRow(system, concurrency, len(answers), sum(1 for a in answers if a.status == 429),
                   *(float(np.percentile(firsts, q)) for q in (50, 95, 99)),
                   float(np.median(rtfs)) if rtfs else float("nan"), tokens / wall if wall > 0 else float("nan"),
                   float(np.mean(accepted)) if accepted else None, sum(1 for a in served if a.stalled))


def check_loopback(url: str) -> None:
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise InputError(f"the load test only calls a server on this machine (127.0.0.1), not {host!r}")


def run_load(url: str, systems: Mapping[str, Mapping[str, object]], texts: Sequence[str], levels: Sequence[int],
             requests: int, sample_rate: int, model: str, max_seconds: float, progress=None) -> list[LoadRow]:
    """Every system at every concurrency level, one level after another (`requests` each, all within
    `max_seconds` overall: a level that runs out of time reports the requests it sent)."""
    check_loopback(url)
    if not texts or requests < 1 or not levels or min(levels) < 1:
        raise InputError("the load test needs texts, at least one request and concurrency levels of at least 1")
    deadline = time.perf_counter() + max_seconds
    rows = []
    for concurrency in levels:
        for system, settings in systems.items():
            rows.append(run_level(url, system, settings, texts, concurrency, requests, sample_rate, model, deadline))
            if progress is not None:
                progress(rows[-1])
    return rows


def load_table(rows: Sequence[LoadRow]) -> list[str]:
    """A Markdown table of the rows."""
    lines = ["| system | clients | requests | refused | first audio P50 / P95 / P99 (s) | stalled | RTF (median) | "
             "tokens/s | acceptance |", "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        if r.requests == 0:  # (`run_load`'s time ran out before this level's turn)
            lines.append(f"| {r.system} | {r.concurrency} | 0 | - | not run: the bench's time (--max-minutes) ran out "
                         "| - | - | - | - |")
            continue
        if math.isnan(r.first_audio_p50):  # every request refused or failed
            lines.append(f"| {r.system} | {r.concurrency} | {r.requests} | {r.refused} | none served | - | - | - | - |")
            continue
        acceptance = "-" if r.acceptance is None else f"{r.acceptance:.2f}"
        lines.append(f"| {r.system} | {r.concurrency} | {r.requests} | {r.refused} | {r.first_audio_p50:.2f} / "
                     f"{r.first_audio_p95:.2f} / {r.first_audio_p99:.2f} | {r.stalled} | {r.real_time_factor:.2f} | "
                     f"{r.tokens_per_second:.0f} | {acceptance} |")
    return lines

"""Both decoders at once, one worker process per lane, each with a core to itself.

Why processes, not threads: between its small model calls the decoding loop is Python, and two threads of one
process wait for each other's interpreter lock (on a 2-core AMD EPYC, racing in two threads made each decoder
1.8-3.4x slower than alone; in two processes pinned to their own cores, within a few per cent on an idle
machine). Each worker loads the preset itself (the embedded voice is small), warms up
once, then decodes the lane it is sent (`decode_lane`, the same code as a lane decoded in the app): its
start, round counts, audio pieces and result come back over one queue, in the order they were made, to the
`LaneSink` of `LaneWorkers.decode`. A stop reaches both workers through one shared event, asked every round.

`concurrent_lanes` says whether a request can race this way: a CPU with at least two cores for this process,
a built-in preset small enough to load twice more (custom pairs live in one session's registry; a large model
would not fit twice), and no ZeroGPU. Where it cannot, the pipeline decodes the lanes one after the other.
No Gradio here.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import pickle
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..engine.cancellation import Cancelled, StopCheck
from ..speech.streaming import AudioPiece
from ..speech.synthesis import SynthesisResult

log = logging.getLogger(__name__)

#: The lanes, in the order the page lists them.
LANES = ("autoregressive", "speculative")
#: A target with more parameters than this is not loaded twice more for a race (memory and start-up time).
MAX_RACE_PARAMETERS = 100_000_000
#: Round counts sent from a worker at most this often (seconds): a count per AR token would slow its loop.
COUNT_EVERY = 0.02
#: How long a race waits for workers still starting before it decodes one lane after the other (seconds).
START_WAIT = 90.0
#: How often an idle worker checks that the app is still there (seconds).
PARENT_CHECK = 1.0


def race_cores() -> list[int]:
    """The cores this process may run on, one per lane (the first two), or [] when there are fewer than two."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no pinning, but two cores still let two processes run at once
        cores = list(range(os.cpu_count() or 1))
    return cores[:2] if len(cores) >= 2 else []


def concurrent_lanes(synthesizer, preset, in_gpu_worker: bool) -> str:
    """"" when both lanes of `preset` can decode at once in worker processes, else why not (the page says it)."""
    if in_gpu_worker or synthesizer.device.type != "cpu":
        return "one GPU runs one decoder at a time"
    if not race_cores():
        return "this machine has one CPU core"
    if preset.owner is not None:
        return "a custom pair is loaded in this session only"
    if sum(p.numel() for p in synthesizer.target.parameters()) > MAX_RACE_PARAMETERS:
        return "the model is too large to load once per lane"
    return ""


def decode_lane(synthesizer, job, lane: str, should_stop: StopCheck | None, lanes) -> SynthesisResult:
    """One lane of `job` (a `pipeline.Job`): decoded at once, or streamed piece by piece to `lanes` (a
    `pipeline.LaneSink`), with the rounds' counts and the drafted tokens rejected so far; in this process or in
    a lane's worker."""
    mode = "ar" if lane == "autoregressive" else "speculative"
    common = dict(mode=mode, config=job.config, draft=job.draft, voice_prompt=job.voice_prompt,
                  should_stop=should_stop, script=job.script)
    if lanes is None:
        return synthesizer.synthesize(job.text, **common)
    rejected = [0]

    def commit(record) -> None:  # called before the round's counts
        rejected[0] += len(record.drafted) - record.accepted

    lanes.started(lane)
    stream = synthesizer.stream(job.text, **common, on_commit=commit,
                                on_progress=lambda tokens, calls: lanes.counted(lane, tokens, calls, rejected[0]))
    for piece in stream:
        lanes.piece(lane, piece)
    lanes.finished(lane, stream.result, stream.result.elapsed_seconds)
    return stream.result



class LaneWorkers:
    """Two worker processes with `preset_key` loaded, one per lane (pinned to their own cores with $SSD_RACE_PIN=1)."""

    def __init__(self, preset_key: str) -> None:
        self.preset_key = preset_key
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch state forked
        self._out = context.Queue()
        self._stop = context.Event()
        self._inboxes = [context.Queue() for _ in LANES]
        self._ready: set[str] = set()
        self._error = ""
        self._lock = threading.Lock()  # one race at a time through these workers
        self._ids = itertools.count(1)
        self.slowdown: dict[str, float] = {}  # per lane, beside the other against alone (`measure_together`)
        # Pinned only when asked ($SSD_RACE_PIN=1): two busy workers on two cores each keep one to themselves anyway,
        # and unpinned, the page's own work (the server, a browser on the same machine) is shared by both lanes
        # instead of slowing whichever lane's core it lands on (browser runs of five races on a 2-core AMD EPYC:
        # the speculative voice heard first in 4 of 4 finished races unpinned, 2 of 4 pinned).
        cores = race_cores() if os.environ.get("SSD_RACE_PIN") == "1" else []
        self._processes = [context.Process(target=_serve, name=f"ssd-lane-{lane}", daemon=True,
                                           args=(lane, preset_key, cores[index] if cores else None,
                                                 self._inboxes[index], self._out, self._stop))
                           for index, lane in enumerate(LANES)]
        with _main_module_hidden():
            for process in self._processes:
                process.start()

    @property
    def ready(self) -> bool:
        self._collect_ready(0.0)
        return len(self._ready) == len(LANES)

    @property
    def error(self) -> str:
        return self._error

    def wait_ready(self, timeout: float = START_WAIT, report: Callable[[str], None] | None = None) -> bool:
        """Wait until both workers have loaded and warmed up (True), failed or `timeout` passed (False)."""
        deadline = time.monotonic() + timeout
        while not self.ready and not self._error and time.monotonic() < deadline:
            if report is not None:
                report(f"Starting the two lanes' decoders ({len(self._ready)} of 2 ready)")
            self._collect_ready(0.25)
        return self.ready

    def _collect_ready(self, timeout: float) -> None:
        """Take the workers' "ready" (or "failed to start") messages, before any race is sent."""
        if len(self._ready) == len(LANES) or self._error:
            return
        try:
            kind, _, lane, payload = self._out.get(timeout=timeout) if timeout else self._out.get_nowait()
        except queue.Empty:
            if any(not p.is_alive() for p in self._processes):
                self._error = "a lane's worker process ended while starting"
            return
        if kind == "ready":
            self._ready.add(lane)
        elif kind == "failed":
            self._error = f"the {lane} lane's worker could not start: {payload}"

    def decode(self, job, sink, should_stop: StopCheck | None = None) -> tuple[SynthesisResult, SynthesisResult]:
        """Both lanes of `job` at once, streamed to `sink` (a `LaneSink`, called from this thread); returns
        (autoregressive, speculative). Raises the first lane's error (`Cancelled` when stopped): the other lane
        is stopped too, and both are waited for, so that no message of this race reaches the next."""
        results = self._run(job, sink, should_stop, LANES)
        return results[LANES[0]], results[LANES[1]]

    def _run(self, job, sink, should_stop: StopCheck | None, lanes: tuple[str, ...]) -> dict[str, SynthesisResult]:
        with self._lock:
            race = next(self._ids)
            self._stop.clear()
            for lane, inbox in zip(LANES, self._inboxes):
                if lane in lanes:
                    inbox.put((race, job))
            results: dict[str, SynthesisResult] = {}
            errors: list[BaseException] = []
            pending = set(lanes)
            while pending:
                if should_stop is not None and should_stop():
                    self._stop.set()
                try:
                    kind, message_race, lane, payload = self._out.get(timeout=0.05)
                except queue.Empty:
                    if any(not p.is_alive() for p in self._processes):
                        raise RuntimeError("a lane's worker process ended during a race") from None
                    continue
                if message_race != race:
                    continue  # a late word from a race that ended before it (there is none once both have answered)
                if kind == "failed":
                    errors.append(payload)
                    self._stop.set()  # the other lane stops within a round
                    pending.discard(lane)
                elif kind == "finished":
                    result, seconds = payload
                    results[lane] = result
                    sink.finished(lane, result, seconds)
                    pending.discard(lane)
                else:
                    getattr(sink, kind)(lane, *payload)
            if errors:
                raise next((e for e in errors if not isinstance(e, Cancelled)), errors[0])
            return results

    def measure_together(self, job, repeats: int = 2) -> dict[str, float]:
        """How much slower each lane's language model runs beside the other than alone, on `job` (0.1: 10 %
        slower), the median of `repeats` rounds of: each lane alone, then both at once."""
        alone: dict[str, list[float]] = {lane: [] for lane in LANES}
        together: dict[str, list[float]] = {lane: [] for lane in LANES}
        for _ in range(repeats):
            for lane in LANES:
                alone[lane].append(self._run(job, _NoSink(), None, (lane,))[lane].lm_seconds)
            for lane, result in self._run(job, _NoSink(), None, LANES).items():
                together[lane].append(result.lm_seconds)
        self.slowdown = {lane: statistics.median(together[lane]) / statistics.median(alone[lane]) - 1
                         for lane in LANES}
        return self.slowdown

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """While workers start: a spawned process runs the parent's main script again (as `__mp_main__`) when that
    script is a file; the app's `app.py` builds the whole page and starts the start-up job at import, which a
    worker must not do. Without the file's name the worker imports only what its target needs."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) if main is not None and getattr(main, "__spec__", None) is None else None
    if path is None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


_workers: dict[str, LaneWorkers] = {}
_workers_lock = threading.Lock()


def lane_workers(preset_key: str) -> LaneWorkers:
    """This process's workers for `preset_key`, started on first use (each loads its own copy of the models)."""
    with _workers_lock:
        workers = _workers.get(preset_key)
        if workers is None or workers.error:
            workers = _workers[preset_key] = LaneWorkers(preset_key)
        return workers


class _NoSink:
    """A `LaneSink` that keeps nothing (a measurement needs only the results)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


# --- in the worker process ----------------------------------------------------------------------------


class _QueueSink:
    """A worker's `LaneSink`: everything the lane does, onto the shared queue (round counts at most every
    `COUNT_EVERY` seconds; the last count before a piece or the end always goes)."""

    def __init__(self, out, race: int) -> None:
        self.out, self.race = out, race
        self._last_sent = 0.0
        self._unsent: tuple | None = None

    def _put(self, kind: str, lane: str, payload) -> None:
        self.out.put((kind, self.race, lane, payload))

    def _flush(self, lane: str) -> None:
        if self._unsent is not None:
            self._put("counted", lane, self._unsent)
            self._unsent = None

    def replaying(self) -> None:  # a worker's lane streams as it decodes: never replayed
        return None

    def started(self, lane: str) -> None:
        self._put("started", lane, ())

    def counted(self, lane: str, tokens: int, calls: int, rejected: int = 0) -> None:
        self._unsent = (tokens, calls, rejected)
        now = time.perf_counter()
        if now - self._last_sent >= COUNT_EVERY:
            self._last_sent = now
            self._flush(lane)

    def piece(self, lane: str, piece: AudioPiece) -> None:
        self._flush(lane)
        self._put("piece", lane, (piece,))

    def finished(self, lane: str, result: SynthesisResult, seconds: float) -> None:
        self._flush(lane)
        self._put("finished", lane, (result, seconds))


def _picklable(error: BaseException) -> BaseException:
    """The error itself when it crosses a process boundary intact, else one that says what it was."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to pickle
        return RuntimeError(f"{type(error).__name__}: {error}")


def _serve(lane: str, preset_key: str, core: int | None, inbox, out, stop) -> None:
    """A worker's life: pin to `core`, load and warm up the preset, then decode `lane` of each job sent."""
    try:
        if core is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {core})
        import torch

        from ..models.cpu_threads import cpu_threads_for
        from .models import load, warm_up

        preset, synthesizer = load(preset_key)
        torch.set_num_threads(cpu_threads_for(synthesizer))
        warm_up(synthesizer, synthesizer.draft_name)
    except BaseException as error:  # noqa: BLE001 - told to the parent, which decodes without workers
        out.put(("failed", 0, lane, f"{type(error).__name__}: {error}"))
        return
    out.put(("ready", 0, lane, None))
    parent = multiprocessing.parent_process()
    while True:
        message = next_job(inbox, parent)
        if message is None:
            return
        race, job = message
        try:
            warm_up(synthesizer, job.draft)  # a draft not used before (once; nothing when already warm)
            decode_lane(synthesizer, job, lane, stop.is_set, _QueueSink(out, race))
        except BaseException as error:  # noqa: BLE001 - the parent raises it for the race
            out.put(("failed", race, lane, _picklable(error)))


def next_job(inbox, parent, check_every: float = PARENT_CHECK):
    """The next message for a worker; None to end it: when the app says so, or once the app is gone (killed without
    closing its workers: a worker must not outlive it, holding a core and a copy of the models)."""
    while True:
        try:
            return inbox.get(timeout=check_every)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return None

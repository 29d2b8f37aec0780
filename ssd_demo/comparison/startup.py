"""Getting the machine ready when the app starts, in the background, so that the first race is a warm one.

The first comparison in a process loads the preset, warms up both decoders and measures this machine's
draft and verify costs (`pipeline.ready_machine`): seconds on the embedded voice, half a minute on a busy
CPU, all before any speech. `get_ready_in_background` does those steps for the default preset and draft in
a thread started with the app, holding the models (`model_turn`) as a race would: a race started meanwhile
waits only for what is left, and its status says what it waits for. The steps are cached per process, so
the race then skips them. `startup_readiness` tells a page how far it got. Once the page says "Ready", the same
thread gets the room's shared voice ready (`speaking`), holding the models again for those few seconds. No Gradio
here.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ..engine import machine_cache
from .lanes import LANES, concurrent_lanes, lane_workers
from .models import load
from .pipeline import Job, decodes_in_gpu_worker, model_turn, ready_machine
from .request import resolve_draft
from .speaking import shared_voice, why_no_shared_voice

log = logging.getLogger(__name__)

#: What a race waiting for the start-up job is told.
DOING = "measuring this machine's draft and verify costs, begun when the app started"


@dataclass
class Readiness:
    """The start-up job's state (written by its thread, read by the page)."""

    preset: str
    started: float = field(default_factory=time.perf_counter)
    stage: str = "Loading the model"
    finished: float | None = None  # perf_counter() when it ended, successfully or not
    error: str = ""  # why it failed ("" when it did not); the first race then does the steps itself
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.finished is None

    def report(self, fraction: float = 0.0, desc: str | None = None) -> None:
        if desc is not None:
            self.stage = desc

    def describe(self) -> str:
        """One line for the page."""
        if self.running:
            return (f"**Getting ready** ({time.perf_counter() - self.started:.0f} s): {self.stage}. "
                    "A race started now begins when this is done.")
        if self.error:
            return "Ready: type a sentence and start the race (the first one measures this machine first)."
        return (f"Ready (this machine measured in {self.finished - self.started:.1f} s at start-up): "
                "type a sentence and start the race.")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the job to end; True when it has."""
        if self.thread is not None:
            self.thread.join(timeout)
        return not self.running


_current: Readiness | None = None
_start_lock = threading.Lock()


def startup_readiness() -> Readiness | None:
    """The start-up job of this process, if one was started."""
    return _current


def get_ready_in_background(preset_key: str) -> Readiness | None:
    """Start (once per process) a thread that loads `preset_key`, warms up its default draft and measures
    this machine's costs; None where the models only reach the device inside each job (ZeroGPU)."""
    global _current
    if decodes_in_gpu_worker():
        return None
    with _start_lock:
        if _current is not None:
            return _current
        readiness = Readiness(preset_key)
        readiness.thread = threading.Thread(target=_get_ready, args=(readiness,), name="ssd-startup", daemon=True)
        _current = readiness
        readiness.thread.start()
        return readiness


#: What the lanes decode to time themselves alone and at once (a sentence: long enough to time, quick to decode).
INTERFERENCE_TEXT = "Both decoders run at once, each on a core of its own, and here is how much that slows them down."


def interference_job(synthesizer, preset_key: str) -> Job:
    """The job `LaneWorkers.measure_together` times: the preset's defaults, a fixed seed, the default draft."""
    config = synthesizer.config(seed=1)
    return Job(preset_key, None, INTERFERENCE_TEXT, config, synthesizer.draft_name, None,
               synthesizer.script(INTERFERENCE_TEXT))


#: What a race that waits for the shared voice's start-up is told.
SHARED_VOICE_DOING = "getting the voice ready for visitors who only listen (\"Just speak it\"), a few seconds"


def _get_shared_voice_ready(preset_key: str) -> None:
    """Once the race is ready: the room's shared voice loaded, warmed up and its costs measured (read from this
    machine's cache after the first start), holding the models as a race would, so that a race started meanwhile
    waits seconds instead of sharing the CPU with it (its status line says what for). A failure is logged and
    leaves the race as it was: "Just speak it" then says why itself."""
    if why_no_shared_voice(preset_key):
        return
    try:
        with model_turn(lambda *args, **kwargs: None, doing=SHARED_VOICE_DOING):
            shared_voice(preset_key).get_ready()
    except Exception as error:  # noqa: BLE001
        log.warning("the shared voice of %s could not get ready: %s", preset_key, error)


#: Where `measure_together` keeps each lane's slowdown beside the other (`engine.machine_cache`).
SLOWDOWN_KIND = "lanes_together"


def measure_together(workers, job: Job, synthesizer) -> dict[str, float]:
    """How much slower each lane runs beside the other (`LaneWorkers.measure_together`, 10-15 s of decoding on a
    2-core CPU), measured once per machine, models and settings, then read from this machine's cache
    (`engine.machine_cache`) at later starts."""
    key = (machine_cache.signature(synthesizer.target), machine_cache.signature(synthesizer.drafts[job.draft]),
           job.draft, repr(job.config))  # the machine, its CPUs among it, names the cache file
    kept = machine_cache.get(SLOWDOWN_KIND, *key)
    if kept and set(kept) == set(LANES) and all(isinstance(value, (int, float)) for value in kept.values()):
        workers.slowdown = {lane: float(kept[lane]) for lane in LANES}
        return workers.slowdown
    slowdown = workers.measure_together(job, repeats=1)
    machine_cache.put(SLOWDOWN_KIND, *key, dict(slowdown))
    return slowdown


def _get_ready(readiness: Readiness) -> None:
    try:
        with model_turn(readiness.report, doing=DOING):
            preset, synthesizer = load(readiness.preset, readiness.report)
            # The race's two lane workers load and warm up in their own processes meanwhile (`lanes`).
            racing = not concurrent_lanes(synthesizer, preset, decodes_in_gpu_worker())
            if racing:
                lane_workers(preset.key)
            ready_machine(synthesizer, resolve_draft(preset, synthesizer, None), readiness.report)
            if racing:
                workers = lane_workers(preset.key)
                if workers.wait_ready(report=lambda doing: readiness.report(desc=doing)):
                    readiness.report(desc="Timing both decoders alone and at once, each on its own core")
                    measure_together(workers, interference_job(synthesizer, preset.key), synthesizer)
        readiness.stage = "Ready"
    except Exception as error:  # noqa: BLE001 - the first race does these steps itself and reports any error
        log.warning("start-up measurement failed: %s", error)
        readiness.error = str(error) or type(error).__name__
        return
    finally:
        readiness.finished = time.perf_counter()
    _get_shared_voice_ready(preset.key)

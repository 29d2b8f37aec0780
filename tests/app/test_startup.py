"""Getting the machine ready in the background at start-up: the first race then finds the models warm and
the costs measured, and a race started meanwhile waits for the start-up job, saying what it waits for."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from ssd_demo.app.compare import Race, Request, run_race
from ssd_demo.comparison import load, pipeline, startup, warm_up
from ssd_demo.engine.calibration import is_calibrated
from support.race_lanes import lanes_one_after_the_other
from support.toy_backend import TOY_KEY, register_toy_preset


@pytest.fixture
def fresh_startup(monkeypatch):
    """No start-up job yet in this process (as when the app starts). The toy voice exists in this process only:
    no lane workers start for it, and its races decode one lane after the other (`support.race_lanes`)."""
    monkeypatch.setattr(startup, "_current", None)
    register_toy_preset()
    with lanes_one_after_the_other((TOY_KEY,)):
        yield


def test_the_startup_job_warms_up_and_measures_the_default_pair(fresh_startup):
    readiness = startup.get_ready_in_background(TOY_KEY)
    assert startup.startup_readiness() is readiness
    assert startup.get_ready_in_background(TOY_KEY) is readiness  # once per process
    assert readiness.wait(timeout=120) and not readiness.error
    preset, synthesizer = load(TOY_KEY)
    assert is_calibrated(synthesizer.target, synthesizer.drafts[preset.default_draft])
    assert warm_up(synthesizer, preset.default_draft) is False  # already warm: the first race skips it
    assert readiness.describe().startswith("Ready (this machine measured in")


def test_a_race_started_meanwhile_waits_for_what_is_left_and_says_so(fresh_startup, monkeypatch):
    release, measuring = threading.Event(), threading.Event()
    real = pipeline.ready_machine

    def slow_ready_machine(synthesizer, draft, progress):
        measuring.set()
        release.wait(timeout=60)
        return real(synthesizer, draft, progress)

    monkeypatch.setattr(startup, "ready_machine", slow_ready_machine)
    readiness = startup.get_ready_in_background(TOY_KEY)
    assert measuring.wait(timeout=60)
    assert readiness.running and readiness.describe().startswith("**Getting ready**")
    race, outcome = Race(), {}
    racing = threading.Thread(target=lambda: outcome.update(result=run_race(Request(text="First race.",
                                                                                   preset=TOY_KEY, seed=3), race)))
    racing.start()
    for _ in range(300):  # the race reaches the models' lock (no timing asserted: only what it says there)
        if race.stage.startswith("Waiting"):
            break
        racing.join(timeout=0.1)
    assert racing.is_alive() and race.stage == f"Waiting for the model: {startup.DOING}"
    release.set()
    racing.join(timeout=120)
    assert readiness.wait(timeout=1) and not readiness.error
    assert outcome["result"].spec.generation.tokens  # the race ran once the start-up job was done


def test_a_failed_startup_job_leaves_the_work_to_the_first_race(fresh_startup):
    readiness = startup.get_ready_in_background("no-such-preset")
    assert readiness.wait(timeout=30) and readiness.error
    assert "first one measures this machine" in readiness.describe()


def test_the_status_line_never_says_ready_before_the_job_has_run(fresh_startup, monkeypatch):
    """The page is built before the job starts (app.py), and each page reads the job's state when it opens."""
    from ssd_demo.app.compare import tab

    release, measuring = threading.Event(), threading.Event()

    def slow_ready_machine(synthesizer, draft, progress):
        measuring.set()
        release.wait(timeout=60)

    assert tab._opening_status() == tab.CHECKING_STATUS  # as built, before the app starts the job
    assert tab._initial_status() == tab.READY_STATUS  # read by a page when no job was ever started (ZeroGPU)
    monkeypatch.setattr(startup, "ready_machine", slow_ready_machine)
    readiness = startup.get_ready_in_background(TOY_KEY)
    try:
        assert measuring.wait(timeout=60)
        assert tab._initial_status().startswith("**Getting ready**")
        assert tab._opening_status().startswith("**Getting ready**")
    finally:
        release.set()
    assert readiness.wait(timeout=30) and tab._initial_status().startswith("Ready")


def test_the_lanes_slowdown_is_measured_once_per_machine(tmp_path, monkeypatch):
    """Timing both lanes alone and at once takes 10-15 s of a start on 2 cores: kept on this machine
    (`engine.machine_cache`) and read at later starts; other settings are measured anew."""
    from ssd_demo.backends.embedded import load_synthesizer
    from ssd_demo.comparison.startup import interference_job, measure_together
    from ssd_demo.engine import machine_cache

    monkeypatch.setenv(machine_cache.CACHE_ENV, str(tmp_path))
    machine_cache.forget_read()

    class Workers:
        def __init__(self):
            self.slowdown, self.measured = {}, 0

        def measure_together(self, job, repeats):
            self.measured += 1
            self.slowdown = {"autoregressive": 0.1, "speculative": 0.2}
            return self.slowdown

    synthesizer = load_synthesizer()
    job = interference_job(synthesizer, "embedded")
    first, second, other = Workers(), Workers(), Workers()
    assert measure_together(first, job, synthesizer) == {"autoregressive": 0.1, "speculative": 0.2}
    assert measure_together(second, job, synthesizer) == first.slowdown and second.slowdown == first.slowdown
    measure_together(other, replace(job, config=job.config.with_(draft_len=2)), synthesizer)
    assert (first.measured, second.measured, other.measured) == (1, 0, 1)

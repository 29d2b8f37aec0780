"""The race's lane workers: when both lanes may decode at once, and what crosses the process boundary."""

import pickle
import sys
import types

import pytest

from ssd_demo.comparison import lanes
from ssd_demo.engine.cancellation import Cancelled
from ssd_demo.errors import TextError


class _Param:
    def __init__(self, n: int) -> None:
        self.n = n

    def numel(self) -> int:
        return self.n


class _Synth:
    def __init__(self, device: str = "cpu", parameters: int = 10_000_000) -> None:
        self.device = types.SimpleNamespace(type=device)
        self.target = types.SimpleNamespace(parameters=lambda: [_Param(parameters)])


def test_both_lanes_decode_at_once_only_where_the_machine_and_the_preset_allow(monkeypatch):
    builtin, custom = types.SimpleNamespace(owner=None), types.SimpleNamespace(owner="a-session")
    monkeypatch.setattr(lanes, "race_cores", lambda: [0, 1])
    assert lanes.concurrent_lanes(_Synth(), builtin, in_gpu_worker=False) == ""
    assert "GPU" in lanes.concurrent_lanes(_Synth("cuda"), builtin, in_gpu_worker=False)
    assert "GPU" in lanes.concurrent_lanes(_Synth(), builtin, in_gpu_worker=True)
    assert "custom pair" in lanes.concurrent_lanes(_Synth(), custom, in_gpu_worker=False)
    assert "too large" in lanes.concurrent_lanes(_Synth(parameters=10**9), builtin, in_gpu_worker=False)
    monkeypatch.setattr(lanes, "race_cores", lambda: [])
    assert "one CPU core" in lanes.concurrent_lanes(_Synth(), builtin, in_gpu_worker=False)


def test_a_workers_error_crosses_the_process_boundary_intact_or_as_words():
    for error in (TextError("say it in English"), Cancelled()):
        crossed = pickle.loads(pickle.dumps(lanes._picklable(error)))
        assert type(crossed) is type(error) and str(crossed) == str(error)

    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("no")

    crossed = lanes._picklable(Unpicklable("deep inside"))
    assert isinstance(crossed, RuntimeError) and "Unpicklable: deep inside" in str(crossed)


def test_a_spawned_worker_does_not_run_the_apps_main_script_again(monkeypatch):
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = "/somewhere/app.py", None
    monkeypatch.setitem(sys.modules, "__main__", main)
    with lanes._main_module_hidden():
        assert not hasattr(main, "__file__")  # what spawn reads to run the script in the child
    assert main.__file__ == "/somewhere/app.py"
    main.__spec__ = types.SimpleNamespace(name="ssd_demo.__main__")  # python -m: the child imports by name
    with lanes._main_module_hidden():
        assert main.__file__ == "/somewhere/app.py"


class _Queue:
    def __init__(self) -> None:
        self.items = []

    def put(self, item) -> None:
        self.items.append(item)


def test_a_workers_round_counts_are_thinned_but_the_last_one_always_goes(monkeypatch):
    clock = iter([10.0, 10.001, 10.002, 10.003, 10.5])
    monkeypatch.setattr(lanes.time, "perf_counter", lambda: next(clock))
    out = _Queue()
    sink = lanes._QueueSink(out, race=7)
    sink.started("speculative")
    for tokens in (5, 9, 14, 20):  # four rounds within 20 ms: the first goes, the rest wait
        sink.counted("speculative", tokens, tokens // 5, rejected=1)
    sink.piece("speculative", "a piece")  # the last count goes before the piece
    sink.counted("speculative", 30, 7, rejected=2)  # 0.5 s later: goes at once
    kinds = [(kind, payload) for kind, race, lane, payload in out.items]
    assert all(race == 7 for _, race, _, _ in out.items)
    assert kinds == [("started", ()), ("counted", (5, 1, 1)), ("counted", (20, 4, 1)), ("piece", ("a piece",)),
                     ("counted", (30, 7, 2))]


@pytest.mark.parametrize("pin, expected", [("1", [0, 1]), (None, [])])
def test_workers_are_pinned_only_when_asked(monkeypatch, pin, expected):
    started = []

    class Process:
        def __init__(self, target, name, daemon, args):
            started.append(args[2])  # the core

        def start(self):
            pass

    class Context:
        Queue = _Queue

        def Event(self):
            return None

        def Process(self, **kwargs):
            return Process(**kwargs)

    monkeypatch.setattr(lanes.multiprocessing, "get_context", lambda kind: Context())
    monkeypatch.setattr(lanes, "race_cores", lambda: [0, 1])
    if pin is None:
        monkeypatch.delenv("SSD_RACE_PIN", raising=False)
    else:
        monkeypatch.setenv("SSD_RACE_PIN", pin)
    lanes.LaneWorkers("embedded")
    assert started == (expected or [None, None])


def test_a_worker_takes_each_job_and_ends_once_the_app_is_gone():
    import queue as queues

    inbox = queues.Queue()
    inbox.put(("race", "job"))
    alive = types.SimpleNamespace(is_alive=lambda: True)
    assert lanes.next_job(inbox, alive, check_every=0.01) == ("race", "job")
    inbox.put(None)  # the app closing its workers
    assert lanes.next_job(inbox, alive, check_every=0.01) is None
    assert lanes.next_job(inbox, types.SimpleNamespace(is_alive=lambda: False), check_every=0.01) is None


def test_an_idle_worker_does_not_outlive_an_app_killed_without_closing_it():
    """SIGKILL to the app (a Space restarting it, a test run cut short): its idle worker ends within seconds
    instead of holding a core and a copy of the models as an orphan."""
    import subprocess
    import textwrap
    import time
    from pathlib import Path

    from support.paths import REPOSITORY

    code = textwrap.dedent("""
        import multiprocessing, time
        from ssd_demo.comparison.lanes import next_job

        def worker(inbox):
            next_job(inbox, multiprocessing.parent_process(), check_every=0.1)

        context = multiprocessing.get_context("fork")
        process = context.Process(target=worker, args=(context.Queue(),))
        process.start()
        print(process.pid, flush=True)
        time.sleep(120)
    """)
    app = subprocess.Popen([sys.executable, "-c", code], cwd=REPOSITORY, stdout=subprocess.PIPE, text=True)
    worker = int(app.stdout.readline())
    app.kill()
    app.wait()
    stat = Path(f"/proc/{worker}/stat")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and stat.exists() and stat.read_text().split(") ")[-1][0] != "Z":
        time.sleep(0.1)
    assert not stat.exists() or stat.read_text().split(") ")[-1][0] == "Z", "the worker outlived the app"

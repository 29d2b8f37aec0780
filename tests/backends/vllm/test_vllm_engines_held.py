"""How many vLLM engines a voice holds through a session of setting changes, without vLLM: engine processes are
stood in for by a fake that counts starts and closes. beta travels with each request, so changing it starts
nothing; a new K or draft replaces the speculative engine (closing the old one first); AR keeps its own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ssd_demo.backends.vllm import engines as vllm_engines
from ssd_demo.backends.vllm.synthesizer import VllmSynthesizer
from ssd_demo.backends.vllm.worker import SpecCounts, WorkerBatch
from ssd_demo.config import DecodingConfig
from ssd_demo.errors import InputError, InvalidSettingError
from ssd_demo.speech.synthesis import Synthesizer


class FakeEngine:
    """A started engine: records its spec, the betas it was asked for, and whether it was closed."""

    live: list["FakeEngine"] = []
    started: list["FakeEngine"] = []
    calls: list[int] = []  # the K of each request, in the order the engines took them
    gate = None  # a threading.Event the first request waits on, when set up

    def __init__(self, spec):
        self.spec, self.closed, self.betas = spec, False, []

    @classmethod
    def start(cls, spec):
        engine = cls(spec)
        cls.live.append(engine)
        cls.started.append(engine)
        return engine

    def generate(self, prompts, max_tokens, *, beta, **_):
        assert not self.closed, "a request reached a closed engine"
        FakeEngine.calls.append(self.spec.draft_len)
        gate, FakeEngine.gate = FakeEngine.gate, None
        if gate is not None:
            gate.wait(10)
        self.betas.append(beta)
        speculative = self.spec.draft is not None
        counts = [SpecCounts(drafts=2, draft_tokens=2 * self.spec.draft_len, accepted_tokens=3) if speculative
                  else SpecCounts() for _ in prompts]
        return WorkerBatch([[5, 6, 7] for _ in prompts], ["stop"] * len(prompts), [0.1] * len(prompts), 0.1,
                           drafts=sum(c.drafts for c in counts), draft_tokens=sum(c.draft_tokens for c in counts),
                           accepted_tokens=sum(c.accepted_tokens for c in counts), requests=counts)

    def close(self):
        if not self.closed:
            self.closed = True
            FakeEngine.live.remove(self)


def _model(folder: str) -> torch.nn.Module:
    model = torch.nn.Linear(2, 2)
    model.name_or_path, model.dtype = folder, torch.float32  # what transformers models carry
    return model


@pytest.fixture
def voice(monkeypatch):
    FakeEngine.live, FakeEngine.started, FakeEngine.calls, FakeEngine.gate = [], [], [], None
    monkeypatch.setattr(vllm_engines.VllmWorker, "start", FakeEngine.start)
    backend = SimpleNamespace(name="llasa", max_context=256, eos_token_id=1, allowed_token_ids=lambda: None,
                              default_config=lambda: DecodingConfig(max_new_tokens=8, temperature=1.0, top_k=0))
    plain = Synthesizer(backend, _model("target"), {"small": _model("draft-small"), "tiny": _model("draft-tiny")})
    wrapped = VllmSynthesizer.wrap(plain)
    yield wrapped
    wrapped.close()


def _run(voice, mode="speculative", draft="small", **settings):
    config = voice.config(**settings)
    result, _ = voice.chunk_generator.generate_chunk(voice, [0, 2, 3], mode, config, draft)  # one chunk's tokens
    return result


def test_a_session_of_setting_changes_never_holds_more_than_one_engine_per_decoder(voice):
    session = [dict(beta=0.0), dict(beta=0.3), dict(beta=0.5, acceptance="exact"), dict(mode="ar"),
               dict(beta=0.3, draft_len=6), dict(beta=0.0, draft_len=6), dict(mode="ar", beta=0.9),
               dict(draft="tiny", beta=0.2, draft_len=6), dict(draft="tiny", beta=0.4, draft_len=6)]
    for step in session:
        _run(voice, **step)
        assert len(FakeEngine.live) <= 2 and len(voice.engines()) == len(FakeEngine.live)
    # one AR engine; speculative: K 4 with the small draft, K 6 with it, K 6 with the tiny one (beta started none)
    assert [(e.spec.draft, e.spec.draft_len) for e in FakeEngine.started] == [
        ("draft-small", 4), (None, 0), ("draft-small", 6), ("draft-tiny", 6)]
    assert [e.closed for e in FakeEngine.started] == [True, False, True, False]
    voice.close()
    assert FakeEngine.live == []


def test_a_request_for_another_k_is_served_in_its_turn_not_after_later_ones(voice):
    import threading
    import time

    gate = FakeEngine.gate = threading.Event()
    first = threading.Thread(target=_run, args=(voice,), kwargs={"draft_len": 4})
    first.start()
    while not FakeEngine.calls:  # the first request is inside the K 4 engine
        time.sleep(0.01)
    line = voice.chunk_generator._line["speculative"]
    other = threading.Thread(target=_run, args=(voice,), kwargs={"draft_len": 6})
    other.start()
    while len(line) < 1:  # the K 6 request waits for the engine to be free
        time.sleep(0.01)
    later = threading.Thread(target=_run, args=(voice,), kwargs={"draft_len": 4})
    later.start()
    while len(line) < 2 and FakeEngine.calls == [4]:
        time.sleep(0.01)
    time.sleep(0.1)  # (a request let through ahead of its turn would have reached the engine by now)
    assert FakeEngine.calls == [4], "a later request joined the K 4 engine ahead of the waiting K 6 one"
    gate.set()
    for thread in (first, other, later):
        thread.join(timeout=10)
    assert FakeEngine.calls == [4, 6, 4]
    assert len(FakeEngine.live) == 1 and len(voice.engines()) == 1


def test_each_request_carries_its_own_beta_and_reports_its_own_counts(voice):
    first = _run(voice, beta=0.3)
    _run(voice, beta=0.3, acceptance="exact")  # the exact rule ignores beta, as on our engine
    _run(voice, mode="ar", beta=0.3)  # AR has no verify step
    engines = {e.spec.draft: e for e in FakeEngine.started}
    assert engines["draft-small"].betas == [0.3, 0.0] and engines[None].betas == [0.0]
    stats = first.stats
    assert (stats.rounds, stats.drafted_tokens, stats.accepted_tokens) == (2, 8, 3)
    assert stats.acceptance_rate == pytest.approx(3 / 8)


def test_untempered_ids_are_refused_in_both_modes_before_an_engine_starts(voice):
    for mode in ("ar", "speculative"):
        with pytest.raises(InputError, match="untempered_token_ids needs our engine"):
            voice.check_decoding(mode, voice.config(temperature=0.5, untempered_token_ids=[3]))
    assert FakeEngine.started == []


def test_a_beta_out_of_range_is_refused_before_it_reaches_an_engine():
    from ssd_demo.backends.vllm.worker import VllmWorker, WorkerSpec

    worker = VllmWorker(WorkerSpec(target="t", draft="d"))  # never started: the check comes first
    with pytest.raises(InvalidSettingError, match="beta"):
        worker.generate([[1, 2]], 4, temperature=1.0, beta=1.5)
    with pytest.raises(ValueError, match="one beta, or one per prompt"):
        worker.generate([[1, 2], [3]], 4, temperature=1.0, beta=[0.1])


# -- the engine process's protocol, with the worker's own loop around a stand-in engine ---------------------


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    from support.fake_vllm_worker import stand_in_python
    from ssd_demo.backends.vllm.worker import VllmWorker, WorkerSpec

    monkeypatch.setenv("SSD_DEMO_VLLM_PYTHON", str(stand_in_python(tmp_path)))
    monkeypatch.setenv("STAND_IN_STEP_S", "0.02")
    with VllmWorker.start(WorkerSpec(target="t", draft="d")) as worker:
        yield worker


def test_callers_in_several_threads_share_one_engine_and_each_gets_its_own_answer(stand_in):
    import threading

    answers, threads = {}, []

    def ask(index: int, length: int) -> None:
        answers[index] = stand_in.generate([[index * 100]], length, temperature=1.0, beta=0.1 * (index % 3))

    for index, length in enumerate((30, 5, 12, 20)):
        threads.append(threading.Thread(target=ask, args=(index, length)))
        threads[-1].start()
    for thread in threads:
        thread.join(timeout=30)
    for index, length in enumerate((30, 5, 12, 20)):
        assert answers[index].tokens == [[index * 100 + step for step in range(1, length + 1)]]
    # they were batched together: some step held more than one caller's prompt (all four, unless a thread was late)
    assert max(answer.requests[0].drafts for answer in answers.values()) >= 2
    assert stand_in.in_flight == 0


def test_a_caller_that_stops_leaves_the_engine_and_the_others_go_on(stand_in):
    import threading

    from ssd_demo.engine.cancellation import Cancelled

    stop, other = threading.Event(), {}
    thread = threading.Thread(target=lambda: other.update(batch=stand_in.generate([[5]], 40, temperature=1.0)))
    thread.start()
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(Cancelled):
        stand_in.generate([[7]], 10_000, temperature=1.0, should_stop=stop.is_set)
    thread.join(timeout=30)
    assert other["batch"].tokens == [list(range(6, 46))]
    assert stand_in.in_flight == 0


def test_an_engine_failure_is_each_callers_error_and_the_engine_keeps_serving(stand_in):
    from ssd_demo.backends.vllm.worker import VllmUnavailableError

    with pytest.raises(VllmUnavailableError, match="stand-in engine failed a step"):
        stand_in.generate([[666]], 3, temperature=1.0)
    assert stand_in.generate([[1]], 2, temperature=1.0).tokens == [[2, 3]]


def test_a_closed_engine_is_a_clear_error_for_the_next_caller(stand_in):
    from ssd_demo.backends.vllm.worker import VllmUnavailableError

    stand_in.close()
    with pytest.raises(VllmUnavailableError, match="has ended"):
        stand_in.generate([[1]], 2, temperature=1.0)


def test_loading_another_preset_closes_the_engines_of_the_one_it_replaces(voice, monkeypatch):
    from ssd_demo.backends import registry

    _run(voice, beta=0.3)
    _run(voice, mode="ar")
    assert len(FakeEngine.live) == 2
    monkeypatch.setitem(registry._resident, "llasa-1b-3b", voice)
    registry._drop_resident()
    assert FakeEngine.live == [] and registry._resident == {}

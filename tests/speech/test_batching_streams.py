"""Streams decoded through `BatchingEngines`: several listeners' autoregressive requests share one running batch, and
each hears what it would hear alone (same tokens, same samples); speculative ones decode alone, one at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ssd_demo.server.service import SpeechService
from ssd_demo.speech.chunk_generator import BatchingEngines
from ssd_demo.speech.synthesis import Synthesizer

TEXTS = ["Hi there!", "Where is the small compass?", "Wait. What was that?", "The score was 3 to 8 at half time."]


@pytest.fixture(scope="module")
def synthesizer():
    from ssd_demo.backends.embedded import load_synthesizer

    synthesizer = load_synthesizer()
    synthesizer.chunk_generator = BatchingEngines(max_rows=8)
    return synthesizer


def _heard(synthesizer, text: str, seed: int) -> tuple[list[int], np.ndarray]:
    stream = synthesizer.stream(text, "ar", synthesizer.config(seed=seed))
    audio = np.concatenate([piece.audio for piece in stream])
    return stream.result.generation.tokens, audio


def test_listeners_at_once_hear_what_each_hears_alone(synthesizer):
    alone = [_heard(synthesizer, text, seed) for seed, text in enumerate(TEXTS)]
    engine = synthesizer.chunk_generator.engine(synthesizer.target)
    most_before = engine.stats.most_rows
    together: dict[int, tuple[list[int], np.ndarray]] = {}

    def listen(index: int) -> None:
        together[index] = _heard(synthesizer, TEXTS[index], index)

    threads = [threading.Thread(target=listen, args=(index,)) for index in range(len(TEXTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert most_before == 1 and engine.stats.most_rows >= 2  # they did share the batch
    for index, (tokens, audio) in enumerate(alone):
        assert together[index][0] == tokens
        np.testing.assert_array_equal(together[index][1], audio)


def test_a_batching_server_speculates_alone_and_batches_among_others(synthesizer):
    assert synthesizer.speculation_pays(1) and not synthesizer.speculation_pays(2)
    assert "batched" in synthesizer.engine_description()
    service = SpeechService("embedded", synthesizer, workers=8, default_mode="auto")
    order = service.order("Hello there.", mode=service.default_mode, settings={"seed": 1})
    job = service.admit(order)
    assert b"".join(job.pcm()) and job.result.mode == "speculative"  # alone: speculation pays
    with pytest.raises(Exception, match="default mode must be one of"):
        SpeechService("embedded", synthesizer, default_mode="fastest")


def test_a_batching_generator_measures_where_speculation_pays(synthesizer):
    """What serve measures at start-up: batched AR's tokens per second per batch size against speculative decoding
    alone (one request at a time, so one rate); mode auto then follows the nearest measured size."""
    generator = BatchingEngines(max_rows=4)
    try:
        costs = generator.measure_speculation(synthesizer, sizes=(1, 4))
        assert set(costs) == {1, 4} and all(ar > 0 and speculative > 0 for ar, speculative in costs.values())
        assert generator.engine(synthesizer.target).stats.most_rows == 4
        generator.speculation_costs = {1: (100.0, 200.0), 4: (400.0, 200.0)}
        assert generator.speculation_pays(1) and not generator.speculation_pays(3)
        assert not generator.speculation_pays(16)
        with generator._alone:  # another request's speculative chunk decoding: this one would wait for it
            assert not generator.speculation_pays(1)
        voice = Synthesizer(synthesizer.backend, synthesizer.target, synthesizer.drafts, chunk_generator=generator)
        assert voice.measures_speculation and not Synthesizer(synthesizer.backend, synthesizer.target,
                                                              synthesizer.drafts).measures_speculation
    finally:
        generator.engine(synthesizer.target).close()


def test_a_target_too_large_to_measure_speculates_alone_only(synthesizer, monkeypatch):
    from ssd_demo.speech import chunk_generator

    monkeypatch.setattr(chunk_generator, "MEASURED_MAX", 1000)
    generator = BatchingEngines(max_rows=4)
    assert generator.measure_speculation(synthesizer) == {}
    assert generator.speculation_pays(1) and not generator.speculation_pays(2)


def test_a_batching_server_answers_listeners_at_once_over_http(synthesizer):
    """Eight streamed requests at once, default mode and both named modes mixed, through the HTTP server: every one
    is served in full (a watchdog: each must finish within its timeout, none may hang the batch)."""
    import httpx

    from ssd_demo.measure.serve_load import ask
    from support.speech_server import serve_in_thread

    service = SpeechService("embedded", synthesizer, workers=8, max_waiting=0, default_mode="auto")
    server, thread, address = serve_in_thread(service)
    answers = {}
    try:
        def listen(index: int) -> None:
            body = {"model": "embedded", "voice": "default", "input": TEXTS[index % len(TEXTS)], "seed": index,
                    **({} if index % 4 == 0 else {"mode": "speculative" if index % 4 == 1 else "ar"})}
            answers[index] = ask(address, body, synthesizer.backend.sample_rate, timeout=120)

        threads = [threading.Thread(target=listen, args=(index,)) for index in range(8)]
        for listener in threads:
            listener.start()
        for listener in threads:
            listener.join(240)
        assert len(answers) == 8 and all(answer.status == 200 and answer.audio_bytes for answer in answers.values())
        assert {answers[index].usage["mode"] for index in (1, 5)} == {"speculative"}
        assert {answers[index].usage["mode"] for index in (2, 3, 6, 7)} == {"ar"}
        assert httpx.get(address + "/health", timeout=10).json()["load"] == 0
    finally:
        server.should_exit = True
        thread.join(30)


def test_what_was_measured_is_kept_for_the_next_start(synthesizer, tmp_path, monkeypatch):
    """Measured once per machine, models and settings (`engine.machine_cache`): a second start reads the costs
    instead of decoding for seconds; other settings are measured anew."""
    from ssd_demo.engine import machine_cache

    monkeypatch.setenv(machine_cache.CACHE_ENV, str(tmp_path))
    machine_cache.forget_read()
    first = BatchingEngines(max_rows=2)
    costs = first.measure_speculation(synthesizer, sizes=(1, 2))
    again = BatchingEngines(max_rows=2)
    steps_before = again.engine(synthesizer.target).stats.steps
    assert again.measure_speculation(synthesizer, sizes=(1, 2)) == costs
    warm_ups = again.engine(synthesizer.target).stats.steps - steps_before
    other = BatchingEngines(max_rows=2).measure_speculation(synthesizer, sizes=(1, 2),
                                                            config=synthesizer.config(draft_len=2))
    assert other != costs and warm_ups > 0  # read, after warming up; another K measured

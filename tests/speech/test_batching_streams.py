"""Streams decoded through `BatchingEngines`: several listeners' autoregressive requests share one running batch, and
each hears what it would hear alone (same tokens, same samples); speculative ones decode alone, one at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ssd_demo.server.service import SpeechService
from ssd_demo.speech.chunk_generator import BatchingEngines

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

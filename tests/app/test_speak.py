""""Just speak it": a visitor's text spoken by the room's shared voice, to the race's player, one lane."""

from __future__ import annotations

import base64
import json
import threading

import numpy as np
import pytest

from ssd_demo.app.compare.speak import SPEAK_LANE, SpokenAudio, speak_handler
from ssd_demo.speech.streaming import AudioPiece


def _piece(samples: int) -> AudioPiece:
    return AudioPiece(index=0, chunk_index=0, text="", audio=np.full(samples, 0.25, np.float32), sample_rate=22_050,
                      start_sample=0, ready_seconds=0.0, processing_seconds=0.0, tokens_so_far=0,
                      target_calls_so_far=0)


def test_the_player_gets_each_piece_once_numbered_and_again_in_the_next_update():
    audio = SpokenAudio(22_050)
    audio.piece(_piece(100))
    first = json.loads(audio.payload())
    audio.piece(_piece(0))  # a silent piece is not sent
    audio.piece(_piece(50))
    second = json.loads(audio.payload())
    last = json.loads(audio.payload(done=True))
    assert [p["index"] for p in first["pieces"]] == [0] and [p["index"] for p in second["pieces"]] == [0, 1]
    assert [p["index"] for p in last["pieces"]] == [1] and last["lanes"][SPEAK_LANE] == {
        "pieces": 2, "stopped": False, "tokens": 0, "done": True}
    assert len(base64.b64decode(second["pieces"][1]["pcm"])) == 100  # 50 samples of 16-bit PCM
    assert first["race"] == last["race"] and first["rate"] == 22_050 and not first["lanes"][SPEAK_LANE]["done"]


def test_a_text_is_spoken_piece_by_piece_then_summed_up():
    frames = list(speak_handler()("Wait. Where is the small compass?", "embedded", None))
    statuses = [status for status, _ in frames]
    payloads = [json.loads(value) for _, value in frames if isinstance(value, str)]
    assert statuses[0].startswith("**Speaking:** decoding")
    assert any("first audio after" in status for status in statuses[1:-1])
    assert statuses[-1].startswith("**Decoded:**") and "s of speech" in statuses[-1]
    indices = sorted({p["index"] for payload in payloads for p in payload["pieces"]})
    assert len(indices) >= 2 and indices == list(range(len(indices)))  # streamed: several pieces, none lost
    assert payloads[-1]["lanes"][SPEAK_LANE]["done"] and payloads[-1]["lanes"][SPEAK_LANE]["pieces"] == len(indices)


@pytest.mark.parametrize("text, preset, message", [
    ("", "embedded", "type some text"),
    ("Hello.", "llasa-1b-3b", "races only"),
    ("Hello.", "no-such-pair", "unknown preset 'no-such-pair': the voices that speak to many listeners at once "
                                "are embedded"),
])
def test_what_cannot_be_spoken_says_why_in_the_status_line(text, preset, message):
    frames = list(speak_handler()(text, preset, None))
    assert len(frames) == 1 and frames[0][0].startswith("**Not spoken:**") and message in frames[0][0]


@pytest.mark.server
def test_visitors_speaking_at_once_are_spoken_together():
    from gradio_client import Client

    from ssd_demo.app.page import build_demo

    demo = build_demo(default_preset="embedded")
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        speak = next(fn for fn in demo.fns.values() if fn.api_name == "speak")
        assert (speak.concurrency_id, speak.concurrency_limit) == ("speak", 16)
        texts = ["Hi there!", "Where is the small compass?", "The score was 3 to 8.", "See you soon."]
        statuses: dict[int, str] = {}

        def visit(index: int) -> None:
            statuses[index] = Client(url, verbose=False).predict(texts[index], "embedded", api_name="/speak")[0]

        threads = [threading.Thread(target=visit, args=(index,)) for index in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    finally:
        demo.close()
    assert all(statuses[index].startswith("**Decoded:**") for index in range(len(texts))), statuses
    assert any("other voice" in status for status in statuses.values()), statuses  # they shared the machine


def test_a_race_timed_while_listeners_texts_are_spoken_says_so():
    from types import SimpleNamespace

    from ssd_demo.app.compare.race import together_note
    from ssd_demo.comparison.speaking import shared_voice

    race = SimpleNamespace(apart=None)
    assert together_note(race) == ""
    speeches = [shared_voice("embedded").speak(text) for text in ("Hello.", "Hello again.")]
    try:
        assert together_note(race) == " · 2 listeners' texts spoken on this machine meanwhile"
        speeches.pop().close()
        assert together_note(race) == " · 2 listeners' texts spoken on this machine meanwhile"  # the most, kept
    finally:
        for speech in speeches:
            speech.close()
    assert together_note(race) == " · 2 listeners' texts spoken on this machine meanwhile"
    assert together_note(SimpleNamespace(apart=None)) == ""  # a race that began after them

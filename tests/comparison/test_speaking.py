"""The room's shared voice: texts spoken at once decode together and each is what it would be alone; the mode
follows how many speak; a text's place is given back however it ends."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ssd_demo.comparison.speaking import SharedVoice, why_no_shared_voice
from ssd_demo.errors import TextError

TEXTS = ["Hi!", "Wait. Where is the small compass?", "The score was 3 to 8."]


@pytest.fixture(scope="module")
def voice():
    from ssd_demo.backends.embedded import load_synthesizer

    return SharedVoice(load_synthesizer(), max_rows=4, measure=False)


def _heard(speech) -> tuple[list[int], np.ndarray]:
    audio = np.concatenate([piece.audio for piece in speech])
    return speech.result.generation.tokens, audio


def test_texts_spoken_at_once_decode_together_and_sound_as_alone(voice):
    voice.synthesizer.chunk_generator.speculation_costs = {1: (500.0, 100.0)}  # the batch pays at every size
    alone = [_heard(voice.speak(text, seed=seed)) for seed, text in enumerate(TEXTS)]
    engine = voice.synthesizer.chunk_generator.engine(voice.synthesizer.target)
    most_before = engine.stats.most_rows
    speeches = [voice.speak(text, seed=seed) for seed, text in enumerate(TEXTS)]
    assert voice.speaking == len(TEXTS) and [s.together for s in speeches] == [1, 2, 3]
    assert {s.mode for s in speeches} == {"ar"}
    heard: dict[int, tuple[list[int], np.ndarray]] = {}
    threads = [threading.Thread(target=lambda i=i: heard.__setitem__(i, _heard(speeches[i]))) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert most_before == 1 and engine.stats.most_rows >= 2  # they did share the batch
    assert voice.speaking == 0
    for index, (tokens, audio) in enumerate(alone):
        assert heard[index][0] == tokens
        np.testing.assert_array_equal(heard[index][1], audio)


def test_alone_it_speculates_among_others_it_batches(voice):
    voice.synthesizer.chunk_generator.speculation_costs = {}  # not measured: speculative only alone
    first = voice.speak("Hello there.", seed=1)
    second = voice.speak("Hello again.", seed=2)
    assert (first.mode, second.mode) == ("speculative", "ar")
    tokens = _heard(first)[0]
    assert tokens and first.result.mode == "speculative"
    second.close()  # never listened to: its place is given back all the same
    assert voice.speaking == 0
    again = voice.speak("Hello there.", seed=1)
    assert again.mode == "speculative" and _heard(again)[0] == tokens


def test_a_stopped_or_refused_text_gives_its_place_back(voice):
    stop = threading.Event()
    speech = voice.speak("A sentence that is stopped after its first piece of audio, long before its end.",
                         seed=3, should_stop=stop.is_set)
    pieces = iter(speech)
    next(pieces)
    stop.set()
    with pytest.raises(Exception, match="(?i)stop|cancel"):
        list(pieces)
    assert voice.speaking == 0
    for text, message in [("", "type some text"), ("x" * 10_000, "at most"), (5, "must be a string")]:
        with pytest.raises(TextError, match=message):
            voice.speak(text)
    assert voice.speaking == 0


def test_only_local_presets_speak_to_a_room():
    assert why_no_shared_voice("embedded") == ""
    assert "races only" in why_no_shared_voice("llasa-1b-3b")


def test_getting_ready_measures_where_speculation_pays(voice):
    voice.synthesizer.chunk_generator.speculation_costs = {}
    voice.get_ready()
    costs = voice.synthesizer.chunk_generator.speculation_costs
    assert set(costs) == {1, 2, 4, 16} and all(ar > 0 and speculative > 0 for ar, speculative in costs.values())


def test_a_voice_the_batch_cannot_run_is_refused_once_loaded_once(monkeypatch):
    from support.toy_backend import TOY_KEY, register_toy_preset

    from ssd_demo.backends.registry import Preset, get_preset, register
    from ssd_demo.comparison import speaking
    from ssd_demo.errors import InputError

    register_toy_preset()
    toy, loads = get_preset(TOY_KEY), []

    def loader(device):
        loads.append(device)
        return toy.loader(device)

    register(Preset(key="unbatched", label="Unbatched", description="", licence="", drafts=toy.drafts,
                    default_draft=toy.default_draft, loader=loader))
    monkeypatch.setattr(speaking, "batches", lambda model: False)
    for _ in range(2):
        with pytest.raises(InputError, match="does not run in the batch"):
            speaking.shared_voice("unbatched")
    assert len(loads) == 1

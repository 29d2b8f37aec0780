"""Rater ids are compared case-insensitively (Unicode case folding) and stored as given: a rater who types
their id again in other capitals resumes their session, or is told they have finished the study."""

from __future__ import annotations

import pytest

from ssd_demo.listening import study_sessions
from ssd_demo.listening.ab_mos import tab_study
from ssd_demo.listening.errors import RaterFinishedError
from ssd_demo.listening.migrations import TAB_STUDY
from ssd_demo.listening.stimuli import create_stimulus_set, tone_renderer
from ssd_demo.listening.study_sessions import StudyRunner
from ssd_demo.listening.study_store import ListeningStore


@pytest.fixture()
def runner(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    stimulus_set = create_stimulus_set("tones", ["One.", "Two."], ("AR", "SSD beta=0.3 K=4"), tone_renderer(seconds=0.05),
                                       root=tmp_path)
    with ListeningStore(tmp_path / "votes.sqlite3") as store:
        yield StudyRunner(store, tab_study(stimulus_set, 1), stimulus_set)


def finish(runner: StudyRunner, session_id: str) -> None:
    view = runner.next_view(session_id)
    while view is not None:
        labels = [c.label for c in view.conditions]
        runner.fetch_clip(session_id, view.trial_id, *labels)
        for label in labels:
            runner.record_play(session_id, view.trial_id, label)
        view = runner.submit(session_id, view.trial_id, {"choice": "A"} if view.kind == "ab" else {"score": 3})


def test_a_rater_id_in_other_capitals_is_the_same_rater_and_is_stored_as_given(runner):
    first = runner.start_session("Élodie-Straße", seed=1)
    for typed in ("élodie-straße", " ÉLODIE-STRASSE ", "Élodie-Strasse"):  # case folding: ß is ss
        assert runner.start_session(typed, seed=2).session_id == first.session_id
    assert [s.rater_id for s in runner.store.study_sessions(TAB_STUDY)] == ["Élodie-Straße"]
    assert runner.store.rater_sessions(TAB_STUDY, "ELODIE-STRASSE") == set()  # folding is not accent stripping
    assert runner.store.rater_sessions(TAB_STUDY, "élodie-STRASSE") == {first.session_id}
    finish(runner, first.session_id)
    with pytest.raises(RaterFinishedError, match="already taken this study"):
        runner.start_session("ÉLODIE-straße", seed=3)
    other = runner.start_session("Elodie", seed=4)  # another id is another rater
    assert other.session_id != first.session_id and other.rater_id == "Elodie"

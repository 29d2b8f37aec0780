"""The listening-test tab (the built-in A/B + MOS study) driven through its API with gradio_client, on a real
local server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf
from gradio_client.exceptions import AppError

from ssd_demo.listening import study_sessions as sessions_module
from ssd_demo.listening.migrations import TAB_STUDY
from ssd_demo.listening.stimuli import create_stimulus_set, tone_renderer
from ssd_demo.listening.stimulus_sets import load_stimulus_set
from ssd_demo.listening.study_results import read_long_csv
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.app.listening.service import close_listening_apps
from ssd_demo.app.listening.tab import build_listening_tab
from ssd_demo.app.page import QUEUE_MAX_SIZE
from support.listening_tab import (AB_TRIALS, CLIPS, DONE, PLAYED, REVEALING, SAVED, START, SUBMIT, SYSTEMS, TEXTS,  # noqa: F401
                                   TOKEN, TRIALS, answer, client, is_ab, make_data, play)

@contextmanager
def serve(root: Path) -> Iterator[str]:
    """A Blocks app holding only the listening tab, on 127.0.0.1; closed (with its database) on exit."""
    with gr.Blocks() as demo, gr.Tab("Listening test"):
        build_listening_tab(root)
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=1)  # as the full app does
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield demo.local_url
    finally:
        demo.close()
        close_listening_apps()


def stored_answers(root: Path):
    """Every stored answer of the tab's study, oldest first."""
    with ListeningStore(root / "listening.sqlite3", app_version="reader") as store:
        return [a for s in store.study_sessions(TAB_STUDY) for a in store.study_answers(s.session_id)]


def stored_ratings(root: Path):
    with ListeningStore(root / "listening.sqlite3", app_version="reader") as store:
        return store.study_ratings(TAB_STUDY)


@pytest.fixture()
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", str(AB_TRIALS))
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", TOKEN)
    # The clips are 100 ms long; only the gating test waits for a play to count.
    monkeypatch.setattr(sessions_module, "LISTEN_FRACTION", 0.0)
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    monkeypatch.delenv("SSD_DEMO_STIMULUS_SET", raising=False)
    return make_data(tmp_path / "data")


@pytest.mark.server
def test_twenty_concurrent_raters_store_exactly_480_answers(data):
    def rater(k: int) -> dict[str, tuple]:
        api = client(url)
        out = api.predict(f"rater-{k}", api_name=START)
        session_id = out[0]
        sent = {}
        for i in range(TRIALS):
            assert out[2] == f"**Trial {i + 1} of {TRIALS}**"
            assert is_ab(out) == (i < AB_TRIALS)  # the A/B block first, then the MOS block
            choice, score = ("A", "B", "none")[(k + i) % 3], 1 + (k + i) % 5
            sent[out[1]] = (session_id, {"choice": choice} if is_ab(out) else {"score": score})
            out = answer(api, out, choice, str(score))
        assert out[1] == "" and "Thank you" in out[DONE]
        return sent

    with serve(data) as url, ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(rater, range(20)))
    sent = {trial: vote for result in results for trial, vote in result.items()}
    assert len(sent) == 20 * TRIALS == 480
    answers = stored_answers(data)
    assert len(answers) == 480 and len({a.answer_id for a in answers}) == 480
    assert {a.trial_id: (a.session_id, a.answer) for a in answers} == sent
    ratings = stored_ratings(data)
    assert {r.rater for r in ratings} == {f"rater-{k}" for k in range(20)}
    for row in ratings:
        if row.kind == "ab":
            assert row.other_system not in (None, row.system)
    per_session = {}
    for row in ratings:
        per_session.setdefault(row.session_id, set()).add(row.trial_index)
    assert len(per_session) == 20 and all(indices == set(range(TRIALS)) for indices in per_session.values())


@pytest.mark.server
def test_repeated_submission_stores_once_and_changes_are_refused(data):
    with serve(data) as url:
        api = client(url)
        first = api.predict("", api_name=START)
        after = answer(api, first, "A")
        again = answer(api, first, "A")  # e.g. a double click
        assert again[:4] == after[:4]  # same next trial, nothing new stored
        with pytest.raises(AppError, match="already has your answer"):
            api.predict(first[0], first[1], "B", None, None, api_name=SUBMIT)
    answers = stored_answers(data)
    assert [(a.trial_id, a.answer) for a in answers] == [(first[1], {"choice": "A"})]


@pytest.mark.server
def test_tampered_requests_are_refused_and_store_nothing(data):
    with serve(data) as url:
        api = client(url)
        mine = api.predict("me", api_name=START)
        theirs = api.predict("them", api_name=START)
        play(api, mine[0], mine[1], ab=True)
        bad_requests = [
            ("0" * 32, mine[1], "A", None, None),  # unknown session
            (mine[0], "f" * 32, "A", None, None),  # unknown trial
            (mine[0], theirs[1], "A", None, None),  # someone else's trial
            ("", "", "A", None, None),
            (mine[0], mine[1], "C", None, None),  # no such choice
            (mine[0], mine[1], "A", "6", None),  # a score out of range
        ]
        for request in bad_requests:
            with pytest.raises(AppError):
                api.predict(*request, api_name=SUBMIT)
        # A score sent with an A/B trial's choice: told on the trial's status line, the trial left as it was.
        for request in ((mine[0], mine[1], "A", "3", None), (mine[0], mine[1], "A", None, "3")):
            out = api.predict(*request, api_name=SUBMIT)
            assert "Send the choice alone" in out[-1] and out[1] == {"__type__": "update"}, out
        summary = api.predict(TOKEN, api_name="/listening_results")[2]
        assert summary["n_votes"] == 0
    assert stored_answers(data) == []


@pytest.mark.server
def test_a_mos_trial_takes_one_score_in_range(data, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "1")  # 1 sentence: 3 A/B trials, then 3 MOS trials
    with serve(data) as url:
        api = client(url)
        out = api.predict("", api_name=START)
        for _ in range(3):
            out = answer(api, out, "none")
        assert not is_ab(out) and out[2] == "**Trial 4 of 6**"
        play(api, out[0], out[1], ab=False)
        for bad in ((None, "0", None), (None, "3.5", None), (None, "x", None)):  # not a score the controls offer
            with pytest.raises(AppError):
                api.predict(out[0], out[1], *bad, api_name=SUBMIT)
        for bad in (("A", "4", None), (None, "4", "4")):  # more than the one clip's score
            assert "send its score (1 to 5) alone" in api.predict(out[0], out[1], *bad, api_name=SUBMIT)[-1]
        assert "Rate the clip" in api.predict(out[0], out[1], None, None, None, api_name=SUBMIT)[-1]
        after = api.predict(out[0], out[1], None, "5", None, api_name=SUBMIT)
        assert after[2] == "**Trial 5 of 6**"
    assert [a.answer for a in stored_answers(data)][3:] == [{"score": 5}]


@pytest.mark.server
def test_rater_view_hides_systems_and_serves_recorded_positions(data):
    stimulus_set = load_stimulus_set(data / "stimuli" / "tones")
    with serve(data) as url:
        api = client(url)
        out = api.predict("", api_name=START)
        with ListeningStore(data / "listening.sqlite3", app_version="reader") as store:
            for _ in range(AB_TRIALS + 2):
                text = json.dumps(out)
                assert not REVEALING.search(text), text
                trial = store.get_study_trial(out[0], out[1])
                assert out[4] is None and out[5] is None  # a trial is shown without its clips: they are fetched
                clips = api.predict(out[0], out[1], api_name=CLIPS)
                assert not REVEALING.search(json.dumps(clips)), clips
                served = [sf.read(clip["path"], dtype="int16")[0] for clip in clips if clip is not None]
                # The audio served as A (and B) is exactly the recorded systems' clips, in the recorded positions.
                item = stimulus_set.item(trial.item_id)
                assert len(served) == len(trial.conditions) == (2 if trial.kind == "ab" else 1)
                for audio, condition in zip(served, trial.conditions):
                    expected = sf.read(stimulus_set.clip_path(item.clips[condition.system].path), dtype="int16")[0]
                    assert np.array_equal(audio, expected)
                out = answer(api, out, "B", "5")
    ratings = stored_ratings(data)
    assert all(r.score == (1.0 if r.label == "B" else 0.0) for r in ratings if r.kind == "ab")
    assert [r.score for r in ratings if r.kind == "mos"] == [5.0, 5.0]


@pytest.mark.server
def test_votes_survive_a_restart_and_the_session_continues(data):
    with serve(data) as url:
        api = client(url)
        out = api.predict("persistent", api_name=START)
        session_id, saved = out[0], out[SAVED]
        for _ in range(3):
            out = answer(api, out, "A")
        next_trial = out[1]
    with serve(data) as url:  # a fresh server and store on the same database file
        api = client(url)
        summary = api.predict(TOKEN, api_name="/listening_results")[2]
        assert summary["n_votes"] == 3 and summary["n_sessions"] == 1
        resumed = api.predict(saved, api_name="/listening_resume")  # what a page reload does
        assert resumed[:3] == (session_id, next_trial, f"**Trial 4 of {TRIALS}**")
        out = answer(api, resumed, "none")
        assert out[2] == f"**Trial 5 of {TRIALS}**"
    answers = stored_answers(data)
    assert len(answers) == 4 and {r.rater for r in stored_ratings(data)} == {"persistent"}


@pytest.mark.server
def test_results_on_an_empty_database(data):
    with serve(data) as url:
        text, plot, summary, _ = client(url).predict(TOKEN, api_name="/listening_results")
    assert "No votes yet" in text and plot is not None
    assert summary == {"n_votes": 0, "n_sessions": 0, "pairs": [], "mos": [], "stimulus_sets": [],
                       "excluded_raters": []}


@pytest.mark.server
def test_csv_export_round_trips_and_results_need_the_token(data, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "s3cret")
    with serve(data) as url:
        api = client(url)
        out = api.predict('r,1 "quoted"', api_name=START)
        for choice in ("A", "none", "B"):
            out = answer(api, out, choice)
        for endpoint in ("/listening_results", "/listening_export", "/listening_build_set"):
            with pytest.raises(AppError, match="token"):
                api.predict("wrong", api_name=endpoint)
        exported = api.predict("s3cret", api_name="/listening_export")
        path = exported["path"] if isinstance(exported, dict) else exported
        summary = api.predict("s3cret", api_name="/listening_results")[2]
    assert summary["n_votes"] == 3
    rows = read_long_csv(path)
    ratings = stored_ratings(data)
    assert [(r.session, r.trial, r.label, r.system, r.score) for r in rows] == [
        (r.session_id, r.trial_index + 1, r.label, r.system, r.score) for r in ratings]
    assert len(rows) == 2 * 3 and rows[0].rater == 'r,1 "quoted"'


@pytest.mark.server
def test_no_stimulus_set_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SSD_DEMO_STIMULUS_SET", raising=False)
    with serve(tmp_path / "empty") as url, pytest.raises(AppError, match="No stimulus set"):
        client(url).predict("", api_name=START)


@pytest.mark.server
def test_a_damaged_stimulus_set_is_refused_with_a_clear_error(data):
    clip = next((data / "stimuli" / "tones" / "clips").glob("*.wav"))
    clip.write_bytes(clip.read_bytes()[:-10])
    with serve(data) as url, pytest.raises(AppError, match="does not match its checksum"):
        client(url).predict("", api_name=START)
    assert stored_answers(data) == []


def test_an_unusable_database_leaves_a_message_not_a_crash(tmp_path, monkeypatch):
    (tmp_path / "not-a-db.sqlite3").write_bytes(b"this is not an SQLite database" * 100)
    monkeypatch.setenv("SSD_DEMO_LISTENING_DB", str(tmp_path / "not-a-db.sqlite3"))
    with gr.Blocks() as demo, gr.Tab("Listening test"):
        build_listening_tab(tmp_path)
    markdown = [b for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert any("unavailable" in str(b.value) for b in markdown)


@pytest.mark.server
def test_the_full_app_serves_the_listening_tab(data, monkeypatch):
    from support.toy_backend import TOY_KEY, register_toy_preset

    from ssd_demo.app.page import build_demo

    monkeypatch.setenv("SSD_DEMO_DATA_DIR", str(data))
    register_toy_preset()
    demo = build_demo(default_preset=TOY_KEY, load_default=False)
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        api = client(demo.local_url)
        out = api.predict("", api_name=START)
        out = answer(api, out, "A")
        assert out[2] == f"**Trial 2 of {TRIALS}**"
    finally:
        demo.close()
        close_listening_apps()
    assert [a.answer for a in stored_answers(data)] == [{"choice": "A"}]


@pytest.mark.server
def test_votes_without_listening_are_refused_with_a_message(data, monkeypatch):
    from ssd_demo.listening import database
    from support.clock import ManualClock

    monkeypatch.setattr(sessions_module, "LISTEN_FRACTION", 0.9)  # the app's rule: a play counts after the clip's length
    # The store's clock moves only when the test says so: "too early" holds however slow the machine is.
    clock = ManualClock()
    monkeypatch.setattr(database, "system_clock", clock)
    create_stimulus_set("long", TEXTS[:1], SYSTEMS, tone_renderer(seconds=1.0), root=data)
    monkeypatch.setenv("SSD_DEMO_STIMULUS_SET", "long")
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "1")
    with serve(data) as url:
        api = client(url)
        out = api.predict("", api_name=START)
        session_id, trial_id = out[0], out[1]
        # No play reported: the vote is refused, the trial stays as it was, the rater is told why.
        refused = api.predict(session_id, trial_id, "A", None, None, api_name=SUBMIT)
        assert "Listen to samples A, B to the end" in refused[-1]
        api.predict(session_id, trial_id, api_name=CLIPS)  # what the page does after showing a trial
        # A play reported sooner than the clip could have been heard does not count.
        early = api.predict(session_id, trial_id, api_name=PLAYED[0])
        assert "cannot have been played to the end" in early[-1]
        clock.advance(1.0)  # the clips are 1 s long
        assert api.predict(session_id, trial_id, api_name=PLAYED[0])[-1] == "Now play clip B to the end."
        refused = api.predict(session_id, trial_id, "A", None, None, api_name=SUBMIT)
        assert "Listen to sample B to the end" in refused[-1]
        api.predict(session_id, trial_id, api_name=PLAYED[1])
        # Both plays counted, but both clips cannot have been heard one after the other yet.
        assert "they take 2 seconds together" in api.predict(session_id, trial_id, "A", None, None,
                                                             api_name=SUBMIT)[-1]
        clock.advance(1.0)
        # A missing choice is a message too, never an error.
        assert "Choose A, B or no preference" in api.predict(session_id, trial_id, None, None, None,
                                                             api_name=SUBMIT)[-1]
        after = api.predict(session_id, trial_id, "A", None, None, api_name=SUBMIT)
        assert after[2] == "**Trial 2 of 6**" and after[-1] == "", after[-1]
    [stored] = stored_answers(data)
    assert stored.trial_id == trial_id and stored.trial_seconds == 2.0  # on the test's clock
    assert sorted((r.label, r.plays) for r in stored_ratings(data)) == [("A", 1), ("B", 1)]


@pytest.mark.server
def test_a_play_counts_only_for_a_clip_the_session_fetched(data, monkeypatch):
    from ssd_demo.listening import database
    from support.clock import ManualClock

    monkeypatch.setattr(sessions_module, "LISTEN_FRACTION", 0.9)
    clock = ManualClock()
    monkeypatch.setattr(database, "system_clock", clock)
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "1")
    with serve(data) as url:
        api = client(url)
        out = api.predict("", api_name=START)
        assert out[4] is None and out[5] is None  # showing a trial hands out no clip
        clock.advance(5.0)  # however long after the trial was shown: a clip never fetched was never heard
        for endpoint in PLAYED:
            assert "was never loaded" in api.predict(out[0], out[1], api_name=endpoint)[-1]
        api.predict(out[0], out[1], api_name=CLIPS)
        assert "cannot have been played to the end" in api.predict(out[0], out[1], api_name=PLAYED[0])[-1]
        clock.advance(1.0)  # the clips are about 0.1 s long
        for endpoint in PLAYED:
            api.predict(out[0], out[1], api_name=endpoint)
        after = api.predict(out[0], out[1], "B", None, None, api_name=SUBMIT)
        assert after[2] == "**Trial 2 of 6**", after[-1]
    with ListeningStore(data / "listening.sqlite3", app_version="reader") as store:
        assert [label for _, label, _ in store.clip_fetches(out[0])] == ["A", "B"]
        assert len(store.study_plays(out[0])) == 2


@pytest.mark.server
def test_one_address_starts_a_bounded_number_of_new_sessions_and_rater_ids_ignore_case(data, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_SESSIONS_PER_ADDRESS", "2")
    with serve(data) as url:
        api = client(url)
        first = api.predict("Alice", api_name=START)
        assert api.predict("", api_name=START)[0] != first[0]
        with pytest.raises(AppError, match="Too many new sessions from your network address"):
            api.predict("", api_name=START)  # a third new session from 127.0.0.1 within the hour
        again = api.predict("ALICE", api_name=START)  # the same rater typed otherwise: resumed, even at the limit
        assert again[:2] == first[:2]
    with ListeningStore(data / "listening.sqlite3", app_version="reader") as store:
        assert sorted(s.rater_id or "" for s in store.study_sessions(TAB_STUDY)) == ["", "Alice"]  # as given


@pytest.mark.server
def test_the_experimenter_view_is_off_without_a_token(data, monkeypatch):
    monkeypatch.delenv("SSD_DEMO_RESULTS_TOKEN")
    with serve(data) as url:
        api = client(url)
        for endpoint in ("/listening_results", "/listening_export", "/listening_build_set"):
            with pytest.raises(AppError, match="no results token is configured"):
                api.predict("", api_name=endpoint)


@pytest.mark.server
def test_a_finished_session_gets_a_stored_completion_code(data, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "1")  # 1 sentence: 3 A/B and 3 MOS trials
    with serve(data) as url:
        api = client(url)
        out = api.predict("crowd-1", api_name=START)
        session_id = out[0]
        for _ in range(6):
            out = answer(api, out, "none", "3")
        code = re.search(r"completion code: \*\*`([0-9A-F]{10})`\*\*", out[DONE]).group(1)
        # A reload after the end shows the same code.
        assert code in api.predict(out[SAVED], api_name="/listening_resume")[DONE]
        # The browser keeps the session id signed with the server's key: a forged one resumes nothing.
        assert api.predict(session_id, api_name="/listening_resume")[DONE] != out[DONE]
        assert api.predict(session_id + ".0000", api_name="/listening_resume")[DONE] != out[DONE]
    with ListeningStore(data / "listening.sqlite3", app_version="reader") as store:
        assert store.completion_code(session_id) == code

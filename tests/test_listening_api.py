"""The listening-test tab driven through its API with gradio_client, on a real local server."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client
from gradio_client.exceptions import AppError

from ssd_demo.listening import sessions as sessions_module
from ssd_demo.listening.export import read_votes_csv
from ssd_demo.listening.stimuli import create_stimulus_set, tone_renderer
from ssd_demo.listening.stimulus_sets import load_stimulus_set
from ssd_demo.listening.store import ListeningStore
from ssd_demo.app.listening.service import close_listening_apps
from ssd_demo.app.listening.tab import build_listening_tab
from ssd_demo.app.page import QUEUE_MAX_SIZE

SYSTEMS = ("AR", "SSD beta=0.3 K=4", "exact speculative")
TEXTS = tuple(f"Sentence number {n}, read aloud." for n in range(1, 10))  # 9 sentences x 3 pairs = 27 trials
REVEALING = re.compile(r"\bAR\b|SSD|beta|exact|speculative", re.IGNORECASE)
START, SUBMIT = "/listening_start", "/listening_submit"
PLAYED = ("/listening_played_a", "/listening_played_b")
TOKEN = "experimenter-token"
DONE, SAVED = 9, 10  # indices of the closing message and the browser's saved session among the trial outputs


def make_data(root: Path) -> Path:
    create_stimulus_set("tones", TEXTS, SYSTEMS, tone_renderer(seconds=0.1), root=root)
    return root


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


def client(url: str) -> Client:
    # ssl_verify=False: the server is plain http on 127.0.0.1, and verification would make httpx
    # load the CA bundle for every request gradio_client sends (most of the test's CPU otherwise).
    return Client(url, download_files=False, verbose=False, ssl_verify=False)


def cast_vote(api: Client, session_id: str, trial_id: str, *answer):
    """Both clips reported as played to the end (as the rater's player does), then the vote."""
    for endpoint in PLAYED:
        api.predict(session_id, trial_id, api_name=endpoint)
    return api.predict(session_id, trial_id, *answer, api_name=SUBMIT)


def stored_votes(root: Path):
    with ListeningStore(root / "listening.sqlite3", app_version="reader") as store:
        return store.votes()


@pytest.fixture()
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "25")
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", TOKEN)
    # The clips are 100 ms long; only the gating test waits for a play to count.
    monkeypatch.setattr(sessions_module, "LISTEN_FRACTION", 0.0)
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    monkeypatch.delenv("SSD_DEMO_STIMULUS_SET", raising=False)
    return make_data(tmp_path / "data")


@pytest.mark.server
def test_twenty_concurrent_raters_store_exactly_500_votes(data):
    def rater(k: int) -> dict[str, tuple]:
        api = client(url)
        out = api.predict(f"rater-{k}", api_name=START)
        session_id, trial_id = out[0], out[1]
        sent = {}
        for i in range(25):
            assert out[2] == f"**Trial {i + 1} of 25**"
            choice, score = ("A", "B", "none")[(k + i) % 3], str(1 + (k + i) % 5)
            out = cast_vote(api, session_id, trial_id, choice, score, None)
            sent[trial_id] = (session_id, f"rater-{k}", choice, int(score))
            trial_id = out[1]
        assert trial_id == "" and "Thank you" in out[DONE]
        return sent

    with serve(data) as url, ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(rater, range(20)))
    sent = {trial: vote for result in results for trial, vote in result.items()}
    assert len(sent) == 500
    votes = stored_votes(data)
    assert len(votes) == 500
    assert len({v.trial_id for v in votes}) == 500 and len({v.vote_id for v in votes}) == 500
    assert {v.trial_id: (v.session_id, v.rater_id, v.choice, v.score_a) for v in votes} == sent
    for vote in votes:
        assert vote.score_b is None and vote.system_a != vote.system_b
        assert vote.preferred_system == {"A": vote.system_a, "B": vote.system_b, "none": None}[vote.choice]
    per_session = {}
    for vote in votes:
        per_session.setdefault(vote.session_id, set()).add(vote.trial_index)
    assert len(per_session) == 20 and all(indices == set(range(25)) for indices in per_session.values())


@pytest.mark.server
def test_repeated_submission_stores_once_and_changes_are_refused(data):
    with serve(data) as url:
        api = client(url)
        first = api.predict("", api_name=START)
        after = cast_vote(api, first[0], first[1], "A", "4", "2")
        again = cast_vote(api, first[0], first[1], "A", "4", "2")  # e.g. a double click
        assert again[:4] == after[:4]  # same next trial, nothing new stored
        with pytest.raises(AppError, match="already has your vote"):
            api.predict(first[0], first[1], "B", "4", "2", api_name=SUBMIT)
    votes = stored_votes(data)
    assert len(votes) == 1 and (votes[0].choice, votes[0].score_a, votes[0].score_b, votes[0].rater_id) == (
        "A",
        4,
        2,
        None,
    )


@pytest.mark.server
def test_tampered_requests_are_refused_and_store_nothing(data):
    with serve(data) as url:
        api = client(url)
        mine = api.predict("me", api_name=START)
        theirs = api.predict("them", api_name=START)
        bad_requests = [
            ("0" * 32, mine[1], "A", None, None),  # unknown session
            (mine[0], "f" * 32, "A", None, None),  # unknown trial
            (mine[0], theirs[1], "A", None, None),  # someone else's trial
            (mine[0], mine[1], "C", None, None),  # no such choice
            (mine[0], mine[1], "A", "6", None),  # score out of range
            (mine[0], mine[1], "A", None, "0"),
            (mine[0], mine[1], "A", "3.5", None),
            ("", "", "A", None, None),
        ]
        for request in bad_requests:
            with pytest.raises(AppError):
                api.predict(*request, api_name=SUBMIT)
        summary = api.predict(TOKEN, api_name="/listening_results")[2]
        assert summary["n_votes"] == 0
    assert stored_votes(data) == []


@pytest.mark.server
def test_rater_view_hides_systems_and_serves_recorded_positions(data):
    stimulus_set = load_stimulus_set(data / "stimuli" / "tones")
    with serve(data) as url:
        api = client(url)
        out = api.predict("", api_name=START)
        for _ in range(4):
            text = json.dumps(out)
            assert not REVEALING.search(text), text
            trial_id = out[1]
            served_a, served_b = (sf.read(out[k]["path"], dtype="int16")[0] for k in (4, 5))
            out = cast_vote(api, out[0], trial_id, "B", None, "5")
            vote = next(v for v in stored_votes(data) if v.trial_id == trial_id)
            # The audio served as A and B is exactly the recorded systems' clips, in the recorded positions.
            item = stimulus_set.item(vote.item_id)
            for served, system in ((served_a, vote.system_a), (served_b, vote.system_b)):
                expected = sf.read(stimulus_set.clip_path(item.clips[system].path), dtype="int16")[0]
                assert np.array_equal(served, expected)
            assert vote.preferred_system == vote.system_b and vote.score_b == 5


@pytest.mark.server
def test_votes_survive_a_restart_and_the_session_continues(data):
    with serve(data) as url:
        api = client(url)
        out = api.predict("persistent", api_name=START)
        session_id, saved = out[0], out[SAVED]
        for _ in range(3):
            out = cast_vote(api, session_id, out[1], "A", "3", "3")
        next_trial = out[1]
    with serve(data) as url:  # a fresh server and store on the same database file
        api = client(url)
        summary = api.predict(TOKEN, api_name="/listening_results")[2]
        assert summary["n_votes"] == 3 and summary["n_sessions"] == 1
        resumed = api.predict(saved, api_name="/listening_resume")  # what a page reload does
        assert resumed[:3] == (session_id, next_trial, "**Trial 4 of 25**")
        out = cast_vote(api, session_id, next_trial, "none", None, None)
        assert out[2] == "**Trial 5 of 25**"
    votes = stored_votes(data)
    assert len(votes) == 4 and {v.rater_id for v in votes} == {"persistent"}


@pytest.mark.server
def test_results_on_an_empty_database(data):
    with serve(data) as url:
        text, plot, summary, _ = client(url).predict(TOKEN, api_name="/listening_results")
    assert "No votes yet" in text and plot is not None
    assert summary == {"n_votes": 0, "n_sessions": 0, "pairs": [], "mos": [], "stimulus_sets": []}


@pytest.mark.server
def test_csv_export_round_trips_and_results_need_the_token(data, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "s3cret")
    with serve(data) as url:
        api = client(url)
        out = api.predict('r,1 "quoted"', api_name=START)
        for choice, a, b in (("A", "5", None), ("none", None, None), ("B", "1", "2")):
            out = cast_vote(api, out[0], out[1], choice, a, b)
        for endpoint in ("/listening_results", "/listening_export", "/listening_build_set"):
            with pytest.raises(AppError, match="token"):
                api.predict("wrong", api_name=endpoint)
        exported = api.predict("s3cret", api_name="/listening_export")
        path = exported["path"] if isinstance(exported, dict) else exported
        summary = api.predict("s3cret", api_name="/listening_results")[2]
    assert summary["n_votes"] == 3
    rows = read_votes_csv(path)
    assert rows == stored_votes(data) and len(rows) == 3
    assert rows[0].rater_id == 'r,1 "quoted"'


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
    assert stored_votes(data) == []


def test_an_unusable_database_leaves_a_message_not_a_crash(tmp_path, monkeypatch):
    (tmp_path / "not-a-db.sqlite3").write_bytes(b"this is not an SQLite database" * 100)
    monkeypatch.setenv("SSD_DEMO_LISTENING_DB", str(tmp_path / "not-a-db.sqlite3"))
    with gr.Blocks() as demo, gr.Tab("Listening test"):
        build_listening_tab(tmp_path)
    markdown = [b for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert any("unavailable" in str(b.value) for b in markdown)


@pytest.mark.server
def test_the_full_app_serves_the_listening_tab(data, monkeypatch):
    from toy_backend import TOY_KEY, register_toy_preset

    from ssd_demo.app.page import build_demo

    monkeypatch.setenv("SSD_DEMO_DATA_DIR", str(data))
    register_toy_preset()
    demo = build_demo(default_preset=TOY_KEY, load_default=False)
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        api = client(demo.local_url)
        out = api.predict("", api_name=START)
        out = cast_vote(api, out[0], out[1], "A", "5", "4")
        assert out[2] == "**Trial 2 of 25**"
    finally:
        demo.close()
        close_listening_apps()
    votes = stored_votes(data)
    assert [(v.choice, v.score_a, v.score_b) for v in votes] == [("A", 5, 4)]


@pytest.mark.server
def test_votes_without_listening_are_refused_with_a_message(data, monkeypatch):
    monkeypatch.setattr(sessions_module, "LISTEN_FRACTION", 0.9)  # the app's rule: a play counts after the clip's length
    with serve(data) as url:
        api = client(url)
        out = api.predict("", api_name=START)
        session_id, trial_id = out[0], out[1]
        # No play reported: the vote is refused, the trial stays as it was, the rater is told why.
        refused = api.predict(session_id, trial_id, "A", "4", None, api_name=SUBMIT)
        assert "Listen to clip A and clip B to the end" in refused[-1]
        # A play reported sooner than the clip could have been heard does not count.
        early = api.predict(session_id, trial_id, api_name=PLAYED[0])
        assert "cannot have been played to the end" in early[-1]
        time.sleep(0.15)  # the clips are 0.1 s long
        assert api.predict(session_id, trial_id, api_name=PLAYED[0])[-1] == "Now play clip B to the end."
        refused = api.predict(session_id, trial_id, "A", None, None, api_name=SUBMIT)
        assert "Listen to clip B to the end" in refused[-1]
        api.predict(session_id, trial_id, api_name=PLAYED[1])
        # A missing choice is a message too, never an error.
        assert "Choose A, B or no preference" in api.predict(session_id, trial_id, None, None, None,
                                                             api_name=SUBMIT)[-1]
        after = api.predict(session_id, trial_id, "A", "4", None, api_name=SUBMIT)
        assert after[2] == "**Trial 2 of 25**" and after[-1] == ""
    [stored] = stored_votes(data)
    assert (stored.trial_id, stored.plays_a, stored.plays_b) == (trial_id, 1, 1) and stored.trial_seconds >= 0.15


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
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "2")
    with serve(data) as url:
        api = client(url)
        out = api.predict("crowd-1", api_name=START)
        session_id = out[0]
        for _ in range(2):
            out = cast_vote(api, session_id, out[1], "none", None, None)
        code = re.search(r"completion code: \*\*`([0-9A-F]{10})`\*\*", out[DONE]).group(1)
        # A reload after the end shows the same code.
        assert code in api.predict(out[SAVED], api_name="/listening_resume")[DONE]
        # The browser keeps the session id signed with the server's key: a forged one resumes nothing.
        assert api.predict(session_id, api_name="/listening_resume")[DONE] != out[DONE]
        assert api.predict(session_id + ".0000", api_name="/listening_resume")[DONE] != out[DONE]
    with ListeningStore(data / "listening.sqlite3", app_version="reader") as store:
        assert store.completion_code(session_id) == code

"""The listening tab's server side: set handling across sessions, per-set results, settings from the
environment, and what raters are told. Handlers are called directly (no server), so these are fast."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf

from ssd_demo.listening import study_sessions as sessions_module
from ssd_demo.listening import stimulus_sets
from ssd_demo.listening.errors import ListeningError
from ssd_demo.listening.migrations import TAB_STUDY
from ssd_demo.listening.stimuli import create_stimulus_set, tone_renderer
from ssd_demo.listening.study_results import read_long_csv
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.app.listening.service import (CURRENT_SET, EXPORTS_KEPT, ListeningApp, ListeningSettings, browser_secret,
                                            check_build_allowed, close_listening_apps, public_message)
from ssd_demo.app.listening.tab import build_listening_tab

SYSTEMS = ("AR", "SSD beta=0.3 K=4", "exact speculative")
TEXTS = ("The birch canoe slid on the smooth planks.", "Rice is often served in round bowls.")
TOKEN = "experimenter-token"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in (
        "SSD_DEMO_RESULTS_TOKEN",
        "SSD_DEMO_LISTENING_DB",
        "SSD_DEMO_STIMULUS_SET",
        "SSD_DEMO_BROWSER_SECRET",
        "SSD_DEMO_DATA_DIR",
        "SPACE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SSD_DEMO_LISTENING_TRIALS", "4")
    # The clips are 50 ms long; these tests are not about the wait before a play counts.
    monkeypatch.setattr(sessions_module, "LISTEN_FRACTION", 0.0)
    yield
    close_listening_apps()


def make_set(root: Path, name: str, texts=TEXTS, systems=SYSTEMS, age: int = 0, **kwargs):
    stimulus_set = create_stimulus_set(name, texts, systems, tone_renderer(seconds=0.05), root=root, **kwargs)
    # Newest first is decided by the manifest's mtime: make the order explicit.
    stamp = 1_700_000_000 + age
    os.utime(stimulus_set.root / "manifest.json", (stamp, stamp))
    return stimulus_set


def new_app(root: Path) -> ListeningApp:
    return ListeningApp(ListeningSettings.from_env(root))


def build(root: Path | None = None, **kwargs) -> gr.Blocks:
    with gr.Blocks() as demo:
        build_listening_tab(root, **kwargs)
    return demo


def handler(demo: gr.Blocks, api_name: str):
    return next(f for f in demo.fns.values() if f.api_name == api_name)


def listen(app: ListeningApp, trial) -> None:
    """Every clip of the shown trial fetched, then played to the end."""
    app.clips(trial.view.session_id, trial.view.trial_id)
    for condition in trial.view.conditions:
        app.record_play(trial.view.session_id, trial.view.trial_id, condition.label)


def answers(store: ListeningStore) -> list:
    return [a for s in store.study_sessions(TAB_STUDY) for a in store.study_answers(s.session_id)]


def listen_in_tab(demo: gr.Blocks, session_id: str, trial_id: str) -> None:
    handler(demo, "listening_clips").fn(session_id, trial_id)
    for name in ("listening_played_a", "listening_played_b"):
        handler(demo, name).fn(session_id, trial_id)


def test_running_sessions_keep_their_set_when_another_is_served(tmp_path):
    first = make_set(tmp_path, "first", age=0)
    app = new_app(tmp_path)
    try:
        old_view = app.start(None)
        second = make_set(tmp_path, "second", texts=TEXTS[:1], systems=SYSTEMS[:2], age=10)
        app.use_set(second)  # what "Build a small stimulus set" does
        listen(app, old_view)
        view = app.submit(old_view.view.session_id, old_view.view.trial_id, "A", None, None)
        # The old session goes on with its own set's audio.
        assert view is not None and view.view.number == 2
        [stored] = answers(app.store)
        session = app.store.get_session(stored.session_id)
        assert (session.stimulus_set, session.stimulus_set_sha256) == ("first", first.manifest_sha256)
        trial = app.store.get_study_trial(view.view.session_id, view.view.trial_id)
        clip = first.clip_path(trial.conditions[0].clip)
        assert view.audio == ()  # shown without its clips, which the page fetches next
        assert np.array_equal(app.clips(view.view.session_id, view.view.trial_id).audio[0][1],
                              sf.read(clip, dtype="int16")[0])
        # A page reload resumes it too, and new sessions get the new set.
        assert app.resume(old_view.view.session_id).view.trial_id == view.view.trial_id
        new_view = app.start(None)
        assert app.store.get_session(new_view.view.session_id).stimulus_set == "second"
    finally:
        app.close()

    # After a restart (a fresh app, nothing cached) the old session still finds its set on disk.
    restarted = new_app(tmp_path)
    try:
        assert restarted.resume(old_view.view.session_id).view.trial_id == view.view.trial_id
    finally:
        restarted.close()


def test_a_rebuilt_set_is_refused_with_a_clear_message_before_storing(tmp_path):
    make_set(tmp_path, "tones")
    app = new_app(tmp_path)
    try:
        view = app.start(None)
        # The same name rebuilt with other audio: the session's clips are gone.
        make_set(tmp_path, "tones", texts=TEXTS[:1], overwrite=True, base_seed=7)
        for attempt in (
            lambda: app.submit(view.view.session_id, view.view.trial_id, "A", None, None),
            lambda: app.resume(view.view.session_id),
        ):
            with pytest.raises(ListeningError, match="stimulus set changed") as caught:
                attempt()
            assert "votes so far are saved" in str(caught.value) and "new session" in str(caught.value)
        assert answers(app.store) == []
        # New sessions get the rebuilt set.
        assert app.start(None) is not None
    finally:
        app.close()


def test_results_default_to_the_served_set_and_can_show_another(tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", TOKEN)
    old = make_set(tmp_path, "old", age=0)
    app = new_app(tmp_path)
    view = app.start(None)
    for choice in ("A", "B"):
        listen(app, view)
        view = app.submit(view.view.session_id, view.view.trial_id, choice, None, None)
    app.close()
    new = make_set(tmp_path, "new", systems=SYSTEMS[:2], age=10)

    demo = build(tmp_path)
    start, submit, results = (handler(demo, n).fn for n in ("listening_start", "listening_submit", "listening_results"))
    out = start("")
    listen_in_tab(demo, out[0], out[1])
    submit(out[0], out[1], "none", None, None)

    text, _, summary, selector = results(TOKEN, CURRENT_SET)
    assert summary["n_votes"] == 1 and [tuple(s) for s in summary["stimulus_sets"]] == [("new", new.manifest_sha256)]
    assert "Stimulus set **new" in text and "pool" not in text
    choices = [value for _, value in selector.choices]
    assert choices == [CURRENT_SET, f"new:{new.manifest_sha256}", f"old:{old.manifest_sha256}"]

    text, _, summary, _ = results(TOKEN, f"old:{old.manifest_sha256}")
    assert summary["n_votes"] == 2 and [tuple(s) for s in summary["stimulus_sets"]] == [("old", old.manifest_sha256)]
    assert results(TOKEN, "old")[2]["n_votes"] == 2  # a name alone selects every version of that name
    with pytest.raises(gr.Error, match="No votes on stimulus set"):
        results(TOKEN, "missing")

    # The export holds every set's ratings (two per A/B vote), with the stimulus version to tell them apart.
    export = handler(demo, "listening_export").fn
    rows = read_long_csv(export(TOKEN))
    assert sorted(r.stimulus_version for r in rows) == sorted([new.manifest_sha256] * 2 + [old.manifest_sha256] * 4)
    assert {r.study for r in rows} == {TAB_STUDY}


def test_exports_are_pruned_to_the_last_few(tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", TOKEN)
    make_set(tmp_path, "tones")
    export = handler(build(tmp_path), "listening_export").fn
    paths = [Path(export(TOKEN)) for _ in range(EXPORTS_KEPT + 3)]
    folder = paths[0].parent
    assert sorted(folder.glob("listening_votes_*.csv")) == sorted(paths[-EXPORTS_KEPT:])


def test_two_builds_on_one_data_dir_share_the_browser_secret(tmp_path, monkeypatch):
    def secret_of(root: Path) -> str:
        app = new_app(root)
        try:
            return app.browser_secret
        finally:
            app.close()

    make_set(tmp_path / "a", "tones")
    first, second = secret_of(tmp_path / "a"), secret_of(tmp_path / "a")
    assert first == second and len(first) == 64
    assert (tmp_path / "a" / "listening.browser_secret").read_text().strip() == first
    assert secret_of(tmp_path / "b") != first  # a different deployment, a different key
    # The key signs the session id the browser keeps; it never goes to the browser itself.
    demo = build(tmp_path / "a")
    assert first not in repr(demo.get_config_file())
    app = new_app(tmp_path / "a")
    try:
        session_id = app.start(None).view.session_id
        token = app.saved_token(session_id)
        assert app.session_from_token(token) == session_id
        for forged in (session_id, f"{session_id}.{'0' * 32}", "", None):
            assert app.session_from_token(forged) is None
    finally:
        app.close()
    monkeypatch.setenv("SSD_DEMO_BROWSER_SECRET", "from-the-environment")
    assert secret_of(tmp_path / "a") == "from-the-environment"


def test_the_secret_is_made_without_hard_links_too(tmp_path, monkeypatch):
    def no_links(*args):
        raise PermissionError("hard links are not supported here")

    monkeypatch.setattr(os, "link", no_links)
    secret = browser_secret(tmp_path / "listening.sqlite3")
    assert len(secret) == 64 and browser_secret(tmp_path / "listening.sqlite3") == secret
    assert (tmp_path / "listening.browser_secret").stat().st_mode & 0o077 == 0
    assert [p.name for p in tmp_path.iterdir()] == ["listening.browser_secret"]  # no temporary left behind


def test_a_damaged_secret_file_is_reported(tmp_path):
    (tmp_path / "listening.browser_secret").write_text("\n")
    with pytest.raises(ValueError, match="delete it"):
        browser_secret(tmp_path / "listening.sqlite3")


@pytest.mark.parametrize("group", ["model", "gpu"])
def test_build_event_joins_the_given_concurrency_group(tmp_path, group):
    demo = build(tmp_path, concurrency_id=group)
    build_fn = handler(demo, "listening_build_set")
    assert (build_fn.concurrency_id, build_fn.concurrency_limit) == (group, 1)


def test_build_event_defaults_to_the_model_group(tmp_path):
    assert handler(build(tmp_path), "listening_build_set").concurrency_id == "model"


def test_building_on_a_space_needs_a_results_token(tmp_path, monkeypatch):
    with pytest.raises(ListeningError, match="SSD_DEMO_RESULTS_TOKEN"):
        check_build_allowed({"SPACE_ID": "user/demo"})
    check_build_allowed({"SPACE_ID": "user/demo", "SSD_DEMO_RESULTS_TOKEN": "t"})
    check_build_allowed({})  # a local run stays open

    def must_not_render(*args, **kwargs):
        raise AssertionError("refused requests must not render")

    monkeypatch.setattr("ssd_demo.app.listening.service.build_small_set", must_not_render)
    monkeypatch.setenv("SPACE_ID", "user/demo")
    build_fn = handler(build(tmp_path), "listening_build_set").fn
    with pytest.raises(gr.Error, match="no results token is configured"):
        build_fn("")


def test_the_tab_and_results_warn_when_votes_would_be_lost(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the fallback ./data lands here
    monkeypatch.setenv("SPACE_ID", "user/demo")
    monkeypatch.setattr(stimulus_sets, "PERSISTENT_ROOT", tmp_path / "no-persistent-storage")
    demo = build()
    warnings = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "listening-storage-warning"]
    assert len(warnings) == 1 and "lost when it restarts" in warnings[0].value
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", TOKEN)
    text = handler(demo, "listening_results").fn(TOKEN, CURRENT_SET)[0]
    assert "lost when it restarts" in text

    close_listening_apps()
    monkeypatch.setenv("SSD_DEMO_DATA_DIR", str(tmp_path / "explicit"))
    demo = build()
    assert not any(getattr(b, "elem_id", None) == "listening-storage-warning" for b in demo.blocks.values())


def test_messages_name_files_not_server_folders(tmp_path, monkeypatch):
    assert public_message("no stimulus manifest at /srv/app/data/stimuli/x/manifest.json") == (
        "no stimulus manifest at manifest.json"
    )
    assert public_message("[Errno 13] Permission denied: '/data/ssd_demo/listening.sqlite3'") == (
        "[Errno 13] Permission denied: 'listening.sqlite3'"
    )
    assert public_message("choose A/B; scores 1-5; clips/abc.wav") == "choose A/B; scores 1-5; clips/abc.wav"

    # A served set whose manifest is missing: the rater's error names the file only.
    monkeypatch.setenv("SSD_DEMO_STIMULUS_SET", "missing")
    start = handler(build(tmp_path), "listening_start").fn
    with pytest.raises(gr.Error) as caught:
        start("")
    assert "manifest.json" in caught.value.message and str(tmp_path) not in caught.value.message

    # A database from a newer app: the tab's message names the file only.
    db = tmp_path / "newer" / "listening.sqlite3"
    db.parent.mkdir()
    with sqlite3.connect(db) as connection:
        connection.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT, applied_at TEXT)"
        )
        connection.execute("INSERT INTO schema_migrations VALUES (99, 'future', 'now')")
    monkeypatch.setenv("SSD_DEMO_LISTENING_DB", str(db))
    demo = build(tmp_path)
    [message] = [str(b.value) for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert "unavailable" in message and "listening.sqlite3 has schema version 99" in message
    assert str(tmp_path) not in message


def test_a_rater_is_told_when_the_next_clip_is_missing_and_the_vote_is_saved(tmp_path):
    stimulus_set = make_set(tmp_path, "tones")
    demo = build(tmp_path)
    start, submit, clips = (handler(demo, n).fn for n in ("listening_start", "listening_submit", "listening_clips"))
    out = start("")
    listen_in_tab(demo, out[0], out[1])
    other = new_app(tmp_path)  # a second server process, its stimulus set loaded before the clips went
    assert other.resume(out[0]).view.trial_id == out[1]
    for clip in (stimulus_set.root / "clips").glob("*.wav"):
        clip.unlink()
    after = submit(out[0], out[1], "B", None, None)  # the vote is stored and the next trial shown...
    assert after[1] != out[1] and after[2].startswith("**Trial 2 of ")
    with pytest.raises(gr.Error, match="cannot be read") as caught:  # ...whose clips the page cannot get
        clips(after[0], after[1])
    message = caught.value.message
    assert str(tmp_path) not in message and "/" not in message
    assert re.search(r"clip [0-9a-f]+\.wav of stimulus set 'tones' cannot be read", message), message
    with ListeningStore(tmp_path / "listening.sqlite3", app_version="reader") as store:
        assert [a.trial_id for a in answers(store)] == [out[1]]
    # The same after a reload: the rater is told, without the server's folders.
    try:
        assert other.resume(out[0]).view.trial_id == after[1]
        with pytest.raises(ListeningError, match="cannot be read") as caught:
            other.clips(after[0], after[1])
        assert "/" not in str(caught.value)
    finally:
        other.close()

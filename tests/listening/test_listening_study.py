"""Listening studies: the study file, rendering its stimuli, the session API the rater's page uses, and the
schema migration that keeps every A/B vote."""

from __future__ import annotations

from support.paths import REPOSITORY

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ssd_demo.errors import UserError
from ssd_demo.listening import study_sessions
from ssd_demo.listening.errors import (AlreadyVotedError, InvalidAnswerError, ListeningError, NotFetchedError,
                                       NotListenedError, StudyChangedError, StudyFileError, UnknownStudyError,
                                       UnknownTrialError)
from ssd_demo.listening.migrations import MIGRATIONS, SCHEMA_VERSION, TAB_STUDY
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.study import ATTENTION_SYSTEM, LOWPASS_ANCHOR, load_study, parse_study
from ssd_demo.listening.study_sessions import StudyRegistry, list_studies
from ssd_demo.listening.stimuli import parse_system, tone_renderer
from ssd_demo.listening.study_setup import create_study

EXAMPLE = REPOSITORY / "ssd_demo" / "listening" / "data" / "example_study.toml"
SYSTEMS = ("SSD beta=0.3 K=4", "SSD beta=1.0 K=4", "exact speculative K=4")
REVEALING = re.compile(r"\bAR\b|SSD|beta|exact|speculative|anchor|attention|lowpass", re.IGNORECASE)

STUDY_FILE = """
name = "{name}"
instructions = "Use headphones."
systems = ["SSD beta=0.3 K=4", "SSD beta=1.0 K=4", "exact speculative K=4"]
items_per_rater = 3
sentences = ["One sentence.", "Two sentences here.", "Three of them now.", "And a fourth one."]

[mushra]

[abx]
pairs = [["SSD beta=1.0 K=4", "exact speculative K=4"]]

[ab]
pairs = [["AR", "SSD beta=1.0 K=4"]]

[mos]

[attention]
per_block = 1
"""


def write_study(folder: Path, name: str = "pilot", text: str = STUDY_FILE) -> Path:
    path = folder / f"{name}-file.toml"
    path.write_text(text.format(name=name), encoding="utf-8")
    return path


@pytest.fixture()
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)  # tone clips: no waiting for plays to count
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    data = tmp_path / "data"
    create_study(write_study(tmp_path), root=data, render=tone_renderer(seconds=0.2))
    return data


@pytest.fixture()
def registry(root):
    with ListeningStore(root / "listening.sqlite3") as store:
        yield StudyRegistry(store, root)


def answer_for(view) -> dict:
    if view.kind == "mushra":
        return {"scores": {c.label: 50 for c in view.conditions if c.rated}}
    if view.kind == "mos":
        return {"score": 3}
    return {"choice": "A"}


def play_all(runner, view) -> None:
    for condition in view.conditions:
        if condition.must_play:
            runner.fetch_clip(view.session_id, view.trial_id, condition.label)
            runner.record_play(view.session_id, view.trial_id, condition.label)


def test_the_example_study_file_is_valid():
    study = load_study(EXAMPLE)
    assert study.name == "example" and study.reference == "AR" and study.anchors == (LOWPASS_ANCHOR,)
    assert study.kinds == ("mushra", "abx", "mos")
    for system in study.rendered_systems():
        parse_system(system)  # every name renders


@pytest.mark.parametrize("change, message", [
    ('name = "pilot"', "systems"),  # no systems at all
    (STUDY_FILE.replace("[mushra]", "[mushra]\ncolour = 1"), "unknown field"),
    (STUDY_FILE.replace("items_per_rater = 3", "items_per_rater = 9"), "only 4 sentences"),
    (STUDY_FILE.replace('pairs = [["AR", "SSD beta=1.0 K=4"]]', 'pairs = [["AR", "GPT"]]'), "is not the reference"),
    (STUDY_FILE.replace('systems = ["SSD beta=0.3 K=4", "SSD beta=1.0 K=4", "exact speculative K=4"]', "systems = []"),
     "at least one system"),
    (STUDY_FILE.replace("[mos]", "[mos]\nsystems = []"), "at least one"),
    (STUDY_FILE + "\n[surprise]\n", "unknown field"),
    ("name = [", "not valid TOML"),
])
def test_bad_study_files_are_refused_with_the_field_named(change, message):
    with pytest.raises(StudyFileError, match=message):
        parse_study(change.replace("{name}", "pilot"))


def test_creating_a_study_renders_reference_systems_anchor_and_attention_clip(root):
    assert list_studies(root) == ["pilot"]
    study, stimulus_set = study_sessions.load_study_and_stimuli("pilot", root)
    assert set(stimulus_set.systems) == {"AR", *SYSTEMS, LOWPASS_ANCHOR, ATTENTION_SYSTEM}
    item = stimulus_set.items[0]
    reference, _ = sf.read(stimulus_set.clip_path(item.clips["AR"].path))
    anchor, rate = sf.read(stimulus_set.clip_path(item.clips[LOWPASS_ANCHOR].path))
    assert anchor.shape == reference.shape  # aligned sample for sample: switching keeps the position
    high = np.fft.rfftfreq(anchor.size, 1 / rate) > 5000
    power = lambda audio: float((np.abs(np.fft.rfft(audio * np.hanning(audio.size)))[high] ** 2).sum())  # noqa: E731
    assert power(anchor) < 1e-3 * power(reference)  # more than 30 dB down above 5 kHz
    assert item.clips[LOWPASS_ANCHOR].settings["lowpass_hz"] == 3500
    assert not {"beta", "draft_len", "acceptance"} & set(item.clips["AR"].settings)


def test_a_session_serves_every_kind_blind_and_gates_answers(registry):
    runner = registry.runner("pilot")
    session = runner.start_session("rater-1", seed=7)
    # 3 items: 3 MUSHRA + 3 ABX + (3 A/B + 1 check) + (3 items x 4 systems MOS + 1 check)
    assert session.n_trials == 3 + 3 + 4 + 13
    seen_kinds, view = [], runner.next_view(session.session_id)
    while view is not None:
        seen_kinds.append(view.kind)
        shown = json.dumps([view.text, view.instructions, [(c.label, c.clip.name) for c in view.conditions]])
        assert not REVEALING.search(shown)
        assert all(c.clip.is_file() for c in view.conditions)
        if view.kind == "mushra":
            assert view.conditions[0].label == "Reference" and not view.conditions[0].rated
            assert [c.label for c in view.conditions[1:]] == ["A", "B", "C", "D", "E"] and view.scale == (0, 100)
        if view.kind == "abx":
            assert [c.label for c in view.conditions] == ["A", "B", "X"] and view.choices == ("A", "B")
            assert not any(c.rated for c in view.conditions) and all(c.must_play for c in view.conditions)
        with pytest.raises(NotListenedError):
            runner.submit(session.session_id, view.trial_id, answer_for(view))
        play_all(runner, view)
        assert {c.label for c in view.conditions if c.must_play} <= runner.store.study_played(view.trial_id)
        with pytest.raises(ListeningError, match="once every trial"):
            runner.reveal(session.session_id)
        view = runner.submit(session.session_id, view.trial_id, answer_for(view))
    assert seen_kinds[:3] == ["mushra"] * 3 and set(seen_kinds[3:6]) == {"abx"}
    assert re.fullmatch(r"[0-9A-F]{10}", runner.completion_code(session.session_id))
    revealed = runner.reveal(session.session_id)
    assert len(revealed) == session.n_trials and "AR" in revealed[0].systems.values()


def test_answers_out_of_range_or_repeated_are_refused(registry):
    runner = registry.runner("pilot")
    session = runner.start_session(seed=1)
    view = runner.next_view(session.session_id)
    play_all(runner, view)
    labels = [c.label for c in view.conditions if c.rated]
    for bad in ({"scores": {label: 101 for label in labels}}, {"scores": {labels[0]: 5}}, {"score": 3},
                {"scores": {**{label: 5 for label in labels}, "Z": 1}}, {"scores": {label: True for label in labels}},
                {"scores": {label: 2.5 for label in labels}}, "A", None):
        with pytest.raises(InvalidAnswerError):
            runner.submit(session.session_id, view.trial_id, bad)
    good = {"scores": {label: str(10 * i) for i, label in enumerate(labels)}}  # digit strings, as forms send
    runner.submit(session.session_id, view.trial_id, good)
    runner.submit(session.session_id, view.trial_id, good)  # a double click: stored once
    with pytest.raises(AlreadyVotedError):
        runner.submit(session.session_id, view.trial_id, {"scores": {label: 99 for label in labels}})
    with pytest.raises(UnknownTrialError):
        runner.submit(session.session_id, "0" * 32, good)
    rows = registry.store.study_ratings("pilot")
    assert len(rows) == len(labels) and sorted(r.score for r in rows) == [10.0 * i for i in range(len(labels))]
    assert all(r.plays == 1 and r.rater.startswith("session:") for r in rows)


def test_a_play_reported_too_soon_is_refused(registry, monkeypatch):
    from support.clock import ManualClock

    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.9)
    clock = ManualClock()
    monkeypatch.setattr(registry.store, "clock", clock)  # time moves only when the test moves it
    runner = registry.runner("pilot")
    session = runner.start_session(seed=2)
    view = runner.next_view(session.session_id)
    runner.fetch_clip(session.session_id, view.trial_id, "A")
    with pytest.raises(NotListenedError, match="cannot have been played to the end"):
        runner.record_play(session.session_id, view.trial_id, "A")  # the clip is 0.2 s long; no time has passed
    length = view.condition("A").duration_seconds
    clock.advance(0.85 * length)  # 85% of the clip: still too soon
    with pytest.raises(NotListenedError):
        runner.record_play(session.session_id, view.trial_id, "A")
    clock.advance(0.1 * length)  # 95%: it counts
    assert "A" in runner.record_play(session.session_id, view.trial_id, "A")
    with pytest.raises(Exception, match="no sample"):
        runner.record_play(session.session_id, view.trial_id, "Q")


def test_a_play_counts_only_for_a_clip_the_session_fetched(registry, monkeypatch):
    """A script that never downloads a clip cannot report hearing it; the time to hear it runs from the fetch."""
    from support.clock import ManualClock

    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.9)
    clock = ManualClock()
    monkeypatch.setattr(registry.store, "clock", clock)
    runner, store = registry.runner("pilot"), registry.store
    session = runner.start_session(seed=4)
    view = runner.next_view(session.session_id)
    length = view.condition("A").duration_seconds
    clock.advance(10 * length)  # long after the trial was shown: only the missing fetch stands in the way
    with pytest.raises(NotFetchedError, match="never loaded"):
        runner.record_play(session.session_id, view.trial_id, "A")
    fetched_at = clock().isoformat(timespec="microseconds")
    fetched = runner.fetch_clip(session.session_id, view.trial_id, "A")
    assert (fetched.trial_id, fetched.condition("A").clip) == (view.trial_id, view.condition("A").clip)
    with pytest.raises(NotListenedError, match="cannot have been played"):  # shown long ago, but fetched just now
        runner.record_play(session.session_id, view.trial_id, "A")
    clock.advance(0.95 * length)
    assert runner.record_play(session.session_id, view.trial_id, "A") == {"A"}
    with pytest.raises(NotFetchedError):  # fetching A lets A's plays count, no other clip's
        runner.record_play(session.session_id, view.trial_id, "B")
    with pytest.raises(NotListenedError, match="to the end before answering"):
        runner.submit(session.session_id, view.trial_id, answer_for(view))
    # Another session's fetch is no fetch of this one's trial; an unknown label records nothing.
    other = runner.start_session(seed=5)
    with pytest.raises(UnknownTrialError):
        runner.fetch_clip(other.session_id, view.trial_id, "B")
    with pytest.raises(ListeningError, match="no sample"):
        runner.fetch_clip(session.session_id, view.trial_id, "Q")
    assert store.clip_fetches(session.session_id) == [(view.trial_id, "A", fetched_at)]
    assert store.clip_fetches(other.session_id) == []
    assert [label for _, label, _ in store.study_plays(session.session_id)] == ["A"]
    # Every clip that must be heard, fetched and played: the answer is taken.
    for condition in view.conditions:
        if condition.must_play and condition.label != "A":
            runner.fetch_clip(session.session_id, view.trial_id, condition.label)
    clock.advance(sum(c.duration_seconds for c in view.conditions))
    for condition in view.conditions:
        if condition.must_play:
            runner.record_play(session.session_id, view.trial_id, condition.label)
    assert runner.submit(session.session_id, view.trial_id, answer_for(view)).number == 2


def test_several_studies_are_served_at_once_and_sessions_stay_in_theirs(tmp_path, root, registry):
    create_study(write_study(tmp_path, "second"), root=root, render=tone_renderer(seconds=0.2))
    assert registry.names() == ["pilot", "second"]
    first, second = registry.runner("pilot"), registry.runner("second")
    session = first.start_session(seed=3)
    assert registry.runner_for_session(session.session_id) is first
    with pytest.raises(StudyChangedError):
        second.next_view(session.session_id)
    registry.store.invalidate_session(session.session_id, "left after one trial")
    [progress] = registry.store.study_progress_table("pilot")
    assert (progress.session_id, progress.answered, progress.n_trials, progress.invalidated) == (
        session.session_id, 0, session.n_trials, "left after one trial")
    assert registry.store.study_progress_table("second") == []
    with pytest.raises(UnknownStudyError):
        registry.runner("missing")
    with pytest.raises(UnknownStudyError):
        registry.runner("../pilot")


def test_migration_from_v3_keeps_every_vote(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)")
    for version, description, statements in MIGRATIONS[:3]:
        for statement in statements:
            db.execute(statement)
        db.execute("INSERT INTO schema_migrations VALUES (?, ?, 'then')", (version, description))
    db.execute("INSERT INTO sessions VALUES ('s1', 'r', 'set', 'abc', 1, 0, 'then', 'v')")
    db.execute("INSERT INTO trials VALUES ('t1', 's1', 0, 'i', 'text', 'AR', 'SSD', 'a.wav', 'b.wav', 'then')")
    db.execute("""INSERT INTO votes (session_id, rater_id, trial_id, trial_index, stimulus_set, item_id, text, system_a,
                  system_b, choice, preferred_system, score_a, score_b, presented_at, submitted_at, app_version,
                  stimulus_set_sha256, plays_a, plays_b, trial_seconds)
                  VALUES ('s1', 'r', 't1', 0, 'set', 'i', 'text', 'AR', 'SSD', 'A', 'AR', 4, 2, 'then', 'now', 'v',
                  'abc', 1, 1, 3.5)""")
    db.commit()
    db.close()
    with ListeningStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION == 6
        # The vote is now the built-in A/B + MOS study's: an A/B answer, and a MOS answer per score.
        assert store.get_session("s1").study == TAB_STUDY
        assert [a.answer for a in store.study_answers("s1")] == [{"choice": "A"}, {"score": 4}, {"score": 2}]
        rows = [(r.kind, r.system, r.score, r.plays, r.trial_seconds) for r in store.study_ratings(TAB_STUDY)]
        assert rows == [("ab", "AR", 1.0, 1, 3.5), ("ab", "SSD", 0.0, 1, 3.5), ("mos", "AR", 4.0, 1, 3.5),
                        ("mos", "SSD", 2.0, 1, 3.5)]
    with sqlite3.connect(path) as db:  # the first store's row stays as it was
        assert db.execute("SELECT choice, score_a, plays_a FROM votes").fetchall() == [("A", 4, 1)]


@pytest.mark.parametrize("system, message", [
    ("SSD beta=2.0 K=4", r"bad\.toml: system 'SSD beta=2\.0 K=4'.*beta must be between 0 and 1"),
    ("SSD beta=0.3 K=0", r"bad\.toml: system 'SSD beta=0\.3 K=0'.*draft_len must be an integer"),
    ("GPT", r"bad\.toml: unknown system 'GPT'"),
])
def test_bad_system_settings_are_refused_before_rendering_with_the_file_named(tmp_path, system, message):
    path = tmp_path / "bad.toml"
    path.write_text(STUDY_FILE.replace("SSD beta=1.0 K=4", system).replace("{name}", "pilot"), encoding="utf-8")
    rendered: list[str] = []

    def render(*args, **kwargs):  # never reached: the check comes first, even with tones
        rendered.append("called")
        return tone_renderer(seconds=0.1)(*args, **kwargs)

    with pytest.raises(UserError, match=message):
        create_study(path, root=tmp_path / "data", render=render)
    assert rendered == [] and not (tmp_path / "data" / "studies").exists()


def test_an_answer_sooner_than_its_clips_end_to_end_is_refused(registry, monkeypatch):
    from support.clock import ManualClock

    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.9)
    clock = ManualClock()
    monkeypatch.setattr(registry.store, "clock", clock)  # time moves only when the test moves it
    runner = registry.runner("pilot")
    session = runner.start_session(seed=4)
    view = runner.next_view(session.session_id)
    must = [c for c in view.conditions if c.must_play]
    assert len(must) >= 3  # the 0.2-second clips take longer together than any one of them
    longest, together = max(c.duration_seconds for c in must), sum(c.duration_seconds for c in must)
    for condition in must:  # as the page does when it shows the trial
        runner.fetch_clip(session.session_id, view.trial_id, condition.label)
    clock.advance(0.9 * longest + 0.05)  # every single play may count by now...
    for condition in must:
        runner.record_play(session.session_id, view.trial_id, condition.label)
    with pytest.raises(NotListenedError, match="before answering"):  # ...but not all of them one after another
        runner.submit(session.session_id, view.trial_id, answer_for(view))
    clock.advance(0.9 * together)
    assert runner.submit(session.session_id, view.trial_id, answer_for(view)).trial_id != view.trial_id


@pytest.mark.parametrize("bad", ["9" * 100_000, "\u0665\u0660", "\u00b2", "\uff15\uff10", "1e1", "0x10", " 5 0 ",
                                 "5" * 20, 10 ** 100_000, float("nan"), float("inf"), 50.5],
                         ids=["100000-digits", "arabic-indic", "superscript", "fullwidth", "exponent", "hex",
                              "inner-space", "20-digits", "huge-int", "nan", "inf", "fraction"])
def test_a_score_is_a_short_ascii_number_or_a_typed_refusal(registry, bad):
    runner = registry.runner("pilot")
    session = runner.start_session(seed=1)
    view = runner.next_view(session.session_id)
    play_all(runner, view)
    labels = [c.label for c in view.conditions if c.rated]
    with pytest.raises(InvalidAnswerError) as refused:
        runner.submit(session.session_id, view.trial_id, {"scores": {label: bad for label in labels}})
    assert isinstance(refused.value, UserError) and len(str(refused.value)) < 200
    runner.submit(session.session_id, view.trial_id, {"scores": {label: s for label, s in
                                                                 zip(labels, ["+50", " 50 ", "50.0", 50.0] * 4)}})
    assert {r.score for r in registry.store.study_ratings("pilot")} == {50.0}


def test_messages_quote_at_most_a_little_of_what_a_client_sent(registry):
    from ssd_demo.listening.errors import QUOTED_CHARS
    from ssd_demo.listening.answers import normalize_answer

    runner = registry.runner("pilot")
    session = runner.start_session(seed=1)
    view = runner.next_view(session.session_id)
    play_all(runner, view)
    labels = [c.label for c in view.conditions if c.rated]
    huge = "L" * 1_000_000
    for answer in ({"scores": {**{label: 5 for label in labels}, huge: 1}}, {"scores": {label: huge for label in labels}}):
        with pytest.raises(InvalidAnswerError) as refused:
            runner.submit(session.session_id, view.trial_id, answer)
        assert "L" * QUOTED_CHARS not in str(refused.value) and len(str(refused.value)) < 200
    for call in (lambda: runner.record_play(session.session_id, view.trial_id, huge),
                 lambda: normalize_answer("ab", {"choice": huge}, ["A", "B"]),
                 lambda: normalize_answer("mos", {"score": huge}, ["A"]),
                 lambda: normalize_answer("mos", {"score": "\u0663"}, ["A"])):
        with pytest.raises(ListeningError) as refused:
            call()
        assert len(str(refused.value)) < 200


def test_scoring_mushras_reference_says_it_is_not_scored(registry, monkeypatch):
    """A MUSHRA answer that scores the open reference is refused naming it as the reference, not as a sample the
    trial lacks; an answer without it is taken."""
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    runner = registry.runner("pilot")
    session = runner.start_session(seed=3)
    view = runner.next_view(session.session_id)
    while view.kind != "mushra":
        play_all(runner, view)
        runner.submit(session.session_id, view.trial_id, answer_for(view))
        view = runner.next_view(session.session_id)
    play_all(runner, view)
    rated = [c.label for c in view.conditions if c.rated]
    reference = [c.label for c in view.conditions if not c.rated]
    assert reference, view.conditions
    with pytest.raises(InvalidAnswerError, match=f"'{reference[0]}' is the reference .* not scored. Score only "):
        runner.submit(session.session_id, view.trial_id, {"scores": {label: 80 for label in rated + reference}})
    runner.submit(session.session_id, view.trial_id, {"scores": {label: 80 for label in rated}})

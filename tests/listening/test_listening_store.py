"""The listening store, stimulus sets and the A/B tab's built-in study, without a model or a server."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
import soundfile as sf

from ssd_demo.app.listening.service import prune_exports
from ssd_demo.listening import stimulus_sets
from ssd_demo.listening import migrations as migrations_module
from ssd_demo.listening import study_sessions
from ssd_demo.listening.ab_mos import rated_study, tab_ratings, tab_study
from ssd_demo.listening.errors import (AlreadyVotedError, InvalidVoteError, ListeningError, NotFetchedError,
                                       NotListenedError, StudyChangedError, UnknownSessionError, UnknownTrialError)
from ssd_demo.listening.migrations import SCHEMA_VERSION, TAB_STUDY
from ssd_demo.listening.stimuli import create_stimulus_set, parse_system, tone_renderer
from ssd_demo.listening.stimulus_sets import (
                                              current_stimulus_set,
                                              data_dir,
                                              load_stimulus_set,
                                              stimulus_set_by_checksum,
                                              storage_warning,
                                              )
from ssd_demo.listening.study_plan import plan_study
from ssd_demo.listening.study_results import read_long_csv, results_from_long, study_results, write_long_csv
from ssd_demo.listening.study_sessions import StudyRunner
from ssd_demo.listening.study_store import ListeningStore

SYSTEMS = ("AR", "SSD beta=0.3 K=4", "exact speculative")
TEXTS = (
    "The birch canoe slid on the smooth planks.",
    'A "quoted", comma, sentence',
    "Rice is often served in round bowls.",
)


@pytest.fixture()
def stimulus_set(tmp_path):
    return create_stimulus_set(
        "tones", TEXTS, SYSTEMS, tone_renderer(), root=tmp_path, preset="test", model_revision="r1"
    )


@pytest.fixture()
def store(tmp_path):
    with ListeningStore(tmp_path / "votes.sqlite3", app_version="test-1") as s:
        yield s


@pytest.fixture()
def instant(monkeypatch):
    """A play counts at once (the tone clips last 0.3 s); only the gating test keeps the app's rule."""
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)


def tab(store, stimulus_set, ab_trials: int = 3) -> StudyRunner:
    """The tab's built-in study on `stimulus_set`: `ab_trials` A/B trials (3 pairs a sentence), then MOS trials."""
    return StudyRunner(store, tab_study(stimulus_set, ab_trials), stimulus_set)


def listen(store, view):
    """Every clip of a trial played to the end, as the rater's player reports it."""
    for condition in view.conditions:
        store.record_clip_fetch(view.session_id, view.trial_id, condition.label)
        store.record_study_play(view.session_id, view.trial_id, condition.label)


def answers(store) -> list:
    return [a for s in store.study_sessions(TAB_STUDY) for a in store.study_answers(s.session_id)]


def test_parse_system_names():
    assert parse_system("AR").mode == "ar"
    ssd = parse_system("SSD beta=0.3 K=4")
    assert (ssd.mode, ssd.overrides) == ("speculative", {"beta": 0.3, "draft_len": 4, "acceptance": "ssd"})
    exact = parse_system("exact speculative")
    assert exact.overrides == {"acceptance": "exact", "beta": 0.0}
    assert parse_system("SSD beta=0.4 K=3 draft=layers").draft == "layers"
    for bad in ("", "greedy", "SSD K=4", "AR K=2", "SSD beta=x K=4", "exact speculative beta=0.2", "SSD beta=0.3 Q=1"):
        with pytest.raises(ValueError):
            parse_system(bad)


def test_stimulus_set_manifest_and_checksums(stimulus_set, tmp_path):
    manifest = json.loads((stimulus_set.root / "manifest.json").read_text())
    assert manifest["model_revision"] == "r1" and manifest["preset"] == "test"
    assert [s["name"] for s in manifest["systems"]] == list(SYSTEMS)
    assert len(stimulus_set.items) == 3
    for item in stimulus_set.items:
        assert set(item.clips) == set(SYSTEMS)
        seeds = {clip.seed for clip in item.clips.values()}
        assert len(seeds) == 1  # every system renders a sentence with the same seed
        for clip in item.clips.values():
            # File names are content hashes: nothing in a path names the system.
            assert clip.path.startswith("clips/") and clip.sha256.startswith(clip.path[6:-4])
            audio, rate = sf.read(stimulus_set.clip_path(clip.path))
            assert rate == clip.sample_rate and abs(len(audio) / rate - clip.duration_seconds) < 1e-3
    assert current_stimulus_set(tmp_path).manifest_sha256 == stimulus_set.manifest_sha256
    # Tampering with a clip is detected.
    first = stimulus_set.items[0].clips["AR"]
    path = stimulus_set.clip_path(first.path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        load_stimulus_set(stimulus_set.root)


def test_existing_set_is_not_overwritten(stimulus_set, tmp_path):
    with pytest.raises(ValueError, match="already exists"):
        create_stimulus_set("tones", TEXTS, SYSTEMS, tone_renderer(), root=tmp_path)
    with pytest.raises(ValueError, match="two systems"):
        create_stimulus_set("single", TEXTS, ["AR"], tone_renderer(), root=tmp_path)


def test_data_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SSD_DEMO_DATA_DIR", str(tmp_path / "elsewhere"))
    assert data_dir() == (tmp_path / "elsewhere").resolve()
    monkeypatch.delenv("SSD_DEMO_DATA_DIR")
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    assert data_dir() == (tmp_path / "data").resolve()


def test_schema_is_versioned_and_wal(store, tmp_path):
    assert store.schema_version() == SCHEMA_VERSION
    assert store.journal_mode() == "wal"
    store.close()
    # Reopening applies nothing twice.
    with ListeningStore(tmp_path / "votes.sqlite3", app_version="test-1") as again:
        rows = again._connection().execute("SELECT version FROM schema_migrations").fetchall()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.sqlite3"
    ListeningStore(path, app_version="t").close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'now')")
    with pytest.raises(RuntimeError, match="newer"):
        ListeningStore(path, app_version="t")


def test_the_plan_is_random_but_reproducible(stimulus_set):
    study = tab_study(stimulus_set, 9)
    plan = plan_study(study, stimulus_set, seed=7)
    assert plan == plan_study(study, stimulus_set, seed=7)
    assert plan != plan_study(study, stimulus_set, seed=8)
    # 3 sentences x 3 pairs of A/B trials, all distinct, then 3 sentences x 3 systems of MOS trials.
    assert [t.kind for t in plan] == ["ab"] * 9 + ["mos"] * 9
    assert len({(t.item_id, frozenset(c.system for c in t.conditions)) for t in plan if t.kind == "ab"}) == 9
    assert len({(t.item_id, t.conditions[0].system) for t in plan if t.kind == "mos"}) == 9
    # Positions are randomised: over many sessions each system lands in both positions.
    positions = {(c.system, c.label) for s in range(20) for t in plan_study(study, stimulus_set, s)
                 if t.kind == "ab" for c in t.conditions}
    assert positions == {(s, p) for s in SYSTEMS for p in "AB"}
    # About the asked number of A/B trials: whole sentences, never more than the set has.
    assert [tab_study(stimulus_set, n).items_per_rater for n in (1, 3, 4, 9, 50)] == [1, 1, 2, 3, 3]
    with pytest.raises(ListeningError, match="between 1 and"):
        tab_study(stimulus_set, 0)


def test_an_answer_stores_everything_and_once(store, stimulus_set, instant):
    runner = tab(store, stimulus_set)
    session = runner.start_session(rater_id="  rater-7 ", seed=1)
    view = runner.next_view(session.session_id)
    assert view.progress_label == "Trial 1 of 6" and view.kind == "ab" and view.choices == ("A", "B", "none")
    listen(store, view)
    outcome = store.submit_answer(session.session_id, view.trial_id, {"choice": "B"})
    assert outcome.stored
    trial = store.get_study_trial(session.session_id, view.trial_id)
    systems = {c.label: c.system for c in trial.conditions}
    rows = store.study_ratings(TAB_STUDY)
    assert [(r.rater, r.label, r.system, r.other_system, r.score) for r in rows] == [
        ("rater-7", "A", systems["A"], systems["B"], 0.0), ("rater-7", "B", systems["B"], systems["A"], 1.0)]
    stored = outcome.answer
    assert stored.app_version == "test-1" and stored.presented_at <= stored.submitted_at
    assert store.get_session(session.session_id).stimulus_set == "tones"
    # The same submission again stores nothing and returns the stored answer.
    again = store.submit_answer(session.session_id, view.trial_id, {"choice": "B"})
    assert not again.stored and again.answer == stored
    # A different answer on an answered trial is refused.
    with pytest.raises(AlreadyVotedError):
        store.submit_answer(session.session_id, view.trial_id, {"choice": "A"})
    assert len(answers(store)) == 1 and store.study_progress(session.session_id) == (1, 6)
    assert runner.next_view(session.session_id).number == 2


@pytest.mark.parametrize(
    "change, error",
    [
        ({"answer": {"choice": "C"}}, InvalidVoteError),
        ({"answer": {"choice": None}}, InvalidVoteError),
        ({"answer": {"choice": "A", "score": 3}}, InvalidVoteError),
        ({"answer": {"score": 4}}, InvalidVoteError),
        ({"answer": "A"}, InvalidVoteError),
        ({"session_id": "0" * 32}, UnknownSessionError),
        ({"session_id": "'; DROP TABLE answers; --"}, UnknownSessionError),
        ({"trial_id": "f" * 32}, UnknownTrialError),
        ({"trial_id": ""}, UnknownTrialError),
    ],
)
def test_bad_answers_store_nothing(store, stimulus_set, change, error):
    runner = tab(store, stimulus_set)
    session = runner.start_session(seed=3)
    view = runner.next_view(session.session_id)
    listen(store, view)
    request = {"session_id": session.session_id, "trial_id": view.trial_id, "answer": {"choice": "A"}, **change}
    with pytest.raises(error):
        store.submit_answer(**request)
    assert answers(store) == []


@pytest.mark.parametrize("score", [6, 0, 3.5, True, "five", None, "\u0663"])
def test_bad_naturalness_scores_store_nothing(store, stimulus_set, score):
    runner = tab(store, stimulus_set, ab_trials=1)
    session = runner.start_session(seed=3)
    for _ in range(3):  # the A/B trials first
        view = runner.next_view(session.session_id)
        listen(store, view)
        store.submit_answer(session.session_id, view.trial_id, {"choice": "none"})
    view = runner.next_view(session.session_id)
    assert view.kind == "mos" and view.scale == (1, 5) and [c.label for c in view.conditions] == ["A"]
    listen(store, view)
    with pytest.raises(InvalidVoteError):
        store.submit_answer(session.session_id, view.trial_id, {"score": score})
    assert len(answers(store)) == 3
    store.submit_answer(session.session_id, view.trial_id, {"score": "4"})
    assert [r.score for r in store.study_ratings(TAB_STUDY) if r.kind == "mos"] == [4.0]


@pytest.mark.parametrize("rater_id", ["=HYPERLINK(1)", "@cmd", "x" * 65, "tab\there"])
def test_bad_rater_ids_are_refused(store, stimulus_set, rater_id):
    with pytest.raises(InvalidVoteError):
        tab(store, stimulus_set).start_session(rater_id=rater_id, seed=1)
    assert store.study_sessions(TAB_STUDY) == []


def test_trial_of_another_session_is_refused(store, stimulus_set):
    runner = tab(store, stimulus_set)
    mine = runner.start_session(seed=1)
    theirs = runner.start_session(seed=2)
    their_trial = runner.next_view(theirs.session_id).trial_id
    with pytest.raises(UnknownTrialError):
        store.submit_answer(mine.session_id, their_trial, {"choice": "A"})
    assert answers(store) == []


def test_unique_constraint_holds_without_the_app(store, stimulus_set):
    # The database itself refuses a second answer for a trial, whatever code writes to it.
    runner = tab(store, stimulus_set)
    session = runner.start_session(seed=1)
    view = runner.next_view(session.session_id)
    listen(store, view)
    store.submit_answer(session.session_id, view.trial_id, {"choice": "none"})
    with pytest.raises(sqlite3.IntegrityError):
        store._connection().execute(
            "INSERT INTO answers (trial_id, session_id, kind, answer, submitted_at, app_version) "
            "SELECT trial_id, session_id, kind, answer, 'now', 'v' FROM answers")
    with pytest.raises(sqlite3.IntegrityError):  # CHECK: an A/B rating is 0, 0.5 or 1
        store._connection().execute("UPDATE ratings SET score = 9")


def test_concurrent_double_submission_stores_once(store, stimulus_set):
    runner = tab(store, stimulus_set)
    session = runner.start_session(seed=1)
    view = runner.next_view(session.session_id)
    listen(store, view)
    outcomes = []
    barrier = threading.Barrier(8)

    def vote() -> None:
        barrier.wait()
        outcomes.append(store.submit_answer(session.session_id, view.trial_id, {"choice": "A"}))

    threads = [threading.Thread(target=vote) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(o.stored for o in outcomes) == 1 and len(outcomes) == 8
    assert len(answers(store)) == 1 and len(store.study_ratings(TAB_STUDY)) == 2


def complete(store, runner, session_id, choices=("A", "none", "B"), score=3) -> None:
    """Answer every trial of a session: the A/B trials with `choices` in turn, the MOS trials with `score`."""
    view, turn = runner.next_view(session_id), 0
    while view is not None:
        listen(store, view)
        answer = {"choice": choices[turn % len(choices)]} if view.kind == "ab" else {"score": score}
        turn += 1
        view = runner.submit(session_id, view.trial_id, answer)


def test_csv_round_trip(store, stimulus_set, tmp_path, instant):
    runner = tab(store, stimulus_set)
    for seed, rater in ((1, None), (2, 'r,2 "x"')):
        complete(store, runner, runner.start_session(rater_id=rater, seed=seed).session_id)
    results = study_results(store, runner.study, stimulus_set.manifest_sha256)
    assert len(results.rows) == 2 * (3 * 2 + 3)  # per session: 3 A/B answers of 2 ratings, 3 MOS scores
    path = write_long_csv(results.rows, tmp_path / "votes.csv")
    assert tuple(read_long_csv(path)) == results.rows
    assert results_from_long(read_long_csv(path), runner.study, stimulus_set.manifest_sha256) == results
    assert {row.rater for row in results.rows} >= {'r,2 "x"'}
    with pytest.raises(ValueError, match="not a study export"):
        (tmp_path / "other.csv").write_text("a,b\n1,2\n")
        read_long_csv(tmp_path / "other.csv")


def test_render_with_a_synthesizer_and_the_cli(tmp_path, capsys):
    from support.toy_backend import TOY_KEY, register_toy_preset

    from ssd_demo.__main__ import main as cli

    register_toy_preset()
    code = cli(
        [
            "stimuli",
            "--name",
            "toy-set",
            "--preset",
            TOY_KEY,
            "--data-dir",
            str(tmp_path),
            "--count",
            "2",
            "--systems",
            "AR",
            "SSD beta=0.3 K=4",
            "exact speculative K=2 draft=copy",
            "--seed",
            "5",
        ]
    )
    assert code == 0 and "wrote 6 clips" in capsys.readouterr().out
    rendered = load_stimulus_set(tmp_path / "stimuli" / "toy-set")
    manifest = json.loads((rendered.root / "manifest.json").read_text())
    assert manifest["preset"] == TOY_KEY and manifest["model_revision"]
    clips = {c["system"]: c for c in manifest["items"][1]["clips"]}
    assert clips["AR"]["settings"]["mode"] == "ar" and clips["AR"]["seed"] == 6
    ssd = clips["SSD beta=0.3 K=4"]["settings"]
    assert (ssd["mode"], ssd["acceptance"], ssd["beta"], ssd["draft_len"], ssd["draft"]) == (
        "speculative",
        "ssd",
        0.3,
        4,
        "small",
    )
    exact = clips["exact speculative K=2 draft=copy"]["settings"]
    assert (exact["acceptance"], exact["beta"], exact["draft_len"], exact["draft"]) == ("exact", 0.0, 2, "copy")
    assert all(c["duration_seconds"] > 0 for c in clips.values())
    # A bad system name fails before any model is loaded, with a one-line error.
    assert (
        cli(["stimuli", "--name", "bad", "--preset", TOY_KEY, "--data-dir", str(tmp_path), "--systems", "AR", "greedy"])
        == 2
    )
    assert "unknown system" in capsys.readouterr().err


@pytest.mark.slow
def test_small_set_with_the_embedded_voice(tmp_path):
    from ssd_demo.backends.embedded import DEFAULT_PATH

    if not (DEFAULT_PATH / "target").is_dir():
        pytest.skip("the embedded voice (assets/embedded) is not built yet")
    from ssd_demo.listening.stimuli import build_small_set

    stimulus_set = build_small_set(tmp_path, n_sentences=1)
    assert len(stimulus_set.items) == 1 and len(stimulus_set.items[0].clips) == 3
    assert stimulus_set.model_revision != "unknown"
    assert (
        build_small_set(tmp_path, n_sentences=1).manifest_sha256 == stimulus_set.manifest_sha256
    )  # reused, not re-rendered


def test_model_revision_hashes_the_weight_folders(tmp_path):
    from types import SimpleNamespace

    from ssd_demo.listening.stimuli import model_revision

    def model(folder):
        return SimpleNamespace(config=SimpleNamespace(_name_or_path=str(folder)))

    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(name.encode())
    synth = SimpleNamespace(target=model(tmp_path / "target"), drafts={"d": model(tmp_path / "draft")})
    first = model_revision(synth)
    assert first.startswith("sha256:") and first == model_revision(synth)
    (tmp_path / "draft" / "model.safetensors").write_bytes(b"retrained")
    assert model_revision(synth) != first
    assert model_revision(SimpleNamespace(target=model(""), drafts={})) == "unknown"
    assert model_revision(SimpleNamespace(revision="v1.2")) == "v1.2"


def test_sessions_of_a_replaced_set_are_refused_before_storing(store, stimulus_set, tmp_path):
    old = tab(store, stimulus_set)
    session = old.start_session(seed=1)
    view = old.next_view(session.session_id)
    listen(store, view)
    replacement = create_stimulus_set("tones2", TEXTS[:2], SYSTEMS[:2], tone_renderer(), root=tmp_path)
    new = tab(store, replacement)
    with pytest.raises(StudyChangedError, match="rebuilt"):
        new.submit(session.session_id, view.trial_id, {"choice": "A"})
    assert answers(store) == []


def test_answers_record_the_stimulus_set_checksum(store, stimulus_set, tmp_path, instant):
    other = create_stimulus_set("tones2", TEXTS[:2], SYSTEMS[:2], tone_renderer(), root=tmp_path)
    for chosen in (stimulus_set, other, stimulus_set):
        runner = tab(store, chosen, ab_trials=1)
        session = runner.start_session(seed=3)
        view = runner.next_view(session.session_id)
        listen(store, view)
        runner.submit(session.session_id, view.trial_id, {"choice": "A"})
    assert [row[:2] for row in store.study_versions(TAB_STUDY)] == [
        ("tones", stimulus_set.manifest_sha256), ("tones2", other.manifest_sha256)]
    assert [row[2] for row in store.study_versions(TAB_STUDY)] == [2, 1]
    assert {r.stimulus_set_sha256 for r in tab_ratings(store, "tones", None)} == {stimulus_set.manifest_sha256}
    assert len(tab_ratings(store, "tones", stimulus_set.manifest_sha256)) == 2 * 2
    assert tab_ratings(store, "tones", "0" * 64) == []
    # The long CSV carries the stimulus version, so an exported study can be split by set.
    rows = study_results(store, rated_study(store.study_ratings(TAB_STUDY))).rows
    assert {row.stimulus_version for row in rows} == {stimulus_set.manifest_sha256, other.manifest_sha256}


def test_migration_backfills_the_checksum_of_old_votes(tmp_path, stimulus_set, monkeypatch):
    path = tmp_path / "old.sqlite3"
    monkeypatch.setattr(migrations_module, "MIGRATIONS", migrations_module.MIGRATIONS[:1])
    monkeypatch.setattr(migrations_module, "SCHEMA_VERSION", 1)
    ListeningStore(path, app_version="old").close()
    monkeypatch.undo()
    item = stimulus_set.items[0]
    with sqlite3.connect(path) as db:  # a vote as the version-1 app stored it: no checksum, no plays
        db.execute("INSERT INTO sessions VALUES ('s1', NULL, 'tones', ?, 1, 1, 'then', 'old')",
                   (stimulus_set.manifest_sha256,))
        db.execute("INSERT INTO trials VALUES ('t1', 's1', 0, ?, ?, 'AR', 'exact speculative', ?, ?, NULL)",
                   (item.item_id, item.text, item.clips["AR"].path, item.clips["exact speculative"].path))
        db.execute("""INSERT INTO votes (session_id, rater_id, trial_id, trial_index, stimulus_set, item_id, text,
                          system_a, system_b, choice, preferred_system, submitted_at, app_version)
                      VALUES ('s1', NULL, 't1', 0, 'tones', ?, ?, 'AR', 'exact speculative', 'none', NULL, 'now',
                          'old')""", (item.item_id, item.text))
    with ListeningStore(path, app_version="new") as new:
        assert new.schema_version() == SCHEMA_VERSION == 6
        assert new.get_session("s1").study == TAB_STUDY
        [answer] = new.study_answers("s1")
        assert answer.answer == {"choice": "none"} and answer.app_version == "old"
        # Plays were not recorded then (no play is counted), and this vote has no presentation time either.
        rows = new.study_ratings(TAB_STUDY)
        assert [(r.system, r.score, r.plays, r.trial_seconds, r.stimulus_set_sha256) for r in rows] == [
            ("AR", 0.5, 0, None, stimulus_set.manifest_sha256),
            ("exact speculative", 0.5, 0, None, stimulus_set.manifest_sha256)]
        # The session's plan and its clips came along: a runner on the same set shows the session as done.
        assert tab(new, stimulus_set).next_view("s1") is None


def test_migration_6_keeps_an_open_trial_and_its_plays_and_new_plays_need_a_fetch(tmp_path, stimulus_set, monkeypatch,
                                                                                  instant):
    path = tmp_path / "v5.sqlite3"
    with monkeypatch.context() as schema_5:
        schema_5.setattr(migrations_module, "MIGRATIONS", migrations_module.MIGRATIONS[:5])
        schema_5.setattr(migrations_module, "SCHEMA_VERSION", 5)
        with ListeningStore(path, app_version="v5") as old:  # a trial half heard, as schema 5 stored it
            runner = tab(old, stimulus_set, ab_trials=1)
            session = runner.start_session(seed=1)
            view = runner.next_view(session.session_id)
            old._connection().execute("INSERT INTO study_plays (session_id, trial_id, label, completed_at) "
                                      "VALUES (?, ?, 'A', ?)", (session.session_id, view.trial_id, old.now()))
    with ListeningStore(path, app_version="v6") as new:
        assert new.schema_version() == SCHEMA_VERSION == 6
        versions = [row[0] for row in new._connection().execute("SELECT version FROM schema_migrations")]
        assert versions == [1, 2, 3, 4, 5, 6]
        runner = tab(new, stimulus_set, ab_trials=1)
        resumed = runner.next_view(session.session_id)
        assert resumed.trial_id == view.trial_id and resumed.played == {"A"}  # the play from before still counts
        assert new.clip_fetches(session.session_id) == []
        with pytest.raises(NotFetchedError):
            runner.record_play(session.session_id, view.trial_id, "B")
        runner.fetch_clip(session.session_id, view.trial_id, "B")
        assert runner.record_play(session.session_id, view.trial_id, "B") == {"A", "B"}
        runner.submit(session.session_id, view.trial_id, {"choice": "A"})
        assert sorted((r.label, r.plays) for r in new.study_ratings(TAB_STUDY)) == [("A", 1), ("B", 1)]


def test_a_session_finds_its_set_only_while_unchanged(stimulus_set, tmp_path):
    name, sha = stimulus_set.name, stimulus_set.manifest_sha256
    assert stimulus_set_by_checksum(tmp_path, name, sha).manifest_sha256 == sha
    assert stimulus_set_by_checksum(tmp_path, name, "0" * 64) is None
    assert stimulus_set_by_checksum(tmp_path, "../etc", sha) is None
    create_stimulus_set(name, TEXTS[:1], SYSTEMS[:2], tone_renderer(), root=tmp_path, overwrite=True)
    assert stimulus_set_by_checksum(tmp_path, name, sha) is None  # rebuilt: other audio under the same name


def test_storage_warning_only_on_a_space_without_persistent_storage(tmp_path):
    missing, writable = tmp_path / "no-data", tmp_path
    space = {"SPACE_ID": "user/demo"}
    assert storage_warning({}, persistent=missing) is None  # not a Space: ./data is the user's own folder
    assert "lost when it restarts" in storage_warning(space, persistent=missing)
    assert storage_warning(space, persistent=writable) is None
    assert storage_warning({**space, "SSD_DEMO_DATA_DIR": "/somewhere"}, persistent=missing) is None
    assert storage_warning({**space, "SSD_DEMO_DATA_DIR": "  "}, persistent=missing) is not None


def test_data_dir_uses_persistent_storage_on_a_space(monkeypatch, tmp_path):
    monkeypatch.delenv("SSD_DEMO_DATA_DIR", raising=False)
    monkeypatch.setenv("SPACE_ID", "user/demo")
    monkeypatch.setattr(stimulus_sets, "PERSISTENT_ROOT", tmp_path)
    assert data_dir() == tmp_path / "ssd_demo"


def test_old_exports_are_pruned(tmp_path):
    names = [f"listening_votes_2026010{d}T000000.000000Z.csv" for d in range(1, 9)]
    for name in names:
        (tmp_path / name).write_text("x")
    (tmp_path / "other.csv").write_text("kept")
    removed = prune_exports(tmp_path, keep=3)
    assert sorted(p.name for p in removed) == names[:5]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[5:], "other.csv"])
    with pytest.raises(ValueError):
        prune_exports(tmp_path, keep=-1)


def test_an_answer_needs_its_clips_played_to_the_end(store, stimulus_set, monkeypatch):
    runner = tab(store, stimulus_set, ab_trials=1)
    session = runner.start_session(seed=1)
    view = runner.next_view(session.session_id)
    with pytest.raises(NotListenedError, match="samples A, B"):
        runner.submit(session.session_id, view.trial_id, {"choice": "none"})
    # A clip the session was never served cannot have been heard, whatever the time.
    with pytest.raises(NotFetchedError, match="never loaded"):
        store.record_study_play(session.session_id, view.trial_id, "A")
    runner.fetch_clip(session.session_id, view.trial_id, "A", "B")  # both at once, as the tab sends them
    [(_, first, at_a), (_, second, at_b)] = store.clip_fetches(session.session_id)
    assert (first, second) == ("A", "B") and at_a == at_b
    # The tone clips last 0.3 s: a play reported at once after the fetch cannot have been heard.
    with pytest.raises(NotListenedError, match="cannot have been played to the end yet"):
        runner.record_play(session.session_id, view.trial_id, "A")
    with pytest.raises(InvalidVoteError):
        store.record_study_play(session.session_id, view.trial_id, "C")
    with pytest.raises(InvalidVoteError):
        store.record_clip_fetch(session.session_id, view.trial_id, "C")
    assert store.record_study_play(session.session_id, view.trial_id, "A") == {"A"}
    with pytest.raises(NotListenedError, match="sample B"):
        store.submit_answer(session.session_id, view.trial_id, {"choice": "A"})
    assert answers(store) == [] and store.completion_code(session.session_id) is None
    store.record_study_play(session.session_id, view.trial_id, "B")
    store.record_study_play(session.session_id, view.trial_id, "B")
    assert runner.next_view(session.session_id).played == {"A", "B"}  # a reload keeps the controls unlocked
    store.submit_answer(session.session_id, view.trial_id, {"choice": "A"})
    assert sorted((r.label, r.plays) for r in store.study_ratings(TAB_STUDY)) == [("A", 1), ("B", 2)]
    assert [label for _, label, _ in store.study_plays(session.session_id)] == ["A", "B", "B"]
    # The last answer in: a completion code, made once and stored.
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    complete(store, runner, session.session_id)
    code = store.completion_code(session.session_id)
    assert code and len(code) == 10 and store.completion_code(session.session_id) == code


def test_the_experimenter_view_is_off_without_a_token(monkeypatch):
    from ssd_demo.app.listening.service import check_results_token

    monkeypatch.delenv("SSD_DEMO_RESULTS_TOKEN", raising=False)
    with pytest.raises(ListeningError, match="no results token is configured"):
        check_results_token("")
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "t")
    with pytest.raises(ListeningError, match="enter the results token"):
        check_results_token("wrong")
    check_results_token("t")

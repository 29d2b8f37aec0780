"""The listening-test store, stimulus sets and sessions, without a model or a server."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
import soundfile as sf

from ssd_demo.listening import stimulus_sets
from ssd_demo.listening import migrations as migrations_module
from ssd_demo.listening.export import COLUMNS, prune_exports, read_votes_csv, write_votes_csv
from ssd_demo.listening.sessions import ClipUnavailableError, ListeningTest, plan_trials
from ssd_demo.listening.stimuli import create_stimulus_set, parse_system, tone_renderer
from ssd_demo.listening.stimulus_sets import (
                                              current_stimulus_set,
                                              data_dir,
                                              load_stimulus_set,
                                              stimulus_set_by_checksum,
                                              storage_warning,
                                              )
from ssd_demo.listening.store import (
                                      SCHEMA_VERSION,
                                      AlreadyVotedError,
                                      InvalidVoteError,
                                      ListeningError,
                                      ListeningStore,
                                      UnknownSessionError,
                                      UnknownTrialError,
                                      )

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


def listen(store, session_id, trial_id):
    """Both clips of a trial played to the end, as the rater's player reports it."""
    for clip in ("A", "B"):
        store.record_play(session_id, trial_id, clip)


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


def test_plan_is_random_but_reproducible(stimulus_set):
    plan = plan_trials(stimulus_set, 9, seed=7)
    assert plan == plan_trials(stimulus_set, 9, seed=7)
    assert plan != plan_trials(stimulus_set, 9, seed=8)
    # 3 sentences x 3 pairs: all distinct, each pair of different systems.
    assert len({(t.item_id, frozenset((t.system_a, t.system_b))) for t in plan}) == 9
    assert all(t.system_a != t.system_b for t in plan)
    # Positions are randomised: over many sessions each system lands in both positions.
    positions = {(t.system_a, "A") for s in range(20) for t in plan_trials(stimulus_set, 9, seed=s)}
    positions |= {(t.system_b, "B") for s in range(20) for t in plan_trials(stimulus_set, 9, seed=s)}
    assert positions == {(s, p) for s in SYSTEMS for p in "AB"}
    assert len(plan_trials(stimulus_set, 50, seed=1)) == 9  # never more than the distinct trials


def test_vote_stores_everything_and_once(store, stimulus_set):
    test = ListeningTest(store, stimulus_set)
    session = test.start_session(rater_id="  rater-7 ", n_trials=3, seed=1)
    view = test.next_view(session.session_id)
    assert view.progress_label == "Trial 1 of 3"
    listen(store, session.session_id, view.trial_id)
    outcome = store.submit_vote(session.session_id, view.trial_id, "B", "4", 5)
    assert outcome.stored
    vote = outcome.vote
    trial = store.get_trial(session.session_id, view.trial_id)
    assert (vote.rater_id, vote.system_a, vote.system_b, vote.preferred_system) == (
        "rater-7",
        trial.system_a,
        trial.system_b,
        trial.system_b,
    )
    assert (vote.score_a, vote.score_b, vote.app_version, vote.stimulus_set) == (4, 5, "test-1", "tones")
    assert vote.presented_at is not None and vote.presented_at <= vote.submitted_at
    # The same submission again stores nothing and returns the stored vote.
    again = store.submit_vote(session.session_id, view.trial_id, "B", 4, "5")
    assert not again.stored and again.vote == vote
    # A different vote on an answered trial is refused.
    with pytest.raises(AlreadyVotedError):
        store.submit_vote(session.session_id, view.trial_id, "A", 4, 5)
    assert store.count_votes() == 1
    assert store.progress(session.session_id) == (1, 3)
    assert test.next_view(session.session_id).number == 2


@pytest.mark.parametrize(
    "change, error",
    [
        ({"choice": "C"}, InvalidVoteError),
        ({"choice": None}, InvalidVoteError),
        ({"score_a": 6}, InvalidVoteError),
        ({"score_a": 0}, InvalidVoteError),
        ({"score_b": 3.5}, InvalidVoteError),
        ({"score_b": True}, InvalidVoteError),
        ({"score_b": "five"}, InvalidVoteError),
        ({"session_id": "0" * 32}, UnknownSessionError),
        ({"session_id": "'; DROP TABLE votes; --"}, UnknownSessionError),
        ({"trial_id": "f" * 32}, UnknownTrialError),
        ({"trial_id": ""}, UnknownTrialError),
    ],
)
def test_bad_votes_store_nothing(store, stimulus_set, change, error):
    test = ListeningTest(store, stimulus_set)
    session = test.start_session(n_trials=2, seed=3)
    view = test.next_view(session.session_id)
    vote = {
        "session_id": session.session_id,
        "trial_id": view.trial_id,
        "choice": "A",
        "score_a": 3,
        "score_b": None,
        **change,
    }
    with pytest.raises(error):
        store.submit_vote(**vote)
    assert store.count_votes() == 0


@pytest.mark.parametrize("rater_id", ["=HYPERLINK(1)", "@cmd", "x" * 65, "tab\there"])
def test_bad_rater_ids_are_refused(store, stimulus_set, rater_id):
    with pytest.raises(InvalidVoteError):
        ListeningTest(store, stimulus_set).start_session(rater_id=rater_id, n_trials=1, seed=1)
    assert store.count_sessions() == 0


def test_trial_of_another_session_is_refused(store, stimulus_set):
    test = ListeningTest(store, stimulus_set)
    mine = test.start_session(n_trials=2, seed=1)
    theirs = test.start_session(n_trials=2, seed=2)
    their_trial = test.next_view(theirs.session_id).trial_id
    with pytest.raises(UnknownTrialError):
        store.submit_vote(mine.session_id, their_trial, "A")
    assert store.count_votes() == 0


def test_unique_constraint_holds_without_the_app(store, stimulus_set):
    # The database itself refuses a second row for a trial, whatever code writes to it.
    test = ListeningTest(store, stimulus_set)
    session = test.start_session(n_trials=1, seed=1)
    trial = test.next_view(session.session_id)
    listen(store, session.session_id, trial.trial_id)
    store.submit_vote(session.session_id, trial.trial_id, "none")
    with pytest.raises(sqlite3.IntegrityError):
        store._connection().execute(
            "INSERT INTO votes (session_id, trial_id, trial_index, stimulus_set, item_id, text, system_a, system_b, choice,"
            " submitted_at, app_version) SELECT session_id, trial_id, 0, 's', 'i', 't', 'x', 'y', 'none', 'now', 'v' FROM votes"
        )
    with pytest.raises(sqlite3.IntegrityError):  # CHECK: a score outside 1..5
        store._connection().execute("UPDATE votes SET score_a = 9")


def test_concurrent_double_submission_stores_once(store, stimulus_set):
    test = ListeningTest(store, stimulus_set)
    session = test.start_session(n_trials=1, seed=1)
    trial = test.next_view(session.session_id)
    listen(store, session.session_id, trial.trial_id)
    outcomes = []
    barrier = threading.Barrier(8)

    def vote() -> None:
        barrier.wait()
        outcomes.append(store.submit_vote(session.session_id, trial.trial_id, "A", 5, 2))

    threads = [threading.Thread(target=vote) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(o.stored for o in outcomes) == 1 and len(outcomes) == 8
    assert store.count_votes() == 1


def test_csv_round_trip(store, stimulus_set, tmp_path):
    test = ListeningTest(store, stimulus_set)
    for seed, rater in ((1, None), (2, 'r,2\n"x"')):
        session = test.start_session(rater_id=rater.replace("\n", " ") if rater else None, n_trials=3, seed=seed)
        for choice, a, b in (("A", 5, None), ("none", None, None), ("B", 1, 3)):
            view = test.next_view(session.session_id)
            listen(store, session.session_id, view.trial_id)
            store.submit_vote(session.session_id, view.trial_id, choice, a, b)
    votes = store.votes()
    assert len(votes) == 6
    path = write_votes_csv(votes, tmp_path / "votes.csv")
    assert read_votes_csv(path) == votes
    with pytest.raises(ValueError, match="not a vote export"):
        (tmp_path / "other.csv").write_text("a,b\n1,2\n")
        read_votes_csv(tmp_path / "other.csv")


def test_render_with_a_synthesizer_and_the_cli(tmp_path, capsys):
    from toy_backend import TOY_KEY, register_toy_preset

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
    old = ListeningTest(store, stimulus_set)
    session = old.start_session(n_trials=2, seed=1)
    trial = old.next_view(session.session_id)
    listen(store, session.session_id, trial.trial_id)
    replacement = create_stimulus_set("tones2", TEXTS[:2], SYSTEMS[:2], tone_renderer(), root=tmp_path)
    new = ListeningTest(store, replacement)
    with pytest.raises(ListeningError, match="no longer served"):
        new.submit(session.session_id, trial.trial_id, "A")
    assert store.count_votes() == 0


def test_votes_record_the_stimulus_set_checksum(store, stimulus_set, tmp_path):
    other = create_stimulus_set("tones2", TEXTS[:2], SYSTEMS[:2], tone_renderer(), root=tmp_path)
    for chosen in (stimulus_set, other, stimulus_set):
        test = ListeningTest(store, chosen)
        session = test.start_session(n_trials=1, seed=3)
        trial_id = test.next_view(session.session_id).trial_id
        listen(store, session.session_id, trial_id)
        test.submit(session.session_id, trial_id, "A")
    votes = store.votes()
    assert [(v.stimulus_set, v.stimulus_set_sha256) for v in votes] == [
        ("tones", stimulus_set.manifest_sha256),
        ("tones2", other.manifest_sha256),
        ("tones", stimulus_set.manifest_sha256),
    ]
    assert store.votes_for_set("tones", stimulus_set.manifest_sha256) == [votes[0], votes[2]]
    assert store.votes_for_set("tones", "0" * 64) == []
    assert store.voted_sets() == [("tones", stimulus_set.manifest_sha256, 2), ("tones2", other.manifest_sha256, 1)]
    # The CSV carries both set columns, so an exported study can be split by set.
    assert {"stimulus_set", "stimulus_set_sha256"} <= set(COLUMNS)
    assert read_votes_csv(write_votes_csv(votes, tmp_path / "v.csv")) == votes


def test_migration_backfills_the_checksum_of_old_votes(tmp_path, stimulus_set, monkeypatch):
    path = tmp_path / "old.sqlite3"
    monkeypatch.setattr(migrations_module, "MIGRATIONS", migrations_module.MIGRATIONS[:1])
    monkeypatch.setattr(migrations_module, "SCHEMA_VERSION", 1)
    with ListeningStore(path, app_version="old") as old:
        test = ListeningTest(old, stimulus_set)
        session = test.start_session(n_trials=1, seed=1)
        trial = old.next_trial(session.session_id)
        # The version-1 schema has no checksum column: insert the way that app did.
        old._connection().execute(
            """INSERT INTO votes (session_id, rater_id, trial_id, trial_index, stimulus_set, item_id, text, system_a,
                   system_b, choice, preferred_system, submitted_at, app_version)
               SELECT session_id, NULL, trial_id, trial_index, 'tones', item_id, text, system_a, system_b, 'none',
                   NULL, 'now', 'old' FROM trials WHERE trial_id = ?""",
            (trial.trial_id,),
        )
    monkeypatch.undo()
    with ListeningStore(path, app_version="new") as new:
        assert new.schema_version() == SCHEMA_VERSION == 4
        [vote] = new.votes()
        assert vote.stimulus_set_sha256 == stimulus_set.manifest_sha256
        # Version 3: plays were not recorded then (NULL, not zero); this vote has no presentation time either.
        assert (vote.plays_a, vote.plays_b, vote.trial_seconds) == (None, None, None)


def test_a_vote_is_stored_even_when_the_next_clip_cannot_be_read(store, stimulus_set):
    test = ListeningTest(store, stimulus_set)
    session = test.start_session(n_trials=3, seed=5)
    first = test.next_view(session.session_id)
    second = plan_trials(stimulus_set, 3, 5)[1]
    stimulus_set.clip_path(second.clip_b).unlink()
    listen(store, session.session_id, first.trial_id)
    with pytest.raises(ClipUnavailableError) as caught:
        test.submit(session.session_id, first.trial_id, "A", 4, None)
    message = str(caught.value)
    assert "vote was saved" in message and second.clip_b.split("/")[-1] in message
    assert str(stimulus_set.root) not in message and "/" not in message
    assert [(v.trial_id, v.choice, v.score_a) for v in store.votes()] == [(first.trial_id, "A", 4)]
    # A truncated WAV is refused the same way, on start or resume.
    stimulus_set.clip_path(second.clip_a).write_bytes(b"RIFF")
    with pytest.raises(ClipUnavailableError, match="cannot be read"):
        test.next_view(session.session_id)


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


def test_a_vote_needs_both_clips_played_to_the_end(store, stimulus_set):
    from ssd_demo.listening.store import NotListenedError

    test = ListeningTest(store, stimulus_set)
    session = test.start_session(n_trials=1, seed=1)
    view = test.next_view(session.session_id)
    with pytest.raises(NotListenedError, match="clip A and clip B"):
        store.submit_vote(session.session_id, view.trial_id, "none")
    # The tone clips last 0.3 s: a play reported at once cannot have been heard.
    with pytest.raises(NotListenedError, match="cannot have been played"):
        test.record_play(session.session_id, view.trial_id, "A")
    with pytest.raises(InvalidVoteError):
        store.record_play(session.session_id, view.trial_id, "C")
    assert store.record_play(session.session_id, view.trial_id, "A") == {"A"}
    with pytest.raises(NotListenedError, match="clip B"):
        store.submit_vote(session.session_id, view.trial_id, "A", 4)
    assert store.count_votes() == 0 and store.completion_code(session.session_id) is None
    store.record_play(session.session_id, view.trial_id, "B")
    store.record_play(session.session_id, view.trial_id, "B")
    assert test.next_view(session.session_id).played == {"A", "B"}  # a reload keeps the controls unlocked
    vote = store.submit_vote(session.session_id, view.trial_id, "A", 4).vote
    assert (vote.plays_a, vote.plays_b) == (1, 2) and vote.trial_seconds >= 0
    assert [(clip) for _, clip, _ in store.plays(session.session_id)] == ["A", "B", "B"]
    # The last vote in: a completion code, made once and stored.
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

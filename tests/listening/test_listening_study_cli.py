"""The study command line (create with a synthesizer, list, results and exports), attention checks and
invalidations in the screening, and the store's guarantees for answers and plays under concurrency and SIGKILL."""

from __future__ import annotations

from support.paths import REPOSITORY

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from ssd_demo.__main__ import main as cli
from ssd_demo.listening import study_sessions
from ssd_demo.listening.errors import AlreadyVotedError
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.study import ATTENTION_SYSTEM, LOWPASS_ANCHOR
from ssd_demo.listening.study_results import read_long_csv, read_summary_json, study_results
from ssd_demo.listening.study_sessions import StudyRegistry
from ssd_demo.listening.stimulus_sets import load_stimulus_set
from ssd_demo.listening.stimuli import tone_renderer
from ssd_demo.listening.study_setup import create_study

ROOT = REPOSITORY
STUDY = """
name = "{name}"
preset = "{preset}"
systems = ["SSD beta=0.3 K=4", "exact speculative K=2"]
items_per_rater = 2
sentences = ["Hello there.", "Good night."]

[mushra]

[abx]

[mos]
systems = ["AR"]

[ab]
pairs = [["AR", "exact speculative K=2"]]

[attention]
per_block = 1
"""


def answer_for(view) -> dict:
    """An ordinary answer (attention checks are answered in `take_session`)."""
    if view.kind == "mushra":
        return {"scores": {c.label: 95 for c in view.conditions if c.rated}}
    if view.kind == "mos":
        return {"score": 4}
    return {"choice": "A"}


def take_session(registry: StudyRegistry, name: str, rater: str, attentive: bool = True) -> str:
    """A whole session; an attentive rater scores the noisy attention clip low and never prefers it."""
    runner = registry.runner(name)
    session = runner.start_session(rater, seed=len(rater))
    view = runner.next_view(session.session_id)
    while view is not None:
        for condition in view.conditions:
            if condition.must_play:
                runner.fetch_clip(session.session_id, view.trial_id, condition.label)
                runner.record_play(session.session_id, view.trial_id, condition.label)
        trial = registry.store.get_study_trial(session.session_id, view.trial_id)
        answer = answer_for(view)
        if trial.attention_check:
            noisy = next(c.label for c in trial.conditions if c.system == ATTENTION_SYSTEM)
            if view.kind == "mos":
                answer = {"score": 1 if attentive else 4}
            else:
                clean = "B" if noisy == "A" else "A"
                answer = {"choice": clean if attentive else noisy}
        view = runner.submit(session.session_id, view.trial_id, answer)
    return session.session_id


@pytest.mark.slow  # tens of seconds: left out of the quick run
def test_the_study_cli_creates_lists_and_reports(tmp_path, capsys, monkeypatch):
    from support.toy_backend import TOY_KEY, register_toy_preset

    register_toy_preset()
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    data = tmp_path / "data"
    study_file = tmp_path / "toy.toml"
    study_file.write_text(STUDY.format(name="toy-study", preset=TOY_KEY), encoding="utf-8")
    assert cli(["study", "create", str(study_file), "--data-dir", str(data)]) == 0
    assert "created study 'toy-study'" in capsys.readouterr().out
    assert cli(["study", "create", str(study_file), "--data-dir", str(data)]) == 2
    assert "already exists" in capsys.readouterr().err
    manifest = json.loads((data / "stimuli" / "toy-study" / "manifest.json").read_text())
    clips = {c["system"]: c["settings"] for c in manifest["items"][0]["clips"]}
    assert not {"beta", "draft_len", "acceptance", "draft"} & set(clips["AR"])  # AR ignores them
    assert clips["SSD beta=0.3 K=4"]["beta"] == 0.3 and clips[LOWPASS_ANCHOR]["source"] == "AR"
    with ListeningStore(data / "listening.sqlite3") as store:
        registry = StudyRegistry(store, data)
        take_session(registry, "toy-study", "alice")
        take_session(registry, "toy-study", "bob", attentive=False)
        invalid = take_session(registry, "toy-study", "carol")
        store.invalidate_session(invalid, "did the study twice")
    assert cli(["study", "list", "--data-dir", str(data)]) == 0
    assert "toy-study: mushra, abx, mos, ab; 2 systems vs AR; 3 sessions" in capsys.readouterr().out
    out_csv, out_json, figure = tmp_path / "r.csv", tmp_path / "s.json", tmp_path / "box.png"
    argv = ["study", "results", "toy-study", "--data-dir", str(data), "--csv", str(out_csv), "--json",
            str(out_json), "--figure", str(figure)]
    assert cli(argv) == 0
    report = capsys.readouterr().out
    assert "2 of 3 raters excluded" in report and "bob: attention (failed 2 of 2" in report
    assert "carol: invalidated (did the study twice)" in report and "1 raters (excluded raters left out)" in report
    rows = read_long_csv(out_csv)
    assert {r.rater for r in rows if r.excluded} == {"bob", "carol"}
    assert read_summary_json(out_json)["results_all_raters"]["raters"] == 3
    # Objective metrics beside the listeners' (the real judges, on the toy voice's tones).
    assert "Objective metrics per system" in report and "Listeners vs metrics" in report
    objective = read_summary_json(out_json)["objective"]
    assert {s["system"] for s in objective["systems"]} >= {"AR"} and objective["judge"].startswith("Whisper tiny.en")
    assert figure.read_bytes().startswith(b"\x89PNG")
    assert cli(["study", "results", "toy-study", "--data-dir", str(data), "--no-exclude", "--no-objective"]) == 0
    assert "3 raters (every rater kept" in capsys.readouterr().out
    assert cli(["study", "results", "nothing", "--data-dir", str(data)]) == 2
    # The A/B stimulus sets still build from plain system names.
    assert cli(["stimuli", "--name", "ab", "--preset", TOY_KEY, "--data-dir", str(data), "--count", "1"]) == 0
    assert load_stimulus_set(data / "stimuli" / "ab").systems == ("AR", "SSD beta=0.3 K=4", "exact speculative")


@pytest.fixture()
def served(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    (tmp_path / "s.toml").write_text(STUDY.format(name="pilot", preset="embedded"), encoding="utf-8")
    data = tmp_path / "data"
    create_study(tmp_path / "s.toml", root=data, render=tone_renderer(seconds=0.05))
    return data


def test_concurrent_raters_store_every_answer_once(served):
    with ListeningStore(served / "listening.sqlite3") as store:
        registry = StudyRegistry(store, served)
        sessions: list[str] = []
        threads = [threading.Thread(target=lambda k=k: sessions.append(take_session(registry, "pilot", f"r{k}")))
                   for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(sessions) == 8
        for session in sessions:
            done, total = store.study_progress(session)
            assert done == total
            assert len(store.study_answers(session)) == total
        runner = registry.runner("pilot")
        # The same answer sent by many threads at once (double clicks, retries) is stored once.
        session = runner.start_session("twice", seed=5)
        view = runner.next_view(session.session_id)
        for condition in view.conditions:
            runner.fetch_clip(session.session_id, view.trial_id, condition.label)
            runner.record_play(session.session_id, view.trial_id, condition.label)
        errors: list[BaseException] = []

        def send():
            try:
                store.submit_answer(session.session_id, view.trial_id, answer_for(view))
            except AlreadyVotedError as error:  # never: the answers are identical
                errors.append(error)

        racers = [threading.Thread(target=send) for _ in range(12)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        assert not errors and len(store.study_answers(session.session_id)) == 1
        rated = sum(1 for c in view.conditions if c.rated)
        assert len([r for r in store.study_ratings("pilot") if r.rater == "twice"]) == rated
        results = study_results(store, registry.runner("pilot").study)
        assert results.excluded_raters == set()


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ssd_demo.listening import study_sessions
    from ssd_demo.listening.study_store import ListeningStore
    study_sessions.LISTEN_FRACTION = 0.0
    root = Path(sys.argv[1])
    store = ListeningStore(root / "listening.sqlite3")
    runner = study_sessions.StudyRegistry(store, root).runner("pilot")
    n = 0
    while True:
        session = runner.start_session(f"w{n}", seed=n)
        n += 1
        view = runner.next_view(session.session_id)
        while view is not None:
            for c in view.conditions:
                runner.fetch_clip(session.session_id, view.trial_id, c.label)
                runner.record_play(session.session_id, view.trial_id, c.label)
                print("play", view.trial_id, c.label, flush=True)
            if view.kind == "mushra":
                answer = {"scores": {c.label: 50 for c in view.conditions if c.rated}}
            else:
                answer = {"score": 3} if view.kind == "mos" else {"choice": "A"}
            trial = view.trial_id
            view = runner.submit(session.session_id, trial, answer)
            print("answer", trial, flush=True)  # acknowledged: it was committed
""")


@pytest.mark.slow
def test_answers_and_plays_survive_sigkill(served):
    """A writer killed mid-stream leaves every acknowledged answer and play stored, each answer with all its
    ratings (one transaction), and an intact database."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(served)], stdout=subprocess.PIPE, text=True, env=env)
    acknowledged, plays = [], []
    try:
        for line in writer.stdout:
            kind, trial, *label = line.split()
            (acknowledged if kind == "answer" else plays).append((trial, *label))
            if len(acknowledged) >= 60:
                break
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    db = sqlite3.connect(served / "listening.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {row[0] for row in db.execute("SELECT trial_id FROM answers")}
    assert {trial for (trial,) in acknowledged} <= stored
    stored_plays = set(db.execute("SELECT trial_id, label FROM study_plays"))
    assert set(plays) <= stored_plays
    # No answer without its ratings, no rating without its answer.
    expected = {"mushra": 4, "abx": 1, "mos": 1, "ab": 2}  # MUSHRA: hidden reference, 2 systems, anchor
    for answer_id, kind in db.execute("SELECT answer_id, kind FROM answers"):
        assert db.execute("SELECT COUNT(*) FROM ratings WHERE answer_id = ?", (answer_id,)).fetchone()[0] == expected[kind]
    assert db.execute("SELECT COUNT(*) FROM ratings r LEFT JOIN answers a USING (answer_id) WHERE a.answer_id IS NULL"
                      ).fetchone()[0] == 0
    db.close()


def test_creating_a_study_again_after_answers_needs_discard_and_splits_by_stimuli(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    data, study_file = tmp_path / "data", tmp_path / "tones.toml"
    study_file.write_text(STUDY.format(name="tones", preset="unused"), encoding="utf-8")
    study, first = create_study(study_file, root=data, render=tone_renderer(seconds=0.2))
    with ListeningStore(data / "listening.sqlite3") as store:
        take_session(StudyRegistry(store, data), "tones", "alice")
    assert cli(["study", "create", str(study_file), "--data-dir", str(data), "--overwrite", "--tones"]) == 2
    with pytest.raises(Exception, match="already has .* answers.*--discard-answers"):
        create_study(study_file, root=data, render=tone_renderer(seconds=0.3), overwrite=True)
    _, second = create_study(study_file, root=data, render=tone_renderer(seconds=0.3), overwrite=True,
                             discard_answers=True)
    assert second.manifest_sha256 != first.manifest_sha256
    with ListeningStore(data / "listening.sqlite3") as store:
        take_session(StudyRegistry(store, data), "tones", "bob")
        current = study_results(store, study, second.manifest_sha256)
        pooled = study_results(store, study)
    assert {r.rater for r in current.rows} == {"bob"} and current.other_versions_left_out > 0
    assert {r.stimulus_version for r in current.rows} == {second.manifest_sha256}
    assert {r.stimulus_version for r in pooled.rows} == {first.manifest_sha256, second.manifest_sha256}
    out_csv = tmp_path / "r.csv"
    assert cli(["study", "results", "tones", "--data-dir", str(data), "--csv", str(out_csv), "--no-objective"]) == 0
    exported = read_long_csv(out_csv)  # every version's ratings (re-analysis needs both), in the order stored
    assert tuple(exported) == current.export_rows
    assert {(r.rater, r.stimulus_version) for r in exported} == {("alice", first.manifest_sha256),
                                                                 ("bob", second.manifest_sha256)}
    assert "stimulus_version" in out_csv.read_text().splitlines()[0]
    assert oct(out_csv.stat().st_mode & 0o777) == "0o600"  # private, like the database


def test_a_study_file_cannot_take_the_listening_tabs_study_name(tmp_path):
    from ssd_demo.listening.migrations import TAB_STUDY

    study_file = tmp_path / "tab.toml"
    study_file.write_text(STUDY.format(name=TAB_STUDY, preset="unused"), encoding="utf-8")
    with pytest.raises(Exception, match="listening tab's built-in study"):
        create_study(study_file, root=tmp_path / "data", render=tone_renderer(seconds=0.05))
    assert not (tmp_path / "data" / "studies").exists()


def test_a_draft_the_preset_lacks_is_refused_before_any_rendering(tmp_path, monkeypatch):
    """A system naming a draft its preset does not have fails at once, naming the file, the system and the drafts
    there are, not after minutes of rendering the other systems."""
    from support.toy_backend import TOY_KEY, register_toy_preset

    from ssd_demo.backends.registry import get_preset
    from ssd_demo.errors import InputError
    from ssd_demo.listening import study_setup

    register_toy_preset()
    monkeypatch.setattr(study_setup, "render_stimulus_set", lambda *a, **k: pytest.fail("rendered before the check"))
    study_file = tmp_path / "drafts.toml"
    study_file.write_text(STUDY.format(name="drafts", preset=TOY_KEY).replace(
        '"exact speculative K=2"]\nitems', '"exact speculative K=2", "SSD beta=0.3 draft=nosuch"]\nitems'),
        encoding="utf-8")
    with pytest.raises(InputError) as refused:
        create_study(study_file, root=tmp_path / "data")
    message = str(refused.value)
    assert "drafts.toml" in message and "'nosuch'" in message
    assert all(draft in message for draft in get_preset(TOY_KEY).drafts)
    assert not (tmp_path / "data" / "studies").exists()


def test_tones_refuse_spoken_attention_checks(tmp_path, capsys):
    """Tones cannot say a spoken check's target: every honest rater would fail it. Noise checks stay possible."""
    study_file = tmp_path / "spoken.toml"
    study_file.write_text(STUDY.format(name="spoken", preset="embedded") + 'kind = "spoken"\n', encoding="utf-8")
    data = tmp_path / "data"
    assert cli(["study", "create", str(study_file), "--data-dir", str(data), "--tones"]) == 2
    assert "spoken attention checks need a voice" in capsys.readouterr().err
    assert not (data / "studies").exists()

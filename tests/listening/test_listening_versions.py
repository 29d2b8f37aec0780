"""A study created again (`--discard-answers`) has several stimulus versions: its export holds every version's
ratings, so analysing the export again reproduces the served results and summary of each version, with two
and with three versions; and the listening guide's re-analysis example, run on the command line's exports, prints the
served summary."""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil

import pytest

from support.paths import REPOSITORY

from ssd_demo.__main__ import main as cli
from ssd_demo.listening import study_sessions
from ssd_demo.listening.study import ATTENTION_SYSTEM
from ssd_demo.listening.study_results import (read_long_csv, read_summary_json, results_from_long, study_results,
                                              summary, write_long_csv)
from ssd_demo.listening.study_sessions import StudyRegistry
from ssd_demo.listening.study_setup import create_study
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.stimuli import tone_renderer

EXAMPLE = REPOSITORY / "ssd_demo" / "listening" / "data" / "example_study.toml"

#: the listening guide's re-analysis example, run as written in a folder holding the command line's exports.
README_EXAMPLE = """
import json
from ssd_demo.listening.study import load_study
from ssd_demo.listening.study_results import read_long_csv, read_summary_json, results_from_long, summary

study = load_study("ssd_demo/listening/data/example_study.toml")  # the study's file
served = read_summary_json("summary.json")  # written by `study results example --csv ratings.csv --json summary.json`
again = summary(results_from_long(read_long_csv("ratings.csv"), study, served["stimulus_version"]))
print(json.dumps(again, indent=2, ensure_ascii=False))  # the served summary
served.pop("objective", None)  # the clips' metrics: not computed from the ratings
print(again == served)  # True, however many times the study was created again
"""


@pytest.fixture()
def data(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)  # tone clips: plays count at once
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    return tmp_path / "data"


def create_version(root, seconds: float):
    """The example study created (again, discarding nothing stored) with tones of another length: a new version."""
    return create_study(EXAMPLE, root=root, render=tone_renderer(seconds=seconds), overwrite=True,
                        discard_answers=True)


def take_session(registry: StudyRegistry, rater: str, rng: random.Random, careless: bool = False) -> str:
    """A whole session: scores drawn at random (a careless rater also scores the hidden reference low and the
    noisy attention clip high); every clip fetched and played first."""
    runner = registry.runner("example")
    session = runner.start_session(rater, seed=rng.randrange(10**6))
    view = runner.next_view(session.session_id)
    while view is not None:
        labels = [c.label for c in view.conditions if c.must_play]
        runner.fetch_clip(session.session_id, view.trial_id, *labels)
        for label in labels:
            runner.record_play(session.session_id, view.trial_id, label)
        systems = {c.label: c.system for c in registry.store.get_study_trial(session.session_id, view.trial_id).conditions}
        if view.kind == "mushra":
            answer = {"scores": {c.label: (rng.randint(0, 60) if careless else 100) if systems[c.label] == "AR"
                                 else 5 * rng.randint(2, 18) for c in view.conditions if c.rated}}
        elif view.kind == "mos":
            noisy = systems["A"] == ATTENTION_SYSTEM
            answer = {"score": (4 if careless else 1) if noisy else rng.randint(2, 5)}
        else:
            answer = {"choice": rng.choice("AB")}
        view = runner.submit(session.session_id, view.trial_id, answer)
    return session.session_id


def take_version(store: ListeningStore, root, raters: list[str], rng: random.Random) -> list[str]:
    registry = StudyRegistry(store, root)
    return [take_session(registry, rater, rng, careless=rater.startswith("careless")) for rater in raters]


def versions_study(root, count: int):
    """The example study created `count` times, each version taken by raters (one careless, one invalidated)."""
    rng = random.Random(count)
    versions = []
    for number in range(count):
        study, stimuli = create_version(root, 0.05 + 0.01 * number)
        versions.append(stimuli.manifest_sha256)
        with ListeningStore(root / "listening.sqlite3") as store:
            sessions = take_version(store, root, [f"v{number}-rater-{n}" for n in range(3)] + [f"careless-{number}"],
                                    rng)
            store.invalidate_session(sessions[number % 3], f"invalidated in version {number + 1}")
    assert len(set(versions)) == count
    return study, versions


@pytest.mark.parametrize("count", [2, 3])
def test_an_export_reproduces_the_served_results_of_every_version(data, tmp_path, count):
    study, versions = versions_study(data, count)
    with ListeningStore(data / "listening.sqlite3") as store:
        served = {version: study_results(store, study, version) for version in (*versions, None)}
    current = served[versions[-1]]
    assert current.other_versions_left_out == len(served[None].rows) - len(current.rows) > 0
    path = write_long_csv(current, tmp_path / "ratings.csv")
    rows = read_long_csv(path)
    assert tuple(rows) == current.export_rows  # every version's ratings, in the order stored
    assert [r for r in rows if r.stimulus_version == versions[-1]] == list(current.rows)
    for version, results in served.items():  # one export reproduces every version's results, and the pooled ones
        again = results_from_long(rows, study, version)
        assert again == results
        assert summary(again) == summary(results)
    for version in versions:  # each version's screening is its own: its careless rater, its invalidated rater
        excluded = {(e.rater, e.rule) for e in served[version].exclusions}
        number = versions.index(version)
        assert ("careless-%d" % number, "hidden-reference") in excluded
        assert (f"v{number}-rater-{number % 3}", "invalidated") in excluded
        assert {r.stimulus_version for r in served[version].rows} == {version}


def test_readme_reanalysis_example_prints_the_served_summary_of_a_two_version_study(data, tmp_path, monkeypatch):
    versions_study(data, 2)
    work = tmp_path / "analysis"
    (work / "ssd_demo" / "listening" / "data").mkdir(parents=True)
    shutil.copy(EXAMPLE, work / "ssd_demo" / "listening" / "data" / "example_study.toml")
    monkeypatch.chdir(work)
    assert cli(["study", "results", "example", "--data-dir", str(data), "--csv", "ratings.csv", "--json",
                "summary.json", "--no-objective"]) == 0
    served = read_summary_json("summary.json")
    assert served["other_versions_left_out"] > 0 and served["results"]["raters"] > 0
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(README_EXAMPLE, "README example", "exec"), {})
    assert printed.getvalue() == json.dumps(served, indent=2, ensure_ascii=False) + "\nTrue\n"

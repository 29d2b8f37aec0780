"""The experimenter's page and its results: a view after the first computes nothing until an answer (or an
invalidation) comes in, and the downloaded CSV of a study created again reproduces the downloaded summary."""

from __future__ import annotations

import pytest

from ssd_demo.app.listening.study_experimenter import StudyExperimenter
from ssd_demo.listening import study_results as results_module
from ssd_demo.listening import study_sessions
from ssd_demo.listening.study_results import read_long_csv, read_summary_json, results_from_long, summary
from ssd_demo.listening.study_sessions import StudyRegistry, load_study_and_stimuli
from ssd_demo.listening.study_setup import create_study
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.stimuli import tone_renderer

STUDY = """
name = "admin"
systems = ["SSD beta=0.3 K=4", "exact speculative K=4"]
items_per_rater = 1
sentences = ["One sentence.", "Two sentences here."]
[mushra]
[mos]
systems = ["AR"]
"""


@pytest.fixture()
def admin(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    monkeypatch.delenv("SSD_DEMO_LISTENING_DB", raising=False)
    monkeypatch.setenv("SSD_DEMO_RESULTS_TOKEN", "right")
    (tmp_path / "admin.toml").write_text(STUDY, encoding="utf-8")
    root = tmp_path / "data"
    create_study(tmp_path / "admin.toml", root=root, render=tone_renderer(seconds=0.05))
    store = ListeningStore(root / "listening.sqlite3")
    yield StudyExperimenter(store, root), StudyRegistry(store, root), tmp_path
    store.close()


def take(registry: StudyRegistry, rater: str) -> str:
    runner = registry.runner("admin")
    session = runner.start_session(rater, seed=len(rater))
    view = runner.next_view(session.session_id)
    while view is not None:
        labels = [c.label for c in view.conditions if c.must_play]
        runner.fetch_clip(session.session_id, view.trial_id, *labels)
        for label in labels:
            runner.record_play(session.session_id, view.trial_id, label)
        answer = ({"scores": {c.label: 100 if c.label == "A" else 70 for c in view.conditions if c.rated}}
                  if view.kind == "mushra" else {"score": 4})
        view = runner.submit(session.session_id, view.trial_id, answer)
    return session.session_id


def test_a_view_after_the_first_computes_nothing_until_the_answers_change(admin, monkeypatch):
    experimenter, registry, _ = admin
    calls = []
    original = results_module.study_statistics
    monkeypatch.setattr(results_module, "study_statistics", lambda rows, study: calls.append(1) or original(rows, study))
    take(registry, "ann")
    first, report = experimenter.results("right", "admin")
    assert len(calls) == 2 and report.summary["results_all_raters"]["raters"] == 1
    for _ in range(3):
        assert experimenter.results("right", "admin")[0] is first
    experimenter.export("right", "admin")  # the downloads are the same results
    assert len(calls) == 2
    take(registry, "Bob")
    again, report = experimenter.results("right", "admin")
    assert len(calls) == 4 and report.summary["results_all_raters"]["raters"] == 2


def test_the_downloaded_csv_of_a_study_created_again_reproduces_the_downloaded_summary(admin):
    experimenter, registry, folder = admin
    take(registry, "ann")
    create_study(folder / "admin.toml", root=registry.root, render=tone_renderer(seconds=0.06), overwrite=True,
                 discard_answers=True)
    take(registry, "bob")
    csv_path, json_path = experimenter.export("right", "admin")
    served = read_summary_json(json_path)
    assert served["other_versions_left_out"] > 0 and served["results_all_raters"]["raters"] == 1
    study, stimuli = load_study_and_stimuli("admin", registry.root, verify=False)
    assert served["stimulus_version"] == stimuli.manifest_sha256
    assert summary(results_from_long(read_long_csv(csv_path), study, stimuli.manifest_sha256)) == served


def test_the_admin_page_refuses_tones_for_spoken_attention_checks(admin, monkeypatch):
    """The admin page's "tones" box as the command line's --tones: a tone cannot say a spoken check's target."""
    from ssd_demo.errors import InputError

    experimenter, _, folder = admin
    monkeypatch.setattr("ssd_demo.app.listening.study_experimenter.check_build_allowed", lambda: None)
    spoken = folder / "spoken.toml"
    spoken.write_text(STUDY.replace('name = "admin"', 'name = "spoken"') + "[attention]\nper_block = 1\n"
                      'kind = "spoken"\n', encoding="utf-8")
    with pytest.raises(InputError, match="spoken attention checks need a voice"):
        experimenter.create("right", spoken, tones=True)
    assert not (folder / "data" / "studies" / "spoken.toml").exists()

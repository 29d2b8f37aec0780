"""Study results kept between views (`ResultsCache`): computed once per study, stimulus version and database
state; computed again after a new answer, an invalidation or its undoing, and never stale, also when the
database changes while they are being computed."""

from __future__ import annotations

import pytest

from ssd_demo.listening import study_results as results_module
from ssd_demo.listening import study_sessions
from ssd_demo.listening.results_cache import ResultsCache
from ssd_demo.listening.study import parse_study
from ssd_demo.listening.study_results import study_results
from ssd_demo.listening.study_sessions import StudyRegistry
from ssd_demo.listening.study_setup import create_study
from ssd_demo.listening.study_store import ListeningStore
from ssd_demo.listening.stimuli import tone_renderer

STUDY = """
name = "cached"
systems = ["SSD beta=0.3 K=4", "exact speculative K=4"]
items_per_rater = 1
sentences = ["One sentence.", "Two sentences here."]
[mushra]
"""


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    monkeypatch.setattr(study_sessions, "LISTEN_FRACTION", 0.0)
    (tmp_path / "cached.toml").write_text(STUDY, encoding="utf-8")
    root = tmp_path / "data"
    study, stimuli = create_study(tmp_path / "cached.toml", root=root, render=tone_renderer(seconds=0.05))
    store = ListeningStore(root / "listening.sqlite3")
    yield store, StudyRegistry(store, root), study, stimuli.manifest_sha256
    store.close()


@pytest.fixture()
def computed(monkeypatch):
    """How many times the statistics were computed (twice per result: with and without the exclusions)."""
    calls = []
    original = results_module.study_statistics
    monkeypatch.setattr(results_module, "study_statistics", lambda rows, study: calls.append(1) or original(rows, study))
    return calls


def take(registry: StudyRegistry, rater: str, score: int = 100) -> str:
    runner = registry.runner("cached")
    session = runner.start_session(rater, seed=len(rater))
    view = runner.next_view(session.session_id)
    while view is not None:
        labels = [c.label for c in view.conditions if c.must_play]
        runner.fetch_clip(session.session_id, view.trial_id, *labels)
        for label in labels:
            runner.record_play(session.session_id, view.trial_id, label)
        view = runner.submit(session.session_id, view.trial_id,
                             {"scores": {c.label: score for c in view.conditions if c.rated}})
    return session.session_id


def test_results_are_computed_once_per_state_and_again_after_each_change(setup, computed):
    store, registry, study, version = setup
    cache = ResultsCache(store)
    first = take(registry, "ann")
    results = cache.results(study, version)
    assert len(computed) == 2 and results == study_results(store, study, version)
    computed.clear()
    for _ in range(3):
        assert cache.results(study, version) is results  # a view after the first: nothing computed
    assert computed == []

    take(registry, "bob", score=95)  # a new answer: computed again, and it is in
    again = cache.results(study, version)
    assert len(computed) == 2 and again.results.raters == 2
    store.invalidate_session(first, "too fast")  # an invalidation changes no answer count, but the results
    invalidated = cache.results(study, version)
    assert [(e.rater, e.rule) for e in invalidated.exclusions] == [("ann", "invalidated")] and len(computed) == 4
    store.restore_session(first)
    assert cache.results(study, version) == again and again.exclusions == ()
    pooled = cache.results(study, None)  # another version (here: all of them): its own entry
    assert pooled.stimulus_version is None and len(computed) == 6
    changed = parse_study(STUDY + '[screening]\nrules = ["attention"]\n')  # the study file changed
    assert cache.results(changed, version).screening == ("attention",) and len(computed) == 8


def test_results_computed_while_the_database_changes_are_kept_under_the_state_they_saw(setup, computed):
    store, registry, study, version = setup
    session = take(registry, "ann")
    cache = ResultsCache(store)
    snapshot = store.study_snapshot

    def invalidated_meanwhile(name):
        store.invalidate_session(session, "invalidated while the results were computed")
        return snapshot(name)

    store.study_snapshot = invalidated_meanwhile  # the state read first is older than the snapshot
    assert [e.rule for e in cache.results(study, version).exclusions] == ["invalidated"]
    store.study_snapshot = snapshot
    store.restore_session(session)  # back to the state read first: its results must be computed, not reused
    assert cache.results(study, version).exclusions == ()
    computed.clear()
    assert cache.results(study, version).exclusions == () and computed == []


def test_the_cache_keeps_its_newest_entries(setup, computed):
    store, registry, study, version = setup
    take(registry, "ann")
    cache = ResultsCache(store, size=1)
    cache.results(study, version)
    cache.results(study, None)  # pushes out the first entry
    cache.results(study, version)
    assert len(computed) == 6
    with pytest.raises(ValueError, match="at least one entry"):
        ResultsCache(store, size=0)

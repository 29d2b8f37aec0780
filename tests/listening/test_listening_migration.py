"""Schema 5: a vote database written by the A/B tab's first store opens as the built-in A/B + MOS study's,
every vote kept with its values, and the tab's summary reports what the first store's code reported.
Schema 6 on top: its unfinished session goes on, a new play counting only for a clip the session fetched.

`data/ab_votes_v4.sqlite3.gz` was written by that store (schema 4): four sessions on stimulus set "tones",
13 A/B votes with optional naturalness scores, one session left unfinished, one invalidated.
"""

from __future__ import annotations

from support.paths import TEST_DATA

import gzip
import sqlite3
from pathlib import Path

import pytest

from ssd_demo.listening.ab_mos import summary_dict, summary_markdown, tab_summary
from ssd_demo.listening.errors import NotFetchedError
from ssd_demo.listening.migrations import SCHEMA_VERSION, TAB_STUDY
from ssd_demo.listening.study_store import ListeningStore

FIXTURE = TEST_DATA / "ab_votes_v4.sqlite3.gz"
SHA = "41d9d92017188f3c707a3485286b5e4a5d8188b8ddfd4440fcd910710b75ab85"
INVALIDATED = "54126a6afdd53e4fcfb604dcd008de43"


@pytest.fixture()
def old_db(tmp_path) -> Path:
    path = tmp_path / "listening.sqlite3"
    path.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return path


def old_rows(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


def test_every_vote_becomes_an_answer_with_the_same_values(old_db):
    votes = old_rows(old_db, "SELECT session_id, trial_id, trial_index, system_a, system_b, choice, score_a, score_b, "
                             "plays_a, plays_b, presented_at, submitted_at, trial_seconds, app_version FROM votes")
    assert len(votes) == 13 and old_rows(old_db, "SELECT MAX(version) FROM schema_migrations") == [(4,)]
    with ListeningStore(old_db) as store:
        assert store.schema_version() == SCHEMA_VERSION == 6
        for (session, trial_id, index, system_a, system_b, choice, score_a, score_b, plays_a, plays_b,
             presented, submitted, seconds, version) in votes:
            assert store.get_session(session).study == TAB_STUDY
            answers = {a.trial_id: a for a in store.study_answers(session)}
            trial = store.get_study_trial(session, trial_id)
            assert (trial.kind, trial.trial_index) == ("ab", index)
            assert {c.label: c.system for c in trial.conditions} == {"A": system_a, "B": system_b}
            answer = answers[trial_id]
            assert answer.answer == {"choice": choice}
            assert (answer.presented_at, answer.submitted_at, answer.trial_seconds, answer.app_version) == (
                presented, submitted, seconds, version)
            for clip, system, score, plays in (("A", system_a, score_a, plays_a), ("B", system_b, score_b, plays_b)):
                mos = answers.get(trial_id + clip.lower())
                if score is None:
                    assert mos is None
                    continue
                assert mos.answer == {"score": score} and mos.submitted_at == submitted
                mos_trial = store.get_study_trial(session, mos.trial_id)
                assert mos_trial.kind == "mos" and [c.system for c in mos_trial.conditions] == [system]
                assert len([p for p in store.study_plays(session) if p[0] == mos.trial_id]) == plays
        ratings = store.study_ratings(TAB_STUDY)
        assert len([r for r in ratings if r.kind == "ab"]) == 2 * 13
        assert len([r for r in ratings if r.kind == "mos"]) == 19  # every score given
        # The old plays, completion codes and the invalidation carry over.
        # 3 votes x 3 plays (A twice, B once); each of its 4 scores' trials has its clip's plays (A: 2, B: 1).
        assert len(store.study_plays(INVALIDATED)) == 3 * 3 + 2 * (2 + 1)
        codes = dict(old_rows(old_db, "SELECT session_id, completion_code FROM completions"))
        assert len(codes) == 3 and all(store.completion_code(s) == c for s, c in codes.items())
        assert store.invalidations() == {INVALIDATED: "did not listen"}
    # The first store's tables are untouched.
    assert old_rows(old_db, "SELECT COUNT(*) FROM votes") == [(13,)]


def test_the_migration_runs_once_and_keeps_the_file(old_db):
    with ListeningStore(old_db) as store:
        first = [(r.session_id, r.trial_index, r.label, r.score) for r in store.study_ratings(TAB_STUDY)]
    with ListeningStore(old_db) as store:  # opened again: nothing is copied twice
        assert [(r.session_id, r.trial_index, r.label, r.score) for r in store.study_ratings(TAB_STUDY)] == first
        assert [v for v, in old_rows(old_db, "SELECT version FROM schema_migrations")] == [1, 2, 3, 4, 5, 6]
    assert old_db.exists() and len(first) == 2 * 13 + 19


def test_an_unfinished_session_continues_where_it_stopped(old_db):
    with ListeningStore(old_db) as store:
        unfinished = [p for p in store.study_progress_table(TAB_STUDY) if p.answered < p.n_trials]
        assert [(p.rater_id, p.answered, p.n_trials) for p in unfinished] == [("rater-4", 5, 8)]
        trial = store.next_study_trial(unfinished[0].session_id)
        assert (trial.kind, trial.trial_index) == ("ab", 2)
        assert store.completion_code(unfinished[0].session_id) is None
        session_id = unfinished[0].session_id
        with pytest.raises(NotFetchedError):  # the old store served clips unrecorded: fetched again, then heard
            store.record_study_play(session_id, trial.trial_id, "A")
        store.record_clip_fetch(session_id, trial.trial_id, "A")
        assert store.record_study_play(session_id, trial.trial_id, "A") == {"A"}


# What the first store's code (stats.summarize over its votes) reported for this database.
OLD_MARKDOWN = """Stimulus set **tones (sha256 41d9d9201718)**.

**13 votes** from **4 sessions**.

### Preference (95% Wilson intervals; exact sign test, ties excluded)

| Pair | Votes | Prefer first | Prefer second | No preference | p (sign test) |
|---|---|---|---|---|---|
| AR vs SSD beta=0.3 K=4 | 8 | AR: 37.5% [13.7%, 69.4%] | SSD beta=0.3 K=4: 37.5% [13.7%, 69.4%] | 25.0% [7.1%, 59.1%] | 1 |
| AR vs exact speculative | 2 | AR: 100.0% [34.2%, 100.0%] | exact speculative: 0.0% [0.0%, 65.8%] | 0.0% [0.0%, 65.8%] | 0.5 |
| SSD beta=0.3 K=4 vs exact speculative | 3 | SSD beta=0.3 K=4: 33.3% [6.1%, 79.2%] | exact speculative: 66.7% [20.8%, 93.9%] \
| 0.0% [0.0%, 56.1%] | 1 |

### Naturalness MOS (1-5; 95% t intervals)

| System | Scores | MOS | 95% CI |
|---|---|---|---|
| AR | 8 | 3.500 | [2.32, 4.68] |
| SSD beta=0.3 K=4 | 7 | 3.429 | [2.25, 4.61] |
| exact speculative | 4 | 3.000 | [0.75, 5.25] |
"""
# (pair, votes, wins x, wins y, ties, Wilson interval of x's share, sign-test p) and (system, scores, MOS, t interval)
OLD_PAIRS = [("AR", "SSD beta=0.3 K=4", 8, 3, 3, 2, (0.13684428582359737, 0.6942576053973728), 1.0),
             ("AR", "exact speculative", 2, 2, 0, 0, (0.34238022750665303, 1.0), 0.5),
             ("SSD beta=0.3 K=4", "exact speculative", 3, 1, 2, 0, (0.06149194472039626, 0.7923403991979523), 1.0)]
OLD_MOS = [("AR", 8, 3.5, (2.317687874203608, 4.6823121257963916)),
           ("SSD beta=0.3 K=4", 7, 3.4285714285714284, (2.2517810321726, 4.605361824970257)),
           ("exact speculative", 4, 3.0, (0.7496706367718167, 5.250329363228183))]
# The same code on the votes without the invalidated session (3 votes, 4 scores fewer).
OLD_PAIRS_KEPT = [("AR", "SSD beta=0.3 K=4", 5, 2, 1, 2, (0.11762077423264794, 0.769275718723987), 1.0),
                  OLD_PAIRS[1], OLD_PAIRS[2]]
OLD_MOS_KEPT = [("AR", 6, 3.8333333333333335, (2.6064956416283596, 5.060171025038308)),
                ("SSD beta=0.3 K=4", 5, 3.4, (1.984285223017728, 4.815714776982272)), OLD_MOS[2]]


def numbers(summary) -> tuple[list, list]:
    data = summary_dict(summary)
    pairs = [(p["system_x"], p["system_y"], p["n"], p["wins_x"], p["wins_y"], p["ties"],
              (p["ci_x"]["low"], p["ci_x"]["high"]), p["p_value"]) for p in data["pairs"]]
    mos = [(m["system"], m["n"], m["mean"], (m["ci"]["low"], m["ci"]["high"])) for m in data["mos"]]
    return pairs, mos


def test_the_summary_matches_what_the_first_store_reported(old_db):
    with ListeningStore(old_db) as store:
        every = tab_summary(store, "tones", SHA, exclude=False)
        kept = tab_summary(store, "tones", None)
    assert (every.n_votes, every.n_sessions, every.stimulus_sets) == (13, 4, (("tones", SHA),))
    assert numbers(every) == (OLD_PAIRS, OLD_MOS)  # the same formulas on the same counts: equal floats
    assert summary_markdown(every).startswith(OLD_MARKDOWN.replace("\\\n", ""))
    # By default the invalidated rater is left out, as the study system's results do.
    assert (kept.n_votes, kept.n_sessions, kept.excluded_raters) == (10, 3, ("rater-2",))
    assert numbers(kept) == (OLD_PAIRS_KEPT, OLD_MOS_KEPT)
    assert "Left out: 1 excluded rater(s) (rater-2)" in summary_markdown(kept)


def test_a_migration_that_fails_leaves_the_file_as_it_was(old_db):
    # A play of a trial the database does not have (possible in a file edited by hand; the first store
    # could not write it): copying it breaks a foreign key, and the whole migration is undone.
    with sqlite3.connect(old_db) as db:
        db.execute("INSERT INTO plays (session_id, trial_id, clip, completed_at) VALUES (?, 'gone', 'A', 'then')",
                   (INVALIDATED,))
    before = old_rows(old_db, "SELECT * FROM votes ORDER BY vote_id")
    with pytest.raises(sqlite3.IntegrityError):
        ListeningStore(old_db)
    assert old_rows(old_db, "SELECT MAX(version) FROM schema_migrations") == [(4,)]
    assert old_rows(old_db, "SELECT COUNT(*) FROM answers") == [(0,)]
    assert old_rows(old_db, "SELECT COUNT(*) FROM sessions WHERE study IS NOT NULL") == [(0,)]
    assert old_rows(old_db, "SELECT * FROM votes ORDER BY vote_id") == before

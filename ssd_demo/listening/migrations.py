"""The listening-test database's schema, as the ordered migrations that build it.

A database records the migrations applied to it in a `schema_migrations` table (and the latest version in
SQLite's `user_version`); opening one with `ListeningStore` applies the missing ones in the same transaction,
so an old database gains new columns, with their values filled in, and a database newer than the app is refused.

Versions 1-3 are the tables of the A/B tab's first store (`sessions`, `trials`, `votes`, `plays`); version 4
added the studies' tables. Version 5 makes the A/B tab one study among others (`TAB_STUDY`): every session,
trial, play and vote of the first store is copied into the studies' tables (`TAB_VOTES_TO_STUDY`). The first
store's tables stay as they were, untouched, so nothing of an old database is ever lost; nothing writes to
them any more. Version 6 records which clips the server handed to each session (`clip_fetches`), so that a
play is counted only for a clip its session fetched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path


#: Each migration is (version, description, statements). Append; never edit a released one.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "sessions, trials and votes",
        (
            """CREATE TABLE sessions (
                session_id TEXT PRIMARY KEY,
                rater_id TEXT,
                stimulus_set TEXT NOT NULL,
                stimulus_set_sha256 TEXT NOT NULL,
                n_trials INTEGER NOT NULL CHECK (n_trials > 0),
                seed INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                app_version TEXT NOT NULL
            )""",
            """CREATE TABLE trials (
                trial_id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                trial_index INTEGER NOT NULL CHECK (trial_index >= 0),
                item_id TEXT NOT NULL,
                text TEXT NOT NULL,
                system_a TEXT NOT NULL,
                system_b TEXT NOT NULL,
                clip_a TEXT NOT NULL,
                clip_b TEXT NOT NULL,
                presented_at TEXT,
                UNIQUE (session_id, trial_index),
                CHECK (system_a <> system_b)
            )""",
            """CREATE TABLE votes (
                vote_id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                rater_id TEXT,
                trial_id TEXT NOT NULL UNIQUE REFERENCES trials(trial_id),
                trial_index INTEGER NOT NULL,
                stimulus_set TEXT NOT NULL,
                item_id TEXT NOT NULL,
                text TEXT NOT NULL,
                system_a TEXT NOT NULL,
                system_b TEXT NOT NULL,
                choice TEXT NOT NULL CHECK (choice IN ('A', 'B', 'none')),
                preferred_system TEXT,
                score_a INTEGER CHECK (score_a IS NULL OR score_a BETWEEN 1 AND 5),
                score_b INTEGER CHECK (score_b IS NULL OR score_b BETWEEN 1 AND 5),
                presented_at TEXT,
                submitted_at TEXT NOT NULL,
                app_version TEXT NOT NULL,
                CHECK (system_a <> system_b),
                CHECK ((choice = 'A' AND preferred_system = system_a)
                    OR (choice = 'B' AND preferred_system = system_b)
                    OR (choice = 'none' AND preferred_system IS NULL))
            )""",
            "CREATE INDEX trials_by_session ON trials (session_id, trial_index)",
            "CREATE INDEX votes_by_session ON votes (session_id)",
        ),
    ),
    (
        2,
        "votes name the stimulus set's manifest checksum",
        (
            # A set name alone is ambiguous: a set rebuilt under the same name holds other audio.
            "ALTER TABLE votes ADD COLUMN stimulus_set_sha256 TEXT",
            """UPDATE votes SET stimulus_set_sha256 =
                (SELECT s.stimulus_set_sha256 FROM sessions s WHERE s.session_id = votes.session_id)""",
        ),
    ),
    (
        3,
        "plays of each clip, listening counts and seconds per vote, completion codes",
        (
            # One row per clip played to the end: a rating of a clip needs one (listen before rating).
            """CREATE TABLE plays (
                play_id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                trial_id TEXT NOT NULL REFERENCES trials(trial_id),
                clip TEXT NOT NULL CHECK (clip IN ('A', 'B')),
                completed_at TEXT NOT NULL
            )""",
            "CREATE INDEX plays_by_trial ON plays (trial_id, clip)",
            # A session's completion code, for crowdsourcing platforms: made once, when its last vote is in.
            """CREATE TABLE completions (
                session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
                completion_code TEXT NOT NULL UNIQUE,
                completed_at TEXT NOT NULL
            )""",
            # Votes stored before plays were recorded keep NULL play counts; their seconds are known.
            "ALTER TABLE votes ADD COLUMN plays_a INTEGER",
            "ALTER TABLE votes ADD COLUMN plays_b INTEGER",
            "ALTER TABLE votes ADD COLUMN trial_seconds REAL",
            """UPDATE votes SET trial_seconds =
                ROUND((julianday(submitted_at) - julianday(presented_at)) * 86400.0, 3)
                WHERE presented_at IS NOT NULL""",
        ),
    ),
    (
        4,
        "studies: MUSHRA, ABX, A/B and MOS trials with their conditions, ratings, plays and invalidated sessions",
        (
            # The A/B tab's tables stay as they are (every vote kept); a study's session names its study.
            "ALTER TABLE sessions ADD COLUMN study TEXT",
            """CREATE TABLE study_trials (
                trial_id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                trial_index INTEGER NOT NULL CHECK (trial_index >= 0),
                kind TEXT NOT NULL CHECK (kind IN ('mushra', 'abx', 'ab', 'mos')),
                item_id TEXT NOT NULL,
                text TEXT NOT NULL,
                attention_check INTEGER NOT NULL DEFAULT 0 CHECK (attention_check IN (0, 1)),
                presented_at TEXT,
                UNIQUE (session_id, trial_index)
            )""",
            # What the rater hears in a trial, under an opaque label; the system stays on the server.
            """CREATE TABLE trial_conditions (
                trial_id TEXT NOT NULL REFERENCES study_trials(trial_id),
                label TEXT NOT NULL,
                position INTEGER NOT NULL CHECK (position >= 0),
                role TEXT NOT NULL CHECK (role IN ('rated', 'reference', 'x')),
                system TEXT NOT NULL,
                clip TEXT NOT NULL,
                duration_seconds REAL NOT NULL CHECK (duration_seconds >= 0),
                PRIMARY KEY (trial_id, label),
                UNIQUE (trial_id, position)
            )""",
            """CREATE TABLE study_plays (
                play_id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                trial_id TEXT NOT NULL,
                label TEXT NOT NULL,
                completed_at TEXT NOT NULL,
                FOREIGN KEY (trial_id, label) REFERENCES trial_conditions(trial_id, label)
            )""",
            "CREATE INDEX study_plays_by_trial ON study_plays (trial_id, label)",
            # One answer per trial (UNIQUE): a repeated or concurrent submission stores at most once.
            """CREATE TABLE answers (
                answer_id INTEGER PRIMARY KEY AUTOINCREMENT,
                trial_id TEXT NOT NULL UNIQUE REFERENCES study_trials(trial_id),
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                kind TEXT NOT NULL CHECK (kind IN ('mushra', 'abx', 'ab', 'mos')),
                answer TEXT NOT NULL CHECK (json_valid(answer)),
                presented_at TEXT,
                submitted_at TEXT NOT NULL,
                trial_seconds REAL,
                app_version TEXT NOT NULL
            )""",
            "CREATE INDEX answers_by_session ON answers (session_id)",
            # One row per rated condition (long format), written with its answer in one transaction.
            """CREATE TABLE ratings (
                rating_id INTEGER PRIMARY KEY AUTOINCREMENT,
                answer_id INTEGER NOT NULL REFERENCES answers(answer_id),
                trial_id TEXT NOT NULL,
                kind TEXT NOT NULL,
                label TEXT NOT NULL,
                system TEXT NOT NULL,
                other_system TEXT,
                score REAL NOT NULL,
                plays INTEGER NOT NULL CHECK (plays >= 0),
                UNIQUE (trial_id, label),
                FOREIGN KEY (trial_id, label) REFERENCES trial_conditions(trial_id, label),
                CHECK ((kind = 'mushra' AND score BETWEEN 0 AND 100 AND score = ROUND(score))
                    OR (kind = 'mos' AND score IN (1, 2, 3, 4, 5))
                    OR (kind = 'ab' AND score IN (0, 0.5, 1))
                    OR (kind = 'abx' AND score IN (0, 1)))
            )""",
            # The experimenter's verdict on a session (e.g. a rater who did not listen); its ratings stay stored.
            """CREATE TABLE invalidations (
                session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
                reason TEXT NOT NULL,
                invalidated_at TEXT NOT NULL
            )""",
        ),
    ),
)

#: The built-in study the app's A/B + MOS tab runs (`ab_mos`); version 5 files the tab's earlier sessions under it.
#: Never change it: databases hold it.
TAB_STUDY = "ab-mos"

# Version 5, statement by statement. An A/B vote becomes an "ab" trial (same trial id and index) with its
# choice as the answer and one rating per clip (1 chosen, 0 not, 0.5 each for no preference); each of its
# optional naturalness scores becomes a "mos" trial of that clip, numbered after the session's A/B trials
# (the session's trial count grows by as many), answered when the vote was. Clip durations were not stored
# by the first store, so the copied conditions have 0 seconds (they only bound how soon a play may count).
TAB_VOTES_TO_STUDY: tuple[str, ...] = (
    f"UPDATE sessions SET study = '{TAB_STUDY}' WHERE study IS NULL",
    """INSERT INTO study_trials (trial_id, session_id, trial_index, kind, item_id, text, attention_check, presented_at)
       SELECT trial_id, session_id, trial_index, 'ab', item_id, text, 0, presented_at FROM trials
       ORDER BY session_id, trial_index""",
    """INSERT INTO trial_conditions (trial_id, label, position, role, system, clip, duration_seconds)
       SELECT trial_id, 'A', 0, 'rated', system_a, clip_a, 0 FROM trials
       UNION ALL SELECT trial_id, 'B', 1, 'rated', system_b, clip_b, 0 FROM trials""",
    """INSERT INTO study_plays (session_id, trial_id, label, completed_at)
       SELECT session_id, trial_id, clip, completed_at FROM plays ORDER BY play_id""",
    """INSERT INTO answers (trial_id, session_id, kind, answer, presented_at, submitted_at, trial_seconds, app_version)
       SELECT trial_id, session_id, 'ab', json_object('choice', choice), presented_at, submitted_at, trial_seconds,
              app_version FROM votes ORDER BY vote_id""",
    """INSERT INTO ratings (answer_id, trial_id, kind, label, system, other_system, score, plays)
       SELECT a.answer_id, v.trial_id, 'ab', c.label,
              CASE c.label WHEN 'A' THEN v.system_a ELSE v.system_b END,
              CASE c.label WHEN 'A' THEN v.system_b ELSE v.system_a END,
              CASE WHEN v.choice = 'none' THEN 0.5 WHEN v.choice = c.label THEN 1 ELSE 0 END,
              COALESCE(CASE c.label WHEN 'A' THEN v.plays_a ELSE v.plays_b END, 0)
       FROM votes v JOIN answers a ON a.trial_id = v.trial_id
       CROSS JOIN (SELECT 'A' AS label UNION ALL SELECT 'B') c ORDER BY v.vote_id, c.label""",
    """CREATE TEMP TABLE tab_scores AS
       SELECT v.vote_id, v.session_id, v.trial_id, c.clip, v.trial_id || lower(c.clip) AS mos_trial_id,
              v.item_id, v.text, v.presented_at, v.submitted_at, v.trial_seconds, v.app_version,
              CASE c.clip WHEN 'A' THEN v.system_a ELSE v.system_b END AS system,
              CASE c.clip WHEN 'A' THEN t.clip_a ELSE t.clip_b END AS path,
              CASE c.clip WHEN 'A' THEN v.score_a ELSE v.score_b END AS score,
              COALESCE(CASE c.clip WHEN 'A' THEN v.plays_a ELSE v.plays_b END, 0) AS plays,
              s.n_trials - 1 + ROW_NUMBER() OVER (PARTITION BY v.session_id ORDER BY v.trial_index, c.clip)
                  AS trial_index
       FROM votes v JOIN trials t ON t.trial_id = v.trial_id JOIN sessions s ON s.session_id = v.session_id
       CROSS JOIN (SELECT 'A' AS clip UNION ALL SELECT 'B') c
       WHERE CASE c.clip WHEN 'A' THEN v.score_a ELSE v.score_b END IS NOT NULL""",
    """INSERT INTO study_trials (trial_id, session_id, trial_index, kind, item_id, text, attention_check, presented_at)
       SELECT mos_trial_id, session_id, trial_index, 'mos', item_id, text, 0, presented_at FROM tab_scores
       ORDER BY vote_id, clip""",
    """INSERT INTO trial_conditions (trial_id, label, position, role, system, clip, duration_seconds)
       SELECT mos_trial_id, 'A', 0, 'rated', system, path, 0 FROM tab_scores ORDER BY vote_id, clip""",
    """INSERT INTO study_plays (session_id, trial_id, label, completed_at)
       SELECT p.session_id, m.mos_trial_id, 'A', p.completed_at
       FROM plays p JOIN tab_scores m ON m.trial_id = p.trial_id AND m.clip = p.clip ORDER BY p.play_id""",
    """INSERT INTO answers (trial_id, session_id, kind, answer, presented_at, submitted_at, trial_seconds, app_version)
       SELECT mos_trial_id, session_id, 'mos', json_object('score', score), presented_at, submitted_at,
              trial_seconds, app_version FROM tab_scores ORDER BY vote_id, clip""",
    """INSERT INTO ratings (answer_id, trial_id, kind, label, system, other_system, score, plays)
       SELECT a.answer_id, m.mos_trial_id, 'mos', 'A', m.system, NULL, m.score, m.plays
       FROM tab_scores m JOIN answers a ON a.trial_id = m.mos_trial_id ORDER BY m.vote_id, m.clip""",
    """UPDATE sessions SET n_trials = n_trials
           + (SELECT COUNT(*) FROM tab_scores m WHERE m.session_id = sessions.session_id)
       WHERE session_id IN (SELECT session_id FROM tab_scores)""",
    "DROP TABLE tab_scores",
)
MIGRATIONS += (
    (5, "the A/B tab's sessions, plays and votes become the built-in A/B + MOS study's", TAB_VOTES_TO_STUDY),
    (
        6,
        "the clips served to each session: a play counts only for a clip its session fetched",
        (
            # One row per time the server handed a condition's audio to a session. Plays recorded before
            # this version have none; from now on a play needs one, at least the clip's length earlier.
            """CREATE TABLE clip_fetches (
                fetch_id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(session_id),
                trial_id TEXT NOT NULL,
                label TEXT NOT NULL,
                fetched_at TEXT NOT NULL,
                FOREIGN KEY (trial_id, label) REFERENCES trial_conditions(trial_id, label)
            )""",
            "CREATE INDEX clip_fetches_by_trial ON clip_fetches (trial_id, label)",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def apply_migrations(db: sqlite3.Connection, path: Path, now: Callable[[], str]) -> None:
    """Bring the database open in `db` (inside a transaction) up to SCHEMA_VERSION; `now()` stamps each one."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    current = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"{path} has schema version {current}, newer than this app's {SCHEMA_VERSION}; upgrade the app"
        )
    for version, description, statements in MIGRATIONS:
        if version > current:
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, description, now()))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

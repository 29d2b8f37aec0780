"""The listening-test database: sessions, planned trials and votes in SQLite.

Trust comes from the database, not from the app: WAL journaling with full sync, one
`BEGIN IMMEDIATE` transaction per vote, CHECK constraints on every value and a UNIQUE
constraint on the trial a vote answers, so a repeated or concurrent submission of the
same trial can store at most one row whatever the caller does. The schema is versioned
in a `schema_migrations` table; opening a database applies any missing migrations (`migrations`).

Every vote row is self-contained (session, rater, trial, systems in their A/B
positions, choice, scores, timestamps, app version), so the raw table is the study.
"""

# The records read from the schema and the transactions that rely on its constraints are one job
# (the vote database), best read together; the schema itself is in `migrations`.

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .answers import parse_whole_number
from .database import SqliteDatabase, utc_now
from .errors import (AlreadyVotedError, InvalidVoteError, ListeningError, NotListenedError,  # noqa: F401 (re-exported)
    UnknownSessionError, UnknownTrialError, quote)
from .migrations import SCHEMA_VERSION as SCHEMA_VERSION  # the version a store opened here ends at
from .records import MAX_RATER_ID_CHARS, SESSION_COLUMNS, SessionRecord, normalize_rater_id  # noqa: F401
from .study_store import StudyTables

CHOICES = ("A", "B", "none")
CLIPS = ("A", "B")
SCORE_RANGE = (1, 5)


@dataclass(frozen=True)
class PlannedTrial:
    """One trial as planned for a session: which clip plays in which position."""

    item_id: str
    text: str
    system_a: str
    system_b: str
    clip_a: str
    clip_b: str


@dataclass(frozen=True)
class TrialRecord:
    trial_id: str
    session_id: str
    trial_index: int
    item_id: str
    text: str
    system_a: str
    system_b: str
    clip_a: str
    clip_b: str
    presented_at: str | None


@dataclass(frozen=True)
class VoteRecord:
    """One stored vote; field order is the CSV column order."""

    vote_id: int
    session_id: str
    rater_id: str | None
    trial_id: str
    trial_index: int
    stimulus_set: str
    stimulus_set_sha256: str | None  # None only for votes whose session row is gone (never, with foreign keys)
    item_id: str
    text: str
    system_a: str
    system_b: str
    choice: str
    preferred_system: str | None
    score_a: int | None
    score_b: int | None
    presented_at: str | None
    submitted_at: str
    app_version: str
    plays_a: int | None = None  # times clip A was played to the end before the vote (None: before plays were kept)
    plays_b: int | None = None
    trial_seconds: float | None = None  # from the trial shown to the vote submitted


@dataclass(frozen=True)
class SubmitOutcome:
    vote: VoteRecord
    stored: bool  # False: this exact vote was already stored (a repeated submission)


def normalize_choice(choice: object) -> str:
    if choice not in CHOICES:
        raise InvalidVoteError(f"Choose A, B or no preference (got {quote(choice)}).")
    return str(choice)


def normalize_score(score: object, label: str) -> int | None:
    """None/"" = not rated; otherwise an integer 1..5 (int or its digit string, never bool or 3.5)."""
    if score is None or score == "":
        return None
    number = parse_whole_number(score)
    if number is None or not SCORE_RANGE[0] <= number <= SCORE_RANGE[1]:
        raise InvalidVoteError(f"The naturalness score for {label} must be a whole number from 1 to 5 "
                               f"(got {quote(score)}).")
    return number


def _looks_like_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and value.isalnum()


class ListeningStore(StudyTables, SqliteDatabase):
    """The listening-test database: the A/B tab's sessions, trials, plays and votes here, the studies'
    tables in `StudyTables`, connections and transactions in `SqliteDatabase`."""

    # -- sessions and trials

    def create_session(
        self,
        trials: Sequence[PlannedTrial],
        *,
        stimulus_set: str,
        stimulus_set_sha256: str,
        seed: int,
        rater_id: str | None = None,
    ) -> SessionRecord:
        """Store a session and its planned trials in one transaction; ids are random and unguessable."""
        if not trials:
            raise ListeningError("This stimulus set has no trials to offer.")
        rater_id = normalize_rater_id(rater_id)
        session = SessionRecord(
            session_id=secrets.token_hex(16),
            rater_id=rater_id,
            stimulus_set=stimulus_set,
            stimulus_set_sha256=stimulus_set_sha256,
            n_trials=len(trials),
            seed=int(seed),
            created_at=utc_now(),
            app_version=self.app_version,
        )
        with self._transaction() as db:
            # The A/B tab's sessions leave `study` NULL (and so work on a database of any schema version).
            columns = [c for c in SESSION_COLUMNS if c != "study"]
            db.execute(f"INSERT INTO sessions ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                       tuple(getattr(session, c) for c in columns))
            db.executemany(
                "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                [(secrets.token_hex(16), session.session_id, index, t.item_id, t.text, t.system_a, t.system_b,
                  t.clip_a, t.clip_b) for index, t in enumerate(trials)],
            )
        return session

    def get_session(self, session_id: str) -> SessionRecord:
        if not _looks_like_id(session_id):
            raise UnknownSessionError("Unknown listening session: start a new session.")
        row = self._connection().execute("SELECT * FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        if row is None:
            raise UnknownSessionError("Unknown listening session: start a new session.")
        return SessionRecord(**dict(row))

    def get_trial(self, session_id: str, trial_id: str) -> TrialRecord:
        """The trial, if it belongs to this session; a trial id from another session is refused."""
        self.get_session(session_id)
        row = None
        if _looks_like_id(trial_id):
            row = (
                self._connection()
                .execute("SELECT * FROM trials WHERE trial_id = ? AND session_id = ?", (trial_id, session_id))
                .fetchone()
            )
        if row is None:
            raise UnknownTrialError("Unknown trial for this session: reload the page or start a new session.")
        return TrialRecord(**dict(row))

    def next_trial(self, session_id: str) -> TrialRecord | None:
        """The first trial of the session without a vote (marked as presented now), or None when done."""
        self.get_session(session_id)
        with self._transaction() as db:
            row = db.execute(
                """SELECT t.* FROM trials t LEFT JOIN votes v ON v.trial_id = t.trial_id
                   WHERE t.session_id = ? AND v.vote_id IS NULL ORDER BY t.trial_index LIMIT 1""",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            if row["presented_at"] is None:
                db.execute(
                    "UPDATE trials SET presented_at = ? WHERE trial_id = ? AND presented_at IS NULL",
                    (utc_now(), row["trial_id"]),
                )
                row = db.execute("SELECT * FROM trials WHERE trial_id = ?", (row["trial_id"],)).fetchone()
        return TrialRecord(**dict(row))

    def progress(self, session_id: str) -> tuple[int, int]:
        """(votes given, trials planned) for a session."""
        session = self.get_session(session_id)
        done = (
            self._connection().execute("SELECT COUNT(*) FROM votes WHERE session_id = ?", (session_id,)).fetchone()[0]
        )
        return int(done), session.n_trials

    # -- plays

    def record_play(self, session_id: str, trial_id: str, clip: str, min_seconds: float = 0.0) -> frozenset[str]:
        """Record that `clip` ("A" or "B") of the trial was played to the end; return the clips played so far.

        Refused when less than `min_seconds` (the clip's length) have passed since the trial was shown:
        nobody can have heard it yet, so a client that reports plays it never made gains nothing.
        """
        if clip not in CLIPS:
            raise InvalidVoteError(f"No such clip {quote(clip)}: A or B.")
        trial = self.get_trial(session_id, trial_id)
        now = utc_now()
        if trial.presented_at is not None and min_seconds > 0:
            elapsed = (datetime.fromisoformat(now) - datetime.fromisoformat(trial.presented_at)).total_seconds()
            if elapsed < min_seconds:
                raise NotListenedError(f"Clip {clip} cannot have been played to the end yet: listen to all of it.")
        with self._transaction() as db:
            db.execute("INSERT INTO plays (session_id, trial_id, clip, completed_at) VALUES (?, ?, ?, ?)",
                       (session_id, trial_id, clip, now))
            return self._played(db, trial_id)

    def played_clips(self, trial_id: str) -> frozenset[str]:
        """The clips of a trial played to the end at least once."""
        return self._played(self._connection(), trial_id)

    @staticmethod
    def _played(db: sqlite3.Connection, trial_id: str) -> frozenset[str]:
        return frozenset(r[0] for r in db.execute("SELECT DISTINCT clip FROM plays WHERE trial_id = ?", (trial_id,)))

    def plays(self, session_id: str) -> list[tuple[str, str, str]]:
        """(trial id, clip, completed at) of every play of a session, in order."""
        rows = self._connection().execute(
            "SELECT trial_id, clip, completed_at FROM plays WHERE session_id = ? ORDER BY play_id", (session_id,)
        )
        return [tuple(row) for row in rows]

    # -- completion codes

    def completion_code(self, session_id: str) -> str | None:
        """The session's completion code, made and stored when every trial has a vote; None before."""
        self.get_session(session_id)
        with self._transaction() as db:
            row = db.execute("SELECT completion_code FROM completions WHERE session_id = ?", (session_id,)).fetchone()
            if row is not None:
                return str(row[0])
            open_trials = db.execute(
                """SELECT (SELECT COUNT(*) FROM trials t LEFT JOIN votes v ON v.trial_id = t.trial_id
                           WHERE t.session_id = ?1 AND v.vote_id IS NULL)
                        + (SELECT COUNT(*) FROM study_trials t LEFT JOIN answers a ON a.trial_id = t.trial_id
                           WHERE t.session_id = ?1 AND a.answer_id IS NULL)""", (session_id,)).fetchone()[0]
            if open_trials:
                return None
            while True:
                code = secrets.token_hex(5).upper()  # 10 hex digits: unguessable enough to prove a finished session
                if db.execute("SELECT 1 FROM completions WHERE completion_code = ?", (code,)).fetchone() is None:
                    db.execute("INSERT INTO completions VALUES (?, ?, ?)", (session_id, code, utc_now()))
                    return code

    # -- votes

    def submit_vote(
        self,
        session_id: str,
        trial_id: str,
        choice: str,
        score_a: object = None,
        score_b: object = None,
        require_plays: bool = True,
    ) -> SubmitOutcome:
        """Store one vote in one transaction. Submitting the same vote again stores nothing and
        returns the stored one; a different vote on an answered trial is refused. Unless
        `require_plays` is False, both clips must have been played to the end first (`record_play`)."""
        choice = normalize_choice(choice)
        score_a = normalize_score(score_a, "A")
        score_b = normalize_score(score_b, "B")
        session = self.get_session(session_id)
        trial = self.get_trial(session_id, trial_id)
        preferred = {"A": trial.system_a, "B": trial.system_b, "none": None}[choice]
        now = utc_now()
        with self._transaction() as db:
            if require_plays and db.execute("SELECT 1 FROM votes WHERE trial_id = ?", (trial_id,)).fetchone() is None:
                missing = [clip for clip in CLIPS if clip not in self._played(db, trial_id)]
                if missing:
                    raise NotListenedError(f"Listen to clip {' and clip '.join(missing)} to the end before voting.")
            cursor = db.execute(
                """INSERT INTO votes (session_id, rater_id, trial_id, trial_index, stimulus_set, stimulus_set_sha256,
                       item_id, text, system_a, system_b, choice, preferred_system, score_a, score_b, presented_at,
                       submitted_at, app_version, plays_a, plays_b, trial_seconds)
                   SELECT ?, ?, trial_id, trial_index, ?, ?, item_id, text, system_a, system_b, ?, ?, ?, ?,
                       presented_at, ?, ?,
                       (SELECT COUNT(*) FROM plays p WHERE p.trial_id = trials.trial_id AND p.clip = 'A'),
                       (SELECT COUNT(*) FROM plays p WHERE p.trial_id = trials.trial_id AND p.clip = 'B'),
                       ROUND((julianday(?) - julianday(presented_at)) * 86400.0, 3)
                   FROM trials WHERE trial_id = ?
                   ON CONFLICT (trial_id) DO NOTHING""",
                (session_id, session.rater_id, session.stimulus_set, session.stimulus_set_sha256, choice, preferred,
                 score_a, score_b, now, self.app_version, now, trial_id),
            )
            stored = cursor.rowcount == 1
            row = db.execute("SELECT * FROM votes WHERE trial_id = ?", (trial_id,)).fetchone()
        vote = VoteRecord(**dict(row))
        if not stored and (vote.choice, vote.score_a, vote.score_b) != (choice, score_a, score_b):
            raise AlreadyVotedError(f"Trial {trial.trial_index + 1} already has your vote; a vote cannot be changed.")
        return SubmitOutcome(vote=vote, stored=stored)

    def votes(self) -> list[VoteRecord]:
        rows = self._connection().execute("SELECT * FROM votes ORDER BY vote_id").fetchall()
        return [VoteRecord(**dict(row)) for row in rows]

    def votes_for_set(self, stimulus_set: str, stimulus_set_sha256: str | None = None) -> list[VoteRecord]:
        """Votes on one stimulus set (by name, and by manifest checksum when given)."""
        query = "SELECT * FROM votes WHERE stimulus_set = ?"
        parameters: tuple = (stimulus_set,)
        if stimulus_set_sha256 is not None:
            query += " AND stimulus_set_sha256 = ?"
            parameters += (stimulus_set_sha256,)
        rows = self._connection().execute(query + " ORDER BY vote_id", parameters).fetchall()
        return [VoteRecord(**dict(row)) for row in rows]

    def voted_sets(self) -> list[tuple[str, str | None, int]]:
        """(set name, manifest checksum, votes) for every stimulus set with votes, most recently voted first."""
        rows = self._connection().execute(
            """SELECT stimulus_set, stimulus_set_sha256, COUNT(*) AS n, MAX(vote_id) AS last FROM votes
               GROUP BY stimulus_set, stimulus_set_sha256 ORDER BY last DESC"""
        ).fetchall()
        return [(row["stimulus_set"], row["stimulus_set_sha256"], int(row["n"])) for row in rows]

    def count_votes(self) -> int:
        return int(self._connection().execute("SELECT COUNT(*) FROM votes").fetchone()[0])

    def count_sessions(self) -> int:
        return int(self._connection().execute("SELECT COUNT(*) FROM sessions").fetchone()[0])

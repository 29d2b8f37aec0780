"""The listening database (`ListeningStore`): sessions in a named study, their trials with conditions under
opaque labels, the clips served to each session, completed plays per clip, one answer per trial with one
rating per condition, completion codes and the experimenter's invalidations. The app's A/B + MOS tab is one
such study (`ab_mos`).

Trust comes from the database, not from the app: WAL journaling with full sync (`database`), one
`BEGIN IMMEDIATE` transaction per answer that writes the answer and its ratings together, `UNIQUE (trial_id)`
on answers so a repeated or concurrent submission stores at most once, CHECK constraints on every score,
a server-side refusal of a play of a clip the session was never served (or served too recently to have
been heard), and of an answer while a clip the rater must hear has no completed play. The schema is
versioned (`migrations`); opening a database applies the missing migrations.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from .answers import normalize_answer, ratings
from .database import SqliteDatabase
from .errors import (AlreadyVotedError, InvalidVoteError, ListeningError, NotFetchedError, NotListenedError,
                     RaterFinishedError, UnknownSessionError, UnknownTrialError, quote)
from .records import (SESSION_COLUMNS, AnswerOutcome, AnswerRecord, ConditionRecord, RatingRow,  # noqa: F401
                      SessionProgress, SessionRecord, StudyTrialRecord, normalize_rater_id)
from .study_plan import PlannedStudyTrial
from .study_queries import StudyQueries

MAX_REASON_CHARS = 500


class StudyTables:
    """The methods of `ListeningStore`; they use its connections and transactions (`SqliteDatabase`)."""

    app_version: str

    def get_session(self, session_id: str) -> SessionRecord:
        if not _looks_like_id(session_id):
            raise UnknownSessionError("Unknown listening session: start a new session.")
        row = self._connection().execute("SELECT * FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        if row is None:
            raise UnknownSessionError("Unknown listening session: start a new session.")
        return SessionRecord(**dict(row))

    def create_study_session(self, study: str, trials: Sequence[PlannedStudyTrial], *, stimulus_set: str,
                             stimulus_set_sha256: str, seed: int, rater_id: str | None = None) -> SessionRecord:
        """Store a session in `study` with its planned trials and their conditions, in one transaction.

        One session per rater id (compared case-insensitively) and study: a rater id with a finished session is
        refused (RaterFinishedError), and one with an unfinished session of the same stimuli gets that session
        back."""
        if not trials:
            raise ListeningError("This study has no trials to offer.")
        session = SessionRecord(
            session_id=secrets.token_hex(16), rater_id=normalize_rater_id(rater_id), stimulus_set=stimulus_set,
            stimulus_set_sha256=stimulus_set_sha256, n_trials=len(trials), seed=int(seed), created_at=self.now(),
            app_version=self.app_version, study=study,
        )
        with self._transaction() as db:
            if session.rater_id is not None:
                earlier = _rater_session(db, study, session.rater_id, stimulus_set_sha256)
                if earlier is not None:
                    return earlier
            db.execute(f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) VALUES ({', '.join('?' * len(SESSION_COLUMNS))})",
                       tuple(getattr(session, c) for c in SESSION_COLUMNS))
            for index, trial in enumerate(trials):
                trial_id = secrets.token_hex(16)
                db.execute("INSERT INTO study_trials VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                           (trial_id, session.session_id, index, trial.kind, trial.item_id, trial.text,
                            int(trial.attention_check)))
                db.executemany("INSERT INTO trial_conditions VALUES (?, ?, ?, ?, ?, ?, ?)",
                               [(trial_id, c.label, position, c.role, c.system, c.clip, c.duration_seconds)
                                for position, c in enumerate(trial.conditions)])
        return session

    def get_study_trial(self, session_id: str, trial_id: str) -> StudyTrialRecord:
        """The trial, if it belongs to this session; a trial id from another session is refused."""
        self.get_session(session_id)
        db = self._connection()
        row = None
        if _looks_like_id(trial_id):
            row = db.execute("SELECT * FROM study_trials WHERE trial_id = ? AND session_id = ?",
                             (trial_id, session_id)).fetchone()
        if row is None:
            raise UnknownTrialError("Unknown trial for this session: reload the page or start a new session.")
        return _trial_record(db, row)

    def next_study_trial(self, session_id: str) -> StudyTrialRecord | None:
        """The session's first trial without an answer (marked as presented now), or None when done."""
        self.get_session(session_id)
        with self._transaction() as db:
            row = db.execute(
                """SELECT t.* FROM study_trials t LEFT JOIN answers a ON a.trial_id = t.trial_id
                   WHERE t.session_id = ? AND a.answer_id IS NULL ORDER BY t.trial_index LIMIT 1""",
                (session_id,)).fetchone()
            if row is None:
                return None
            if row["presented_at"] is None:
                db.execute("UPDATE study_trials SET presented_at = ? WHERE trial_id = ? AND presented_at IS NULL",
                           (self.now(), row["trial_id"]))
                row = db.execute("SELECT * FROM study_trials WHERE trial_id = ?", (row["trial_id"],)).fetchone()
            return _trial_record(db, row)

    def study_progress(self, session_id: str) -> tuple[int, int]:
        """(answers given, trials planned) for a study session."""
        session = self.get_session(session_id)
        done = self._connection().execute("SELECT COUNT(*) FROM answers WHERE session_id = ?", (session_id,)).fetchone()[0]
        return int(done), session.n_trials

    # -- clips served, and plays

    def record_clip_fetch(self, session_id: str, trial_id: str, *labels: str) -> str:
        """Record that the server hands the clips labelled `labels` to the session now (one transaction); the
        time stored. A play of a clip counts only after its session fetched it (`record_study_play`)."""
        trial = self.get_study_trial(session_id, trial_id)
        for label in labels:
            trial.condition(label)  # an unknown trial or label writes nothing
        now = self.now()
        with self._transaction() as db:
            db.executemany("INSERT INTO clip_fetches (session_id, trial_id, label, fetched_at) VALUES (?, ?, ?, ?)",
                           [(session_id, trial_id, label, now) for label in labels])
        return now

    def clip_fetches(self, session_id: str) -> list[tuple[str, str, str]]:
        """(trial id, label, fetched at) of every clip served to a session, in order."""
        rows = self._connection().execute(
            "SELECT trial_id, label, fetched_at FROM clip_fetches WHERE session_id = ? ORDER BY fetch_id",
            (session_id,))
        return [tuple(row) for row in rows]

    def record_study_play(self, session_id: str, trial_id: str, label: str, listen_fraction: float = 0.0) -> frozenset[str]:
        """Record that the clip labelled `label` was played to the end; return the labels played so far.

        Refused (NotFetchedError) when the session was never served that clip (`record_clip_fetch`), and
        (NotListenedError) when less than `listen_fraction` of the clip's length has passed since it was
        first served: nobody can have heard it by then.
        """
        trial = self.get_study_trial(session_id, trial_id)
        condition = trial.condition(label)
        now = self.now()
        minimum = listen_fraction * condition.duration_seconds
        with self._transaction() as db:
            fetched = db.execute("SELECT MIN(fetched_at) FROM clip_fetches WHERE trial_id = ? AND label = ?",
                                 (trial_id, label)).fetchone()[0]
            if fetched is None:
                raise NotFetchedError(f"Sample {label} was never loaded on your page, so it cannot have been played: "
                                      "reload the page and play it to the end.")
            if minimum > 0 and _seconds(fetched, now) < minimum:
                raise NotListenedError(f"Sample {label} cannot have been played to the end yet: listen to all of it.")
            db.execute("INSERT INTO study_plays (session_id, trial_id, label, completed_at) VALUES (?, ?, ?, ?)",
                       (session_id, trial_id, label, now))
            return _played(db, trial_id)

    def study_played(self, trial_id: str) -> frozenset[str]:
        return _played(self._connection(), trial_id)

    def study_plays(self, session_id: str) -> list[tuple[str, str, str]]:
        """(trial id, label, completed at) of every completed play of a session, in order."""
        rows = self._connection().execute(
            "SELECT trial_id, label, completed_at FROM study_plays WHERE session_id = ? ORDER BY play_id", (session_id,))
        return [tuple(row) for row in rows]

    # -- answers

    def submit_answer(self, session_id: str, trial_id: str, answer: object, listen_fraction: float = 0.0) -> AnswerOutcome:
        """Store an answer and its ratings in one transaction. The same answer again stores nothing and
        returns the stored one; another answer to an answered trial is AlreadyVotedError; an answer while a
        clip that must be heard has no completed play is NotListenedError, and so is one sooner after the
        trial was shown than `listen_fraction` of the clips that must be heard, end to end (the player
        plays one clip at a time); a bad value InvalidAnswerError."""
        trial = self.get_study_trial(session_id, trial_id)
        rated = [c.label for c in trial.conditions if c.role == "rated"]
        reference = [c.label for c in trial.conditions if c.role == "reference"]
        canonical = normalize_answer(trial.kind, answer, rated, reference)
        encoded = json.dumps(canonical, sort_keys=True)
        systems = {c.label: c.system for c in trial.conditions}
        now = self.now()
        with self._transaction() as db:
            row = db.execute("SELECT * FROM answers WHERE trial_id = ?", (trial_id,)).fetchone()
            if row is not None:
                stored = _answer_record(row)
                if stored.answer != canonical:
                    raise AlreadyVotedError(f"Trial {trial.trial_index + 1} already has your answer; it cannot be changed.")
                return AnswerOutcome(stored, stored=False)
            played = _played(db, trial_id)
            missing = [c.label for c in trial.conditions if c.must_play and c.label not in played]
            if missing:
                raise NotListenedError(f"Listen to sample{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                                       "to the end before answering.")
            seconds = None
            if trial.presented_at is not None:
                seconds = round(_seconds(trial.presented_at, now), 3)
                needed = listen_fraction * sum(c.duration_seconds for c in trial.conditions if c.must_play)
                if seconds < needed:
                    raise NotListenedError(f"Listen to every sample to the end before answering: they take "
                                           f"{needed / listen_fraction:.0f} seconds together.")
            cursor = db.execute(
                """INSERT INTO answers (trial_id, session_id, kind, answer, presented_at, submitted_at, trial_seconds,
                       app_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                (trial_id, session_id, trial.kind, encoded, trial.presented_at, now, seconds, self.app_version))
            answer_id = cursor.lastrowid
            counts = dict(db.execute("SELECT label, COUNT(*) FROM study_plays WHERE trial_id = ? GROUP BY label",
                                     (trial_id,)).fetchall())
            for rating in ratings(trial.kind, canonical, systems):
                # ABX's one row stands for the whole trial: its plays are those of A, B and X together.
                plays = sum(counts.values()) if trial.kind == "abx" else counts.get(rating.label, 0)
                db.execute("""INSERT INTO ratings (answer_id, trial_id, kind, label, system, other_system, score, plays)
                              VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                           (answer_id, trial_id, trial.kind, rating.label, rating.system, rating.other_system,
                            rating.score, plays))
            stored = _answer_record(db.execute("SELECT * FROM answers WHERE answer_id = ?", (answer_id,)).fetchone())
        return AnswerOutcome(stored, stored=True)

    def study_answers(self, session_id: str) -> list[AnswerRecord]:
        rows = self._connection().execute("SELECT * FROM answers WHERE session_id = ? ORDER BY answer_id", (session_id,))
        return [_answer_record(row) for row in rows]

    def study_trials(self, session_id: str) -> list[StudyTrialRecord]:
        db = self._connection()
        rows = db.execute("SELECT * FROM study_trials WHERE session_id = ? ORDER BY trial_index", (session_id,)).fetchall()
        return [_trial_record(db, row) for row in rows]

    # -- completion codes

    def completion_code(self, session_id: str) -> str | None:
        """The session's completion code, made and stored when every trial has its answer; None before."""
        self.get_session(session_id)
        with self._transaction() as db:
            row = db.execute("SELECT completion_code FROM completions WHERE session_id = ?", (session_id,)).fetchone()
            if row is not None:
                return str(row[0])
            open_trials = db.execute(
                """SELECT COUNT(*) FROM study_trials t LEFT JOIN answers a ON a.trial_id = t.trial_id
                   WHERE t.session_id = ? AND a.answer_id IS NULL""", (session_id,)).fetchone()[0]
            if open_trials:
                return None
            while True:
                code = secrets.token_hex(5).upper()  # 10 hex digits: unguessable enough to prove a finished session
                if db.execute("SELECT 1 FROM completions WHERE completion_code = ?", (code,)).fetchone() is None:
                    db.execute("INSERT INTO completions VALUES (?, ?, ?)", (session_id, code, self.now()))
                    return code

    # -- the experimenter's invalidations

    def invalidate_session(self, session_id: str, reason: str) -> None:
        """Mark a session's ratings as excluded from results (they stay stored); a second call keeps the first reason."""
        if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
            raise InvalidVoteError(f"Give a reason of 1 to {MAX_REASON_CHARS} characters for invalidating a rater.")
        self.get_session(session_id)
        with self._transaction() as db:
            db.execute("INSERT INTO invalidations VALUES (?, ?, ?) ON CONFLICT (session_id) DO NOTHING",
                       (session_id, reason.strip(), self.now()))

    def restore_session(self, session_id: str) -> bool:
        """Undo an invalidation: the session's ratings count again. False if it was not invalidated."""
        self.get_session(session_id)
        with self._transaction() as db:
            return db.execute("DELETE FROM invalidations WHERE session_id = ?", (session_id,)).rowcount > 0


class ListeningStore(StudyTables, StudyQueries, SqliteDatabase):
    """The listening database: the studies' tables (`StudyTables`) and the experimenter's reads of them
    (`StudyQueries`) on one SQLite file (`SqliteDatabase`)."""


def _looks_like_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and value.isalnum()


def _rater_session(db: sqlite3.Connection, study: str, rater_id: str, stimulus_set_sha256: str) -> SessionRecord | None:
    """The rater's unfinished session of these stimuli, to resume; refused if the rater finished the study.
    Rater ids are compared case-insensitively ("Alice" is "alice": a person retyping an id is the same rater),
    and stored as given."""
    rows = db.execute(
        """SELECT s.*, (SELECT COUNT(*) FROM answers a WHERE a.session_id = s.session_id) AS answered
           FROM sessions s WHERE s.study = ? AND casefold(s.rater_id) = ? ORDER BY s.created_at DESC""",
        (study, rater_id.casefold())).fetchall()
    if any(row["answered"] >= row["n_trials"] for row in rows):
        raise RaterFinishedError(f"Rater id {quote(rater_id)} has already taken this study; each rater takes it once. "
                                 "If this is not you, check the id you were given.")
    for row in rows:
        if row["stimulus_set_sha256"] == stimulus_set_sha256:
            return SessionRecord(**{k: row[k] for k in row.keys() if k != "answered"})
    return None


def _seconds(since: str, until: str) -> float:
    """Seconds between two of the store's ISO 8601 times."""
    return (datetime.fromisoformat(until) - datetime.fromisoformat(since)).total_seconds()


def _played(db: sqlite3.Connection, trial_id: str) -> frozenset[str]:
    return frozenset(r[0] for r in db.execute("SELECT DISTINCT label FROM study_plays WHERE trial_id = ?", (trial_id,)))


def _trial_record(db: sqlite3.Connection, row: sqlite3.Row) -> StudyTrialRecord:
    conditions = tuple(
        ConditionRecord(label=c["label"], position=c["position"], role=c["role"], system=c["system"], clip=c["clip"],
                        duration_seconds=c["duration_seconds"])
        for c in db.execute("SELECT * FROM trial_conditions WHERE trial_id = ? ORDER BY position", (row["trial_id"],))
    )
    return StudyTrialRecord(trial_id=row["trial_id"], session_id=row["session_id"], trial_index=row["trial_index"],
                            kind=row["kind"], item_id=row["item_id"], text=row["text"],
                            attention_check=bool(row["attention_check"]), presented_at=row["presented_at"],
                            conditions=conditions)


def _answer_record(row: sqlite3.Row) -> AnswerRecord:
    return AnswerRecord(**{**dict(row), "answer": json.loads(row["answer"])})

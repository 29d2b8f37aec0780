"""The experimenter's reads of the listening database: a study's ratings, sessions, progress, stimulus
versions and invalidations, and the state its results depend on (`study_state`), read with the ratings in
one transaction (`study_snapshot`) so that results cached under a state were computed from exactly it.
The methods of `ListeningStore`, on its connections (`SqliteDatabase`)."""

from __future__ import annotations

from dataclasses import dataclass

from .records import RatingRow, SessionProgress, SessionRecord


@dataclass(frozen=True)
class StudyState:
    """What a study's results depend on in the database. Answers (and their ratings) are only ever added, with
    increasing ids, so equal states mean equal ratings; invalidations can be added and undone, so they are
    part of it."""

    answers: int
    last_answer_id: int | None
    invalidations: tuple[tuple[str, str], ...]  # (session id, reason) of the study's invalidated sessions


@dataclass(frozen=True)
class StudySnapshot:
    state: StudyState
    ratings: list[RatingRow]  # every rating of the study, in the order stored
    invalidations: dict[str, str]  # {session id: reason}, the study's sessions only


class StudyQueries:
    """Read-only queries over the studies' tables."""

    def study_ratings(self, study: str) -> list[RatingRow]:
        """Every rating in the study, in the order stored."""
        rows = self._connection().execute(
            """SELECT s.study, s.session_id, s.rater_id, t.trial_index, r.kind, t.item_id, t.attention_check, r.label,
                      r.system, r.other_system, r.score, r.plays, a.trial_seconds, a.submitted_at,
                      s.stimulus_set_sha256
               FROM ratings r JOIN answers a ON a.answer_id = r.answer_id
               JOIN study_trials t ON t.trial_id = r.trial_id JOIN sessions s ON s.session_id = a.session_id
               WHERE s.study = ? ORDER BY r.rating_id""", (study,)).fetchall()
        return [RatingRow(**{**dict(row), "attention_check": bool(row["attention_check"])}) for row in rows]

    def study_state(self, study: str) -> StudyState:
        """The study's answers (how many, the newest id) and its sessions' invalidations: cheap to read, and
        what a cache of its results is keyed on."""
        db = self._connection()
        answers, last = db.execute(
            "SELECT COUNT(*), MAX(a.answer_id) FROM answers a JOIN sessions s ON s.session_id = a.session_id "
            "WHERE s.study = ?", (study,)).fetchone()
        invalidated = db.execute(
            "SELECT i.session_id, i.reason FROM invalidations i JOIN sessions s ON s.session_id = i.session_id "
            "WHERE s.study = ? ORDER BY i.session_id", (study,)).fetchall()
        return StudyState(int(answers), last, tuple((row[0], row[1]) for row in invalidated))

    def study_snapshot(self, study: str) -> StudySnapshot:
        """The study's state, ratings and invalidations, read in one transaction: an answer stored meanwhile is
        in all three or in none."""
        with self._read_transaction():
            state = self.study_state(study)
            ratings = self.study_ratings(study)
        return StudySnapshot(state, ratings, dict(state.invalidations))

    def study_answer_count(self, study: str) -> int:
        """How many answers the study's sessions have given, whatever their stimulus version."""
        return self.study_state(study).answers

    def study_sessions(self, study: str) -> list[SessionRecord]:
        rows = self._connection().execute("SELECT * FROM sessions WHERE study = ? ORDER BY created_at", (study,))
        return [SessionRecord(**dict(row)) for row in rows]

    def rater_sessions(self, study: str, rater_id: str | None) -> set[str]:
        """The ids of the study's sessions of this rater id, compared case-insensitively as the store compares
        them ("Alice" is "alice"); none for no rater id."""
        if not isinstance(rater_id, str) or not rater_id.strip():
            return set()
        rows = self._connection().execute("SELECT session_id FROM sessions WHERE study = ? AND casefold(rater_id) = ?",
                                          (study, rater_id.strip().casefold()))
        return {row[0] for row in rows}

    def study_progress_table(self, study: str) -> list[SessionProgress]:
        """Live progress of every session in the study, oldest first (the experimenter's view)."""
        rows = self._connection().execute(
            """SELECT s.session_id, s.rater_id, s.n_trials, s.created_at,
                      (SELECT COUNT(*) FROM answers a WHERE a.session_id = s.session_id) AS answered,
                      (SELECT MAX(submitted_at) FROM answers a WHERE a.session_id = s.session_id) AS last_answer_at,
                      (SELECT reason FROM invalidations i WHERE i.session_id = s.session_id) AS invalidated
               FROM sessions s WHERE s.study = ? ORDER BY s.created_at""", (study,)).fetchall()
        return [SessionProgress(**dict(row)) for row in rows]

    def study_versions(self, study: str) -> list[tuple[str, str, int]]:
        """(stimulus set name, manifest sha256, answers) for every stimulus version of the study's sessions,
        most recently answered first (versions without answers last)."""
        rows = self._connection().execute(
            """SELECT s.stimulus_set, s.stimulus_set_sha256, COUNT(a.answer_id) AS n, MAX(a.answer_id) AS last
               FROM sessions s LEFT JOIN answers a ON a.session_id = s.session_id WHERE s.study = ?
               GROUP BY s.stimulus_set, s.stimulus_set_sha256 ORDER BY last IS NULL, last DESC""", (study,)).fetchall()
        return [(row["stimulus_set"], row["stimulus_set_sha256"], int(row["n"])) for row in rows]

    def studies_with_sessions(self) -> list[str]:
        rows = self._connection().execute("SELECT DISTINCT study FROM sessions WHERE study IS NOT NULL ORDER BY study")
        return [row[0] for row in rows]

    def invalidations(self) -> dict[str, str]:
        """{session id: reason} for every invalidated session."""
        return {row[0]: row[1] for row in self._connection().execute("SELECT session_id, reason FROM invalidations")}

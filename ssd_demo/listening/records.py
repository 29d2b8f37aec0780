"""Rows of the listening database: sessions, study trials with their conditions, answers, ratings and progress."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import InvalidVoteError, quote

MAX_RATER_ID_CHARS = 64


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    rater_id: str | None
    stimulus_set: str
    stimulus_set_sha256: str
    n_trials: int
    seed: int
    created_at: str
    app_version: str
    study: str | None = None  # the study the session belongs to (None only in a database before schema 5)


SESSION_COLUMNS = tuple(f.name for f in fields(SessionRecord))


def normalize_rater_id(rater_id: str | None) -> str | None:
    if rater_id is None:
        return None
    if not isinstance(rater_id, str):
        raise InvalidVoteError("The rater id must be text.")
    rater_id = rater_id.strip()
    if not rater_id:
        return None
    if len(rater_id) > MAX_RATER_ID_CHARS or not rater_id.isprintable():
        raise InvalidVoteError(f"The rater id must be at most {MAX_RATER_ID_CHARS} printable characters.")
    if not rater_id[0].isalnum():
        # A leading =, +, - or @ would make the exported CSV a formula in spreadsheet programs.
        raise InvalidVoteError("The rater id must start with a letter or a digit.")
    return rater_id


@dataclass(frozen=True)
class ConditionRecord:
    label: str
    position: int
    role: str  # "rated" | "reference" | "x"
    system: str
    clip: str
    duration_seconds: float

    @property
    def must_play(self) -> bool:
        """Rated clips and ABX's X must be played to the end before the answer (the labelled reference need not)."""
        return self.role in ("rated", "x")


@dataclass(frozen=True)
class StudyTrialRecord:
    trial_id: str
    session_id: str
    trial_index: int
    kind: str
    item_id: str
    text: str
    attention_check: bool
    presented_at: str | None
    conditions: tuple[ConditionRecord, ...]

    def condition(self, label: str) -> ConditionRecord:
        for condition in self.conditions:
            if condition.label == label:
                return condition
        raise InvalidVoteError(f"This trial has no sample {quote(label)}.")


@dataclass(frozen=True)
class AnswerRecord:
    answer_id: int
    trial_id: str
    session_id: str
    kind: str
    answer: dict
    presented_at: str | None
    submitted_at: str
    trial_seconds: float | None
    app_version: str


@dataclass(frozen=True)
class AnswerOutcome:
    answer: AnswerRecord
    stored: bool  # False: this same answer was already stored (a repeated submission)


@dataclass(frozen=True)
class RatingRow:
    """One rating with what analysis needs about it (the long format's row, before screening)."""

    study: str
    session_id: str
    rater_id: str | None
    trial_index: int
    kind: str
    item_id: str
    attention_check: bool
    label: str
    system: str
    other_system: str | None
    score: float
    plays: int
    trial_seconds: float | None
    submitted_at: str
    stimulus_set_sha256: str = ""  # the stimulus version the session heard (a study created again has another)

    @property
    def rater(self) -> str:
        """The rater's id, or the session's id when the rater gave none (one session = one rater then)."""
        return self.rater_id or f"session:{self.session_id[:12]}"


@dataclass(frozen=True)
class SessionProgress:
    session_id: str
    rater_id: str | None
    n_trials: int
    created_at: str
    answered: int
    last_answer_at: str | None
    invalidated: str | None  # the experimenter's reason, if invalidated

"""Rows of the listening database that both the A/B tab's tables and the studies' tables use."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import InvalidVoteError

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
    study: str | None = None  # the study the session belongs to; None for the A/B tab's stimulus-set sessions


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

"""CSV export of raw votes, and the reader that proves it round-trips.

One row per stored vote, columns in `VoteRecord` field order (the stimulus set's name and
manifest checksum included, since system names mean different audio in different sets).
Empty cells mean None
(no rater id, no preference, no score). The CSV module quotes text with commas, quotes
or newlines, so sentences survive unchanged.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path

from .store import VoteRecord

COLUMNS = tuple(f.name for f in fields(VoteRecord))
_INTEGER = {"vote_id", "trial_index"}
_OPTIONAL_INTEGER = {"score_a", "score_b", "plays_a", "plays_b"}
_OPTIONAL_FLOAT = {"trial_seconds"}
_OPTIONAL_TEXT = {"rater_id", "stimulus_set_sha256", "preferred_system", "presented_at"}


def votes_to_csv(votes: Iterable[VoteRecord]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for vote in votes:
        writer.writerow(["" if getattr(vote, c) is None else getattr(vote, c) for c in COLUMNS])
    return buffer.getvalue()


def write_votes_csv(votes: Iterable[VoteRecord], path: Path | str) -> Path:
    path = Path(path)
    # newline="" as the csv module asks: it handles line endings inside quoted fields itself.
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(votes_to_csv(votes))
    return path


def prune_exports(folder: Path | str, keep: int = 5, pattern: str = "listening_votes_*.csv") -> list[Path]:
    """Delete all but the `keep` newest exports in `folder` (names sort by UTC timestamp); return those deleted."""
    if keep < 0:
        raise ValueError(f"keep must be zero or more, got {keep}")
    exports = sorted(Path(folder).glob(pattern), key=lambda p: p.name, reverse=True)
    removed = []
    for old in exports[keep:]:
        old.unlink(missing_ok=True)
        removed.append(old)
    return removed


def _cell(column: str, value: str):
    if column in _INTEGER:
        return int(value)
    if column in _OPTIONAL_INTEGER:
        return int(value) if value else None
    if column in _OPTIONAL_FLOAT:
        return float(value) if value else None
    if column in _OPTIONAL_TEXT:
        return value or None
    return value


def read_votes_csv(path: Path | str) -> list[VoteRecord]:
    with Path(path).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"not a vote export: expected columns {', '.join(COLUMNS)}")
        return [VoteRecord(**{c: _cell(c, row[c]) for c in COLUMNS}) for row in reader]

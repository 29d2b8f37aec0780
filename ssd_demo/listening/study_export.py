"""A study's long CSV export: one row per rating (`LongRow`), written and read back exactly.

Columns: `study, rater, session, kind, item, trial, label, system, other_system, score, plays, seconds,
attention_check, excluded, stimulus_version, invalidated` (`seconds`: from the trial shown to its answer;
`excluded`: the screening of the rater's stimulus version excludes the rater; `stimulus_version`: the
SHA-256 of the stimulus manifest the session heard; `invalidated`: the experimenter's reason when the
session was invalidated, else empty). A study's export holds every stimulus version's ratings, in the order
stored, so that analysing it again (`study_results.results_from_long`) reproduces the served results of any
version (and of all of them pooled), including how many ratings of other versions they leave out.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, fields
from pathlib import Path

from .records import RatingRow


@dataclass(frozen=True)
class LongRow:
    """One rating in the long-format export; field order is the CSV's column order."""

    study: str
    rater: str
    session: str
    kind: str
    item: str
    trial: int  # the trial's 1-based number in its session
    label: str
    system: str
    other_system: str | None
    score: float
    plays: int
    seconds: float | None
    attention_check: bool
    excluded: bool
    stimulus_version: str = ""
    # The experimenter's reason when the session was invalidated, else "". None: read from an export made
    # before this column, which cannot tell.
    invalidated: str | None = ""


LONG_COLUMNS = tuple(f.name for f in fields(LongRow))


def long_csv(rows) -> str:
    """The CSV text of `rows` (LongRows)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(LONG_COLUMNS)
    for row in rows:
        writer.writerow([_cell(getattr(row, column)) for column in LONG_COLUMNS])
    return buffer.getvalue()


def write_long_csv(rows, path: Path | str) -> Path:
    """Write the export: a study's results (`StudyResults`: every stimulus version's ratings, its `export_rows`),
    or LongRows as given."""
    rows = getattr(rows, "export_rows", rows)
    path = Path(path)
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(long_csv(rows))
    return path


def read_long_csv(path: Path | str) -> list[LongRow]:
    with Path(path).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        # Exports made before the invalidated column, and before the stimulus_version column, read too.
        if tuple(reader.fieldnames or ()) not in (LONG_COLUMNS, LONG_COLUMNS[:-1], LONG_COLUMNS[:-2]):
            raise ValueError(f"not a study export: expected the columns {', '.join(LONG_COLUMNS)}")
        return [_long_row(record, line) for line, record in enumerate(reader, start=2)]


def ratings_from_long(rows: list[LongRow]) -> list[RatingRow]:
    """The ratings an export holds, for analysing it again (e.g. `results_from_ratings` on a downloaded CSV)."""
    return [RatingRow(study=r.study, session_id=r.session, rater_id=r.rater, trial_index=r.trial - 1, kind=r.kind,
                      item_id=r.item, attention_check=r.attention_check, label=r.label, system=r.system,
                      other_system=r.other_system, score=r.score, plays=r.plays, trial_seconds=r.seconds,
                      submitted_at="", stimulus_set_sha256=r.stimulus_version) for r in rows]


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same float
    return value


def _long_row(record: dict[str, str], line: int) -> LongRow:
    try:
        return LongRow(
            study=record["study"], rater=record["rater"], session=record["session"], kind=record["kind"],
            item=record["item"], trial=int(record["trial"]), label=record["label"], system=record["system"],
            other_system=record["other_system"] or None, score=float(record["score"]), plays=int(record["plays"]),
            seconds=float(record["seconds"]) if record["seconds"] else None,
            attention_check=_boolean(record["attention_check"]), excluded=_boolean(record["excluded"]),
            stimulus_version=record.get("stimulus_version") or "",
            invalidated=record["invalidated"] if "invalidated" in record else None)
    except (ValueError, TypeError) as error:  # TypeError: a row with fewer cells than columns
        raise ValueError(f"study export, line {line}: {error}") from None


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text == "true"

"""A study's results: screening, statistics with and without the excluded raters, and the exports.

Results cover one stimulus version (the manifest's SHA-256 the sessions heard): by default the study's
current one, so answers given before the study was created again are never pooled with the new ones.

Exports:
- long CSV, one row per rating: `study, rater, session, kind, item, trial, label, system, other_system,
  score, plays, seconds, attention_check, excluded, stimulus_version, invalidated` (`seconds`: from the
  trial shown to its answer; `excluded`: the rater is excluded by the screening, whichever view the results
  show; `stimulus_version`: the SHA-256 of the stimulus manifest the session heard; `invalidated`: the
  experimenter's reason when the session was invalidated, else empty). `results_from_long` analyses an
  export again with its invalidations, so it reproduces the served results and JSON summary;
- JSON summary: the screening (exclusions with their rules, the per-rater table) and the statistics
  both with the exclusions (`results`) and with every rater (`results_all_raters`).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from .screening import Exclusion, RaterSummary, rater_summaries, screen
from .study_store import ListeningStore
from .study import Study
from .study_stats import StudyStatistics, study_statistics
from .study_store import RatingRow

SUMMARY_FORMAT = "ssd-demo-study-summary"


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
    invalidated: str = ""  # the experimenter's reason when the session was invalidated


LONG_COLUMNS = tuple(f.name for f in fields(LongRow))


@dataclass(frozen=True)
class StudyResults:
    study: str
    exclusions: tuple[Exclusion, ...]
    raters: tuple[RaterSummary, ...]
    results: StudyStatistics  # the raters the screening keeps
    results_all_raters: StudyStatistics
    rows: tuple[LongRow, ...]
    stimulus_version: str | None = None  # the only version reported; None: every version
    other_versions_left_out: int = 0  # ratings from other stimulus versions, not reported
    screening: tuple[str, ...] = ()  # the screening rules applied (`Study.screening`)

    @property
    def excluded_raters(self) -> frozenset[str]:
        return frozenset(exclusion.rater for exclusion in self.exclusions)

    def statistics(self, exclude: bool = True) -> StudyStatistics:
        return self.results if exclude else self.results_all_raters


def study_results(store: ListeningStore, study: Study, stimulus_version: str | None = None) -> StudyResults:
    """The study's results over the sessions that heard `stimulus_version` (the stimulus manifest's SHA-256;
    pass the current set's), or over every session when None."""
    ratings = store.study_ratings(study.name)
    kept = [r for r in ratings if stimulus_version is None or r.stimulus_set_sha256 == stimulus_version]
    results = results_from_ratings(kept, study, store.invalidations())
    return replace(results, stimulus_version=stimulus_version, other_versions_left_out=len(ratings) - len(kept))


def results_from_ratings(ratings: list[RatingRow], study: Study, invalidated: dict[str, str] | None = None) -> StudyResults:
    invalidated = invalidated or {}
    exclusions = screen(ratings, study, invalidated)
    excluded = {exclusion.rater for exclusion in exclusions}
    long = tuple(
        LongRow(study=row.study, rater=row.rater, session=row.session_id, kind=row.kind, item=row.item_id,
                trial=row.trial_index + 1, label=row.label, system=row.system, other_system=row.other_system,
                score=row.score, plays=row.plays, seconds=row.trial_seconds, attention_check=row.attention_check,
                excluded=row.rater in excluded, stimulus_version=row.stimulus_set_sha256,
                invalidated=invalidated.get(row.session_id, ""))
        for row in ratings)
    return StudyResults(
        study=study.name, exclusions=tuple(exclusions), raters=tuple(rater_summaries(ratings, study, exclusions)),
        results=study_statistics([row for row in ratings if row.rater not in excluded], study),
        results_all_raters=study_statistics(ratings, study), rows=long, screening=study.screening)


# ----------------------------------------------------------------------------- long CSV


def long_csv(rows: tuple[LongRow, ...] | list[LongRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(LONG_COLUMNS)
    for row in rows:
        writer.writerow([_cell(getattr(row, column)) for column in LONG_COLUMNS])
    return buffer.getvalue()


def write_long_csv(rows, path: Path | str) -> Path:
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
        return [_long_row(record) for record in reader]


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same float
    return value


def _long_row(record: dict[str, str]) -> LongRow:
    return LongRow(
        study=record["study"], rater=record["rater"], session=record["session"], kind=record["kind"],
        item=record["item"], trial=int(record["trial"]), label=record["label"], system=record["system"],
        other_system=record["other_system"] or None, score=float(record["score"]), plays=int(record["plays"]),
        seconds=float(record["seconds"]) if record["seconds"] else None,
        attention_check=_boolean(record["attention_check"]), excluded=_boolean(record["excluded"]),
        stimulus_version=record.get("stimulus_version") or "", invalidated=record.get("invalidated") or "")


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text == "true"


# ----------------------------------------------------------------------------- JSON summary


def summary(results: StudyResults) -> dict:
    return {
        "format": SUMMARY_FORMAT,
        "study": results.study,
        "stimulus_version": results.stimulus_version,
        "other_versions_left_out": results.other_versions_left_out,
        "screening_rules": list(results.screening),
        "exclusions": [asdict(e) for e in results.exclusions],
        "raters": [asdict(r) for r in results.raters],
        "results": asdict(results.results),
        "results_all_raters": asdict(results.results_all_raters),
    }


def write_summary_json(results: StudyResults, path: Path | str, extra: dict | None = None) -> Path:
    """The summary, plus `extra` sections (the objective metrics) beside it."""
    path = Path(path)
    path.write_text(json.dumps({**summary(results), **(extra or {})}, indent=2, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path


def read_summary_json(path: Path | str) -> dict:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT:
        raise ValueError("not a study summary")
    return data


def ratings_from_long(rows: list[LongRow]) -> list[RatingRow]:
    """The ratings an export holds, for analysing it again (e.g. `results_from_ratings` on a downloaded CSV)."""
    return [RatingRow(study=r.study, session_id=r.session, rater_id=r.rater, trial_index=r.trial - 1, kind=r.kind,
                      item_id=r.item, attention_check=r.attention_check, label=r.label, system=r.system,
                      other_system=r.other_system, score=r.score, plays=r.plays, trial_seconds=r.seconds,
                      submitted_at="", stimulus_set_sha256=r.stimulus_version) for r in rows]


EXCLUDED_IN_EXPORT = "excluded in the export (an export without the invalidated column)"


def invalidations_from_long(rows: list[LongRow]) -> dict[str, str]:
    """{session: reason} for the sessions the export marks invalidated."""
    return {row.session: row.invalidated for row in rows if row.invalidated}


def results_from_long(rows: list[LongRow], study: Study, stimulus_version: str | None = None) -> StudyResults:
    """An export analysed again as the served results were: the same screening, with the export's
    invalidations (so an invalidated rater stays out), over the sessions that heard `stimulus_version`
    (None: every row). With an export made before the invalidated column, a rater the export marks excluded
    whom the screening alone keeps is taken as invalidated, with the reason `EXCLUDED_IN_EXPORT`."""
    kept = [row for row in rows if stimulus_version is None or row.stimulus_version == stimulus_version]
    ratings = ratings_from_long(kept)
    invalidated = invalidations_from_long(kept)
    results = results_from_ratings(ratings, study, invalidated)
    marked = {row.rater for row in kept if row.excluded}
    missing = marked - results.excluded_raters
    if missing:
        invalidated.update({row.session: EXCLUDED_IN_EXPORT for row in kept if row.rater in missing})
        results = results_from_ratings(ratings, study, invalidated)
    return replace(results, stimulus_version=stimulus_version, other_versions_left_out=len(rows) - len(kept))

"""A study's results: screening, statistics with and without the excluded raters, and the exports.

Results cover one stimulus version (the manifest's SHA-256 the sessions heard): by default the study's
current one, so answers given before the study was created again are never pooled with the new ones. The
ratings of the other versions are kept beside them (`export_rows`, each version screened on its own): the
long CSV export holds them too, so that analysing an export again reproduces the served results of
any version, with the same count of ratings left out.

Exports:
- long CSV, one row per rating (`study_export`): `results_from_long` analyses an export again with its
  invalidations, so it reproduces the served results and JSON summary;
- JSON summary: the screening (exclusions with their rules, the per-rater table) and the statistics
  both with the exclusions (`results`) and with every rater (`results_all_raters`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .records import RatingRow
from .screening import Exclusion, RaterSummary, rater_summaries, screen
from .study import Study
from .study_export import (LONG_COLUMNS, LongRow, long_csv, ratings_from_long, read_long_csv,  # noqa: F401
                           write_long_csv)
from .study_stats import StudyStatistics, study_statistics
from .study_store import ListeningStore

SUMMARY_FORMAT = "ssd-demo-study-summary"


@dataclass(frozen=True)
class StudyResults:
    study: str
    exclusions: tuple[Exclusion, ...]
    raters: tuple[RaterSummary, ...]
    results: StudyStatistics  # the raters the screening keeps
    results_all_raters: StudyStatistics
    rows: tuple[LongRow, ...]  # the ratings reported
    stimulus_version: str | None = None  # the only version reported; None: every version
    # Every rating of the study in the order stored, what the long CSV export holds: those reported (`rows`) and
    # those of the other stimulus versions, each version's raters screened within that version.
    export_rows: tuple[LongRow, ...] = ()
    screening: tuple[str, ...] = ()  # the screening rules applied (`Study.screening`)

    @property
    def other_versions_left_out(self) -> int:
        """Ratings of other stimulus versions, in the export but not in these results."""
        return len(self.export_rows) - len(self.rows)

    @property
    def excluded_raters(self) -> frozenset[str]:
        return frozenset(exclusion.rater for exclusion in self.exclusions)

    def statistics(self, exclude: bool = True) -> StudyStatistics:
        return self.results if exclude else self.results_all_raters


def study_results(store: ListeningStore, study: Study, stimulus_version: str | None = None) -> StudyResults:
    """The study's results over the sessions that heard `stimulus_version` (the stimulus manifest's SHA-256;
    pass the current set's), or over every session when None. (`results_cache.ResultsCache` keeps them
    while the study's answers and invalidations are unchanged.)"""
    snapshot = store.study_snapshot(study.name)
    return version_results(snapshot.ratings, study, snapshot.invalidations, stimulus_version)


def version_results(ratings: list[RatingRow], study: Study, invalidated: dict[str, str],
                    stimulus_version: str | None) -> StudyResults:
    """Results over the ratings of `stimulus_version` (None: all of them pooled), with the ratings of the
    other versions beside them, each version screened on its own."""
    reported = [stimulus_version is None or row.stimulus_set_sha256 == stimulus_version for row in ratings]
    results = results_from_ratings([row for row, kept in zip(ratings, reported) if kept], study, invalidated)
    kept_rows = iter(results.rows)
    other_rows = iter(_screened_by_version([row for row, kept in zip(ratings, reported) if not kept], study,
                                           invalidated))
    export = tuple(next(kept_rows) if kept else next(other_rows) for kept in reported)  # in the order stored
    return replace(results, stimulus_version=stimulus_version, export_rows=export)


def _screened_by_version(ratings: list[RatingRow], study: Study, invalidated: dict[str, str]) -> tuple[LongRow, ...]:
    """Export rows of ratings of several versions, in the given order, each version's raters screened among
    that version's ratings alone (as that version's own results screen them)."""
    by_version: dict[str, list[RatingRow]] = defaultdict(list)
    for row in ratings:
        by_version[row.stimulus_set_sha256].append(row)
    rows = {version: iter(_long_rows(own, screen(own, study, invalidated), invalidated))
            for version, own in by_version.items()}
    return tuple(next(rows[row.stimulus_set_sha256]) for row in ratings)


def results_from_ratings(ratings: list[RatingRow], study: Study, invalidated: dict[str, str] | None = None) -> StudyResults:
    invalidated = invalidated or {}
    exclusions = screen(ratings, study, invalidated)
    excluded = {exclusion.rater for exclusion in exclusions}
    long = _long_rows(ratings, exclusions, invalidated)
    return StudyResults(
        study=study.name, exclusions=tuple(exclusions), raters=tuple(rater_summaries(ratings, study, exclusions)),
        results=study_statistics([row for row in ratings if row.rater not in excluded], study),
        results_all_raters=study_statistics(ratings, study), rows=long, export_rows=long, screening=study.screening)


def _long_rows(ratings: list[RatingRow], exclusions: list[Exclusion], invalidated: dict[str, str]) -> tuple[LongRow, ...]:
    excluded = {exclusion.rater for exclusion in exclusions}
    return tuple(
        LongRow(study=row.study, rater=row.rater, session=row.session_id, kind=row.kind, item=row.item_id,
                trial=row.trial_index + 1, label=row.label, system=row.system, other_system=row.other_system,
                score=row.score, plays=row.plays, seconds=row.trial_seconds, attention_check=row.attention_check,
                excluded=row.rater in excluded, stimulus_version=row.stimulus_set_sha256,
                invalidated=invalidated.get(row.session_id, ""))
        for row in ratings)


# ----------------------------------------------------------------------------- JSON summary


def summary(results: StudyResults) -> dict:
    """The JSON summary as a dict of JSON's own types (lists, not tuples), so that a summary read back from
    its file (`read_summary_json`) compares equal to it."""
    return json.loads(json.dumps({
        "format": SUMMARY_FORMAT,
        "study": results.study,
        "stimulus_version": results.stimulus_version,
        "other_versions_left_out": results.other_versions_left_out,
        "screening_rules": list(results.screening),
        "exclusions": [asdict(e) for e in results.exclusions],
        "raters": [asdict(r) for r in results.raters],
        "results": asdict(results.results),
        "results_all_raters": asdict(results.results_all_raters),
    }))


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


EXCLUDED_IN_EXPORT = "excluded in the export (an export without the invalidated column)"


def invalidations_from_long(rows: list[LongRow]) -> dict[str, str]:
    """{session: reason} for the sessions the export marks invalidated."""
    return {row.session: row.invalidated for row in rows if row.invalidated}


def results_from_long(rows: list[LongRow], study: Study, stimulus_version: str | None = None) -> StudyResults:
    """An export analysed again as the served results were: the same screening, with the export's
    invalidations (so an invalidated rater stays out), over the sessions that heard `stimulus_version`
    (None: every row pooled), every row kept for the export as it came. An export holds every version, so this
    equals the served results of any of them. With an export made before the invalidated column, a rater the
    export marks excluded whom the screening alone keeps is taken as invalidated, with the reason
    `EXCLUDED_IN_EXPORT`."""
    ratings = ratings_from_long(rows)
    invalidated = invalidations_from_long(rows)
    results = version_results(ratings, study, invalidated, stimulus_version)
    kept = [row for row in rows if stimulus_version is None or row.stimulus_version == stimulus_version]
    marked = {row.rater for row in kept if row.excluded and row.invalidated is None}
    missing = marked - results.excluded_raters
    if missing:
        invalidated.update({row.session: EXCLUDED_IN_EXPORT for row in kept if row.rater in missing})
        results = version_results(ratings, study, invalidated, stimulus_version)
    return results

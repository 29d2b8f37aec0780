"""The experimenter's view of listening studies as plain objects, no Gradio: live progress per rater,
results with and without the screening's exclusions, the box plot, the long CSV and JSON summary
exports, invalidating a rater's session, and creating a study with its stimuli.

Every operation checks `$SSD_DEMO_RESULTS_TOKEN` first; with no token configured the view is off.
The statistics, screening and exports are the library's (`study_results`, `figures`); this module only
selects and formats them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from matplotlib.figure import Figure

from ...listening.errors import ListeningError, UnknownStudyError
from ...listening.figures import mushra_boxplot
from ...listening.study_store import ListeningStore
from ...listening.results_cache import ResultsCache
from ...listening.study_results import StudyResults, summary, write_long_csv, write_summary_json
from ...listening.study_sessions import list_studies, load_study_and_stimuli
from ...listening.study_setup import check_tones, create_study
from ...listening.study_report import format_results
from ...listening.stimuli import tone_renderer
from .experimenter_access import _export_dir, _private_file, check_build_allowed, check_results_token, prune_exports

PROGRESS_COLUMNS = ["rater", "session", "started (UTC)", "answered", "of", "last answer (UTC)", "completed",
                    "invalidated"]
EXPORTS_KEPT = 10


@dataclass(frozen=True)
class StudyReport:
    text: str  # Markdown
    figure: Figure
    summary: dict


class StudyExperimenter:
    """The operations of the admin page on one data directory and database."""

    def __init__(self, store: ListeningStore, data_dir: Path):
        self.store = store
        self.data_dir = data_dir
        self.cache = ResultsCache(store)  # a view computes the statistics again only after new answers

    def studies(self, token: str | None) -> list[str]:
        check_results_token(token)
        return list_studies(self.data_dir)

    def _study(self, name: str | None):
        if not name or name not in list_studies(self.data_dir):
            raise UnknownStudyError(f"No study named {name!r}: create one below or with "
                                    "`python -m ssd_demo study create`.")
        return load_study_and_stimuli(name, self.data_dir, verify=False)[0]

    def _current_version(self, name: str) -> str:
        """The SHA-256 of the study's current stimulus manifest: results report only sessions that heard it."""
        return load_study_and_stimuli(name, self.data_dir, verify=False)[1].manifest_sha256

    def progress(self, token: str | None, name: str | None) -> list[list]:
        """One row per session: who, how far, when, finished (completion code given) or not, invalidated or not."""
        check_results_token(token)
        study = self._study(name)
        rows = []
        for p in self.store.study_progress_table(study.name):
            rater = p.rater_id or f"session:{p.session_id[:12]}"  # as the results name a rater without an id
            rows.append([rater, p.session_id, _time(p.created_at), p.answered, p.n_trials, _time(p.last_answer_at),
                         "yes" if p.answered >= p.n_trials else "", p.invalidated or ""])
        return rows

    def results(self, token: str | None, name: str | None, exclude: bool = True) -> tuple[StudyResults, StudyReport]:
        check_results_token(token)
        study = self._study(name)
        results = self.cache.results(study, self._current_version(study.name))
        text = "```text\n" + "\n".join(format_results(results, exclude)) + "\n```"
        if not results.rows:
            text = f"No answers to study **{study.name}** yet.\n\n" + text
        return results, StudyReport(text=text, figure=mushra_boxplot(results, exclude=exclude),
                                    summary=summary(results))

    def export(self, token: str | None, name: str | None) -> tuple[Path, Path]:
        """The study's long CSV (one row per rating, every stimulus version's: the current one's first) and JSON
        summary, as private files."""
        results, _ = self.results(token, name)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        folder = _export_dir()
        csv_path = write_long_csv(results, _private_file(folder / f"study_{results.study}_ratings_{stamp}.csv"))
        json_path = write_summary_json(results, _private_file(folder / f"study_{results.study}_summary_{stamp}.json"))
        for kind in ("ratings_*.csv", "summary_*.json"):
            prune_exports(folder, keep=EXPORTS_KEPT, pattern=f"study_{results.study}_{kind}")
        return csv_path, json_path

    def invalidate(self, token: str | None, name: str | None, session_id: str | None, reason: str | None) -> str:
        """Leave a session of the chosen study out of the results (undone by `restore`)."""
        check_results_token(token)
        session_id = self._session_in(self._study(name).name, session_id)
        self.store.invalidate_session(session_id, reason or "")
        return (f"Session {session_id[:12]}... is invalidated: its ratings stay stored and are left out of the "
                "results (Undo brings them back).")

    def restore(self, token: str | None, name: str | None, session_id: str | None) -> str:
        """Undo an invalidation of a session of the chosen study."""
        check_results_token(token)
        session_id = self._session_in(self._study(name).name, session_id)
        if not self.store.restore_session(session_id):
            raise ListeningError(f"Session {session_id[:12]}... is not invalidated: nothing to undo.")
        return f"Session {session_id[:12]}... counts again: its ratings are back in the results."

    def _session_in(self, study: str, session_id: str | None) -> str:
        """The session id, if it names a session of `study`; an experimenter's message otherwise."""
        session_id = (session_id or "").strip()
        sessions = {s.session_id for s in self.store.study_sessions(study)}
        if session_id not in sessions:
            where = self._known(session_id)
            raise ListeningError(
                f"No session {session_id[:12] or '(empty)'}... in study {study!r}" +
                (f": it belongs to study {where!r}; pick that study first." if where else
                 ": copy its id from the progress table."))
        return session_id

    def _known(self, session_id: str) -> str | None:
        """The study a session id belongs to, if any."""
        try:
            return self.store.get_session(session_id).study
        except ListeningError:
            return None

    def create(self, token: str | None, study_file: str | Path | None, tones: bool = False,
               overwrite: bool = False, discard_answers: bool = False) -> str:
        """Create a study from its file: render its stimuli (with the model, or tones) and install the file."""
        check_results_token(token)
        check_build_allowed()
        if not study_file:
            raise ListeningError("Choose a study file (TOML) first; see ssd_demo/listening/README.md for its fields.")
        if tones:
            check_tones(study_file)
        render = tone_renderer(seconds=1.0) if tones else None
        study, stimulus_set = create_study(Path(study_file), root=self.data_dir, render=render, overwrite=overwrite,
                                           discard_answers=discard_answers)
        return (f"Created study **{study.name}**: {len(stimulus_set.items)} sentences x {len(stimulus_set.systems)} "
                f"systems. Raters open it at `/?study={study.name}` on a server started with `--study {study.name}`.")


def _time(stamp: str | None) -> str:
    """An ISO time shown to the second, without its zone suffix (all are UTC)."""
    return re.sub(r"(\.\d+)?(\+00:00|Z)?$", "", stamp or "").replace("T", " ")

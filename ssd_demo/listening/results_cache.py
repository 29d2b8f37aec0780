"""Study results kept between views, and never stale.

An experimenter's page asks for a study's results on every view (and the progress table refreshes every few
seconds); the statistics of a MUSHRA study with many systems and raters take a while to compute. Results
depend only on the study (its file: systems, screening rules), the stimulus version reported, the study's
answers and its sessions' invalidations. Answers are only ever added, with increasing ids, so the answer
count and the newest id, with the invalidations, name the database state exactly (`StudyState`): a view
reads that state (one cheap query) and computes again only when it changed. Results are stored under the
state of the very snapshot they were computed from (`ListeningStore.study_snapshot`), so an answer stored
while they were computed makes the next view compute again rather than show a number without it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .study import Study
from .study_results import StudyResults, version_results
from .study_store import ListeningStore

CACHED_RESULTS = 16  # (study, version, state) entries kept; the oldest used goes first


class ResultsCache:
    """`study_results` for one store, kept per (study, stimulus version, database state)."""

    def __init__(self, store: ListeningStore, size: int = CACHED_RESULTS):
        if size < 1:
            raise ValueError(f"a results cache holds at least one entry, got size {size}")
        self.store = store
        self.size = size
        self._entries: OrderedDict[tuple, StudyResults] = OrderedDict()
        self._lock = threading.Lock()

    def results(self, study: Study, stimulus_version: str | None = None) -> StudyResults:
        """The study's results over `stimulus_version` (None: every version pooled), as `study_results` gives
        them; computed again only when the study's answers or invalidations (or the study) changed."""
        found = self._get((study, stimulus_version, self.store.study_state(study.name)))
        if found is not None:
            return found
        snapshot = self.store.study_snapshot(study.name)
        results = version_results(snapshot.ratings, study, snapshot.invalidations, stimulus_version)
        with self._lock:
            self._entries[(study, stimulus_version, snapshot.state)] = results
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return results

    def _get(self, key: tuple) -> StudyResults | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

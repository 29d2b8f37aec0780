"""Serving studies to raters: the operations a client (the app, a script) performs, and the studies
served at once, by name.

A study lives in `<data dir>/studies/<name>.toml` (the file `python -m ssd_demo study create` copies
there) with its stimulus set in `<data dir>/stimuli/<stimulus_set>/`. What a rater is shown
(`StudyTrialView`) carries the sentence, the instructions, and each clip under an opaque label with
its file path (a content hash), never a system name; systems are revealed by `reveal` only once
every trial of the session has its answer. A client gets a clip's audio through `fetch_clip`, which the
store records: a play is counted only for a clip the session fetched, at least 90% of its length earlier.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ..config import draw_seed
from .errors import ListeningError, StudyChangedError, StudyFileError, UnknownStudyError
from .records import SessionRecord
from .stimulus_sets import SET_NAME, StimulusSet, data_dir, load_stimulus_set, manifest_unchanged, stimuli_root
from .study_store import ListeningStore
from .study import DEFAULT_INSTRUCTIONS, Study, load_study
from .study_plan import plan_study
from .study_store import StudyTrialRecord

STUDY_SUFFIX = ".toml"
# A play counts as completed only once this share of the clip's length has passed since the clip was first
# fetched (server time): a client cannot report plays it never made. An answer likewise needs this share of
# the clips that must be heard, end to end, since the trial was shown (the player plays one at a time).
LISTEN_FRACTION = 0.9
SCALES = {"mushra": (0, 100), "mos": (1, 5)}
CHOICES = {"ab": ("A", "B", "none"), "abx": ("A", "B")}


@dataclass(frozen=True)
class ConditionView:
    label: str  # "A", "B", ... ; "Reference" (MUSHRA's labelled reference); "X" (ABX)
    clip: Path  # the WAV file to play; its name is a content hash
    duration_seconds: float
    rated: bool  # has its own score (MUSHRA slider, MOS score) or is a side of the A/B choice; ABX: none
    must_play: bool  # must be played to the end before the answer is accepted


@dataclass(frozen=True)
class StudyTrialView:
    """Everything a rater may see for one trial, and nothing more."""

    study: str
    session_id: str
    trial_id: str
    kind: str  # "mushra" | "abx" | "ab" | "mos"
    number: int  # 1-based
    total: int
    text: str
    instructions: str
    conditions: tuple[ConditionView, ...]  # in presentation order; MUSHRA's reference first
    played: frozenset[str]  # labels already played to the end (a reload keeps them unlocked)
    scale: tuple[int, int] | None  # MUSHRA (0, 100), MOS (1, 5); None for choices
    choices: tuple[str, ...]  # A/B ("A", "B", "none"), ABX ("A", "B"); () for scales

    @property
    def progress_label(self) -> str:
        return f"Trial {self.number} of {self.total}"

    def condition(self, label: str) -> ConditionView:
        return next(c for c in self.conditions if c.label == label)


@dataclass(frozen=True)
class RevealedTrial:
    number: int
    kind: str
    text: str
    systems: dict[str, str]  # {label: system}


class StudyRunner:
    """One study, its stimulus set and the store, joined."""

    def __init__(self, store: ListeningStore, study: Study, stimulus_set: StimulusSet):
        self.store = store
        self.study = study
        self.stimulus_set = stimulus_set

    def start_session(self, rater_id: str | None = None, seed: int | None = None) -> SessionRecord:
        seed = draw_seed() if seed is None else seed
        trials = plan_study(self.study, self.stimulus_set, seed)
        return self.store.create_study_session(
            self.study.name, trials, stimulus_set=self.stimulus_set.name,
            stimulus_set_sha256=self.stimulus_set.manifest_sha256, seed=seed, rater_id=rater_id)

    def next_view(self, session_id: str) -> StudyTrialView | None:
        """The session's next unanswered trial, or None when every trial has its answer."""
        session = self._served_session(session_id)
        trial = self.store.next_study_trial(session_id)
        return None if trial is None else self._view(trial, session.n_trials)

    def fetch_clip(self, session_id: str, trial_id: str, *labels: str) -> StudyTrialView:
        """Record that the clips labelled `labels` (one, or all a client gets at once) are handed to the session
        now, and return their trial's view (`view.condition(label).clip` is the file to send). A play of a clip
        counts only after this."""
        session = self._served_session(session_id)
        self.store.record_clip_fetch(session_id, trial_id, *labels)
        return self._view(self.store.get_study_trial(session_id, trial_id), session.n_trials)

    def record_play(self, session_id: str, trial_id: str, label: str) -> frozenset[str]:
        """Record that the clip labelled `label` played to the end; the labels played so far. Refused for a
        clip this session never fetched (`fetch_clip`), or fetched too recently to have been heard."""
        self._served_session(session_id)
        return self.store.record_study_play(session_id, trial_id, label, listen_fraction=LISTEN_FRACTION)

    def submit(self, session_id: str, trial_id: str, answer: object) -> StudyTrialView | None:
        """Store the answer (idempotently) and return the next trial to show, or None when done."""
        self._served_session(session_id)
        self.store.submit_answer(session_id, trial_id, answer, listen_fraction=LISTEN_FRACTION)
        return self.next_view(session_id)

    def progress(self, session_id: str) -> tuple[int, int]:
        self._served_session(session_id)
        return self.store.study_progress(session_id)

    def completion_code(self, session_id: str) -> str | None:
        """The session's completion code once every trial has its answer (made then, stored once)."""
        self._served_session(session_id)
        return self.store.completion_code(session_id)

    def reveal(self, session_id: str) -> tuple[RevealedTrial, ...]:
        """Which system each label was, trial by trial, for a finished session only."""
        self._served_session(session_id)
        done, total = self.store.study_progress(session_id)
        if done < total:
            raise ListeningError("The systems are shown once every trial has its answer.")
        return tuple(RevealedTrial(t.trial_index + 1, t.kind, t.text, {c.label: c.system for c in t.conditions})
                     for t in self.store.study_trials(session_id))

    def _served_session(self, session_id: str) -> SessionRecord:
        session = self.store.get_session(session_id)
        if session.study != self.study.name:
            raise StudyChangedError("This session belongs to another study: start a new session.")
        if session.stimulus_set_sha256 != self.stimulus_set.manifest_sha256:
            raise StudyChangedError("This study's stimuli were rebuilt since your session started; your answers so "
                                    "far are saved. Start a new session.")
        return session

    def _view(self, trial: StudyTrialRecord, total: int) -> StudyTrialView:
        try:
            block_instructions = self.study.block(trial.kind).instructions
        except KeyError:  # the study file was edited since the session began: the kind's usual instructions
            block_instructions = DEFAULT_INSTRUCTIONS[trial.kind]
        instructions = "\n\n".join(t for t in (self.study.instructions, block_instructions) if t)
        ordered = sorted(trial.conditions, key=lambda c: (c.role != "reference", c.position))
        conditions = tuple(
            ConditionView(label=c.label, clip=self.stimulus_set.clip_path(c.clip), duration_seconds=c.duration_seconds,
                          rated=c.role == "rated" and trial.kind != "abx", must_play=c.must_play)
            for c in ordered)
        return StudyTrialView(
            study=self.study.name, session_id=trial.session_id, trial_id=trial.trial_id, kind=trial.kind,
            number=trial.trial_index + 1, total=total, text=trial.text, instructions=instructions,
            conditions=conditions, played=self.store.study_played(trial.trial_id),
            scale=SCALES.get(trial.kind), choices=CHOICES.get(trial.kind, ()))


# ----------------------------------------------------------------------------- several studies at once


def database_path(root: Path | None = None) -> Path:
    """The listening database: $SSD_DEMO_LISTENING_DB, else `<data dir>/listening.sqlite3` (as the app uses)."""
    configured = os.environ.get("SSD_DEMO_LISTENING_DB", "").strip()
    return Path(configured) if configured else (root if root is not None else data_dir()) / "listening.sqlite3"


def studies_root(root: Path | None = None) -> Path:
    return (root if root is not None else data_dir()) / "studies"


def study_path(name: str, root: Path | None = None) -> Path:
    if not isinstance(name, str) or not SET_NAME.match(name):
        raise UnknownStudyError(f"No study named {name!r}.")
    return studies_root(root) / f"{name}{STUDY_SUFFIX}"


def list_studies(root: Path | None = None) -> list[str]:
    """The names of the studies created under the data directory, sorted."""
    folder = studies_root(root)
    return sorted(p.stem for p in folder.glob(f"*{STUDY_SUFFIX}") if SET_NAME.match(p.stem)) if folder.is_dir() else []


def load_study_and_stimuli(name: str, root: Path | None = None, verify: bool = True) -> tuple[Study, StimulusSet]:
    """A created study and its stimulus set; UnknownStudyError if either is missing or broken."""
    path = study_path(name, root)
    if not path.is_file():
        raise UnknownStudyError(f"No study named {name!r}; create it with: python -m ssd_demo study create FILE")
    study = load_study(path)
    try:
        stimulus_set = load_stimulus_set(stimuli_root(root) / study.stimulus_set, verify=verify)
    except (OSError, ValueError):
        raise UnknownStudyError(f"The stimuli of study {name!r} are missing or damaged; create the study again.") from None
    return study, stimulus_set


class StudyRegistry:
    """The studies under a data directory, served at once by name; one store for all of them.

    A runner is cached while its study file and stimulus manifest are unchanged on disk, and rebuilt
    when the study was created again.
    """

    def __init__(self, store: ListeningStore, root: Path | None = None):
        self.store = store
        self.root = root
        self._runners: dict[str, tuple[float, StudyRunner]] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return list_studies(self.root)

    def runner(self, name: str) -> StudyRunner:
        path = study_path(name, self.root)
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            raise UnknownStudyError(f"Study {name!r} is not created yet: run python -m ssd_demo study create FILE "
                                    "(its study file).") from None
        with self._lock:
            cached = self._runners.get(name)
            if cached and cached[0] == stamp and manifest_unchanged(cached[1].stimulus_set):
                return cached[1]
        try:
            study, stimulus_set = load_study_and_stimuli(name, self.root)
        except StudyFileError as error:
            raise UnknownStudyError(f"Study {name!r} cannot be served: {error}") from None
        runner = StudyRunner(self.store, study, stimulus_set)
        with self._lock:
            self._runners[name] = (stamp, runner)
        return runner

    def runner_for_session(self, session_id: str) -> StudyRunner:
        """The runner of the study a session belongs to (to resume a session after a reload)."""
        session = self.store.get_session(session_id)
        if session.study is None:
            raise UnknownStudyError("This session is not part of a study.")
        return self.runner(session.study)

"""Rater sessions: plan randomised trials, serve them blind, record votes.

A session's trials are drawn from every (sentence, system pair) of a stimulus set in a
random order, each with a random A/B position, from a per-session seed that is stored so
the plan can be reproduced. What a rater is shown (`TrialView`) carries the sentence and
the two clips' audio, never the systems: those stay in the database.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from ..config import draw_seed
from .stimulus_sets import StimulusSet, read_clip
from .store import ListeningError, ListeningStore, PlannedTrial, SessionRecord, TrialRecord

DEFAULT_TRIALS = 10
# What reading a clip can raise: a missing or unreadable file, a path outside the set, a broken WAV.
CLIP_READ_ERRORS = (OSError, ValueError, sf.SoundFileError)


class ClipUnavailableError(ListeningError):
    """A trial's clip cannot be read (deleted, truncated or replaced on disk)."""
MAX_TRIALS = 200
# A clip counts as played to the end only once this share of its length has passed since its trial was
# shown (server time): a client cannot report plays it never made. Below 1 for clock and rounding slack.
LISTEN_FRACTION = 0.9


def plan_trials(stimulus_set: StimulusSet, n_trials: int, seed: int) -> list[PlannedTrial]:
    """Up to `n_trials` distinct (sentence, system pair) trials in random order with random positions."""
    if not isinstance(n_trials, int) or not 1 <= n_trials <= MAX_TRIALS:
        raise ListeningError(f"The number of trials must be between 1 and {MAX_TRIALS}.")
    rng = random.Random(seed)
    candidates = [(item, pair) for item in stimulus_set.items for pair in itertools.combinations(sorted(item.clips), 2)]
    if not candidates:
        raise ListeningError(f"Stimulus set {stimulus_set.name!r} has no sentence with two systems to compare.")
    rng.shuffle(candidates)
    planned = []
    for item, pair in candidates[:n_trials]:
        first, second = pair if rng.random() < 0.5 else pair[::-1]
        planned.append(
            PlannedTrial(
                item_id=item.item_id,
                text=item.text,
                system_a=first,
                system_b=second,
                clip_a=item.clips[first].path,
                clip_b=item.clips[second].path,
            )
        )
    return planned


@dataclass(frozen=True)
class TrialView:
    """Everything a rater may see for one trial, and nothing more."""

    session_id: str
    trial_id: str
    number: int  # 1-based
    total: int
    text: str
    audio_a: tuple[int, np.ndarray]  # (sample rate, int16 samples)
    audio_b: tuple[int, np.ndarray]
    played: frozenset[str] = frozenset()  # clips already played to the end (a reload keeps them unlocked)

    @property
    def progress_label(self) -> str:
        return f"Trial {self.number} of {self.total}"


class ListeningTest:
    """A stimulus set and a store, joined: the operations the UI (or any client) performs."""

    def __init__(self, store: ListeningStore, stimulus_set: StimulusSet):
        self.store = store
        self.stimulus_set = stimulus_set

    def start_session(
        self, rater_id: str | None = None, n_trials: int = DEFAULT_TRIALS, seed: int | None = None
    ) -> SessionRecord:
        seed = draw_seed() if seed is None else seed
        trials = plan_trials(self.stimulus_set, n_trials, seed)
        return self.store.create_session(
            trials,
            stimulus_set=self.stimulus_set.name,
            stimulus_set_sha256=self.stimulus_set.manifest_sha256,
            seed=seed,
            rater_id=rater_id,
        )

    def _served_session(self, session_id: str) -> SessionRecord:
        session = self.store.get_session(session_id)
        if (session.stimulus_set, session.stimulus_set_sha256) != (
            self.stimulus_set.name,
            self.stimulus_set.manifest_sha256,
        ):
            raise ListeningError(
                "This session belongs to a stimulus set that is no longer served: start a new session."
            )
        return session

    def next_view(self, session_id: str) -> TrialView | None:
        """The session's next unanswered trial, or None when every trial has a vote."""
        session = self._served_session(session_id)
        trial = self.store.next_trial(session_id)
        return None if trial is None else self._view(trial, session.n_trials)

    def record_play(self, session_id: str, trial_id: str, clip: str) -> frozenset[str]:
        """Record that `clip` of the trial played to the end; the clips played so far."""
        self._served_session(session_id)
        trial = self.store.get_trial(session_id, trial_id)
        system = {"A": trial.system_a, "B": trial.system_b}.get(clip)
        seconds = 0.0
        if system is not None:
            try:
                seconds = self.stimulus_set.item(trial.item_id).clips[system].duration_seconds
            except KeyError:
                seconds = 0.0
        return self.store.record_play(session_id, trial_id, clip, min_seconds=LISTEN_FRACTION * seconds)

    def completion_code(self, session_id: str) -> str | None:
        """The session's completion code once every trial has a vote (made then, stored once)."""
        return self.store.completion_code(session_id)

    def submit(
        self, session_id: str, trial_id: str, choice: str, score_a: object = None, score_b: object = None
    ) -> TrialView | None:
        """Record a vote (idempotently) and return the next trial to show, or None when done."""
        # Refuse before storing: a vote the rater is then told failed must not be in the table.
        self._served_session(session_id)
        self.store.submit_vote(session_id, trial_id, choice, score_a, score_b)
        try:
            return self.next_view(session_id)
        except ClipUnavailableError as error:
            # The vote is stored: the rater must not think it was lost and vote again elsewhere.
            raise ClipUnavailableError(f"Your vote was saved, but the next trial cannot be shown: {error}") from None

    def _view(self, trial: TrialRecord, total: int) -> TrialView:
        return TrialView(
            session_id=trial.session_id,
            trial_id=trial.trial_id,
            number=trial.trial_index + 1,
            total=total,
            text=trial.text,
            audio_a=self._read(trial.clip_a),
            audio_b=self._read(trial.clip_b),
            played=self.store.played_clips(trial.trial_id),
        )

    def _read(self, relative: str) -> tuple[int, np.ndarray]:
        try:
            return read_clip(self.stimulus_set, relative)
        except CLIP_READ_ERRORS:
            # The file name only: a rater's message must not show the server's folders.
            raise ClipUnavailableError(
                f"clip {Path(relative).name} of stimulus set {self.stimulus_set.name!r} cannot be read; "
                "please tell the experimenter."
            ) from None

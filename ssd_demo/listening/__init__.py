"""Blind listening tests: stimulus sets, a SQLite vote store, statistics; studies (MUSHRA, ABX, A/B, MOS)
defined in one file, served by name, screened and analysed.

The pieces are independent of any model: a stimulus set is a folder of WAV files and a
manifest, so a test can run on clips rendered elsewhere. Only `stimuli.render_stimulus_set`
and `stimuli.build_small_set` need a synthesizer.
"""

from .errors import InvalidAnswerError, NotListenedError, StudyChangedError, StudyFileError, UnknownStudyError
from .stats import ListeningSummary, MosSummary, PairPreference, summarize
from .stimulus_sets import StimulusSet, data_dir, load_stimulus_set
from .store import (
    AlreadyVotedError,
    InvalidVoteError,
    ListeningError,
    ListeningStore,
    UnknownSessionError,
    UnknownTrialError,
    VoteRecord,
)
from .study import Study, load_study
from .study_sessions import StudyRegistry, StudyRunner, StudyTrialView

__all__ = [
    "AlreadyVotedError",
    "InvalidAnswerError",
    "InvalidVoteError",
    "NotListenedError",
    "ListeningError",
    "ListeningStore",
    "ListeningSummary",
    "MosSummary",
    "PairPreference",
    "StimulusSet",
    "Study",
    "StudyChangedError",
    "StudyFileError",
    "StudyRegistry",
    "StudyRunner",
    "StudyTrialView",
    "UnknownStudyError",
    "UnknownSessionError",
    "UnknownTrialError",
    "VoteRecord",
    "data_dir",
    "load_stimulus_set",
    "load_study",
    "summarize",
]

"""Blind listening tests: stimulus sets, a SQLite store, studies (MUSHRA, ABX, A/B, MOS) defined in one
file, served by name, screened and analysed; the app's A/B + MOS tab is a built-in study (`ab_mos`).

The pieces are independent of any model: a stimulus set is a folder of WAV files and a
manifest, so a test can run on clips rendered elsewhere. Only `stimuli.render_stimulus_set`
and `stimuli.build_small_set` need a synthesizer.
"""

from .ab_mos import ListeningSummary, MosSummary, PairPreference, summarize, tab_study
from .errors import (AlreadyVotedError, InvalidAnswerError, InvalidVoteError, ListeningError, NotListenedError,
                     StudyChangedError, StudyFileError, UnknownSessionError, UnknownStudyError, UnknownTrialError)
from .stimulus_sets import StimulusSet, data_dir, load_stimulus_set
from .study import Study, load_study
from .study_sessions import StudyRegistry, StudyRunner, StudyTrialView
from .study_store import ListeningStore

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
    "data_dir",
    "load_stimulus_set",
    "load_study",
    "summarize",
    "tab_study",
]

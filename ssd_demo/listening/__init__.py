"""Blind listening tests: stimulus sets, a SQLite vote store, statistics, charts and a Gradio tab.

The pieces are independent of any model: a stimulus set is a folder of WAV files and a
manifest, so a test can run on clips rendered elsewhere. Only `stimuli.render_stimulus_set`
and `stimuli.build_small_set` need a synthesizer.
"""

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

__all__ = [
    "AlreadyVotedError",
    "InvalidVoteError",
    "ListeningError",
    "ListeningStore",
    "ListeningSummary",
    "MosSummary",
    "PairPreference",
    "StimulusSet",
    "UnknownSessionError",
    "UnknownTrialError",
    "VoteRecord",
    "data_dir",
    "load_stimulus_set",
    "summarize",
]

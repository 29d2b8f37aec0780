"""The A/B + MOS tab driven through its API (gradio_client): the stimulus set it serves in tests, its endpoints'
names, and one rater's moves (play the shown trial's clips, answer it)."""

from __future__ import annotations

import re
from pathlib import Path

from gradio_client import Client

from ssd_demo.listening.stimuli import create_stimulus_set, tone_renderer

SYSTEMS = ("AR", "SSD beta=0.3 K=4", "exact speculative")
TEXTS = tuple(f"Sentence number {n}, read aloud." for n in range(1, 10))  # 9 sentences x 3 pairs = 27 A/B trials
REVEALING = re.compile(r"\bAR\b|SSD|beta|exact|speculative", re.IGNORECASE)
START, SUBMIT, CLIPS = "/listening_start", "/listening_submit", "/listening_clips"
PLAYED = ("/listening_played_a", "/listening_played_b")
TOKEN = "experimenter-token"
DONE, SAVED = 9, 10  # indices of the closing message and the browser's saved session among the trial outputs
AB_TRIALS = 12  # SSD_DEMO_LISTENING_TRIALS: 4 sentences x 3 pairs, then 4 x 3 systems' MOS trials
TRIALS = 2 * AB_TRIALS


def make_data(root: Path) -> Path:
    create_stimulus_set("tones", TEXTS, SYSTEMS, tone_renderer(seconds=0.1), root=root)
    return root


def client(url: str) -> Client:
    # ssl_verify=False: the server is plain http on 127.0.0.1, and verification would make httpx
    # load the CA bundle for every request gradio_client sends (most of the test's CPU otherwise).
    return Client(url, download_files=False, verbose=False, ssl_verify=False)


def is_ab(out) -> bool:
    """Whether the trial shown is an A/B trial (two clips, a choice) rather than a MOS trial (one clip, A)."""
    return bool(out[6]["visible"])


def play(api: Client, session_id: str, trial_id: str, ab: bool) -> None:
    """The trial's clips fetched (a play counts only for a clip the session fetched), then played to the end."""
    api.predict(session_id, trial_id, api_name=CLIPS)
    for endpoint in PLAYED if ab else PLAYED[:1]:
        api.predict(session_id, trial_id, api_name=endpoint)


def answer(api: Client, out, choice: str = "A", score: str = "4"):
    """The shown trial's clips played, then its answer: the choice of an A/B trial, the score of a MOS trial."""
    ab = is_ab(out)
    play(api, out[0], out[1], ab)
    return api.predict(out[0], out[1], *((choice, None, None) if ab else (None, score, None)), api_name=SUBMIT)

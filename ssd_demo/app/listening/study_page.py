"""The rater-only server for listening studies: `python app.py --study NAME` (or `$SSD_DEMO_STUDY=NAME`).

`build_study_demo(names)` returns a queued `gr.Blocks` whose home page holds the study's instructions and
trials only: no hypothesis, no other tab, no results, no download or share button (the clips play in a
custom player). Raters open `/?study=NAME` (`/` alone when one study is served); several studies run at
once by name. The experimenter's view is a separate page, `/admin`, linked from nowhere, and off unless
`$SSD_DEMO_RESULTS_TOKEN` is set (`study_admin.py`).

The page calls the server through the player's server functions, and gets each clip's audio that way too
(`study_clip`), never from a file URL: the server records which clips a session fetched and counts a play
only for one of them. The same operations are API endpoints for scripted raters: `/study_start(study,
rater_id)`, `/study_clip(session_id, trial_id, label)` (the clip as base64 WAV), `/study_played(session_id,
trial_id, label)`, `/study_submit(session_id, trial_id, answer)`, `/study_resume(token)`. Each returns a
dict: `state` ("start", "trial", "done", "closed") with the trial view or the completion `code`, the clip's
`wav`, or `refused` with the reason (a clip not fetched or not heard, a missing or out-of-range answer).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import gradio as gr

from ...listening.study_sessions import list_studies
from .. import jobs
from .service import register_app
from .study_admin import build_study_admin
from .study_player import CSS, JS, TEMPLATE
from .session_limits import client_address
from .study_service import StudyService, StudySettings

log = logging.getLogger(__name__)
ADMIN_PATH = "admin"
CACHE_SECONDS = 24 * 3600
QUEUE_MAX_SIZE = 1024  # answers must never be turned away by a full queue
# In the page's head, whatever the launch options: no navigation bar (Gradio shows one for a multipage app
# even when told not to) and no footer with its API and settings links.
PAGE_HEAD = "<style>.nav-holder, footer { display: none !important; }</style>"


def build_study_demo(names: Sequence[str], data_root: Path | None = None) -> gr.Blocks:
    """The rater page for `names` and, at /admin, the experimenter's view."""
    jobs.distrust_forwarded_headers()  # a client's X-Forwarded-For is no new address (sessions per address)
    service = StudyService(StudySettings.from_env(names, data_root))
    register_app(service)  # closed with the listening tab's apps at shutdown
    missing = sorted(set(names) - set(list_studies(service.settings.data_dir)))
    if missing:
        log.warning("no study named %s yet; create it with: python -m ssd_demo study create FILE", ", ".join(missing))
    # The admin page's exports are served from Gradio's cache; a file there lives a day.
    with gr.Blocks(title="Listening test", analytics_enabled=False, delete_cache=(3600, CACHE_SECONDS)) as demo:
        gr.Navbar(visible=False, main_page_name=False)  # the admin page must not be one click away
        build_rater_page(service)
    with demo.route("Experimenter", ADMIN_PATH, show_in_navbar=False):
        build_study_admin(service)
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=1)
    return demo


def study_launch_options() -> dict:
    return {"theme": gr.themes.Soft()}


def build_rater_page(service: StudyService) -> gr.HTML:
    """The player in the current Blocks context, with the server functions it calls and their API twins."""
    def study_open(request: dict) -> dict:
        request = request if isinstance(request, dict) else {}
        return service.open(_text(request.get("study")), _text(request.get("token")))

    def study_start(request: dict, client: gr.Request) -> dict:
        request = request if isinstance(request, dict) else {}
        return service.start(_text(request.get("study")), _text(request.get("rater")), _address(client))

    def study_clip(request: dict) -> dict:
        request = request if isinstance(request, dict) else {}
        return service.clip(_text(request.get("session")), _text(request.get("trial")), _text(request.get("label")))

    def study_played(request: dict) -> dict:
        request = request if isinstance(request, dict) else {}
        return service.played(_text(request.get("session")), _text(request.get("trial")), _text(request.get("label")))

    def study_submit(request: dict) -> dict:
        request = request if isinstance(request, dict) else {}
        return service.submit(_text(request.get("session")), _text(request.get("trial")), request.get("answer"))

    player = gr.HTML(html_template=TEMPLATE, css_template=CSS, js_on_load=JS, apply_default_css=True, head=PAGE_HEAD,
                     server_functions=[study_open, study_start, study_clip, study_played, study_submit],
                     elem_id="study-page")

    def api_start(study: str, rater_id: str = "", client: gr.Request = None) -> dict:
        """Start a session of a served study; the first trial's view (its labels) and the session id."""
        return service.start(study, rater_id, _address(client))

    def api_clip(session_id: str, trial_id: str, label: str) -> dict:
        """The clip under `label`: {"label", "wav": base64 WAV}. Its plays count only once it was fetched."""
        return service.clip(session_id, trial_id, label)

    def api_played(session_id: str, trial_id: str, label: str) -> dict:
        """Report that the clip under `label` played to the end; refused for a clip never fetched, or sooner
        than 90% of its length after it was."""
        return service.played(session_id, trial_id, label)

    def api_submit(session_id: str, trial_id: str, answer: dict) -> dict:
        """Answer a trial: {"scores": {label: 0..100}} (MUSHRA), {"score": 1..5} (MOS), {"choice": "A"|"B"|"none"}
        (A/B), {"choice": "A"|"B"} (ABX: which one X is). Refused for a clip with no completed play."""
        return service.submit(session_id, trial_id, answer)

    def api_resume(token: str, study: str = "") -> dict:
        """The session a signed token names (as the page keeps it): its next trial, or the completion code."""
        return service.open(study, token)

    for fn, name in ((api_start, "study_start"), (api_clip, "study_clip"), (api_played, "study_played"),
                     (api_submit, "study_submit"), (api_resume, "study_resume")):
        gr.api(fn, api_name=name, concurrency_limit=16)
    return player



def _address(client: gr.Request | None) -> str | None:
    """The client's network address (`session_limits.client_address`), as the sessions per address count it."""
    return client_address(client)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""

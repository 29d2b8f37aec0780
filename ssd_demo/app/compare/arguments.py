"""From an API call's arguments to a `Request`: what `/synthesize` and `/race` share before any model runs.

Both events take the same parameters (`tab.synthesize_signature`); `admitted_request` admits the job
(`jobs.admit`: a session's flood is turned away) and builds the click's `Request` from the bound values:
a setting left out (None) is not given, and the library fills it from the chosen preset.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import jobs
from ...comparison import Request
from .settings import COMPARE_SETTINGS, voice_upload


def upload_path(upload) -> str | None:
    """The server-side path of an upload as the unprocessed event sends it (a FileData dict), or None."""
    if isinstance(upload, dict):
        return upload.get("path") or None
    return upload or None


def owner_of(request) -> str | None:
    """Custom pairs belong to the browser session (an API client's session) that added them; `request` is
    the event's `gr.Request`, or None."""
    return getattr(request, "session_hash", None) or None


def admitted_request(chosen: Mapping[str, object], concurrency_id: str) -> Request:
    """Admit the job and build its request from the bound parameters (raising what the user can fix)."""
    jobs.admit(chosen["request"], concurrency_id)
    return Request(
        text=chosen["text"], preset=chosen["preset"], draft=chosen["draft"] or None, owner=owner_of(chosen["request"]),
        voice_prompt=voice_upload(upload_path(chosen["voice_audio"]), chosen["voice_transcript"]),
        within_controls=True, **{s.name: chosen[s.name] for s in COMPARE_SETTINGS},
    )

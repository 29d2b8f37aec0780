"""A refusal shown to the person at the page (a wrong results token, an unknown session): the message in the
page, one warning line in the server's log, no traceback (a refusal is not a server fault)."""

from __future__ import annotations

import logging

import gradio as gr

from .service import public_message

log = logging.getLogger("ssd_demo.app.listening")
LOGGED_CHARS = 200


def refused(error: BaseException, prefix: str = "") -> gr.Error:
    """The gr.Error to raise for `error`; logs one line."""
    message = prefix + public_message(error)
    line = " ".join(message.split())
    log.warning("refused (%s): %s", type(error).__name__,
                line if len(line) <= LOGGED_CHARS else line[:LOGGED_CHARS] + "...")
    return gr.Error(message, print_exception=False)

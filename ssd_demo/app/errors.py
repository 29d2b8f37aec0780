"""One way for every tab to show an exception: a readable `gr.Error`, the traceback in the server log."""

from __future__ import annotations

import logging

import gradio as gr

from ..errors import UserError

log = logging.getLogger("ssd_demo.app.page")


def to_gradio_error(error: Exception) -> gr.Error:
    """Exceptions -> one readable message; `UserError`s show under their own title."""
    if isinstance(error, UserError):
        # A wrapped cause (a loader's own exception) keeps its traceback in the log.
        log.warning("request refused: %s", str(error).splitlines()[0] if str(error) else type(error).__name__)
        if error.__cause__ is not None:  # a loader's own exception: its traceback only when debugging
            log.debug("cause of the refused request", exc_info=error)
        # One log line is enough: the user's mistake needs no traceback (a flood would fill the log).
        return gr.Error(str(error), title=error.title, print_exception=False)
    message = str(error.args[0]) if error.args else ""
    if isinstance(error, (ValueError, NotImplementedError)):
        # Most are the user's to fix (an unknown draft, an unsupported option), but an internal
        # ValueError can hide here too: show the message and keep the traceback in the log.
        log.warning("request refused: %s", error, exc_info=True)
        return gr.Error(message or type(error).__name__, title="Cannot run these settings")
    log.exception("synthesis failed")
    return gr.Error(f"Synthesis failed ({type(error).__name__}: {error}). Try other settings.", title="Error")

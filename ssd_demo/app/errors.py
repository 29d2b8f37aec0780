"""One way for every tab to show an exception: a readable `gr.Error`, the traceback in the server log.

A `UserError` is the user's to fix: its message under its title. Anything else is a bug: the user
is told an internal error happened (the message of an internal exception may reveal paths or
internals, and says nothing the user can act on) and the traceback goes to the server log.
"""

from __future__ import annotations

import logging

import gradio as gr

from ..errors import UserError

log = logging.getLogger(__name__)

INTERNAL_ERROR_MESSAGE = "An internal error happened (details in the server log). Please try again or report it."


def to_gradio_error(error: Exception) -> gr.Error:
    """Exceptions -> one readable message; `UserError`s show under their own title."""
    if isinstance(error, UserError):
        log.warning("request refused: %s", str(error).splitlines()[0] if str(error) else type(error).__name__)
        if error.__cause__ is not None:  # a loader's own exception: its traceback only when debugging
            log.debug("cause of the refused request", exc_info=error)
        # One log line is enough: the user's mistake needs no traceback (a flood would fill the log).
        return gr.Error(str(error), title=error.title, print_exception=False)
    log.error("internal error", exc_info=error)
    return gr.Error(INTERNAL_ERROR_MESSAGE, title="Error")

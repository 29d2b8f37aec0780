"""Errors a user can fix, as types: the app and the CLI choose a message by class, never by text.

Every `UserError` is a `ValueError` (so code that catches ValueError keeps working) whose `str()` is
the sentence to show; `title` is the heading the app gives it. Anything else that escapes a request
is a bug: the app logs its traceback and says an internal error happened; the command line prints the
traceback and exits 1.
"""

from __future__ import annotations


class UserError(ValueError):
    """Input the user can change (text, settings, model choice); str(error) says what to change."""

    title = "Cannot synthesise"

    def __init__(self, *args: object, param: str | None = None) -> None:
        super().__init__(*args)
        self.param = param  # the input (setting, field) it is about, where there is one: an API names it

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidSettingError(UserError):
    """A decoding setting is out of range or of the wrong kind."""

    title = "Invalid settings"
    PREFIX = "Invalid decoding setting: "

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message if message.startswith(self.PREFIX) else self.PREFIX + message, param=param)


class UnknownPresetError(UserError, KeyError):
    """No model preset has this key (a KeyError too: presets are looked up by key)."""

    title = "Unknown preset"


class TextError(UserError):
    """The text cannot be synthesised (empty, too long, nothing pronounceable)."""


class InputError(UserError):
    """An input other than the text and the decoding settings cannot be used: a draft or mode name, a
    voice prompt, a file, a command-line option."""

    title = "Cannot run these settings"


class ModelLoadError(UserError):
    """A model or pair cannot be loaded; the message says why and what to do."""

    title = "Cannot load the models"


class ModelNotFoundError(ModelLoadError):
    """No such local folder or Hub repository (or revision)."""


class ModelUnavailableError(ModelLoadError):
    """The model exists but cannot be fetched now (offline and not cached, gated, no weights)."""


class IncompatiblePairError(ModelLoadError):
    """Target and draft cannot be used together, or are not a supported model family."""


class NotACausalLMError(ModelLoadError):
    """The repository does not hold a causal language model."""


__all__ = ["IncompatiblePairError", "InputError", "InvalidSettingError", "ModelLoadError", "ModelNotFoundError",
           "ModelUnavailableError", "NotACausalLMError", "TextError", "UnknownPresetError", "UserError"]

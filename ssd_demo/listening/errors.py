"""What the listening tests refuse: each a `UserError` whose message is meant for the rater or the experimenter."""

from __future__ import annotations

import reprlib

from ..errors import UserError

QUOTED_CHARS = 40  # a message quotes at most this much of what a client sent
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = _QUOTE.maxlong = QUOTED_CHARS
_QUOTE.maxlist = _QUOTE.maxdict = _QUOTE.maxtuple = _QUOTE.maxset = 3
_QUOTE.maxlevel = 2


def quote(value: object) -> str:
    """`value` as a message may quote it: its repr, cut to about QUOTED_CHARS characters (a client's 1 MB label
    or 100,000-digit number is not echoed back)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return "a number of about %d digits" % int(value.bit_length() * 0.30103)
    text = _QUOTE.repr(value)
    return text if len(text) <= QUOTED_CHARS + 5 else text[:QUOTED_CHARS] + "..."


class ListeningError(UserError):
    """A request the listening test must refuse; the message is meant for the rater."""


class UnknownSessionError(ListeningError):
    pass


class UnknownTrialError(ListeningError):
    pass


class InvalidVoteError(ListeningError):
    pass


class AlreadyVotedError(ListeningError):
    pass


class NotListenedError(InvalidVoteError):
    """A vote or rating on a clip that has not been played to the end."""


class NotFetchedError(NotListenedError):
    """A play reported for a clip the server never handed to this session: it cannot have been heard."""


class InvalidAnswerError(InvalidVoteError):
    """A study answer that is missing a field, has an unknown one, or a value out of its range."""


class UnknownStudyError(ListeningError):
    """No study of that name is served."""


class StudyFileError(UserError):
    """A study file that cannot be read or does not define a valid study (the message says what to fix)."""


class RaterFinishedError(ListeningError):
    """A rater id that already finished the study asks for another session (it would be pooled as one rater)."""


class StudyChangedError(ListeningError):
    """A session's study or stimulus set was replaced or removed since the session started."""

"""What the listening tests refuse: each a `UserError` whose message is meant for the rater or the experimenter."""

from __future__ import annotations

from ..errors import UserError


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

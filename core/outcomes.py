"""What became of a human's answer from a channel, and the words that tell them.

Every sentence comes from ``core.wording``; this module maps the lifecycle's refusals to them, so
each connector tells people the same thing for the same outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.errors import (
    AlreadyAnsweredError,
    AlreadyVotedError,
    ExpiredError,
    FourEyesError,
    HandraiseError,
    InvalidAnswerError,
    NotAssignedError,
    NotFoundError,
    RequestCancelledError,
)

# The lifecycle's refusals of a submitted answer, as outcome codes. Assigned to other people is
# refused as a stranger is: nobody learns who else may answer.
REFUSALS: tuple[tuple[type[HandraiseError], str], ...] = (
    (NotAssignedError, "not_authorized"),
    (FourEyesError, "four_eyes"),
    (AlreadyVotedError, "already_voted"),
    (AlreadyAnsweredError, "already_answered"),
    (ExpiredError, "expired"),
    (RequestCancelledError, "cancelled"),
    (NotFoundError, "not_found"),
)
# Every refusal of a submitted answer that ``refused`` turns into an outcome.
REFUSED: tuple[type[HandraiseError], ...] = (InvalidAnswerError, *(error for error, _ in REFUSALS))


@dataclass(frozen=True)
class AnswerOutcome:
    """What became of a human's answer from chat, with a short text to show them.

    ``code`` is one of: ``accepted``, ``not_authorized``, ``not_found``, ``already_answered``,
    ``expired``, ``cancelled``, ``invalid`` (``message`` then says what is wrong, field by field),
    the chat refusals of ``core.chat`` (``not_a_decision``, ``sensitive_removed`` ...), ``link``
    (``url`` is a personal form link, ``link_id`` its id), and for a rating tap also ``unavailable``. ``message`` is
    the wording owner's sentence for it (``core.wording``).
    """

    code: str
    message: str
    view: RequestView | None = None
    url: str | None = None
    link_id: str | None = None  # the link behind ``url``
    # For ``invalid``: core's per-field problems (``{"field", "message"}``), for a form that marks fields.
    problems: tuple[dict[str, Any], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.code == "accepted"


def said(code: str, view: RequestView | None = None) -> AnswerOutcome:
    """The outcome ``code`` with the wording owner's sentence for it."""
    return AnswerOutcome(code, wording.text(code), view)


def refused(error: HandraiseError) -> AnswerOutcome:
    """The outcome of an answer the lifecycle refused (one of ``REFUSED``, or an invalid answer)."""
    if isinstance(error, InvalidAnswerError):
        return AnswerOutcome("invalid", invalid_answer_text(error), problems=tuple(error.fields))
    return said(next(code for kind, code in REFUSALS if isinstance(error, kind)))


def terminal_outcome(view: RequestView) -> AnswerOutcome | None:
    """The refusal for an answer to a request that is no longer pending, or None while it is.

    A request its ``on_timeout`` policy ended is ``answered`` by nobody: to a late human the time ran out,
    as ``raise_if_terminal`` (the API, the hosted form) tells them, never "already answered"."""
    if view.timed_out:
        return said("expired", view)
    code = {"answered": "already_answered", "cancelled": "cancelled"}.get(view.status)
    return None if code is None else said(code, view)


def outcome_text(view: RequestView, *, who: str | None = None) -> str:
    """One line on how a terminal request ended ("Approved by Alice via Telegram"); ``core.wording``
    owns it. A sensitive answer is never shown."""
    return wording.headline(view, who=who)


def invalid_answer_text(error: InvalidAnswerError) -> str:
    """An invalid answer explained to the human, one line per field; never quotes the value."""
    return wording.invalid_answer(error.fields, error.message)

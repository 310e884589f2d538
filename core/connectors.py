"""A connector: a channel that posts requests somewhere (a chat, a webhook) and takes them back.

It delivers a request to each of its targets, withdraws it once terminal (the dispatcher calls
both) and submits its humans' correlated answers through the lifecycle service. A channel that
posts nowhere (the hosted forms) is a plain :class:`~handraise.core.channels.Channel`.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.channels import Channel, SettingsT
from handraise.core.errors import (
    AlreadyAnsweredError,
    ConflictError,
    ExpiredError,
    FourEyesError,
    InvalidAnswerError,
    NotAssignedError,
    NotFoundError,
    RequestCancelledError,
)

# Rating buttons: the values 1..5 behind their tokens, and durable state (person -> their newest
# rating's annotation id; request -> the buttons' tokens).
RATINGS = range(1, 6)
RATING_STATE = "ratings"
RATING_TOKENS = "ratings.tokens"


@dataclass(frozen=True)
class AnswerOutcome:
    """What became of a human's answer from chat, with a short text to show them.

    ``code`` is one of: ``accepted``, ``not_authorized``, ``not_found``, ``already_answered``,
    ``expired``, ``cancelled``, ``invalid`` (``message`` then says what is wrong, field by field),
    the chat refusals of ``core.chat`` (``not_a_decision``, ``sensitive_removed`` ...), ``link``
    (``url`` is a personal form link), and for a rating tap also ``unavailable``. ``message`` is
    the wording owner's sentence for it (``core.wording``).
    """

    code: str
    message: str
    view: RequestView | None = None
    url: str | None = None
    # For ``invalid``: core's per-field problems (``{"field", "message"}``), for a form that marks fields.
    problems: tuple[dict[str, Any], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.code == "accepted"


def _said(code: str, view: RequestView | None = None) -> AnswerOutcome:
    return AnswerOutcome(code, wording.text(code), view)


class Connector(Channel[SettingsT]):
    """A channel that delivers: subclasses implement ``targets``, ``deliver`` and ``withdraw``."""

    # -- routing ---------------------------------------------------------------

    def serves(self, tenant_id: str) -> bool:
        """A connector reaches a tenant where it has somewhere to post that tenant's requests."""
        return bool(self.targets(tenant_id))

    @abstractmethod
    def targets(self, tenant_id: str) -> list[str]:
        """Where this connector posts a tenant's requests (chat ids, room ids, URLs)."""

    def targets_for(self, request: RequestView) -> list[str]:
        """Where this connector posts ``request``: its tenant's places, and where a connector reaches
        the people a request is assigned to directly (a DM), those too (``ChatConnector``)."""
        return self.targets(request.tenant_id)

    def reach(self, request: RequestView, person_ids: list[str]) -> list[str]:
        """Where this connector reaches these people of the request's tenant directly (their DMs, their
        addresses), for an escalation step; default: nowhere of its own."""
        return []

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        """Whether a messenger user may answer this tenant's requests (the allowlist)."""
        return False

    def principal(self, user_id: str) -> str:
        """Who acted, as journaled: ``telegram:<user id>``, ``slack:<team>/<user>`` ..."""
        return f"{self.name}:{user_id}"

    # -- inbound answers -------------------------------------------------------

    async def submit_answer(self, *, tenant_id: str, request_id: str, user_id: str,
                            response: Any, principal: str | None = None) -> AnswerOutcome:
        """Check the allowlist, then submit through core (validation, one winner, journal).

        Every inbound answer of every chat connector goes through here, so a stranger is
        refused the same way everywhere and nothing about the request changes for them.
        """
        principal = principal or self.principal(user_id)
        if not self.may_answer(tenant_id, user_id):
            self.log.info("answer refused: not on the allowlist",
                          extra={"request_id": request_id, "channel": self.name})
            # Audited, never applied: the request itself does not change.
            await self.service.journal(tenant_id=tenant_id, event="answer_refused", request_id=request_id,
                                       principal=principal, channel=self.name,
                                       data={"reason": "not_authorized"})
            return _said("not_authorized")
        try:
            view = await self.service.submit(tenant_id=tenant_id, request_id=request_id, response=response,
                                             principal=principal, channel=self.name)
        except InvalidAnswerError as e:
            return AnswerOutcome("invalid", invalid_answer_text(e), problems=tuple(e.fields))
        except NotAssignedError:
            return _said("not_authorized")  # assigned to other people: refused as a stranger is
        except FourEyesError:
            return _said("four_eyes")
        except AlreadyAnsweredError:
            return _said("already_answered")
        except ExpiredError:
            return _said("expired")
        except RequestCancelledError:
            return _said("cancelled")
        except NotFoundError:
            return _said("not_found")
        return _said("accepted", view)

    # -- rating buttons (RFC 0056 annotations from chat) -----------------------

    def offers_ratings(self, view: RequestView) -> bool:
        """Whether the withdrawn message of ``view`` carries rating buttons: the connector's
        ``rating_buttons`` setting, feedback enabled, and an answered request that names its run."""
        return (bool(getattr(self.settings, "rating_buttons", False)) and self.annotations is not None
                and self.annotations.enabled and view.status == "answered" and view.run_id is not None)

    async def rating_tokens(self, view: RequestView) -> list[str]:
        """Button tokens for ratings 1..5 of the request's run, the same for every withdraw of it:
        a repeated withdraw then edits nothing (Telegram answers "not modified")."""
        key = f"{self.name}:{view.id}"
        kept = await self.service.get_state(RATING_TOKENS, key)
        if kept is not None:
            return json.loads(kept)
        tokens = await self.service.create_chat_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                        channel=self.name, values=[{"rate": n} for n in RATINGS])
        await self.service.set_state(RATING_TOKENS, key, json.dumps(tokens), request_id=view.id)
        return tokens

    async def rate(self, *, tenant_id: str, request_id: str, user_id: str, principal: str,
                   rating: int) -> AnswerOutcome:
        """Record a rating tap as an annotation of the request's run; ``accepted`` when recorded.

        Only people on the allowlist may rate. Each person's newest rating from one request's
        message supersedes their previous one (RFC 0056: annotations are append-only).
        """
        if not self.may_answer(tenant_id, user_id):
            self.log.info("rating refused: not on the allowlist",
                          extra={"request_id": request_id, "channel": self.name})
            await self.service.journal(tenant_id=tenant_id, event="rating_refused", request_id=request_id,
                                       principal=principal, channel=self.name, data={"reason": "not_authorized"})
            return AnswerOutcome("not_authorized", wording.text("rating_not_authorized"))
        if self.annotations is None or not self.annotations.enabled:
            return AnswerOutcome("unavailable", wording.text("ratings_off"))
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return _said("not_found")
        if view.run_id is None:
            return AnswerOutcome("unavailable", wording.text("no_run"))
        key = f"{self.name}:{request_id}:{principal.partition(':')[2]}"
        previous = await self.service.get_state(RATING_STATE, key)
        for _ in range(3):
            body: dict[str, Any] = {"signal": {"kind": "rating", "rating": rating}}
            if previous is not None:
                body["supersedes"] = previous
            try:
                annotation = await self.annotations.record(tenant_id=tenant_id, run_id=view.run_id,
                                                           principal=principal, body=body, channel=self.name)
            except ConflictError:
                # A simultaneous tap (here or on another instance) superseded it first: follow the chain.
                assert previous is not None
                previous = await self._newest_of_chain(tenant_id, view.run_id, previous)
                continue
            await self.service.set_state(RATING_STATE, key, annotation["annotationId"], request_id=request_id)
            return AnswerOutcome("accepted", wording.rated(rating, replaced=previous is not None), view)
        return AnswerOutcome("unavailable", wording.text("rating_lost"))

    async def _newest_of_chain(self, tenant_id: str, run_id: str, annotation_id: str) -> str:
        assert self.annotations is not None
        successor = {a["supersedes"]: a["annotationId"]
                     for a in await self.annotations.all_for_run(tenant_id=tenant_id, run_id=run_id)
                     if "supersedes" in a}
        while annotation_id in successor:
            annotation_id = successor[annotation_id]
        return annotation_id

    @staticmethod
    def terminal_outcome(view: RequestView) -> AnswerOutcome | None:
        """The refusal for an answer to a request that is no longer pending, or None while it is."""
        code = {"answered": "already_answered", "expired": "expired", "cancelled": "cancelled"}.get(view.status)
        return None if code is None else _said(code, view)

    # -- delivery --------------------------------------------------------------

    @abstractmethod
    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        """Post the question; return what identifies the posted message (kept for withdraw).

        Raise ``ConnectorError`` (with ``retry_after`` or ``permanent``) on failure.
        """

    @abstractmethod
    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """The request is terminal: show its outcome where it was posted and remove its buttons.

        Must be idempotent: a retry after a lost reply edits again. Instances never both call it for one
        delivery (the dispatcher claims it first: ``Store.claim_withdrawal``).
        """

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        """Ping a still-pending request once more (``remind_after_seconds``); default: post it again.

        Return the ref of anything posted that must be withdrawn too (the dispatcher keeps it
        beside the original's and calls ``withdraw`` for both), or None.
        """
        return await self.deliver(request, target=target)

    def remind_after(self) -> float | None:
        value = getattr(self.settings, "remind_after_seconds", None)
        return float(value) if value else None


def rating_value(value: Any) -> int | None:
    """The rating a chat button token stands for (``{"rate": n}``), or None for any other button.

    No answer button has this shape (answers are bare values or ``{"decision": …}``/``{"answer": …}``),
    so a rating tap can never submit an answer, nor an answer tap record a rating.
    """
    if isinstance(value, dict) and set(value) == {"rate"}:
        n = value["rate"]
        if isinstance(n, int) and not isinstance(n, bool) and n in RATINGS:
            return n
    return None


def outcome_text(view: RequestView, *, who: str | None = None) -> str:
    """One line on how a terminal request ended ("Approved by Alice via Telegram"); ``core.wording``
    owns it. A sensitive answer is never shown."""
    return wording.headline(view, who=who)


def invalid_answer_text(error: InvalidAnswerError) -> str:
    """An invalid answer explained to the human, one line per field; never quotes the value."""
    return wording.invalid_answer(error.fields, error.message)

"""Rating buttons: 1..5 under an answered request's outcome in chat, each tap an RFC 0056 rating of its run.

A chat connector holds one :class:`RatingButtons` and adds only the markup: which request offers
them, their tokens, and what a tap records are decided here, once for every messenger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.errors import ConflictError, NotFoundError
from handraise.core.outcomes import AnswerOutcome, said

if TYPE_CHECKING:
    from handraise.core.annotations import AnnotationService
    from handraise.core.chatrefs import ChatRefs
    from handraise.core.service import RequestService
    from handraise.core.state import StateStore

# The values 1..5 behind the buttons' tokens, and durable state (person -> their newest rating's
# annotation id; request -> the buttons' tokens).
RATINGS = range(1, 6)
RATING_STATE = "ratings"
RATING_TOKENS = "ratings.tokens"


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


class RatingButtons:
    """One channel's rating buttons: ``offered`` on a request, their ``tokens``, and ``rate`` for a tap."""

    def __init__(self, *, channel: str, enabled: bool, service: RequestService, state: StateStore,
                 chat_refs: ChatRefs, annotations: AnnotationService | None, may_rate: Callable[[str, str], bool],
                 log: logging.Logger) -> None:
        self.channel = channel
        self.enabled = enabled  # the connector's ``rating_buttons`` setting
        self.service = service
        self.state = state
        self.chat_refs = chat_refs
        self.annotations = annotations
        # The channel's allowlist (tenant id, user id): only people who may answer may rate.
        self.may_rate = may_rate
        self.log = log

    def offered(self, view: RequestView) -> bool:
        """Whether the withdrawn message of ``view`` carries rating buttons: the connector's
        ``rating_buttons`` setting, feedback enabled, and an answered request that names its run."""
        return (self.enabled and self.annotations is not None and self.annotations.enabled
                and view.status == "answered" and view.run_id is not None)

    async def tokens(self, view: RequestView) -> list[str]:
        """Button tokens for ratings 1..5 of the request's run, the same for every withdraw of it:
        a repeated withdraw then edits nothing (Telegram answers "not modified")."""
        key = f"{self.channel}:{view.id}"
        kept = await self.state.get(RATING_TOKENS, key)
        if kept is not None:
            return json.loads(kept)
        tokens = await self.chat_refs.create_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                     channel=self.channel, values=[{"rate": n} for n in RATINGS])
        await self.state.set(RATING_TOKENS, key, json.dumps(tokens), request_id=view.id)
        return tokens

    async def rate(self, *, tenant_id: str, request_id: str, user_id: str, principal: str,
                   rating: int) -> AnswerOutcome:
        """Record a rating tap as an annotation of the request's run; ``accepted`` when recorded.

        Only people on the allowlist may rate. Each person's newest rating from one request's
        message supersedes their previous one (RFC 0056: annotations are append-only).
        """
        if not self.may_rate(tenant_id, user_id):
            self.log.info("rating refused: not on the allowlist",
                          extra={"request_id": request_id, "channel": self.channel})
            await self.service.journal(tenant_id=tenant_id, event="rating_refused", request_id=request_id,
                                       principal=principal, channel=self.channel, data={"reason": "not_authorized"})
            return AnswerOutcome("not_authorized", wording.text("rating_not_authorized"))
        if self.annotations is None or not self.annotations.enabled:
            return AnswerOutcome("unavailable", wording.text("ratings_off"))
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return said("not_found")
        if view.run_id is None:
            return AnswerOutcome("unavailable", wording.text("no_run"))
        key = f"{self.channel}:{request_id}:{principal.partition(':')[2]}"
        previous = await self.state.get(RATING_STATE, key)
        for _ in range(3):
            body: dict[str, Any] = {"signal": {"kind": "rating", "rating": rating}}
            if previous is not None:
                body["supersedes"] = previous
            try:
                annotation = await self.annotations.record(tenant_id=tenant_id, run_id=view.run_id,
                                                           principal=principal, body=body, channel=self.channel)
            except ConflictError:
                # A simultaneous tap (here or on another instance) superseded it first: follow the chain.
                assert previous is not None
                previous = await self._newest_of_chain(tenant_id, view.run_id, previous)
                continue
            await self.state.set(RATING_STATE, key, annotation["annotationId"], request_id=request_id)
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

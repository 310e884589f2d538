"""A connector: a channel that posts requests somewhere (a chat, a webhook) and takes them back.

It delivers a request to each of its targets, withdraws it once terminal (the dispatcher calls
both) and submits its humans' correlated answers through the lifecycle service. A channel that
posts nowhere (the hosted forms) is a plain :class:`~handraise.core.channels.Channel`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from handraise.core import quorum, wording
from handraise.core.api import RequestView
from handraise.core.channels import Channel, SettingsT
from handraise.core.config import PersonSettings
from handraise.core.outcomes import REFUSED, AnswerOutcome, refused, said
from handraise.core.personal import PrivateNote

__all__ = ["AnswerOutcome", "Connector"]


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

    def fallback_targets(self, request: RequestView) -> list[str]:
        """Where ``request`` goes instead when none of ``targets_for`` could be posted to (the dispatcher
        decides; ``ChatConnector`` falls back from people's DMs to the tenant's places). None here."""
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
            return said("not_authorized")
        try:
            view = await self.service.submit(tenant_id=tenant_id, request_id=request_id, response=response,
                                             principal=principal, channel=self.name)
        except REFUSED as e:
            return refused(e)
        if view.status == "pending":  # a vote on a quorum request: more votes decide it
            return AnswerOutcome("accepted", f"{wording.text('voted')} {self.tally_text(view)}".strip(), view)
        return said("accepted", view)

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

    async def show_votes(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """A vote on a quorum request was counted and it is still pending: edit the posted message to show
        the tally (``tally_text``), keeping its buttons. Default: nothing (a channel that cannot edit)."""

    async def send_private(self, person: PersonSettings, *, tenant_id: str, note: PrivateNote) -> bool:
        """Send ``note`` to ``person`` alone, on their own identity on this channel (their direct chat
        with the bot, their address), never to a shared place; False when this channel cannot reach them
        privately (no identity here, not on the allowlist, the messenger refuses a first message). Raise
        ``ConnectorError`` on a failure worth logging. Default: this channel reaches nobody privately."""
        return False

    def tally_text(self, request: RequestView) -> str:
        """The tally line of a quorum request ("1 of 2 approved: Alice. Still expected: Bob, Carol."), or ""."""
        return quorum.tally_text(self.app_settings, request)

    def remind_after(self) -> float | None:
        value = getattr(self.settings, "remind_after_seconds", None)
        return float(value) if value else None

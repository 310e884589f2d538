"""Form links: minting one-time links (personal or forwarded), finding and opening them, answering through
them, and the first open recorded. A part of :class:`~handraise.core.service.RequestService`, kept here
so the service module holds the lifecycle itself."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from handraise.core.api import LinkView, MintedLink, RequestView, raise_if_terminal
from handraise.core.errors import (
    AlreadyAnsweredError,
    AlreadyAnsweredGone,
    ExpiredError,
    ForbiddenError,
    LinkUsedError,
    NotFoundError,
    PersonNotBoundError,
    RequestCancelledError,
)
from handraise.core.people import link_principal

if TYPE_CHECKING:
    from handraise.core.service import RequestService

log = logging.getLogger("handraise.core.service")

__all__ = ["LinkDoors", "new_id"]

# Domain separation: this key turns a link's id into its token and serves nothing else (ServerSecret.key's
# purpose). The store keeps only the token's hash, yet the server can show a pending link again (a chat
# message edited to a new quorum tally keeps its button) without keeping the token anywhere.
LINK_TOKEN_KEY = "form link token"


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(16)}"


class LinkDoors:
    """The link half of the request service (a base of RequestService: ``self`` is the service)."""

    async def link_opened(self: RequestService, *, link: LinkView, view: RequestView) -> None:
        """A person opened the request's hosted form: the first open is journaled and shown on the request.

        The web channel does not call it for a link preview's fetch (a chat's unfurler, a mail scanner, a
        prefetch: webforms/previews.py).
        """
        if view.opened_at is not None or view.terminal:
            return
        now = self.clock()
        async with self.store.transaction() as conn:
            if not await self.store.reviews.mark_opened(conn, tenant_id=view.tenant_id, request_id=view.id, now=now):
                return
            entry = await self.store.append_journal(conn, tenant_id=view.tenant_id, event="opened",
                                                    request_id=view.id, run_id=view.run_id,
                                                    principal=link.answers_as, channel="web",
                                                    data={"link_id": link.id}, at=now)
            await self._notify_progress(conn, view, seq=entry.seq)
        log.info("request form opened", extra={"request_id": view.id, "link_id": link.id})
        await self._progressed(view, seq=entry.seq)


    async def mint_link(self: RequestService, *, tenant_id: str, request_id: str, principal: str,
                        recipient: str | None = None, forward: bool = False,
                        for_principal: str | None = None, person: str | None = None,
                        reuse: bool = False, known_as: Sequence[str] = ()) -> MintedLink:
        """A one-time form link. ``forward``: an agent's key minting for the human it serves,
        allowed only on a request that same key created (``created_by == principal``).
        ``for_principal``: a personal link; answers through it are that person's (a chat
        connector mints one only for someone on its allowlist). ``person``: the same for one of the
        tenant's people, named by id (a 422 unless they may answer it).

        ``reuse``: the link ``principal`` minted before for the same person and recipient, while it is
        unused and its request pending, rather than a second one (neither inserted nor journaled): a
        person who taps twice, or a delivery tried again, holds one live link. An agent's explicit
        mint (``POST /v1/requests/{id}/links``) is a fresh link each call. ``known_as``: labels the same
        recipient's links were stored under before (a connector that renamed how it labels people), found
        by ``reuse`` too; a new link takes ``recipient``."""
        if forward and (person is not None or for_principal is not None):
            # An agent's link is for the human it serves, whoever that is: it never answers as a person.
            raise PersonNotBoundError("a forward key's link never names a person")
        view = await self.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        if forward and view.created_by != principal:
            raise ForbiddenError("a forward key mints links only for requests it created itself")
        raise_if_terminal(view)
        if person is not None:
            for_principal = link_principal(self.settings, tenant_id, view.assign_to, person)
            recipient = recipient or person
        now = self.clock()
        if view.expires_at <= now:
            # The deadline passed since the read: applied now (journaled once), and no link is minted for it.
            raise_if_terminal(await self._settle(view))
        async with self.store.transaction() as conn:
            link_id = await self.store.links.live(conn, tenant_id=tenant_id, request_id=request_id,
                                                  principal=for_principal, recipient=recipient,
                                                  created_by=principal, known_as=known_as) if reuse else None
            if link_id is None:
                link_id = new_id("lnk")
                await self.store.links.insert(conn, {
                    "id": link_id, "tenant_id": tenant_id, "request_id": request_id,
                    "token_sha256": hashlib.sha256(self._link_token(link_id).encode()).hexdigest(),
                    "recipient": recipient, "created_by": principal, "created_at": now, "used_at": None,
                    "principal": for_principal,
                })
                await self.store.append_journal(conn, tenant_id=tenant_id, event="link_minted",
                                                request_id=request_id, run_id=view.run_id, principal=principal,
                                                data={"link_id": link_id, "recipient": recipient,
                                                      **({"scope": "forward"} if forward else {}),
                                                      **({"for": for_principal} if for_principal else {})}, at=now)
        return MintedLink(link_id=link_id, token=self._link_token(link_id), url=self.link_url(link_id),
                          expires_at=view.expires_at)

    def link_url(self: RequestService, link_id: str) -> str:
        """The URL of a link minted before, from its id alone: nothing is minted or journaled. Only for a
        link shown again where it was shown first (its id kept beside that message)."""
        return f"{self.settings.server.public_url}/f/{self._link_token(link_id)}"

    def _link_token(self: RequestService, link_id: str) -> str:
        # HMAC of an unguessable id (128 random bits) under a key of the server secret: as unguessable as
        # a random token to anyone without the secret, and 43 characters like token_urlsafe(32).
        digest = hmac.digest(self.store.secret.key(LINK_TOKEN_KEY), link_id.encode(), "sha256")
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    async def find_link(self: RequestService, token: str) -> tuple[LinkView, RequestView]:
        """The link and its request whatever their state (a dead link's page says who answered and when),
        or NotFoundError when no link has this token."""
        if not token or len(token) > 128:
            raise NotFoundError("no such link")
        row = await self.store.links.by_hash(hashlib.sha256(token.encode()).hexdigest())
        if row is None:
            raise NotFoundError("no such link")
        link = LinkView(row["id"], row["tenant_id"], row["request_id"], row["recipient"], row["created_at"],
                        row["used_at"], row.get("principal"))
        view = await self.get(tenant_id=link.tenant_id, request_id=link.request_id, with_deliveries=False)
        return link, view

    async def open_link(self: RequestService, token: str) -> tuple[LinkView, RequestView]:
        """The link and its request, or NotFoundError (unknown) / a GoneError subclass (dead link)."""
        link, view = await self.find_link(token)
        if view.status == "answered" and link.used_at is None:
            # The answer may have come through this very link between our two reads: its use
            # commits with the answer, so a second look tells "used" from "answered elsewhere".
            again = await self.store.links.by_hash(hashlib.sha256(token.encode()).hexdigest())
            if again is not None and again["used_at"] is not None:
                raise LinkUsedError("this link was used already")
        if link.used_at is not None:
            raise LinkUsedError("this link was used already")
        if view.timed_out:
            raise ExpiredError("the question expired")
        if view.status == "answered":
            raise AlreadyAnsweredGone("the question was answered already")
        if view.status == "expired":
            raise ExpiredError("the question expired")
        if view.status == "cancelled":
            raise RequestCancelledError("the question was cancelled")
        return link, view

    async def submit_link(self: RequestService, *, token: str, response: Any) -> RequestView:
        link, view = await self.open_link(token)
        try:
            return await self.submit(tenant_id=link.tenant_id, request_id=view.id, response=response,
                                     principal=link.answers_as, channel=link.channel, link_id=link.id)
        except AlreadyAnsweredError:
            # Lost a race after open_link (another tab of this link, or another channel): a dead
            # link is a 410 as open_link reports it (LinkUsedError / AlreadyAnsweredGone), not a 409.
            await self.open_link(token)
            raise

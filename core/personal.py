"""Private notes to one of a tenant's people on their own channels: how something that names a person
(an inbox sign-in, a form link that answers as them) reaches only that person (DESIGN invariant 10).

A note goes to the person's own identity as ``[[tenants.people]]`` lists it (their Telegram or Matrix
direct chat with the bot, their Slack DM, their email address), never to a shared place, and its link
is never shown to whoever asked for it to be sent. Each connector says how it reaches a person
privately (``Connector.send_private``); one that cannot says so, and the next is tried.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handraise.core.config import PERSON_CHANNELS, Settings
from handraise.core.errors import ConnectorError, ValidationFailedError

if TYPE_CHECKING:
    from handraise.core.connectors import Connector

log = logging.getLogger(__name__)

Journal = Callable[..., Awaitable[None]]


@dataclass(frozen=True)
class PrivateNote:
    """What the person reads: a sentence or two (``text``, from core.wording), and one link with its label;
    ``title`` heads it where a channel shows a heading apart (a mail's subject). None of them holds the link
    but ``url``."""

    text: str
    url: str
    button: str
    title: str = ""


class PrivatePost:
    """Sends a note to a person on the first of their own channels that takes it."""

    def __init__(self, *, settings: Settings, connectors: Mapping[str, Connector[Any]], journal: Journal) -> None:
        self.settings = settings
        self.connectors = connectors
        # The lifecycle's journal (RequestService.journal): where each note went, or that none took it.
        self.journal = journal

    def reachable(self, tenant_id: str, person_id: str) -> list[str]:
        """The channels that may reach ``person_id`` privately, in the order tried: each enabled connector
        serving the tenant on which the person has an identity."""
        tenant = self.settings.tenant(tenant_id)
        person = tenant.person(person_id) if tenant is not None else None
        if person is None:
            return []
        return [name for name in PERSON_CHANNELS
                if person.identity(name) is not None and name in self.connectors
                and self.connectors[name].serves(tenant_id)]

    def check(self, tenant_id: str, person_id: str, *, field: str = "person") -> list[str]:
        """``reachable``, or a 422 naming ``field`` when nothing reaches the person privately."""
        channels = self.reachable(tenant_id, person_id)
        if not channels:
            message = (f"{person_id} has no channel this server reaches privately: give them a telegram, slack, "
                       "matrix or email identity in [[tenants.people]] whose connector serves this tenant")
            raise ValidationFailedError(f"{field}: {message}", fields=[{"field": field, "message": message}])
        return channels

    async def send(self, *, tenant_id: str, person_id: str, note: PrivateNote, principal: str,
                   about: Mapping[str, str], request_id: str | None = None,
                   channels: Sequence[str] | None = None) -> str | None:
        """The channel that took the note, or None when none did (each failure logged, never the link).

        Journaled as ``sent_privately`` (the channel that took it) or ``not_delivered`` (the channels
        tried), with ``about`` (the sign-in's or link's id) and the person, on behalf of ``principal``."""
        tenant = self.settings.tenant(tenant_id)
        person = tenant.person(person_id) if tenant is not None else None
        tried = list(channels if channels is not None else self.reachable(tenant_id, person_id))
        taken = None
        for name in tried if person is not None else []:
            try:
                if await self.connectors[name].send_private(person, tenant_id=tenant_id, note=note):
                    log.info("private note sent", extra={"channel": name, "tenant_id": tenant_id})
                    taken = name
                    break
            except ConnectorError as e:
                log.warning("private note failed", extra={"channel": name, "tenant_id": tenant_id,
                                                          "error": e.message})
        data = {**about, "for": f"person:{person_id}",
                **({"channel": taken} if taken is not None else {"channels": tried})}
        await self.journal(tenant_id=tenant_id, event="sent_privately" if taken else "not_delivered",
                           request_id=request_id, principal=principal, channel="api", data=data)
        return taken

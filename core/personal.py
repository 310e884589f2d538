"""Private notes to one of a tenant's people on their own channels: how something that names a person
(an inbox sign-in, a form link that answers as them) reaches only that person (DESIGN invariant 10).

A note goes to the person's own identity as ``[[tenants.people]]`` lists it (their Telegram or Matrix
direct chat with the bot, their Slack DM, their email address), never to a shared place, and its link
is never shown to whoever asked for it to be sent. Each connector says how it reaches a person
privately (``Connector.send_private``); one that cannot says so, and the next is tried.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handraise.core.config import PERSON_CHANNELS, Settings
from handraise.core.errors import ConnectorError, ValidationFailedError

if TYPE_CHECKING:
    from handraise.core.connectors import Connector

log = logging.getLogger(__name__)


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

    def __init__(self, *, settings: Settings, connectors: Mapping[str, Connector[Any]]) -> None:
        self.settings = settings
        self.connectors = connectors

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

    async def send(self, *, tenant_id: str, person_id: str, note: PrivateNote,
                   channels: Sequence[str] | None = None) -> str | None:
        """The channel that took the note, or None when none did (each failure logged, never the link)."""
        tenant = self.settings.tenant(tenant_id)
        person = tenant.person(person_id) if tenant is not None else None
        if person is None:
            return None
        for name in channels if channels is not None else self.reachable(tenant_id, person_id):
            try:
                if await self.connectors[name].send_private(person, tenant_id=tenant_id, note=note):
                    log.info("private note sent", extra={"channel": name, "tenant_id": tenant_id})
                    return name
            except ConnectorError as e:
                log.warning("private note failed", extra={"channel": name, "tenant_id": tenant_id,
                                                          "error": e.message})
        return None

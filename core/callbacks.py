"""Request callbacks: a request's ``callback_url`` hears its result once it is terminal.

The POST is signed and sent exactly like a ``[[webhooks]]`` one (``core/signedpost.py``, which
bounds the exchange in size and time) with the tenant's ``[tenants.callbacks] secret``, and the
dispatcher retries it with the deliveries' backoff; it shows on the request as a delivery of
channel ``callback``. A callback goes only to ``https`` URLs whose host resolves to public
addresses (``core/addresses.py``), unless the tenant lists the host in ``allow_hosts`` (plain
http and private or loopback addresses are then fine). The check runs at create (422) and again
before each attempt, and that attempt connects only to the addresses its own check resolved and
judged (:class:`PinnedResolver`): the name is looked up once per attempt, so a name that answers
the check with a public address and the connection with a private one (DNS rebinding) cannot
steer the connection. TLS still verifies the certificate against the URL's host name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from handraise.core import addresses
from handraise.core.api import RequestView, url_host
from handraise.core.config import CallbackSettings
from handraise.core.errors import ConnectorError
from handraise.core.hitl import hitl_signature
from handraise.core.signedpost import RESOLVED, envelope, post_signed

CHANNEL = "callback"
MAX_URL_CHARS = 2000
_RESOLVE_SECONDS = 5.0


@dataclass(frozen=True)
class Destination:
    """Where one attempt may connect: the checked addresses of the URL's host, or None for a host the
    tenant allows (``allow_hosts``), which is looked up as usual."""

    addresses: Sequence[ResolveResult] | None


async def url_problem(url: str, settings: CallbackSettings | None, *,
                      resolver: AbstractResolver | None = None) -> str | None:
    """Why a callback may not go to ``url`` for a tenant with these settings, or None."""
    checked = await destination(url, settings, resolver=resolver)
    return checked if isinstance(checked, str) else None


async def destination(url: str, settings: CallbackSettings | None, *,
                      resolver: AbstractResolver | None = None) -> Destination | str:
    """Where a callback to ``url`` may connect, else why it may not go there at all.

    ``resolver``: who looks the host up (the system's ``getaddrinfo`` unless a test hands its own).
    """
    if settings is None:
        return "this tenant has no [tenants.callbacks] secret to sign callbacks with"
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "must be an absolute https:// URL"
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        return "must be an absolute https:// URL"
    if parts.username is not None or parts.password is not None:
        return "must not hold a user name or password (sign-in travels in the signature)"
    allowed = host in settings.allow_hosts
    if parts.scheme != "https" and not allowed:
        return "must be https (or name a host the tenant allows in [tenants.callbacks] allow_hosts)"
    if allowed:
        return Destination(addresses=None)
    found = await _lookup(host, port, resolver or ThreadedResolver())
    if not found:
        return "its host cannot be resolved"
    # Every address, not just one: the connection may try any of them.
    parsed = [addresses.parse(str(r["host"])) for r in found]
    if not all(a is not None and addresses.is_public(a) for a in parsed):
        return ("its host resolves to a loopback, private or reserved address "
                "(allow it in [tenants.callbacks] allow_hosts)")
    return Destination(addresses=found)


class PinnedResolver(AbstractResolver):
    """Answers with addresses already checked, without asking DNS again: what one attempt connects to.

    Its session posts to one URL with redirects off, so the only name it is ever asked is that URL's.
    """

    def __init__(self, found: Sequence[ResolveResult]) -> None:
        self._found = list(found)

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        wanted = [r for r in self._found if family in (socket.AF_UNSPEC, r["family"])]
        if not wanted:
            raise OSError(f"{host}: no checked address of that family")
        return wanted

    async def close(self) -> None:
        pass


class CallbackHttp:
    """How callbacks are posted: a host the tenant allows (``allow_hosts``) through the shared session,
    any other through a session of its own per attempt, connecting only to the addresses that attempt
    checked. One session per attempt, not one shared guarded session: a pooled connection or the
    connector's DNS cache would carry one attempt's addresses into another's."""

    def __init__(self, shared: aiohttp.ClientSession, *, resolver: AbstractResolver | None = None) -> None:
        self.shared = shared
        # Who looks callback hosts up; None: the system's getaddrinfo (tests hand a scripted one).
        self.resolver = resolver

    @contextlib.asynccontextmanager
    async def session_to(self, where: Destination) -> AsyncIterator[aiohttp.ClientSession]:
        if where.addresses is None:
            yield self.shared
            return
        connector = aiohttp.TCPConnector(resolver=PinnedResolver(where.addresses), use_dns_cache=False,
                                         force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            yield session


async def send(http: CallbackHttp, *, view: RequestView, url: str, settings: CallbackSettings | None,
               log: logging.Logger, hitl_payload: dict[str, Any] | None = None) -> dict[str, object]:
    """POST the terminal request to its callback; the delivery's ref, else ``ConnectorError``.

    ``hitl_payload``: a HITL-protocol case's callback (core/hitl.py) instead of the request's
    envelope, signed both ways: Handraise's headers and the protocol's ``X-HITL-Signature``.
    """
    where = await destination(url, settings, resolver=http.resolver)
    if isinstance(where, str) or settings is None:
        raise ConnectorError(f"callback to {url_host(url)} refused: the URL {where}", permanent=True)
    secret = settings.secret.get_secret_value()
    payload = hitl_payload or envelope(RESOLVED, view, delivery_id=f"{view.id}:{CHANNEL}")
    async with http.session_to(where) as session:
        status = await post_signed(session, url=url, secret=secret, payload=payload,
                                   timeout=settings.timeout_seconds, log=log, user_agent="Handraise-Callback/1",
                                   also_signed=None if hitl_payload is None else hitl_signature(secret))
    return {"status": status}


async def _lookup(host: str, port: int, resolver: AbstractResolver) -> list[ResolveResult]:
    """The host's addresses, once; [] when it does not resolve (in time)."""
    literal = addresses.parse(host)
    if literal is not None:
        family = socket.AF_INET6 if literal.version == 6 else socket.AF_INET
        return [ResolveResult(hostname=host, host=str(literal), port=port, family=family, proto=0,
                              flags=socket.AI_NUMERICHOST)]
    try:
        async with asyncio.timeout(_RESOLVE_SECONDS):
            return await resolver.resolve(host, port, family=socket.AF_UNSPEC)
    except (OSError, TimeoutError, UnicodeError):
        return []

"""Request callbacks: a request's ``callback_url`` hears its result once it is terminal.

The POST is signed and sent exactly like a ``[[webhooks]]`` one (``core/signedpost.py``)
with the tenant's ``[tenants.callbacks] secret``, and the dispatcher retries it with the
deliveries' backoff; it shows on the request as a delivery of channel ``callback``.
A callback goes only to ``https`` URLs whose host resolves to public addresses, unless
the tenant lists the host in ``allow_hosts`` (plain http and private or loopback
addresses are then fine). The check runs at create (422) and again before each attempt,
so a name that later resolves somewhere private is refused then too; and the POST itself
connects through a resolver that hands the connection only public addresses
(:class:`CallbackHttp`), so a name that answers the check with a public address and the
connection with a private one (DNS rebinding) reaches nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from handraise.core.api import RequestView, url_host
from handraise.core.config import CallbackSettings
from handraise.core.errors import ConnectorError
from handraise.core.hitl import hitl_signature
from handraise.core.signedpost import RESOLVED, envelope, post_signed

CHANNEL = "callback"
MAX_URL_CHARS = 2000
_RESOLVE_SECONDS = 5.0


async def url_problem(url: str, settings: CallbackSettings | None) -> str | None:
    """Why a callback may not go to ``url`` for a tenant with these settings, or None."""
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
        return None
    addresses = await _addresses(host, port)
    if not addresses:
        return "its host cannot be resolved"
    if not all(_public(a) for a in addresses):
        return ("its host resolves to a loopback, private or reserved address "
                "(allow it in [tenants.callbacks] allow_hosts)")
    return None


class PublicOnlyResolver(AbstractResolver):
    """Resolves as usual, then keeps only public addresses: what a connection to a callback may use."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        public = [r for r in found if _public(ipaddress.ip_address(str(r["host"]).split("%")[0]))]
        if not public:
            raise OSError(f"{host} resolves to no public address")
        return public

    async def close(self) -> None:
        await self._inner.close()


class CallbackHttp:
    """The sessions callbacks are posted through: a host the tenant allows (``allow_hosts``) through the
    shared session, any other through one whose connections reach public addresses only."""

    def __init__(self, shared: aiohttp.ClientSession, *, resolver: AbstractResolver | None = None) -> None:
        self.shared = shared
        self._resolver = resolver
        self._guarded: aiohttp.ClientSession | None = None

    def session_for(self, url: str, settings: CallbackSettings | None) -> aiohttp.ClientSession:
        host = (urlsplit(url).hostname or "").lower()
        if settings is not None and host in settings.allow_hosts:
            return self.shared
        if self._guarded is None:  # made on first use: inside the running loop
            connector = aiohttp.TCPConnector(resolver=PublicOnlyResolver(self._resolver))
            self._guarded = aiohttp.ClientSession(connector=connector, timeout=self.shared.timeout)
        return self._guarded

    async def close(self) -> None:
        if self._guarded is not None:
            await self._guarded.close()


async def send(http: CallbackHttp, *, view: RequestView, url: str, settings: CallbackSettings | None,
               log: logging.Logger, hitl_payload: dict[str, Any] | None = None) -> dict[str, object]:
    """POST the terminal request to its callback; the delivery's ref, else ``ConnectorError``.

    ``hitl_payload``: a HITL-protocol case's callback (core/hitl.py) instead of the request's
    envelope, signed both ways: Handraise's headers and the protocol's ``X-HITL-Signature``.
    """
    problem = await url_problem(url, settings)
    if problem is not None or settings is None:
        raise ConnectorError(f"callback to {url_host(url)} refused: the URL {problem}", permanent=True)
    secret = settings.secret.get_secret_value()
    payload = hitl_payload or envelope(RESOLVED, view, delivery_id=f"{view.id}:{CHANNEL}")
    status = await post_signed(http.session_for(url, settings), url=url, secret=secret, payload=payload,
                               timeout=settings.timeout_seconds, log=log, user_agent="Handraise-Callback/1",
                               also_signed=None if hitl_payload is None else hitl_signature(secret))
    return {"status": status}


async def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host.split("%")[0])]
    except ValueError:
        pass
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM), _RESOLVE_SECONDS)
    except (OSError, TimeoutError, UnicodeError):
        return []
    out = []
    for family, *_rest, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            out.append(ipaddress.ip_address(str(sockaddr[0]).split("%")[0]))
    return out


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # ::ffff:127.0.0.1 reaches 127.0.0.1: judge a mapped address by the IPv4 one it stands for.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast

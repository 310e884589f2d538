"""Bearer keys: each belongs to one tenant and carries scopes; an ``ask`` key never answers."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from dataclasses import dataclass

from aiohttp import web

from handraise.core.config import Settings
from handraise.core.errors import ForbiddenError, UnauthorizedError
from handraise.core.logs import PRINCIPAL_ATTR
from handraise.core.store import Store


@dataclass(frozen=True)
class Principal:
    tenant_id: str
    key_id: str
    scopes: frozenset[str]
    # The person this key is bound to: the only person it acts as (DESIGN invariant 10). None: nobody.
    person: str | None = None

    @property
    def name(self) -> str:
        """``agent:<key id>`` for asking keys; ``person:<id>`` for a key bound to a person, which acts as
        them; ``operator:<key id>`` for the rest, which is nobody in particular (DESIGN.md)."""
        if "ask" in self.scopes:
            return f"agent:{self.key_id}"
        return f"person:{self.person}" if self.person is not None else f"operator:{self.key_id}"

    def require(self, *scopes: str) -> None:
        if not self.scopes.intersection(scopes):
            raise ForbiddenError(f"this key lacks the scope: {' or '.join(scopes)}")


# What a 401 tells the client (RFC 6750 §3): the scheme alone when no bearer key came, invalid_token when
# the one that came is not a key.
NO_KEY_CHALLENGE = "Bearer"
UNKNOWN_KEY_CHALLENGE = 'Bearer error="invalid_token"'

# Stored keys are re-read at most this often: a revocation takes effect within it.
STORED_KEYS_TTL = 5.0
# Authorization headers of config keys remembered at most (see Keyring._known).
_KNOWN_HEADERS = 256
# An unknown key re-reads the stored keys at most this often: a key just made with ``handraise keys
# create`` works within a second, and a flood of random keys costs one query a second, not one each.
UNKNOWN_KEY_RELOAD = 1.0


class Keyring:
    """Keys from the config (literal or sha256) and from the store (``handraise keys create``).

    The store's active keys are held in memory as a whole, so an unknown key is answered from it
    (a negative answer needs no query of its own).
    """

    def __init__(self, *, settings: Settings, store: Store) -> None:
        self._store = store
        self._config: dict[str, Principal] = {}
        for tenant in settings.tenants:
            for key in tenant.keys:
                self._config[key.digest()] = Principal(tenant.id, key.id, frozenset(key.scopes), key.person)
        self._stored: dict[str, Principal] = {}
        self._loaded_at = -math.inf
        self._reload_lock = asyncio.Lock()
        # Authorization headers already found to carry a key of the config, which never changes while the
        # server runs: such a request is not hashed again. Only known keys enter (a stranger's random keys
        # never do), and it is emptied past _KNOWN_HEADERS (spellings of the same key: "bearer", spaces).
        self._known: dict[str, Principal] = {}

    @property
    def empty(self) -> bool:
        return not self._config

    async def lookup(self, key: str) -> Principal | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        found = self._config.get(digest)
        if found is not None:
            return found
        age = time.monotonic() - self._loaded_at
        if age > STORED_KEYS_TTL or (digest not in self._stored and age > UNKNOWN_KEY_RELOAD):
            await self._reload()
        return self._stored.get(digest)

    async def _reload(self) -> None:
        async with self._reload_lock:  # callers that queued meanwhile use the fresh copy
            if time.monotonic() - self._loaded_at <= UNKNOWN_KEY_RELOAD:
                return
            rows = await self._store.list_api_keys()
            self._stored = {r["key_sha256"]: Principal(r["tenant_id"], r["id"], frozenset(r["scopes"].split(",")),
                                                       r.get("person"))
                            for r in rows if r["revoked_at"] is None}
            self._loaded_at = time.monotonic()

    async def authenticate(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        principal = self._known.get(header)
        if principal is None:
            principal = await self._authenticate(header)
        request[PRINCIPAL_ATTR] = principal  # for the access log line: tenant and key id, never the key
        return principal

    async def _authenticate(self, header: str) -> Principal:
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise UnauthorizedError("missing bearer key: send 'Authorization: Bearer <key>'",
                                    challenge=NO_KEY_CHALLENGE)
        key = key.strip()
        if len(key) > 512:
            raise UnauthorizedError("unknown key", challenge=UNKNOWN_KEY_CHALLENGE)
        principal = await self.lookup(key)
        if principal is None:
            raise UnauthorizedError("unknown key", challenge=UNKNOWN_KEY_CHALLENGE)
        if self._config.get(hashlib.sha256(key.encode()).hexdigest()) is principal:
            if len(self._known) >= _KNOWN_HEADERS:
                self._known.clear()
            self._known[header] = principal
        return principal

    async def authorize(self, request: web.Request, *scopes: str) -> Principal:
        """The request's principal, holding one of ``scopes`` (401 without a known key, 403 without the scope)."""
        principal = await self.authenticate(request)
        principal.require(*scopes)
        return principal

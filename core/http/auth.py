"""Bearer keys: each belongs to one tenant and carries scopes; an ``ask`` key never answers."""

from __future__ import annotations

import hashlib
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

    @property
    def name(self) -> str:
        """``agent:<key id>`` for asking keys, ``operator:<key id>`` for the rest (DESIGN.md)."""
        return f"agent:{self.key_id}" if "ask" in self.scopes else f"operator:{self.key_id}"

    def require(self, *scopes: str) -> None:
        if not self.scopes.intersection(scopes):
            raise ForbiddenError(f"this key lacks the scope: {' or '.join(scopes)}")


class Keyring:
    """Keys from the config (literal or sha256) and from the store (``handraise keys create``)."""

    def __init__(self, *, settings: Settings, store: Store) -> None:
        self._store = store
        self._config: dict[str, Principal] = {}
        for tenant in settings.tenants:
            for key in tenant.keys:
                self._config[key.digest()] = Principal(tenant.id, key.id, frozenset(key.scopes))
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    @property
    def empty(self) -> bool:
        return not self._config

    async def lookup(self, key: str) -> Principal | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        found = self._config.get(digest)
        if found is not None:
            return found
        # Stored keys are cached briefly so a busy agent does not cost a query per call;
        # a revocation takes effect within the TTL.
        cached = self._cache.get(digest)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        row = await self._store.find_api_key(digest)
        principal = None if row is None else Principal(row["tenant_id"], row["id"], frozenset(row["scopes"].split(",")))
        if len(self._cache) > 10000:
            self._cache.clear()
        self._cache[digest] = (now + 5.0, principal)
        return principal

    async def authenticate(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise UnauthorizedError("missing bearer key: send 'Authorization: Bearer <key>'")
        key = key.strip()
        if len(key) > 512:
            raise UnauthorizedError("unknown key")
        principal = await self.lookup(key)
        if principal is None:
            raise UnauthorizedError("unknown key")
        request[PRINCIPAL_ATTR] = principal  # for the access log line: tenant and key id, never the key
        return principal

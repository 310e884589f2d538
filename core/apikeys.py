"""Stored API keys: made, listed and revoked on the store, by ``handraise keys`` or ``/v1/keys``.

A key is shown once, when made; the store keeps its sha256. A key may be bound to one of its tenant's
people (``person``): it then acts only as them (``person:<id>``, DESIGN invariant 10). Whoever makes a
bound key holds it until they hand it over, so making keys is an admin's power (the ``admin`` scope, or
the CLI on the server's own store), and each key made or revoked is journaled.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from handraise.core.config import Settings
from handraise.core.errors import ConflictError, NotFoundError, ValidationFailedError
from handraise.core.scopes import ALL_SCOPES, hash_key, scopes_problem
from handraise.core.store import Store

KEY_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


@dataclass(frozen=True)
class MadeKey:
    id: str
    tenant_id: str
    scopes: tuple[str, ...]
    person: str | None
    created_at: float
    key: str  # the secret: shown once, never stored

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "tenant_id": self.tenant_id, "scopes": list(self.scopes), "person": self.person,
                "created_at": self.created_at, "key": self.key}


def _problem(field: str, message: str) -> ValidationFailedError:
    return ValidationFailedError(f"{field}: {message}", fields=[{"field": field, "message": message}])


async def make_key(store: Store, settings: Settings, *, tenant_id: str, scopes: list[str], key_id: str | None,
                   person: str | None, made_by: str, now: float) -> MadeKey:
    """Store a new key of ``tenant_id``; ValidationFailedError (422, per field) or ConflictError (a taken id)."""
    tenant = settings.tenant(tenant_id)
    if tenant is None:
        raise NotFoundError(f"no tenant {tenant_id!r}")
    bad = [s for s in scopes if s not in ALL_SCOPES]
    if bad or not scopes:
        raise _problem("scopes", f"must be among {', '.join(ALL_SCOPES)}")
    if person is not None and tenant.person(person) is None:
        raise _problem("person", f"{person} is not one of this tenant's people")
    problem = scopes_problem(scopes, person=person)
    if problem is not None:
        raise _problem("scopes", problem)
    key_id = key_id or f"key-{secrets.token_hex(4)}"
    if not KEY_ID.match(key_id):
        raise _problem("id", "1 to 64 letters, digits, _ . -")
    taken = {k.id for t in settings.tenants for k in t.keys} | {r["id"] for r in await store.list_api_keys()}
    if key_id in taken:
        raise ConflictError(f"a key with id {key_id!r} exists already; choose another")
    key = f"hr_{secrets.token_urlsafe(32)}"
    ordered = tuple(s for s in ALL_SCOPES if s in scopes)
    await store.insert_api_key({"id": key_id, "tenant_id": tenant_id, "key_sha256": hash_key(key),
                                "scopes": ",".join(ordered), "created_at": now, "revoked_at": None, "person": person})
    async with store.transaction() as conn:
        await store.append_journal(conn, tenant_id=tenant_id, event="key_created", principal=made_by, channel="api",
                                   data={"key_id": key_id, "scopes": list(ordered),
                                         **({"person": person} if person else {})}, at=now)
    return MadeKey(key_id, tenant_id, ordered, person, now, key)


async def list_keys(store: Store, settings: Settings, *, tenant_id: str) -> list[dict[str, Any]]:
    """The tenant's keys, from the config and the store, never their secrets."""
    tenant = settings.tenant(tenant_id)
    config = [{"id": k.id, "scopes": list(k.scopes), "person": k.person, "source": "config", "revoked_at": None}
              for k in (tenant.keys if tenant is not None else [])]
    stored = [{"id": r["id"], "scopes": r["scopes"].split(","), "person": r.get("person"), "source": "store",
               "created_at": r["created_at"], "revoked_at": r["revoked_at"]}
              for r in await store.list_api_keys(tenant_id)]
    return config + stored


async def revoke_key(store: Store, *, tenant_id: str, key_id: str, revoked_by: str, now: float) -> None:
    """Revoke a stored key of ``tenant_id`` (NotFoundError: no such active key of this tenant)."""
    rows = [r for r in await store.list_api_keys(tenant_id) if r["id"] == key_id and r["revoked_at"] is None]
    if not rows or not await store.revoke_api_key(key_id, now=now):
        raise NotFoundError(f"no active stored key {key_id!r} in this tenant")
    async with store.transaction() as conn:
        await store.append_journal(conn, tenant_id=tenant_id, event="key_revoked", principal=revoked_by,
                                   channel="api", data={"key_id": key_id}, at=now)

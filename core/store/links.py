"""One-time form links as stored: the row minted (its token only as a hash), found by that hash, used
once by a compare-and-set; and the live link a person holds already, found before another is minted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, text, update

from handraise.core.models import LinkRow
from handraise.core.store.leadership import lock_key
from handraise.core.store.units import StoreConnection, first, rowcount, scalar

links_t = LinkRow.__table__

_b = bindparam
_INSERT = insert(links_t)
_BY_HASH = select(links_t).where(links_t.c.token_sha256 == _b("token_sha256"))
_USE = update(links_t).where(links_t.c.id == _b("w_id"), links_t.c.used_at.is_(None)).values(used_at=_b("w_now"))
# IS NOT DISTINCT FROM (SQLite: IS): a link minted for nobody in particular (a webhook's) has no principal.
# Read through ix_links_request: a request holds a few links, one per person and channel that asked.
_LIVE_OF = (links_t.c.tenant_id == _b("tenant_id"), links_t.c.request_id == _b("request_id"),
            links_t.c.used_at.is_(None), links_t.c.created_by == _b("created_by"),
            links_t.c.principal.is_not_distinct_from(_b("principal")))
_LIVE = select(links_t.c.id).where(
    *_LIVE_OF, links_t.c.recipient.is_not_distinct_from(_b("recipient")),
).order_by(links_t.c.created_at, links_t.c.id).limit(1)
# The same, for a recipient whose links older releases stored under other labels too.
_LIVE_ANY = select(links_t.c.id).where(
    *_LIVE_OF, links_t.c.recipient.in_(_b("recipients", expanding=True)),
).order_by(links_t.c.created_at, links_t.c.id).limit(1)
# Two 32-bit keys: a key space apart from the one-key advisory locks (leadership, migrations), so a
# link's lock never waits on a lock held for as long as an instance leads.
_LOCK = text("SELECT pg_advisory_xact_lock(CAST(:space AS integer), CAST(:key AS integer))")
_LOCK_SPACE = lock_key("form links")

Read = Callable[..., Awaitable[Any]]


class LinkRecords:
    """Statements in the caller's transaction (``conn``) or as reads of their own."""

    def __init__(self, *, read: Read, dialect: str) -> None:
        self._read = read
        self._postgres = dialect == "postgresql"

    async def insert(self, conn: StoreConnection, row: Mapping[str, Any]) -> None:
        await conn.run(rowcount, _INSERT, dict(row))

    async def by_hash(self, token_sha256: str) -> dict[str, Any] | None:
        return await self._read(first, _BY_HASH, {"token_sha256": token_sha256})

    async def use(self, conn: StoreConnection, *, link_id: str, now: float) -> bool:
        """True for the one caller that used the link (it commits with the answer it carried)."""
        return await conn.run(rowcount, _USE, {"w_id": link_id, "w_now": now}) == 1

    async def live(self, conn: StoreConnection, *, tenant_id: str, request_id: str, principal: str | None,
                   recipient: str | None, created_by: str, known_as: Sequence[str] = ()) -> str | None:
        """The id of the oldest unused link of this request that ``created_by`` minted for this person
        (``principal``) and ``recipient``, or None: then the caller inserts one in the same transaction.
        ``known_as``: labels older releases stored the same recipient's links under, matched too.

        Two mints at once for the same person must not both miss: on PostgreSQL this first takes a
        transaction-scoped advisory lock on those values, so the second waits for the first's COMMIT and
        its read (READ COMMITTED: a snapshot per statement) finds the first's link. No unique index does it:
        databases minted a link per tap before, and an agent's explicit mints are fresh links each. SQLite's
        write transactions run one at a time already (BEGIN IMMEDIATE).
        """
        params = {"tenant_id": tenant_id, "request_id": request_id, "principal": principal,
                  "recipient": recipient, "created_by": created_by}
        if self._postgres:
            # A collision of two keys only makes two unrelated mints wait for each other.
            key = lock_key("\0".join(str(params[k]) for k in sorted(params)))
            await conn.run(scalar, _LOCK, {"space": _LOCK_SPACE, "key": key})
        if known_as and recipient is not None:
            del params["recipient"]
            return await conn.run(scalar, _LIVE_ANY, {**params, "recipients": [recipient, *known_as]})
        return await conn.run(scalar, _LIVE, params)

"""One-time form links as stored: the row minted (its token only as a hash), found by that hash, used
once by a compare-and-set."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from handraise.core.models import LinkRow
from handraise.core.store.units import StoreConnection, first, rowcount

links_t = LinkRow.__table__

_b = bindparam
_INSERT = insert(links_t)
_BY_HASH = select(links_t).where(links_t.c.token_sha256 == _b("token_sha256"))
_USE = update(links_t).where(links_t.c.id == _b("w_id"), links_t.c.used_at.is_(None)).values(used_at=_b("w_now"))

Read = Callable[..., Awaitable[Any]]


class LinkRecords:
    """Statements in the caller's transaction (``conn``) or as reads of their own."""

    def __init__(self, *, read: Read) -> None:
        self._read = read

    async def insert(self, conn: StoreConnection, row: Mapping[str, Any]) -> None:
        await conn.run(rowcount, _INSERT, dict(row))

    async def by_hash(self, token_sha256: str) -> dict[str, Any] | None:
        return await self._read(first, _BY_HASH, {"token_sha256": token_sha256})

    async def use(self, conn: StoreConnection, *, link_id: str, now: float) -> bool:
        """True for the one caller that used the link (it commits with the answer it carried)."""
        return await conn.run(rowcount, _USE, {"w_id": link_id, "w_now": now}) == 1

"""The operator inbox's sign-in links and sessions: rows keyed by a token's sha256, never the token.

Redeeming a link is a compare-and-set (``used_at IS NULL AND expires_at > now``) in the
caller's transaction, so two tabs opening the same link make one session between them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, func, insert, or_, select, update

from handraise.core.models import InboxSessionRow, InboxSigninRow, JournalRow, RequestRow
from handraise.core.store.listing import tenant_requests
from handraise.core.store.units import StoreConnection, all_rows, first, rowcount, scalar

requests_t = RequestRow.__table__
journal_t = JournalRow.__table__
signins_t = InboxSigninRow.__table__
sessions_t = InboxSessionRow.__table__

_b = bindparam
_INSERT_SIGNIN = insert(signins_t)
_GET_SIGNIN = select(signins_t).where(signins_t.c.token_sha256 == _b("token_sha256"))
_USE_SIGNIN = update(signins_t).where(
    signins_t.c.id == _b("w_id"), signins_t.c.used_at.is_(None), signins_t.c.expires_at > _b("w_now"),
).values(used_at=_b("w_now"))
_INSERT_SESSION = insert(sessions_t)
_GET_SESSION = select(sessions_t).where(sessions_t.c.token_sha256 == _b("token_sha256"),
                                        sessions_t.c.ended_at.is_(None))
_JOURNAL_HEAD = select(func.max(journal_t.c.seq)).where(journal_t.c.tenant_id == _b("tenant_id"))
_TOUCH_SESSION = update(sessions_t).where(sessions_t.c.id == _b("w_id")).values(last_seen_at=_b("w_now"))
_END_SESSION = update(sessions_t).where(sessions_t.c.id == _b("w_id"), sessions_t.c.ended_at.is_(None)).values(
    ended_at=_b("w_now"))

Read = Callable[..., Awaitable[Any]]


class InboxRecords:
    """Statements in the caller's transaction (``conn``) or through the store's reader/writer."""

    def __init__(self, *, read: Read, write: Read) -> None:
        self._read = read
        self._write = write

    async def insert_signin(self, conn: StoreConnection, row: Mapping[str, Any]) -> None:
        await conn.run(rowcount, _INSERT_SIGNIN, dict(row))

    async def signin_by_hash(self, token_sha256: str) -> dict[str, Any] | None:
        return await self._read(first, _GET_SIGNIN, {"token_sha256": token_sha256})

    async def use_signin(self, conn: StoreConnection, *, signin_id: str, now: float) -> bool:
        """True for the one caller that used the link, while it was unused and unexpired."""
        return await conn.run(rowcount, _USE_SIGNIN, {"w_id": signin_id, "w_now": now}) == 1

    async def insert_session(self, conn: StoreConnection, row: Mapping[str, Any]) -> None:
        await conn.run(rowcount, _INSERT_SESSION, dict(row))

    async def session_by_hash(self, token_sha256: str) -> dict[str, Any] | None:
        return await self._read(first, _GET_SESSION, {"token_sha256": token_sha256})

    async def touch_session(self, session_id: str, *, now: float) -> None:
        await self._write(rowcount, _TOUCH_SESSION, {"w_id": session_id, "w_now": now})

    async def end_session(self, session_id: str, *, now: float) -> bool:
        return await self._write(rowcount, _END_SESSION, {"w_id": session_id, "w_now": now}) == 1

    async def requests_page(self, tenant_id: str, *, statuses: tuple[str, ...], run_id: str | None = None,
                            channel: str | None = None, created_by: str | None = None, since: float | None = None,
                            until: float | None = None, unexpired_at: float | None = None,
                            older_than: tuple[float, str] | None = None, newer_than: tuple[float, str] | None = None,
                            limit: int = 50) -> list[dict[str, Any]]:
        """The tenant's requests, newest first, filtered as the inbox's list and history ask: the newest
        ``limit``, or a keyset page (no OFFSET) of the ``limit`` just older than ``older_than``, or just newer
        than ``newer_than``, each a (created_at, id) position; ids break ties of equal times."""
        stmt = tenant_requests(tenant_id, statuses=statuses, run_id=run_id, channel=channel, created_by=created_by,
                               since=since, until=until, unexpired_at=unexpired_at)
        c = requests_t.c
        if newer_than is not None:
            created_at, request_id = newer_than
            # The >= bound is what the index range starts from; the OR drops the rows up to the position.
            stmt = stmt.where(c.created_at >= created_at, or_(c.created_at > created_at, c.id > request_id))
            rows = await self._read(all_rows, stmt.order_by(c.created_at, c.id).limit(limit))
            return rows[::-1]
        if older_than is not None:
            created_at, request_id = older_than
            stmt = stmt.where(c.created_at <= created_at, or_(c.created_at < created_at, c.id < request_id))
        return await self._read(all_rows, stmt.order_by(c.created_at.desc(), c.id.desc()).limit(limit))

    async def journal_head(self, tenant_id: str) -> int:
        """The tenant's newest journal seq (0 before its first entry)."""
        return int(await self._read(scalar, _JOURNAL_HEAD, {"tenant_id": tenant_id}) or 0)

"""How far a person got with a request (form opened, an answer tried) and the HITL-protocol cases.

The two marks are compare-and-sets (``… IS NULL`` and still pending) in the caller's
transaction, so the first open is journaled once however many tabs race, and a
terminal request never changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from handraise.core.models import HitlCaseRow, RequestRow
from handraise.core.store.units import StoreConnection, first, rowcount

requests_t = RequestRow.__table__
cases_t = HitlCaseRow.__table__

_b = bindparam
_GET_CASE = select(cases_t).where(cases_t.c.request_id == _b("request_id"), cases_t.c.tenant_id == _b("tenant_id"))


def _mark(column: Any) -> Any:
    return update(requests_t).where(
        requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant"),
        requests_t.c.status == "pending", column.is_(None),
    ).values({column.name: _b("w_now")})


_MARK_OPENED = _mark(requests_t.c.opened_at)
_MARK_INTERACTED = _mark(requests_t.c.interacted_at)

Read = Callable[..., Awaitable[Any]]


class ReviewRecords:
    """Statements in the caller's transaction (``conn``) or as reads of their own."""

    def __init__(self, *, read: Read, dialect: str) -> None:
        self._read = read
        make = pg_insert if dialect == "postgresql" else sqlite_insert
        self._insert_case = make(cases_t).on_conflict_do_nothing()

    async def mark_opened(self, conn: StoreConnection, *, tenant_id: str, request_id: str, now: float) -> bool:
        """True for the one caller that recorded the first open of a pending request."""
        return await conn.run(rowcount, _MARK_OPENED, {"w_id": request_id, "w_tenant": tenant_id, "w_now": now}) == 1

    async def mark_interacted(self, conn: StoreConnection, *, tenant_id: str, request_id: str, now: float) -> bool:
        """True for the one caller that recorded the first (refused) attempt at a pending request."""
        return await conn.run(rowcount, _MARK_INTERACTED,
                              {"w_id": request_id, "w_tenant": tenant_id, "w_now": now}) == 1

    async def insert_case(self, conn: StoreConnection, row: Mapping[str, Any]) -> bool:
        """Insert; False when the request has its case already (an agent's retry)."""
        return await conn.run(rowcount, self._insert_case, dict(row)) == 1

    async def get_case(self, *, tenant_id: str, request_id: str) -> dict[str, Any] | None:
        return await self._read(first, _GET_CASE, {"request_id": request_id, "tenant_id": tenant_id})

"""Escalation steps and reminders that are due: the sweeper's look, and the compare-and-set that lets one
instance act on them.

A request's ``next_due_at`` is when the next thing of its schedule is due. Advancing it is a
compare-and-set on that value (and on the request still pending), in the caller's transaction with
the journal: however many instances sweep at once, one reaches each step and sends each reminder.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import and_, bindparam, select, update

from handraise.core.models import RequestRow
from handraise.core.store.units import StoreConnection, all_rows, rowcount

requests_t = RequestRow.__table__
_b = bindparam

_DUE = (select(requests_t.c.id, requests_t.c.tenant_id)
        .where(and_(requests_t.c.status == "pending", requests_t.c.next_due_at.is_not(None),
                    requests_t.c.next_due_at <= _b("now")))
        .order_by(requests_t.c.next_due_at).limit(_b("limit")))
_ADVANCE = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
    requests_t.c.next_due_at == _b("w_due"),
).values(schedule_json=_b("schedule_json"), next_due_at=_b("next_due_at"), assign_to_json=_b("assign_to_json"),
         channels_json=_b("channels_json"))

Read = Callable[..., Awaitable[Any]]


class ScheduleRecords:
    """Statements through the store's reader, or in the caller's transaction (``conn``)."""

    def __init__(self, *, read: Read) -> None:
        self._read = read

    async def due(self, now: float, *, limit: int = 500) -> list[tuple[str, str]]:
        """(request id, tenant id) of pending requests with a step or reminder due by ``now``."""
        return [(r["id"], r["tenant_id"]) for r in await self._read(all_rows, _DUE, {"now": now, "limit": limit})]

    async def advance(self, conn: StoreConnection, *, request_id: str, tenant_id: str, due: float,
                      values: Mapping[str, Any]) -> bool:
        """Compare-and-set: True for the one caller that moved a pending request's schedule on from ``due``."""
        params = {**values, "w_id": request_id, "w_tenant_id": tenant_id, "w_due": due}
        return await conn.run(rowcount, _ADVANCE, params) == 1

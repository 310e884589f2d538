"""Runs: a row per (tenant, run id), made by registration or by the first request or annotation naming it.

Making a run by use is ``INSERT … ON CONFLICT DO NOTHING`` in the caller's transaction, so two
first uses at once make one run; finishing is a compare-and-set on ``status = 'running'``, so a
terminal status never changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from handraise.core.models import RequestRow, RunRow
from handraise.core.store.units import StoreConnection, all_rows, first, rowcount

runs_t = RunRow.__table__
requests_t = RequestRow.__table__

_b = bindparam
_GET_RUN = select(runs_t).where(runs_t.c.tenant_id == _b("tenant_id"), runs_t.c.run_id == _b("run_id"))
# Registration claims a run that use made earlier: only while it is unregistered.
_CLAIM_RUN = update(runs_t).where(
    runs_t.c.tenant_id == _b("w_tenant_id"), runs_t.c.run_id == _b("w_run_id"), runs_t.c.registered.is_(False))
_FINISH_RUN = update(runs_t).where(
    runs_t.c.tenant_id == _b("w_tenant_id"), runs_t.c.run_id == _b("w_run_id"), runs_t.c.status == "running",
).values(status=_b("status"), completed_by=_b("completed_by"), completed_at=_b("now"), updated_at=_b("now"),
         reason=_b("reason"))
_REQUEST_COUNTS = (select(requests_t.c.status, func.count()).where(
    requests_t.c.tenant_id == _b("tenant_id"), requests_t.c.run_id == _b("run_id")).group_by(requests_t.c.status))

Read = Callable[..., Awaitable[Any]]


def _status_counts(c: Any, stmt: Any, params: Mapping[str, Any]) -> dict[str, int]:
    return {status: int(n) for status, n in c.execute(stmt, params)}


class RunRecords:
    """Statements in the caller's transaction (``conn``) or through the store's reader."""

    def __init__(self, *, read: Read, dialect: str) -> None:
        self._read = read
        make = pg_insert if dialect == "postgresql" else sqlite_insert
        self._insert = make(runs_t).on_conflict_do_nothing(index_elements=["tenant_id", "run_id"])

    async def insert(self, conn: StoreConnection, row: Mapping[str, Any]) -> bool:
        """Insert; False when the tenant has a run of that id already."""
        return await conn.run(rowcount, self._insert, dict(row)) == 1

    async def ensure(self, conn: StoreConnection, *, tenant_id: str, run_id: str, principal: str, now: float) -> bool:
        """The run named by a request or annotation: made, unregistered and running, unless it exists."""
        return await conn.run(self.ensure_in, tenant_id, run_id, principal, now)

    def ensure_in(self, c: Connection, tenant_id: str, run_id: str, principal: str, now: float) -> bool:
        """:meth:`ensure` as part of a larger unit of work (a request's create)."""
        return c.execute(self._insert, {"tenant_id": tenant_id, "run_id": run_id, "status": "running",
                                        "registered": False, "created_by": principal, "created_at": now,
                                        "updated_at": now}).rowcount == 1

    async def claim(self, conn: StoreConnection, *, tenant_id: str, run_id: str, values: Mapping[str, Any]) -> bool:
        """Register a run that use made: True when it was unregistered (and now is registered)."""
        params = {**values, "registered": True, "w_tenant_id": tenant_id, "w_run_id": run_id}
        return await conn.run(rowcount, _CLAIM_RUN, params) == 1

    async def get(self, tenant_id: str, run_id: str, *, conn: StoreConnection | None = None) -> dict[str, Any] | None:
        params = {"tenant_id": tenant_id, "run_id": run_id}
        if conn is not None:
            return await conn.run(first, _GET_RUN, params)
        return await self._read(first, _GET_RUN, params)

    async def finish(self, conn: StoreConnection, *, tenant_id: str, run_id: str, status: str, principal: str,
                     now: float, reason: str | None) -> bool:
        """Compare-and-set running → ``status``; True for the one caller that finished it."""
        params = {"status": status, "completed_by": principal, "now": now, "reason": reason,
                  "w_tenant_id": tenant_id, "w_run_id": run_id}
        return await conn.run(rowcount, _FINISH_RUN, params) == 1

    async def page(self, tenant_id: str, *, status: str | None = None, before_seq: int | None = None,
                   limit: int = 100) -> list[dict[str, Any]]:
        """The tenant's runs, newest first, older than ``before_seq``."""
        stmt = select(runs_t).where(runs_t.c.tenant_id == tenant_id)
        if status is not None:
            stmt = stmt.where(runs_t.c.status == status)
        if before_seq is not None:
            stmt = stmt.where(runs_t.c.seq < before_seq)
        return await self._read(all_rows, stmt.order_by(runs_t.c.seq.desc()).limit(limit))

    async def request_counts(self, tenant_id: str, run_id: str) -> dict[str, int]:
        return await self._read(_status_counts, _REQUEST_COUNTS, {"tenant_id": tenant_id, "run_id": run_id})

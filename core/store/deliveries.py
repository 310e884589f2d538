"""Delivery rows: one per (request, channel, target), and the journal entries about them.

A change to a row and its journal entry are one unit of work (the lifecycle's rule: journal in the
same transaction), so the journal never tells of a delivery the row does not show, nor the reverse.
Withdrawing a message is claimed with a compare-and-set, so one instance edits it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import and_, bindparam, exists, insert, select, update
from sqlalchemy.engine import Connection

from handraise.core.models import DeliveryRow, RequestRow
from handraise.core.store.journal import Journal, JournalEntry
from handraise.core.store.units import all_rows, rowcount

deliveries_t = DeliveryRow.__table__
requests_t = RequestRow.__table__

_b = bindparam
_FIND = select(deliveries_t.c.id).where(
    deliveries_t.c.request_id == _b("request_id"), deliveries_t.c.channel == _b("channel"),
    deliveries_t.c.target == _b("target"))
_INSERT = insert(deliveries_t)
_UPDATE = update(deliveries_t).where(deliveries_t.c.id == _b("w_id"))
# One instance withdraws a message: sent → withdrawing, or a claim whose holder went quiet (it died mid-edit).
_CLAIM_WITHDRAWAL = update(deliveries_t).where(
    deliveries_t.c.id == _b("w_id"),
    (deliveries_t.c.status == "sent")
    | ((deliveries_t.c.status == "withdrawing") & (deliveries_t.c.updated_at < _b("w_stale_before"))),
).values(status="withdrawing", updated_at=_b("w_now"))
# The recovery pass takes over only a claim whose holder went quiet (its journal entry in the same unit).
_RECLAIM_WITHDRAWAL = update(deliveries_t).where(
    deliveries_t.c.id == _b("w_id"), deliveries_t.c.status == "withdrawing",
    deliveries_t.c.updated_at < _b("w_stale_before"),
).values(updated_at=_b("w_now"))
# Claims untouched since a bound: their holders died mid-withdrawal (partial index ix_deliveries_withdrawing).
_ABANDONED_WITHDRAWALS = (select(deliveries_t)
                          .where(deliveries_t.c.status == "withdrawing",
                                 deliveries_t.c.updated_at < _b("stale_before"))
                          .order_by(deliveries_t.c.updated_at).limit(_b("limit")))
_RELEASE_WITHDRAWAL = (update(deliveries_t)
                       .where(deliveries_t.c.id == _b("w_id"), deliveries_t.c.status == "withdrawing")
                       .values(status="sent", updated_at=_b("w_now")))
FOR_REQUEST = (select(deliveries_t)
               .where(deliveries_t.c.tenant_id == _b("tenant_id"), deliveries_t.c.request_id == _b("request_id"))
               .order_by(deliveries_t.c.id))
# Terminal requests whose callback was neither sent nor given up on: what recovery resumes.
_CALLBACKS_DUE = (
    select(requests_t.c.id, requests_t.c.tenant_id, requests_t.c.resolved_at)
    .where(requests_t.c.callback_url.is_not(None), requests_t.c.status != "pending",
           ~exists().where(deliveries_t.c.request_id == requests_t.c.id, deliveries_t.c.channel == "callback",
                           deliveries_t.c.status.in_(("sent", "failed"))))
    .order_by(requests_t.c.resolved_at)
    .limit(_b("limit")))

Run = Callable[..., Awaitable[Any]]


def _open(c: Connection, row: dict[str, Any]) -> int:
    existing = c.execute(_FIND, {k: row[k] for k in ("request_id", "channel", "target")}).first()
    if existing is not None:
        return existing.id
    return c.execute(_INSERT, row).inserted_primary_key[0]


class DeliveryRecords:
    """Each call is a unit of work of its own (``write``) or a read (``read``)."""

    def __init__(self, *, read: Run, write: Run, journal: Journal) -> None:
        self._read = read
        self._write = write
        self._journal = journal

    async def open(self, *, tenant_id: str, request_id: str, channel: str, target: str, now: float) -> int:
        """The delivery's id, made ``pending`` unless it exists already."""
        return await self._write(_open, {
            "tenant_id": tenant_id, "request_id": request_id, "channel": channel, "target": target,
            "status": "pending", "attempts": 0, "created_at": now, "updated_at": now,
        })

    async def update(self, delivery_id: int, values: Mapping[str, Any], *,
                     journal: Mapping[str, Any] | None = None) -> JournalEntry | None:
        """Change the row (``updated_at`` now unless given) and append ``journal`` (``entry_row``'s
        fields) in the same transaction: both happen, or neither."""
        params = {"updated_at": time.time(), **values, "w_id": delivery_id} if values else None
        return await self._write(self._update_unit, params, None if journal is None else dict(journal))

    def _update_unit(self, c: Connection, params: dict[str, Any] | None,
                     journal: dict[str, Any] | None) -> JournalEntry | None:
        if params is not None:
            c.execute(_UPDATE, params)
        return None if journal is None else self._journal.append_in(c, journal)

    async def claim_withdrawal(self, delivery_id: int, *, now: float, stale_before: float) -> bool:
        """Compare-and-set a sent delivery to ``withdrawing``: True for the one instance that then edits or
        removes the message. A claim not touched since ``stale_before`` is taken over."""
        params = {"w_id": delivery_id, "w_now": now, "w_stale_before": stale_before}
        return await self._write(rowcount, _CLAIM_WITHDRAWAL, params) == 1

    async def reclaim_withdrawal(self, delivery_id: int, *, now: float, stale_before: float,
                                 journal: Mapping[str, Any]) -> bool:
        """Take over a ``withdrawing`` claim untouched since ``stale_before`` and journal it, as one unit:
        True for the one instance that then finishes the withdrawal."""
        params = {"w_id": delivery_id, "w_now": now, "w_stale_before": stale_before}
        return await self._write(self._reclaim_unit, params, dict(journal))

    def _reclaim_unit(self, c: Connection, params: dict[str, Any], journal: dict[str, Any]) -> bool:
        if c.execute(_RECLAIM_WITHDRAWAL, params).rowcount != 1:
            return False
        self._journal.append_in(c, journal)
        return True

    async def abandoned_withdrawals(self, *, stale_before: float, limit: int = 500) -> list[dict[str, Any]]:
        """Deliveries left ``withdrawing`` and untouched since ``stale_before``, oldest first."""
        return await self._read(all_rows, _ABANDONED_WITHDRAWALS, {"stale_before": stale_before, "limit": limit})

    async def release_withdrawal(self, delivery_id: int, *, now: float) -> None:
        """A claimed withdrawal that did not happen: the message is still up, the delivery ``sent`` again."""
        await self._write(rowcount, _RELEASE_WITHDRAWAL, {"w_id": delivery_id, "w_now": now})

    async def for_request(self, tenant_id: str, request_id: str) -> list[dict[str, Any]]:
        return await self._read(all_rows, FOR_REQUEST, {"tenant_id": tenant_id, "request_id": request_id})

    async def for_requests(self, tenant_id: str, request_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {rid: [] for rid in request_ids}
        if not request_ids:
            return out
        stmt = (select(deliveries_t).where(and_(deliveries_t.c.tenant_id == tenant_id,
                                                deliveries_t.c.request_id.in_(request_ids)))
                .order_by(deliveries_t.c.id))
        for r in await self._read(all_rows, stmt):
            out[r["request_id"]].append(r)
        return out

    async def callbacks_due(self, *, limit: int = 500) -> list[dict[str, Any]]:
        """Terminal requests (id, tenant_id, resolved_at) whose callback is not yet sent nor failed for good."""
        return await self._read(all_rows, _CALLBACKS_DUE, {"limit": limit})

"""The store's statements about requests, API keys and annotations: built once, with bind parameters,
so a call neither constructs a statement nor recomputes its cache key; and the shapes a request is read in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, insert, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from handraise.core.models import (
    AnnotationRow,
    ApiKeyRow,
    DeliveryRow,
    JournalRow,
    RequestRow,
)
from handraise.core.store.journal import JournalEntry
from handraise.core.store.listing import tenant_requests

requests_t = RequestRow.__table__
journal_t = JournalRow.__table__
deliveries_t = DeliveryRow.__table__
api_keys_t = ApiKeyRow.__table__
annotations_t = AnnotationRow.__table__


# -- prebuilt statements -------------------------------------------------------
# Built once so that a call neither constructs a statement nor recomputes its cache key.
# Bind names of UPDATE conditions start with ``w_``: a bind named like a column would
# collide with that column's SET parameter.

_b = bindparam
GET_REQUEST = select(requests_t).where(requests_t.c.id == _b("id"), requests_t.c.tenant_id == _b("tenant_id"))
GET_REQUEST_BY_UNIQUE_ID = select(requests_t).where(requests_t.c.tenant_id == _b("tenant_id"),
                                                     requests_t.c.unique_id == _b("unique_id"))
# A request with its deliveries in one statement (the view an agent or operator reads).
_DELIVERY_COLUMNS = ("channel", "target", "status", "attempts", "last_error", "updated_at")
_WITH_DELIVERIES = requests_t.outerjoin(deliveries_t, and_(deliveries_t.c.request_id == requests_t.c.id,
                                                           deliveries_t.c.tenant_id == requests_t.c.tenant_id))
_JOINED = select(requests_t, *[deliveries_t.c[n].label(f"delivery_{n}") for n in _DELIVERY_COLUMNS],
                 deliveries_t.c.id.label("delivery_id")).select_from(_WITH_DELIVERIES)
GET_REQUEST_JOINED = _JOINED.where(requests_t.c.id == _b("id"), requests_t.c.tenant_id == _b("tenant_id")
                                    ).order_by(deliveries_t.c.id)
GET_REQUEST_BY_UNIQUE_ID_JOINED = _JOINED.where(
    requests_t.c.tenant_id == _b("tenant_id"), requests_t.c.unique_id == _b("unique_id")).order_by(deliveries_t.c.id)
RESOLVE_UNEXPIRED = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
    requests_t.c.expires_at > _b("w_now"))
RESOLVE_EXPIRED = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
    requests_t.c.expires_at <= _b("w_now"))
_RETURNING = tuple(requests_t.c)
CANCEL_REQUEST = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
).values(status="cancelled", resolved_at=_b("w_now"), resolved_by=_b("w_principal"), resolved_via="api")
INSERT_API_KEY = insert(api_keys_t)
REVOKE_API_KEY = (update(api_keys_t).where(api_keys_t.c.id == _b("w_id"), api_keys_t.c.revoked_at.is_(None))
                   .values(revoked_at=_b("w_now")))

INSERT_ANNOTATION = insert(annotations_t)
GET_ANNOTATION = select(annotations_t).where(annotations_t.c.tenant_id == _b("tenant_id"),
                                              annotations_t.c.annotation_id == _b("annotation_id"))

NOTIFY = text("SELECT pg_notify(:ch, :p)")
# The compare-and-set updates that hand back the row they changed (one statement: no re-read).
RESOLVE = {True: RESOLVE_UNEXPIRED.returning(*_RETURNING), False: RESOLVE_EXPIRED.returning(*_RETURNING)}
CANCEL_RETURNING = CANCEL_REQUEST.returning(*_RETURNING)
SELECT_1 = text("SELECT 1")


class _Inserts:
    """``INSERT … ON CONFLICT DO NOTHING`` per dialect: a duplicate is a rowcount of 0, no savepoint needed."""

    def __init__(self, dialect: str) -> None:
        make = pg_insert if dialect == "postgresql" else sqlite_insert
        self.request = make(requests_t).on_conflict_do_nothing()


INSERTS = {"sqlite": _Inserts("sqlite"), "postgresql": _Inserts("postgresql")}


def list_requests_statement(tenant_id: str, *, status: str | None, run_id: str | None, limit: int,
                            after: tuple[float, str] | None = None) -> Any:
    """Oldest first, in (created_at, id) order, from ``after`` on (a keyset page: no OFFSET). Served by
    an index whichever filter is given (migration 0009): (tenant, created), (tenant, status, created) or
    (tenant, run, created); a page costs the same at a million rows, first or deep. Ids break ties of
    equal times, so the order is total and a page boundary never skips or repeats a row."""
    stmt = tenant_requests(tenant_id, statuses=None if status is None else (status,), run_id=run_id)
    if after is not None:
        created_at, request_id = after
        # The >= bound is what the index range starts from; the OR then drops the rows up to the cursor.
        stmt = stmt.where(requests_t.c.created_at >= created_at,
                          or_(requests_t.c.created_at > created_at, requests_t.c.id > request_id))
    return stmt.order_by(requests_t.c.created_at, requests_t.c.id).limit(limit)


def overdue_statement(now: float, *, limit: int) -> Any:
    """The sweeper's pending requests past their deadline (index (status, expires_at))."""
    return (select(requests_t.c.id, requests_t.c.tenant_id, requests_t.c.on_timeout_json)
            .where(and_(requests_t.c.status == "pending", requests_t.c.expires_at <= now))
            .order_by(requests_t.c.expires_at).limit(limit))


def row_and_deliveries(c: Connection, stmt: Any, params: Mapping[str, Any]) -> RequestWithDeliveries | None:
    request: dict[str, Any] | None = None
    deliveries: list[dict[str, Any]] = []
    for r in c.execute(stmt, params).mappings():
        if request is None:
            request = {k: v for k, v in r.items() if not k.startswith("delivery_")}
        if r["delivery_id"] is not None:
            deliveries.append({n: r[f"delivery_{n}"] for n in _DELIVERY_COLUMNS})
    return None if request is None else (request, deliveries)


@dataclass(frozen=True)
class Resolution:
    """What one compare-and-set that won leaves: the row as updated, its deliveries, its journal entry."""

    row: dict[str, Any]
    deliveries: list[dict[str, Any]]
    entry: JournalEntry


RequestWithDeliveries = tuple[dict[str, Any], list[dict[str, Any]]]

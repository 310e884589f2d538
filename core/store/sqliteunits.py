"""SQLite's hot units of work (create, resolve or cancel, a request with its deliveries) as SQL text on the
raw sqlite3 connection of the database thread, not through SQLAlchemy's execution and result machinery.

They run on the database thread only (core/store/sqlite.py): a write unit inside the write transaction
that thread opened (BEGIN IMMEDIATE), a read on the autocommit reader. The journal's entry is chained by
``SqliteChain`` (core/store/journal.py) in the same transaction. Rows come back as plain dicts of the
same values SQLAlchemy's would hold (its Boolean columns as bool).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from handraise.core.models import DeliveryRow, RequestRow
from handraise.core.store.journal import JournalEntry, SqliteChain, entry_row
from handraise.core.store.sealed import Pair, attach_raw, carrying, insert_raw
from handraise.core.store.statements import RequestWithDeliveries, Resolution

_requests = RequestRow.__table__
# What an insert leaves to a column the row does not name (SQLAlchemy's scalar defaults, as its INSERT would).
_REQUEST_DEFAULTS = {c.name: c.default.arg for c in _requests.c if c.default is not None and not callable(c.default.arg)}
# SQLite stores these as 0/1; SQLAlchemy hands them over as bool.
_BOOLEANS = tuple(c.name for c in _requests.c if c.type.python_type is bool)
_DELIVERY_COLUMNS = tuple(c.name for c in DeliveryRow.__table__.c)
# The deliveries as a request's view shows them (statements.row_and_deliveries: the same keys).
_SHOWN = ("channel", "target", "status", "attempts", "last_error", "updated_at")

_ENSURE_RUN = ("INSERT INTO runs (tenant_id, run_id, status, registered, created_by, created_at, updated_at) "
               "VALUES (?, ?, 'running', 0, ?, ?, ?) ON CONFLICT (tenant_id, run_id) DO NOTHING")
_DELIVERIES = "SELECT * FROM deliveries WHERE tenant_id = ? AND request_id = ? ORDER BY id"
_JOINED = ("SELECT r.*, d.id, " + ", ".join(f"d.{c}" for c in _SHOWN) + " FROM requests r "
           "LEFT JOIN deliveries d ON d.request_id = r.id AND d.tenant_id = r.tenant_id WHERE ")
_BY = {"id": _JOINED + "r.id = ? AND r.tenant_id = ? ORDER BY d.id",
       "unique_id": _JOINED + "r.unique_id = ? AND r.tenant_id = ? ORDER BY d.id"}
_GET = {"id": "SELECT * FROM requests WHERE id = ? AND tenant_id = ?",
        "unique_id": "SELECT * FROM requests WHERE unique_id = ? AND tenant_id = ?"}
_first = itemgetter(0)
_CONDITIONS = {True: " AND expires_at > ?", False: " AND expires_at <= ?", None: ""}


def _request(names: list[str], values: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(names, values))
    for name in _BOOLEANS:
        value = row.get(name)
        if value is not None:
            row[name] = bool(value)
    return row


def _names(cursor: sqlite3.Cursor) -> list[str]:
    return list(map(_first, cursor.description))


class SqliteHotUnits:
    """The units, each a function of the raw connection; SQL text built once per shape of call."""

    def __init__(self, chain: SqliteChain) -> None:
        self._chain = chain
        self._inserts: dict[tuple[str, ...], str] = {}
        self._changes: dict[tuple[tuple[str, ...], bool | None], str] = {}

    # -- writes (inside the transaction open on ``raw``) -----------------------

    def create(self, raw: sqlite3.Connection, row: Mapping[str, Any], entry: Mapping[str, Any]) -> JournalEntry | None:
        """Insert the request, its run (made by use) and its ``created`` entry; None when (tenant, unique_id)
        exists already (nothing written)."""
        values = {**_REQUEST_DEFAULTS, **row}
        columns = tuple(values)
        sql = self._inserts.get(columns)
        if sql is None:
            sql = self._inserts[columns] = (
                f"INSERT INTO requests ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
                "ON CONFLICT DO NOTHING")
        for name in _BOOLEANS:  # as the integers SQLite stores (as SQLAlchemy binds them): no adapter looked for
            value = values.get(name)
            if value.__class__ is bool:
                values[name] = int(value)
        if raw.execute(sql, tuple(values.values())).rowcount != 1:
            return None
        if values.get("run_id") is not None:
            # A run named by use is made with its first request (tenant-scoped, unregistered), as runs.ensure_in.
            raw.execute(_ENSURE_RUN, (values["tenant_id"], values["run_id"], values["created_by"],
                                      values["created_at"], values["created_at"]))
        return self._chain.append(raw, entry)

    def change(self, raw: sqlite3.Connection, sets: Mapping[str, Any], where: Mapping[str, Any],
               require_unexpired: bool | None, journal: Mapping[str, Any], with_deliveries: bool,
               sealed: Pair | None = None) -> Resolution | None:
        """Compare-and-set a pending request (``where``: w_id, w_tenant_id, w_now) to ``sets`` and journal it
        under the row's run; None when another writer won (or the deadline's condition does not hold).
        ``sealed``: a sensitive answer's sealed parts, held in their own table (core/store/sealed.py)."""
        columns = tuple(sets)
        sql = self._changes.get((columns, require_unexpired))
        if sql is None:
            sql = self._changes[(columns, require_unexpired)] = (
                f"UPDATE requests SET {', '.join(f'{c} = ?' for c in columns)} WHERE id = ? AND tenant_id = ? "
                f"AND status = 'pending'{_CONDITIONS[require_unexpired]} RETURNING *")
        params = (*sets.values(), where["w_id"], where["w_tenant_id"])
        if require_unexpired is not None:
            params += (where["w_now"],)
        cursor = raw.execute(sql, params)
        changed = cursor.fetchall()
        if not changed:
            return None
        row = carrying(_request(_names(cursor), changed[0]), sealed)
        if sealed is not None:
            insert_raw(raw, row, sealed)
        deliveries: list[dict[str, Any]] = []
        if with_deliveries:
            cursor = raw.execute(_DELIVERIES, (row["tenant_id"], row["id"]))
            names = _names(cursor)
            deliveries = [dict(zip(names, d)) for d in cursor.fetchall()]
        entry = self._chain.append(raw, entry_row(**journal, run_id=row["run_id"]))
        return Resolution(row, deliveries, entry)

    # -- reads -----------------------------------------------------------------

    @staticmethod
    def request_with_deliveries(raw: sqlite3.Connection, tenant_id: str, request_id: str | None,
                                unique_id: str | None) -> RequestWithDeliveries | None:
        """The row and its delivery rows (channel, target, status, attempts, last_error, updated_at), in one
        statement, by id or by the agent's unique_id."""
        by, key = ("id", request_id) if request_id is not None else ("unique_id", unique_id)
        cursor = raw.execute(_BY[by], (key, tenant_id))
        rows = cursor.fetchall()
        if not rows:
            return None
        width = len(rows[0]) - len(_SHOWN) - 1  # the request's columns, then the delivery's id and the rest
        request = attach_raw(raw, _request(_names(cursor)[:width], rows[0][:width]))
        deliveries = [dict(zip(_SHOWN, r[width + 1:])) for r in rows if r[width] is not None]
        return request, deliveries

    @staticmethod
    def request(raw: sqlite3.Connection, tenant_id: str, request_id: str | None,
                unique_id: str | None) -> dict[str, Any] | None:
        by, key = ("id", request_id) if request_id is not None else ("unique_id", unique_id)
        cursor = raw.execute(_GET[by], (key, tenant_id))
        found = cursor.fetchall()  # to the end: a statement left unfinished holds its read transaction open
        return attach_raw(raw, _request(_names(cursor), found[0])) if found else None

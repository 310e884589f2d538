"""Held sensitive answers (``sealed_answers``): where a sealed answer and its wrapped key live from the answer
to their shredding, and what makes shredding leave nothing of them in the database's files.

A row is inserted once, with the answer and in its unit of work, and deleted once, by the purge; a request
row never holds either part. The request rows the store hands out carry them as ``response_sealed`` and
``response_key`` (None unless held), read here only for a sensitive answer not yet shredded, so no other
read touches this table. A deleted row leaves its bytes behind until something overwrites them:

- SQLite, with ``secure_delete``, zeroes them in the page at once; what the WAL still holds goes when it is
  checkpointed and truncated (at once after a purge, again by the sweeper until a checkpoint was not kept
  from truncating it by a reader of another process).
- PostgreSQL keeps the deleted row version in the table's file (and its TOAST table's) until VACUUM reuses
  the space, which it need not ever do. So after deletions the sweeper rewrites the table (``REWRITE``):
  the live rows into a new file, the old one truncated at commit. Not ``VACUUM FULL`` or ``CLUSTER``: they
  copy every row version some open transaction of the database might still see (a pg_dump, a session idle
  in a transaction), without a word; measured, with one such snapshot open every deleted key and sealed
  answer was still in the new file. TRUNCATE drops the old file whatever any snapshot, and the live rows go
  back in the same statement, so nobody sees the table without them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, text, union, update
from sqlalchemy.engine import Connection

from handraise.core.models import HELD_ANSWER, RequestRow, SealedAnswerRow
from handraise.core.store.units import StoreConnection, all_rows, first, rowcount

log = logging.getLogger(__name__)

requests_t = RequestRow.__table__
sealed_t = SealedAnswerRow.__table__

Pair = tuple[str, str]
"""(sealed answer, wrapped key), as core/sealing.py makes them."""

# The longest the rewrite waits for its lock. Waiting, it queues every later statement on the table (the
# answering and collecting of sensitive answers, never anything else) behind it, so it gives up early and
# the sweeper's next tick tries again.
LOCK_TIMEOUT_MS = 50

# One statement, one round trip with the lock held, in the implicit transaction of its statement (LOCK
# needs one; a DO block's is that). Measured on the project's shared 2-core test machine under load: the
# statement and its commit hold the lock 20-60 ms with 100 to 1,000 answers held (VACUUM FULL beside it:
# 30-40 ms; a one-row insert's commit: 3-12 ms), nearly all of it making the new files and flushing the WAL.
REWRITE = f"""DO $$
DECLARE live sealed_answers[];
BEGIN
  PERFORM set_config('lock_timeout', '{LOCK_TIMEOUT_MS}ms', true);
  LOCK TABLE sealed_answers IN ACCESS EXCLUSIVE MODE;
  SELECT coalesce(array_agg(s), '{{}}') INTO live FROM sealed_answers s;
  TRUNCATE sealed_answers;
  INSERT INTO sealed_answers SELECT * FROM unnest(live);
END $$"""

_b = bindparam
_INSERT = insert(sealed_t)
_GET = select(sealed_t.c.sealed, sealed_t.c.wrapped_key).where(
    sealed_t.c.request_id == _b("request_id"), sealed_t.c.tenant_id == _b("tenant_id"))
_DELETE = delete(sealed_t).where(sealed_t.c.request_id == _b("request_id"), sealed_t.c.tenant_id == _b("tenant_id"))
_HELD = text(HELD_ANSWER)
_MARK_PURGED = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), _HELD,
).values(response_json=None, response_purged=True)
_MARK_DELIVERED = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), _HELD,
    requests_t.c.response_delivered_at.is_(None),
).values(response_delivered_at=_b("w_now"))
# Two range scans of partial indexes that hold only the requests whose answer is held (migration 0019): the
# sweeper reads the answers that are due, not every one within its time, and never the held answers' table.
HELD_DUE = union(
    select(requests_t.c.id, requests_t.c.tenant_id).where(_HELD, requests_t.c.resolved_at < _b("resolved_before")),
    select(requests_t.c.id, requests_t.c.tenant_id).where(
        _HELD, requests_t.c.response_delivered_at < _b("delivered_before")),
).limit(_b("limit"))

# The same on SQLite's raw connection (core/store/sqliteunits.py).
_RAW_GET = "SELECT sealed, wrapped_key FROM sealed_answers WHERE request_id = ? AND tenant_id = ?"
_RAW_INSERT = "INSERT INTO sealed_answers (request_id, tenant_id, sealed, wrapped_key) VALUES (?, ?, ?, ?)"


def split(values: Mapping[str, Any]) -> tuple[dict[str, Any], Pair | None]:
    """A resolution's columns, and apart from them the sealed answer they may carry (for its own table)."""
    rest = dict(values)
    sealed, key = rest.pop("response_sealed", None), rest.pop("response_key", None)
    return rest, None if sealed is None or key is None else (sealed, key)


def carrying(row: dict[str, Any], pair: Pair | None) -> dict[str, Any]:
    """``row`` with the sealed answer it holds (None, None when it holds none), as request rows carry it."""
    row["response_sealed"], row["response_key"] = pair if pair is not None else (None, None)
    return row


def held(row: Mapping[str, Any]) -> bool:
    """Whether a request row's answer may be in ``sealed_answers``: sensitive, answered (it has a digest), not
    shredded (HELD_ANSWER)."""
    return bool(row["sensitive"]) and row["response_digest"] is not None and not row["response_purged"]


def attach(c: Connection, row: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request row with its sealed answer, on a SQLAlchemy connection (None stays None)."""
    if row is None:
        return None
    found = c.execute(_GET, {"request_id": row["id"], "tenant_id": row["tenant_id"]}).first() if held(row) else None
    return carrying(row, None if found is None else (found[0], found[1]))


def first_request(c: Connection, stmt: Any, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """``first`` for a request: the row with its sealed answer."""
    return attach(c, first(c, stmt, params))


def attach_raw(raw: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The same on SQLite's raw connection."""
    found = raw.execute(_RAW_GET, (row["id"], row["tenant_id"])).fetchall() if held(row) else None
    return carrying(row, (found[0][0], found[0][1]) if found else None)


def insert_in(c: Connection, row: Mapping[str, Any], pair: Pair) -> None:
    """Hold ``pair`` for the request ``row`` just answered (SQLAlchemy connection, in the answer's unit)."""
    c.execute(_INSERT, {"request_id": row["id"], "tenant_id": row["tenant_id"], "sealed": pair[0],
                        "wrapped_key": pair[1]})


def insert_raw(raw: Any, row: Mapping[str, Any], pair: Pair) -> None:
    raw.execute(_RAW_INSERT, (row["id"], row["tenant_id"], *pair))


def _purge_unit(c: Connection, request_id: str, tenant_id: str) -> bool:
    # The request's row first, as the answer's unit takes them (its row, then the held answer's): one order of
    # locks, and its compare-and-set decides which of two purges at once journals the deletion.
    if c.execute(_MARK_PURGED, {"w_id": request_id, "w_tenant_id": tenant_id}).rowcount != 1:
        return False
    c.execute(_DELETE, {"request_id": request_id, "tenant_id": tenant_id})
    return True


class SealedRecords:
    """Held answers' hand-over and shredding. ``clean()`` leaves nothing of the deleted ones in the files:
    SQLite's checkpoint that truncates the WAL, PostgreSQL's ``REWRITE``; True when it did."""

    def __init__(self, *, read: Callable[..., Awaitable[Any]], write: Callable[..., Awaitable[Any]],
                 clean: Callable[[], Awaitable[bool]]) -> None:
        self._read = read
        self._write = write
        self._clean = clean
        # Whether the files may hold what a deletion left: at the start, whatever an instance that stopped
        # before it cleaned (or one that still runs) left; then after each deletion or answer undone here.
        self.dirty = True

    async def due(self, *, resolved_before: float, delivered_before: float, limit: int = 500) -> list[tuple[str, str]]:
        """Answers still held past their retention (never collected) or their grace (handed out)."""
        params = {"resolved_before": resolved_before, "delivered_before": delivered_before, "limit": limit}
        return [(r["id"], r["tenant_id"]) for r in await self._read(all_rows, HELD_DUE, params)]

    async def mark_delivered(self, *, request_id: str, tenant_id: str, now: float) -> bool:
        """True for the first hand-over of a held answer (its grace starts now)."""
        params = {"w_id": request_id, "w_tenant_id": tenant_id, "w_now": now}
        return await self._write(rowcount, _MARK_DELIVERED, params) == 1

    async def purge(self, conn: StoreConnection, *, request_id: str, tenant_id: str) -> bool:
        """Delete a held answer and its wrapped key in the caller's transaction (which journals it), and mark
        the request's answer deleted; False when there was none (deleted already)."""
        purged = await conn.run(_purge_unit, request_id, tenant_id)
        self.dirty = self.dirty or purged
        return purged

    async def shred(self) -> bool:
        """Clean the files if a deletion since the last time may have left anything; True when nothing is
        left to clean. A lock not had in time or a store out of reach leaves it for the next call."""
        if not self.dirty:
            return True
        self.dirty = False  # a deletion from here on sets it again, whether or not this cleaning saw it
        try:
            done = await self._clean()
        except Exception as e:  # noqa: BLE001 (the sweeper calls again; nothing is lost by waiting)
            log.warning("store: deleted sensitive answers not yet cleaned from the files: %s", type(e).__name__)
            done = False
        self.dirty = self.dirty or not done
        return done

"""The journal: an append-only audit trail whose entries are hash-chained, appended in the writer's
transaction, and verified end to end (a separate head record catches entries cut off the end)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, select, text
from sqlalchemy.engine import Connection

from handraise.core.canonical import canonical_json
from handraise.core.models import JournalRow
from handraise.core.store.state import GET_STATE, put_state
from handraise.core.store.units import StoreConnection, all_rows, scalar

journal_t = JournalRow.__table__

GENESIS_HASH = "0" * 64
# Serialises journal appends across instances sharing one PostgreSQL database.
_JOURNAL_LOCK_ID = 0x48524A4E  # "HRJN"
_JOURNAL_LOCK = text("SELECT pg_advisory_xact_lock(:k)")
_JOURNAL_HEAD = select(journal_t.c.seq, journal_t.c.hash).order_by(journal_t.c.seq.desc()).limit(1)
_JOURNAL_INSERT = insert(journal_t)

Read = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    tenant_id: str
    request_id: str | None
    run_id: str | None
    event: str
    principal: str | None
    channel: str | None
    data: dict[str, Any]
    at: float
    prev_hash: str
    hash: str


def entry_hash(*, prev_hash: str, seq: int, tenant_id: str, request_id: str | None, run_id: str | None,
               event: str, principal: str | None, channel: str | None, data_json: str, at: float) -> str:
    body = canonical_json({
        "seq": seq, "tenant_id": tenant_id, "request_id": request_id, "run_id": run_id, "event": event,
        "principal": principal, "channel": channel, "data": data_json, "at": repr(at),
    })
    return hashlib.sha256((prev_hash + body).encode()).hexdigest()


def _append(c: Connection, is_postgres: bool, row: dict[str, Any]) -> tuple[int, str, str]:
    if is_postgres:
        c.execute(_JOURNAL_LOCK, {"k": _JOURNAL_LOCK_ID})
    last = c.execute(_JOURNAL_HEAD).first()
    seq = 1 if last is None else last.seq + 1
    prev_hash = GENESIS_HASH if last is None else last.hash
    digest = entry_hash(prev_hash=prev_hash, seq=seq, **row)
    c.execute(_JOURNAL_INSERT, {**row, "seq": seq, "prev_hash": prev_hash, "hash": digest})
    # The head is kept apart so that cutting entries off the end is detected too.
    put_state(c, "journal", "head", json.dumps({"seq": seq, "hash": digest}), row["at"])
    return seq, prev_hash, digest


def _entry(r: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(r["seq"], r["tenant_id"], r["request_id"], r["run_id"], r["event"], r["principal"],
                        r["channel"], json.loads(r["data_json"]), r["at"], r["prev_hash"], r["hash"])


class Journal:
    """Appends run in the caller's transaction; reads through the store's reader (``read(fn, *args)``)."""

    def __init__(self, *, read: Read, is_postgres: bool) -> None:
        self._read = read
        self._is_postgres = is_postgres

    async def append(self, conn: StoreConnection, *, tenant_id: str, event: str, request_id: str | None = None,
                     run_id: str | None = None, principal: str | None = None, channel: str | None = None,
                     data: Mapping[str, Any] | None = None, at: float | None = None) -> JournalEntry:
        at = time.time() if at is None else at
        plain = dict(data or {})
        row = {"tenant_id": tenant_id, "request_id": request_id, "run_id": run_id, "event": event,
               "principal": principal, "channel": channel, "data_json": canonical_json(plain), "at": at}
        seq, prev_hash, digest = await conn.run(_append, self._is_postgres, row)
        return JournalEntry(seq, tenant_id, request_id, run_id, event, principal, channel, plain, at,
                            prev_hash, digest)

    async def entries(self, *, tenant_id: str | None = None, request_id: str | None = None,
                      request_ids: list[str] | None = None, after_seq: int = 0,
                      limit: int = 1000) -> list[JournalEntry]:
        stmt = select(journal_t).where(journal_t.c.seq > after_seq)
        if tenant_id is not None:
            stmt = stmt.where(journal_t.c.tenant_id == tenant_id)
        if request_id is not None:
            stmt = stmt.where(journal_t.c.request_id == request_id)
        if request_ids is not None:
            stmt = stmt.where(journal_t.c.request_id.in_(request_ids))
        stmt = stmt.order_by(journal_t.c.seq).limit(limit)
        return [_entry(r) for r in await self._read(all_rows, stmt)]

    async def for_run(self, *, tenant_id: str, run_id: str, limit: int = 10000) -> list[JournalEntry]:
        stmt = (select(journal_t).where(and_(journal_t.c.tenant_id == tenant_id, journal_t.c.run_id == run_id))
                .order_by(journal_t.c.seq).limit(limit))
        return [_entry(r) for r in await self._read(all_rows, stmt)]

    async def verify(self) -> list[str]:
        """Every break in the chain, as sentences; [] when it is whole."""
        problems: list[str] = []
        prev_hash, expected_seq, after = GENESIS_HASH, 1, 0
        while True:
            stmt = select(journal_t).where(journal_t.c.seq > after).order_by(journal_t.c.seq).limit(5000)
            rows = await self._read(all_rows, stmt)
            if not rows:
                break
            for r in rows:
                if r["seq"] != expected_seq:
                    problems.append(f"entry {expected_seq} is missing (next is {r['seq']})")
                if r["prev_hash"] != prev_hash:
                    problems.append(f"entry {r['seq']}: does not follow the entry before it")
                digest = entry_hash(prev_hash=r["prev_hash"], seq=r["seq"], tenant_id=r["tenant_id"],
                                    request_id=r["request_id"], run_id=r["run_id"], event=r["event"],
                                    principal=r["principal"], channel=r["channel"], data_json=r["data_json"],
                                    at=r["at"])
                if digest != r["hash"]:
                    problems.append(f"entry {r['seq']}: altered (hash mismatch)")
                prev_hash, expected_seq, after = r["hash"], r["seq"] + 1, r["seq"]
        head_raw = await self._read(scalar, GET_STATE, {"namespace": "journal", "key": "head"})
        if head_raw is not None:
            head = json.loads(head_raw)
            if head["seq"] != expected_seq - 1 or head["hash"] != prev_hash:
                problems.append(f"the journal ends at entry {expected_seq - 1} but its head says {head['seq']}: "
                                "entries were removed from the end")
        elif expected_seq > 1:
            problems.append("the journal head record is missing")
        return problems

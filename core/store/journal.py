"""The journal: an append-only audit trail, one chain per tenant, each entry's hash an HMAC (under a
key derived from the server secret) of the entry and the hash before it.

Tenants are the isolation boundary, so each has its own chain and its own head row: an append locks
only its tenant's head (``SELECT … FOR UPDATE``), held from the journal statement to COMMIT, and
tenants never wait for each other. On SQLite (one writer at a time: BEGIN IMMEDIATE) an append moves
the head this process remembers with a compare-and-set, and reads it only on a miss (``SqliteChain``). Without the server secret nobody can recompute a chain; cutting
entries off the end and rewriting the head to match is caught against an anchor kept off-site
(``handraise journal anchor``) and against the requests table, which ``verify`` cross-checks.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from handraise.core.canonical import canonical_json
from handraise.core.models import JournalHeadRow, JournalRow
from handraise.core.sealing import Sealer
from handraise.core.store import crosscheck
from handraise.core.store.units import StoreConnection, all_rows, first

journal_t = JournalRow.__table__
heads_t = JournalHeadRow.__table__
requests_t = crosscheck.requests_t

GENESIS_HASH = "0" * 64
_SAFE_INT = 2**53 - 1
_TEXT_OR_NULL = frozenset({str, type(None)})
# Data keys never exported (the run bundle, the API's journal views): the answer's keyed digest.
PRIVATE_DATA_KEYS = frozenset({"response_digest"})

_HEAD = select(heads_t.c.seq, heads_t.c.hash).where(heads_t.c.tenant_id == bindparam("tenant_id")).with_for_update()
_HEADS = select(heads_t.c.tenant_id, heads_t.c.seq, heads_t.c.hash).order_by(heads_t.c.tenant_id)
_NEW_HEAD = pg_insert(heads_t).on_conflict_do_nothing()
# PostgreSQL: the entry and its head in one round trip, so the head's row lock is held for less.
_INSERT_ENTRY = (
    "WITH entry AS (INSERT INTO journal (tenant_id, seq, request_id, run_id, event, principal, channel, "
    "data_json, at, prev_hash, hash) VALUES (:tenant_id, :seq, :request_id, :run_id, :event, :principal, "
    ":channel, :data_json, :at, :prev_hash, :hash)) ")
_INSERT_AND_MOVE_HEAD = text(
    _INSERT_ENTRY + "UPDATE journal_heads SET seq = :seq, hash = :hash WHERE tenant_id = :tenant_id")
# The same with the transaction's NOTIFY folded in: one round trip fewer with the head locked.
_INSERT_MOVE_HEAD_AND_NOTIFY = text(
    _INSERT_ENTRY + ", head AS (UPDATE journal_heads SET seq = :seq, hash = :hash WHERE tenant_id = :tenant_id) "
    "SELECT pg_notify(:notify_channel, :notify_payload)")

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

    def public_data(self) -> dict[str, Any]:
        """``data`` without what is never exported."""
        return {k: v for k, v in self.data.items() if k not in PRIVATE_DATA_KEYS}


def chain_hash(key: bytes, *, prev_hash: str, seq: int, tenant_id: str, request_id: str | None,
               run_id: str | None, event: str, principal: str | None, channel: str | None, data_json: str,
               at: float) -> str:
    fields = {"seq": seq, "tenant_id": tenant_id, "request_id": request_id, "run_id": run_id, "event": event,
              "principal": principal, "channel": channel, "data": data_json, "at": repr(at)}
    message = None
    if type(seq) is int and 0 <= seq <= _SAFE_INT and _TEXT_OR_NULL.issuperset(
            map(type, (tenant_id, request_id, run_id, event, principal, channel, data_json))):
        # The C encoder spells text, null and a safe integer exactly as RFC 8785 does (every code point
        # checked against rfc8785), text that is not ASCII included; a lone surrogate fails the encode.
        with contextlib.suppress(UnicodeEncodeError):
            message = (prev_hash + json.dumps(fields, sort_keys=True, separators=(",", ":"),
                                              ensure_ascii=False)).encode()
    if message is None:
        message = (prev_hash + canonical_json(fields)).encode()
    return hmac.digest(key, message, "sha256").hex()  # one C call (hmac.new builds an HMAC object)


def entry_row(*, tenant_id: str, event: str, request_id: str | None = None, run_id: str | None = None,
              principal: str | None = None, channel: str | None = None, data: Mapping[str, Any] | None = None,
              at: float | None = None) -> dict[str, Any]:
    """A journal entry's columns before it has its place in the chain (seq and hashes)."""
    return {"tenant_id": tenant_id, "request_id": request_id, "run_id": run_id, "event": event,
            "principal": principal, "channel": channel, "data_json": canonical_json(dict(data or {})),
            "at": time.time() if at is None else at}


def _append(c: Connection, key: bytes, dialect: str, row: dict[str, Any],
            notify: tuple[str, Mapping[str, Any]] | None = None) -> JournalEntry:
    """Chain ``row`` after the tenant's head on PostgreSQL (SQLite: ``SqliteChain``). ``notify``:
    (channel, payload) for a NOTIFY sent in the same statement, the entry's seq added to the payload."""
    assert dialect == "postgresql", dialect
    tenant = {"tenant_id": row["tenant_id"]}
    head = c.execute(_HEAD, tenant).first()
    if head is None:  # the tenant's first entry; ON CONFLICT: another writer may be making the head too
        c.execute(_NEW_HEAD, {**tenant, "seq": 0, "hash": GENESIS_HASH})
        head = c.execute(_HEAD, tenant).first()
    seq, prev_hash = head.seq + 1, head.hash
    digest = chain_hash(key, prev_hash=prev_hash, seq=seq, **row)
    entry = {**row, "seq": seq, "prev_hash": prev_hash, "hash": digest}
    if notify is None:
        c.execute(_INSERT_AND_MOVE_HEAD, entry)
    else:
        channel, payload = notify
        c.execute(_INSERT_MOVE_HEAD_AND_NOTIFY, {**entry, "notify_channel": channel,
                                                 "notify_payload": json.dumps({**payload, "seq": seq})})
    return _entry(row, seq, prev_hash, digest)


def _entry(row: Mapping[str, Any], seq: int, prev_hash: str, digest: str) -> JournalEntry:
    return JournalEntry(seq, row["tenant_id"], row["request_id"], row["run_id"], row["event"], row["principal"],
                        row["channel"], json.loads(row["data_json"]), row["at"], prev_hash, digest)


_SQLITE_HEAD = "SELECT seq, hash FROM journal_heads WHERE tenant_id = ?"
_SQLITE_NEW_HEAD = "INSERT INTO journal_heads (tenant_id, seq, hash) VALUES (?, 0, ?) ON CONFLICT DO NOTHING"
_SQLITE_MOVE_HEAD = "UPDATE journal_heads SET seq = ?, hash = ? WHERE tenant_id = ? AND seq = ? AND hash = ?"
_SQLITE_INSERT = ("INSERT INTO journal (tenant_id, seq, request_id, run_id, event, principal, channel, data_json, at, "
                  "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


class SqliteChain:
    """Appends on SQLite's raw connection, inside a write transaction (BEGIN IMMEDIATE: the file's one
    writer lock, across processes), used on the database thread only.

    Each tenant's head is remembered as this process last moved or read it, and moved with a
    compare-and-set on (seq, hash): two statements an append (the head, the entry) instead of three.
    A miss (another process such as the ``handraise`` CLI appended, or a transaction that moved it
    rolled back) reads the head, which under the write lock nobody else can move, and moves it from
    there. So a stale memory costs one statement more, never a broken chain.
    """

    def __init__(self, key: Callable[[], bytes]) -> None:
        self._key = key
        self._heads: dict[str, tuple[int, str]] = {}

    def forget(self) -> None:
        """After a rollback: what was remembered may not have been committed."""
        self._heads.clear()

    def append(self, raw: sqlite3.Connection, row: Mapping[str, Any]) -> JournalEntry:
        """Chain ``row`` (``entry_row``) after its tenant's head, in the transaction open on ``raw``."""
        tenant_id = row["tenant_id"]
        key = self._key()
        head = self._heads.get(tenant_id)
        moved = False
        if head is not None:
            seq, prev_hash = head[0] + 1, head[1]
            digest = chain_hash(key, prev_hash=prev_hash, seq=seq, **row)
            moved = raw.execute(_SQLITE_MOVE_HEAD, (seq, digest, tenant_id, *head)).rowcount == 1
        if not moved:
            found = raw.execute(_SQLITE_HEAD, (tenant_id,)).fetchone()
            if found is None:  # the tenant's first entry
                raw.execute(_SQLITE_NEW_HEAD, (tenant_id, GENESIS_HASH))
                found = (0, GENESIS_HASH)
            seq, prev_hash = found[0] + 1, found[1]
            digest = chain_hash(key, prev_hash=prev_hash, seq=seq, **row)
            if raw.execute(_SQLITE_MOVE_HEAD, (seq, digest, tenant_id, *found)).rowcount != 1:
                raise RuntimeError("the journal head moved inside a write transaction")
        raw.execute(_SQLITE_INSERT, (tenant_id, seq, row["request_id"], row["run_id"], row["event"],
                                     row["principal"], row["channel"], row["data_json"], row["at"], prev_hash, digest))
        self._heads[tenant_id] = (seq, digest)
        return _entry(row, seq, prev_hash, digest)


def entry_from_row(r: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(r["seq"], r["tenant_id"], r["request_id"], r["run_id"], r["event"], r["principal"],
                        r["channel"], json.loads(r["data_json"]), r["at"], r["prev_hash"], r["hash"])


class Journal:
    """Appends run in the caller's transaction; reads go through the store's reader (``read(fn, *args)``)."""

    def __init__(self, *, read: Read, dialect: str, key: bytes | None) -> None:
        self._read = read
        self._dialect = dialect
        self._key = key
        # SQLite: the heads this process moved, on the database thread (core/store/sqlite.py).
        self.sqlite = SqliteChain(self.chain_key) if dialect == "sqlite" else None

    def chain_key(self) -> bytes:
        if self._key is None:
            raise RuntimeError("the store was opened without the server secret: the journal cannot be written")
        return self._key

    def append_in(self, c: Connection, row: dict[str, Any],
                  notify: tuple[str, Mapping[str, Any]] | None = None) -> JournalEntry:
        """Append ``row`` (``entry_row``) inside a unit of work already running on ``c``."""
        if self.sqlite is not None:
            return self.sqlite.append(c.connection.driver_connection, row)
        return _append(c, self.chain_key(), self._dialect, row, notify)

    async def append(self, conn: StoreConnection, *, tenant_id: str, event: str, request_id: str | None = None,
                     run_id: str | None = None, principal: str | None = None, channel: str | None = None,
                     data: Mapping[str, Any] | None = None, at: float | None = None) -> JournalEntry:
        """Append to the tenant's chain; make it the transaction's last statement before COMMIT (the
        tenant's head stays locked from here to the end of the transaction)."""
        row = entry_row(tenant_id=tenant_id, event=event, request_id=request_id, run_id=run_id,
                        principal=principal, channel=channel, data=data, at=at)
        return await conn.run(self.append_in, row)

    async def entries(self, *, tenant_id: str, request_id: str | None = None, after_seq: int = 0,
                      limit: int = 1000) -> list[JournalEntry]:
        stmt = select(journal_t).where(journal_t.c.tenant_id == tenant_id, journal_t.c.seq > after_seq)
        if request_id is not None:
            stmt = stmt.where(journal_t.c.request_id == request_id)
        stmt = stmt.order_by(journal_t.c.seq).limit(limit)
        return [entry_from_row(r) for r in await self._read(all_rows, stmt)]

    async def for_run(self, *, tenant_id: str, run_id: str, limit: int = 10000) -> list[JournalEntry]:
        stmt = (select(journal_t).where(and_(journal_t.c.tenant_id == tenant_id, journal_t.c.run_id == run_id))
                .order_by(journal_t.c.seq).limit(limit))
        return [entry_from_row(r) for r in await self._read(all_rows, stmt)]

    async def anchor(self) -> dict[str, dict[str, Any]]:
        """Every tenant's head, ``{tenant: {"seq", "hash"}}``: print it, keep it elsewhere, verify against it."""
        return {r["tenant_id"]: {"seq": r["seq"], "hash": r["hash"]} for r in await self._read(all_rows, _HEADS)}

    async def verify(self, *, sealer: Sealer, anchor: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
        """Every break, as sentences; [] when each chain is whole, reaches its anchor and agrees with the
        requests table: each request's outcome, and its answer recomputed, votes and proposal (``sealer``:
        the answers' digests, a held sensitive answer opened; core/store/crosscheck.py)."""
        key = self.chain_key()
        problems: list[str] = []
        heads = await self.anchor()
        tenants = sorted(set(heads) | set(await self._read(_journal_tenants)) | set(anchor or {}))
        for tenant in tenants:
            facts = await self._verify_chain(tenant, key, heads.get(tenant), (anchor or {}).get(tenant), problems)
            await self._cross_check(tenant, facts, sealer, problems)
        return problems

    async def _verify_chain(self, tenant: str, key: bytes, head: Mapping[str, Any] | None,
                            anchor: Mapping[str, Any] | None, problems: list[str]) -> dict[str, dict[str, Any]]:
        """Walks the tenant's chain; returns what it says of each request (for the cross-check)."""
        facts: dict[str, dict[str, Any]] = {}
        prev_hash, expected, after = GENESIS_HASH, 1, 0
        anchored = anchor is None
        while True:
            stmt = (select(journal_t).where(journal_t.c.tenant_id == tenant, journal_t.c.seq > after)
                    .order_by(journal_t.c.seq).limit(5000))
            rows = await self._read(all_rows, stmt)
            if not rows:
                break
            for r in rows:
                where = f"tenant {tenant}, entry {r['seq']}"
                if r["seq"] != expected:
                    problems.append(f"tenant {tenant}: entry {expected} is missing (next is {r['seq']})")
                if r["prev_hash"] != prev_hash:
                    problems.append(f"{where}: does not follow the entry before it")
                fields = {k: r[k] for k in ("seq", "tenant_id", "request_id", "run_id", "event", "principal",
                                            "channel", "data_json", "at")}
                if not hmac.compare_digest(chain_hash(key, prev_hash=r["prev_hash"], **fields), r["hash"]):
                    problems.append(f"{where}: altered (its HMAC does not match)")
                if anchor is not None and r["seq"] == anchor["seq"]:
                    anchored = hmac.compare_digest(r["hash"], str(anchor["hash"]))
                    if not anchored:
                        problems.append(f"{where}: differs from the anchor")
                crosscheck.note(facts, r)
                prev_hash, expected, after = r["hash"], r["seq"] + 1, r["seq"]
        last = expected - 1
        if anchor is not None and not anchored and last < int(anchor["seq"]):
            problems.append(f"tenant {tenant}: the journal ends at entry {last} but the anchor names entry "
                            f"{anchor['seq']}: entries were removed from the end")
        if head is None:
            if last > 0:
                problems.append(f"tenant {tenant}: the head record is missing")
        elif head["seq"] != last or head["hash"] != prev_hash:
            problems.append(f"tenant {tenant}: the journal ends at entry {last} but its head says {head['seq']}: "
                            "entries were removed from the end")
        return facts

    async def _cross_check(self, tenant: str, facts: dict[str, dict[str, Any]], sealer: Sealer,
                           problems: list[str]) -> None:
        """The requests table and the journal tell one story: each request was created, its outcome (who
        answered, through which channel) is the journal's, and so are its answer, votes and proposal."""
        after = ""

        async def entry(seq: int) -> dict[str, Any] | None:
            return await self._read(first, select(journal_t).where(journal_t.c.tenant_id == tenant,
                                                                   journal_t.c.seq == seq))

        while True:
            stmt = (crosscheck.ROWS.where(requests_t.c.tenant_id == tenant, requests_t.c.id > after)
                    .order_by(requests_t.c.id).limit(5000))
            rows = await self._read(all_rows, stmt)
            if not rows:
                break
            for r in rows:
                fact = facts.pop(r["id"], {})
                where = f"tenant {tenant}, request {r['id']}"
                if not fact.get("created"):
                    problems.append(f"{where}: no 'created' entry in the journal")
                problems += await crosscheck.problems(where, r, fact, sealer, entry)
                outcome = fact.get("outcome")
                if r["status"] == "pending":
                    if outcome is not None:
                        problems.append(f"{where}: pending, but the journal says {outcome['event']}")
                    continue
                if outcome is None or outcome["event"] != r["status"]:
                    problems.append(f"{where}: {r['status']}, but the journal has no such entry")
                    continue
                if r["status"] == "answered" and (
                        (outcome["principal"], outcome["channel"]) != (r["resolved_by"], r["resolved_via"])):
                    problems.append(f"{where}: answered by {r['resolved_by']} via {r['resolved_via']}, but "
                                    f"the journal says {outcome['principal']} via {outcome['channel']}")
            after = rows[-1]["id"]
        for request_id in sorted(facts):
            problems.append(f"tenant {tenant}, request {request_id}: in the journal but not in the requests table")


def _journal_tenants(c: Connection) -> list[str]:
    return [row[0] for row in c.execute(select(journal_t.c.tenant_id).distinct())]

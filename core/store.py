"""The store: an async SQLAlchemy engine on SQLite (WAL) or PostgreSQL (asyncpg), migrated at open.

Every statement here filters by tenant where a tenant is involved. State changes
are compare-and-set updates (``WHERE status = 'pending'``) so that exactly one
writer wins, and each change appends its journal entry in the same transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import zlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import and_, event, func, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from core.canonical import canonical_json
from core.errors import UnavailableError
from core.models import (
    AnnotationRow,
    ApiKeyRow,
    ChatActionRow,
    DeliveryRow,
    JournalRow,
    LinkRow,
    MessageRefRow,
    RequestRow,
    StateRow,
)

log = logging.getLogger(__name__)

requests_t = RequestRow.__table__
journal_t = JournalRow.__table__
deliveries_t = DeliveryRow.__table__
links_t = LinkRow.__table__
api_keys_t = ApiKeyRow.__table__
annotations_t = AnnotationRow.__table__
chat_actions_t = ChatActionRow.__table__
state_t = StateRow.__table__
message_refs_t = MessageRefRow.__table__

GENESIS_HASH = "0" * 64
NOTIFY_CHANNEL = "handraise_events"
# Serialises journal appends across instances sharing one PostgreSQL database.
_JOURNAL_LOCK_ID = 0x48524A4E  # "HRJN"


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


def to_async_url(url: str) -> str:
    """``sqlite:///x.db`` → aiosqlite, ``postgresql://`` → asyncpg."""
    if url.startswith("sqlite:///"):
        return "sqlite+aiosqlite:///" + url[len("sqlite:///"):]
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        return "postgresql+asyncpg://" + url[len("postgresql://"):]
    return url


def _lock_key(name: str) -> int:
    # Advisory locks take a bigint; crc32 of the name keeps keys stable across instances.
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


class Store:
    def __init__(self, *, url: str) -> None:
        self.url = url
        self.async_url = to_async_url(url)
        self.dialect = "postgresql" if self.async_url.startswith("postgresql") else "sqlite"
        self._engine: AsyncEngine | None = None
        self._locks: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise UnavailableError("store is not open")
        return self._engine

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def sqlite_path(self) -> Path | None:
        if self.dialect != "sqlite":
            return None
        database = make_url(self.async_url).database
        return Path(database) if database and database != ":memory:" else None

    async def open(self) -> None:
        # aiosqlite logs every statement with its parameters at DEBUG: answers must never reach a log.
        logging.getLogger("aiosqlite").setLevel(logging.INFO)
        logging.getLogger("sqlalchemy.engine").setLevel(logging.WARNING)
        if self.dialect == "sqlite":
            path = self.sqlite_path
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = create_async_engine(self.async_url, pool_size=4, max_overflow=4)
            _configure_sqlite(engine)
        else:
            engine = create_async_engine(self.async_url, pool_size=10, max_overflow=20, pool_pre_ping=True)
        self._engine = engine
        async with engine.begin() as conn:
            if self.is_postgres:
                # Two instances starting at once must not both run the migrations.
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key("migrations")})
            await conn.run_sync(_upgrade)
        log.info("store open", extra={"dialect": self.dialect})

    async def close(self) -> None:
        for lock_conn in list(self._locks.values()):
            with contextlib.suppress(Exception):
                await lock_conn.close()
        self._locks.clear()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def ping(self) -> bool:
        try:
            async with self.reader() as conn:
                await conn.execute(text("SELECT 1"))
            return True
        except (OperationalError, OSError, UnavailableError):
            return False
        except Exception:  # a driver error of any kind means "not serving"
            log.exception("store ping failed")
            return False

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[AsyncConnection]:
        """A read-only connection: on SQLite a deferred BEGIN, so readers never queue behind writers."""
        async with self.engine.connect() as conn:
            await conn.execution_options(handraise_read=True)
            yield conn

    async def checkpoint(self) -> None:
        """Flush the SQLite WAL into the database file and truncate it (deleted values leave the disk)."""
        if self.dialect != "sqlite":
            return
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- requests --------------------------------------------------------------

    async def insert_request(self, conn: AsyncConnection, row: Mapping[str, Any]) -> bool:
        """Insert; False when (tenant, unique_id) exists already."""
        try:
            async with conn.begin_nested():
                await conn.execute(insert(requests_t).values(**row))
        except IntegrityError:
            return False
        return True

    async def get_request(self, tenant_id: str, request_id: str, *, conn: AsyncConnection | None = None) -> dict[str, Any] | None:
        stmt = select(requests_t).where(and_(requests_t.c.id == request_id, requests_t.c.tenant_id == tenant_id))
        return await self._one(stmt, conn)

    async def get_request_any_tenant(self, request_id: str) -> dict[str, Any] | None:
        # Only for internal wake-ups (a NOTIFY carries an id); never exposed to a caller.
        return await self._one(select(requests_t).where(requests_t.c.id == request_id), None)

    async def get_request_by_unique_id(self, tenant_id: str, unique_id: str, *, conn: AsyncConnection | None = None) -> dict[str, Any] | None:
        stmt = select(requests_t).where(and_(requests_t.c.tenant_id == tenant_id, requests_t.c.unique_id == unique_id))
        return await self._one(stmt, conn)

    async def list_requests(self, tenant_id: str, *, status: str | None = None, run_id: str | None = None,
                            limit: int = 100) -> list[dict[str, Any]]:
        stmt = select(requests_t).where(requests_t.c.tenant_id == tenant_id)
        if status is not None:
            stmt = stmt.where(requests_t.c.status == status)
        if run_id is not None:
            stmt = stmt.where(requests_t.c.run_id == run_id)
        stmt = stmt.order_by(requests_t.c.created_at).limit(limit)
        async with self.reader() as conn:
            return [dict(r._mapping) for r in await conn.execute(stmt)]

    async def resolve_request(self, conn: AsyncConnection, *, request_id: str, tenant_id: str, status: str,
                              now: float, values: Mapping[str, Any], require_unexpired: bool) -> bool:
        """Compare-and-set pending → ``status``. True for the one winner."""
        cond = [requests_t.c.id == request_id, requests_t.c.tenant_id == tenant_id, requests_t.c.status == "pending"]
        if require_unexpired:
            cond.append(requests_t.c.expires_at > now)
        else:
            cond.append(requests_t.c.expires_at <= now)
        result = await conn.execute(
            update(requests_t).where(and_(*cond)).values(status=status, resolved_at=now, **values)
        )
        return result.rowcount == 1

    async def cancel_request(self, conn: AsyncConnection, *, request_id: str, tenant_id: str, now: float,
                             principal: str) -> bool:
        result = await conn.execute(
            update(requests_t)
            .where(and_(requests_t.c.id == request_id, requests_t.c.tenant_id == tenant_id,
                        requests_t.c.status == "pending"))
            .values(status="cancelled", resolved_at=now, resolved_by=principal, resolved_via="api")
        )
        return result.rowcount == 1

    async def overdue_requests(self, now: float, *, limit: int = 500) -> list[tuple[str, str]]:
        stmt = (
            select(requests_t.c.id, requests_t.c.tenant_id)
            .where(and_(requests_t.c.status == "pending", requests_t.c.expires_at <= now))
            .order_by(requests_t.c.expires_at)
            .limit(limit)
        )
        async with self.reader() as conn:
            return [(r.id, r.tenant_id) for r in await conn.execute(stmt)]

    async def uncollected_sensitive(self, *, resolved_before: float, limit: int = 500) -> list[tuple[str, str]]:
        stmt = (select(requests_t.c.id, requests_t.c.tenant_id)
                .where(and_(requests_t.c.sensitive.is_(True), requests_t.c.response_json.is_not(None),
                            requests_t.c.resolved_at < resolved_before))
                .limit(limit))
        async with self.reader() as conn:
            return [(r.id, r.tenant_id) for r in await conn.execute(stmt)]

    async def purge_response(self, *, request_id: str, tenant_id: str) -> bool:
        async with self.transaction() as conn:
            result = await conn.execute(
                update(requests_t)
                .where(and_(requests_t.c.id == request_id, requests_t.c.tenant_id == tenant_id,
                            requests_t.c.response_json.is_not(None)))
                .values(response_json=None, response_purged=True)
            )
        return result.rowcount == 1

    # -- journal ---------------------------------------------------------------

    async def append_journal(self, conn: AsyncConnection, *, tenant_id: str, event: str,
                             request_id: str | None = None, run_id: str | None = None,
                             principal: str | None = None, channel: str | None = None,
                             data: Mapping[str, Any] | None = None, at: float | None = None) -> JournalEntry:
        if self.is_postgres:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _JOURNAL_LOCK_ID})
        last = (await conn.execute(
            select(journal_t.c.seq, journal_t.c.hash).order_by(journal_t.c.seq.desc()).limit(1)
        )).first()
        seq = 1 if last is None else last.seq + 1
        prev_hash = GENESIS_HASH if last is None else last.hash
        at = time.time() if at is None else at
        data_json = canonical_json(dict(data or {}))
        digest = entry_hash(prev_hash=prev_hash, seq=seq, tenant_id=tenant_id, request_id=request_id, run_id=run_id,
                            event=event, principal=principal, channel=channel, data_json=data_json, at=at)
        await conn.execute(insert(journal_t).values(
            seq=seq, tenant_id=tenant_id, request_id=request_id, run_id=run_id, event=event, principal=principal,
            channel=channel, data_json=data_json, at=at, prev_hash=prev_hash, hash=digest,
        ))
        # The head is kept apart so that cutting entries off the end is detected too.
        await self._put_state(conn, "journal", "head", json.dumps({"seq": seq, "hash": digest}), at)
        return JournalEntry(seq, tenant_id, request_id, run_id, event, principal, channel, dict(data or {}), at,
                            prev_hash, digest)

    async def journal_entries(self, *, tenant_id: str | None = None, request_id: str | None = None,
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
        async with self.reader() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_journal_entry(r._mapping) for r in rows]

    async def journal_rows_for_run(self, *, tenant_id: str, run_id: str, limit: int = 10000) -> list[JournalEntry]:
        stmt = (select(journal_t).where(and_(journal_t.c.tenant_id == tenant_id, journal_t.c.run_id == run_id))
                .order_by(journal_t.c.seq).limit(limit))
        async with self.reader() as conn:
            return [_journal_entry(r._mapping) for r in (await conn.execute(stmt)).all()]

    async def verify_journal(self) -> list[str]:
        """Every break in the chain, as sentences; [] when it is whole."""
        problems: list[str] = []
        prev_hash, expected_seq, after = GENESIS_HASH, 1, 0
        while True:
            stmt = select(journal_t).where(journal_t.c.seq > after).order_by(journal_t.c.seq).limit(5000)
            async with self.reader() as conn:
                rows = (await conn.execute(stmt)).all()
            if not rows:
                break
            for row in rows:
                r = row._mapping
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
        head_raw = await self.get_state("journal", "head")
        if head_raw is not None:
            head = json.loads(head_raw)
            if head["seq"] != expected_seq - 1 or head["hash"] != prev_hash:
                problems.append(f"the journal ends at entry {expected_seq - 1} but its head says {head['seq']}: "
                                "entries were removed from the end")
        elif expected_seq > 1:
            problems.append("the journal head record is missing")
        return problems

    # -- links -----------------------------------------------------------------

    async def insert_link(self, conn: AsyncConnection, row: Mapping[str, Any]) -> None:
        await conn.execute(insert(links_t).values(**row))

    async def get_link_by_hash(self, token_sha256: str) -> dict[str, Any] | None:
        return await self._one(select(links_t).where(links_t.c.token_sha256 == token_sha256), None)

    async def use_link(self, conn: AsyncConnection, *, link_id: str, now: float) -> bool:
        result = await conn.execute(
            update(links_t).where(and_(links_t.c.id == link_id, links_t.c.used_at.is_(None))).values(used_at=now)
        )
        return result.rowcount == 1

    # -- deliveries ------------------------------------------------------------

    async def upsert_delivery(self, *, tenant_id: str, request_id: str, channel: str, target: str,
                              now: float) -> int:
        async with self.transaction() as conn:
            existing = (await conn.execute(select(deliveries_t.c.id).where(and_(
                deliveries_t.c.request_id == request_id, deliveries_t.c.channel == channel,
                deliveries_t.c.target == target)))).first()
            if existing is not None:
                return existing.id
            result = await conn.execute(insert(deliveries_t).values(
                tenant_id=tenant_id, request_id=request_id, channel=channel, target=target, status="pending",
                attempts=0, created_at=now, updated_at=now,
            ))
            return result.inserted_primary_key[0]

    async def update_delivery(self, delivery_id: int, *, conn: AsyncConnection | None = None,
                              **values: Any) -> None:
        values.setdefault("updated_at", time.time())
        stmt = update(deliveries_t).where(deliveries_t.c.id == delivery_id).values(**values)
        if conn is not None:
            await conn.execute(stmt)
            return
        async with self.transaction() as c:
            await c.execute(stmt)

    async def deliveries_for(self, tenant_id: str, request_id: str) -> list[dict[str, Any]]:
        stmt = (select(deliveries_t).where(and_(deliveries_t.c.tenant_id == tenant_id,
                                                deliveries_t.c.request_id == request_id))
                .order_by(deliveries_t.c.id))
        async with self.reader() as conn:
            return [dict(r._mapping) for r in await conn.execute(stmt)]

    async def deliveries_for_many(self, tenant_id: str, request_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {rid: [] for rid in request_ids}
        if not request_ids:
            return out
        stmt = (select(deliveries_t).where(and_(deliveries_t.c.tenant_id == tenant_id,
                                                deliveries_t.c.request_id.in_(request_ids)))
                .order_by(deliveries_t.c.id))
        async with self.reader() as conn:
            for r in await conn.execute(stmt):
                out[r.request_id].append(dict(r._mapping))
        return out

    async def find_delivery_by_ref(self, *, channel: str, ref_key: str) -> dict[str, Any] | None:
        """A delivery whose ``ref_json`` contains ``ref_key`` (connectors index their message ids this way)."""
        stmt = select(deliveries_t).where(and_(deliveries_t.c.channel == channel,
                                              deliveries_t.c.ref_json.contains(ref_key)))
        return await self._one(stmt, None)

    # -- chat actions ----------------------------------------------------------

    async def insert_chat_actions(self, rows: list[Mapping[str, Any]]) -> None:
        if not rows:
            return
        async with self.transaction() as conn:
            await conn.execute(insert(chat_actions_t), [dict(r) for r in rows])

    async def get_chat_action(self, token: str, *, channel: str) -> dict[str, Any] | None:
        stmt = select(chat_actions_t).where(and_(chat_actions_t.c.token == token, chat_actions_t.c.channel == channel))
        return await self._one(stmt, None)

    # -- message refs ----------------------------------------------------------

    async def insert_message_ref(self, row: Mapping[str, Any]) -> None:
        async with self.transaction() as conn:
            try:
                async with conn.begin_nested():
                    await conn.execute(insert(message_refs_t).values(**row))
            except IntegrityError:
                pass  # the same message remembered twice (a retried delivery): keep the first

    async def get_message_ref(self, *, channel: str, message_key: str) -> dict[str, Any] | None:
        stmt = select(message_refs_t).where(and_(message_refs_t.c.channel == channel,
                                                 message_refs_t.c.message_key == message_key))
        return await self._one(stmt, None)

    # -- api keys --------------------------------------------------------------

    async def insert_api_key(self, row: Mapping[str, Any]) -> None:
        async with self.transaction() as conn:
            await conn.execute(insert(api_keys_t).values(**row))

    async def find_api_key(self, key_sha256: str) -> dict[str, Any] | None:
        stmt = select(api_keys_t).where(and_(api_keys_t.c.key_sha256 == key_sha256, api_keys_t.c.revoked_at.is_(None)))
        return await self._one(stmt, None)

    async def list_api_keys(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        stmt = select(api_keys_t).order_by(api_keys_t.c.created_at)
        if tenant_id is not None:
            stmt = stmt.where(api_keys_t.c.tenant_id == tenant_id)
        async with self.reader() as conn:
            return [dict(r._mapping) for r in await conn.execute(stmt)]

    async def revoke_api_key(self, key_id: str, *, now: float) -> bool:
        async with self.transaction() as conn:
            result = await conn.execute(update(api_keys_t).where(and_(api_keys_t.c.id == key_id,
                                                                      api_keys_t.c.revoked_at.is_(None)))
                                        .values(revoked_at=now))
        return result.rowcount == 1

    # -- annotations -----------------------------------------------------------

    async def insert_annotation(self, conn: AsyncConnection, row: Mapping[str, Any]) -> int:
        result = await conn.execute(insert(annotations_t).values(**row))
        return result.inserted_primary_key[0]

    async def get_annotation(self, tenant_id: str, annotation_id: str) -> dict[str, Any] | None:
        stmt = select(annotations_t).where(and_(annotations_t.c.tenant_id == tenant_id,
                                                annotations_t.c.annotation_id == annotation_id))
        return await self._one(stmt, None)

    async def list_annotations(self, tenant_id: str, run_id: str, *, after_seq: int = 0,
                               limit: int = 100) -> list[dict[str, Any]]:
        stmt = (select(annotations_t)
                .where(and_(annotations_t.c.tenant_id == tenant_id, annotations_t.c.run_id == run_id,
                            annotations_t.c.seq > after_seq))
                .order_by(annotations_t.c.seq).limit(limit))
        async with self.reader() as conn:
            return [dict(r._mapping) for r in await conn.execute(stmt)]

    async def query_annotations(self, tenant_id: str, *, run_id: str | None = None, since: float | None = None,
                                until: float | None = None, limit: int = 100000) -> list[dict[str, Any]]:
        stmt = select(annotations_t).where(annotations_t.c.tenant_id == tenant_id)
        if run_id is not None:
            stmt = stmt.where(annotations_t.c.run_id == run_id)
        if since is not None:
            stmt = stmt.where(annotations_t.c.created_at >= since)
        if until is not None:
            stmt = stmt.where(annotations_t.c.created_at < until)
        stmt = stmt.order_by(annotations_t.c.seq).limit(limit)
        async with self.reader() as conn:
            return [dict(r._mapping) for r in await conn.execute(stmt)]

    # -- state -----------------------------------------------------------------

    async def get_state(self, namespace: str, key: str) -> str | None:
        stmt = select(state_t.c.value).where(and_(state_t.c.namespace == namespace, state_t.c.key == key))
        async with self.reader() as conn:
            return (await conn.execute(stmt)).scalar()

    async def set_state(self, namespace: str, key: str, value: str) -> None:
        async with self.transaction() as conn:
            await self._put_state(conn, namespace, key, value, time.time())

    async def set_state_if_absent(self, namespace: str, key: str, value: str) -> str:
        """Store ``value`` unless a value is there already; return what is stored (first writer wins)."""
        async with self.transaction() as conn:
            current = (await conn.execute(select(state_t.c.value).where(
                and_(state_t.c.namespace == namespace, state_t.c.key == key)))).scalar()
            if current is not None:
                return current
            try:
                async with conn.begin_nested():
                    await conn.execute(insert(state_t).values(namespace=namespace, key=key, value=value,
                                                              updated_at=time.time()))
            except IntegrityError:
                return (await conn.execute(select(state_t.c.value).where(
                    and_(state_t.c.namespace == namespace, state_t.c.key == key)))).scalar_one()
            return value

    async def _put_state(self, conn: AsyncConnection, namespace: str, key: str, value: str, now: float) -> None:
        result = await conn.execute(update(state_t).where(and_(state_t.c.namespace == namespace, state_t.c.key == key))
                                    .values(value=value, updated_at=now))
        if result.rowcount == 0:
            await conn.execute(insert(state_t).values(namespace=namespace, key=key, value=value, updated_at=now))

    # -- notifications and leadership (PostgreSQL) -----------------------------

    async def notify(self, conn: AsyncConnection, payload: Mapping[str, Any]) -> None:
        """Queue a NOTIFY in this transaction: other instances hear it only once it commits."""
        if self.is_postgres:
            await conn.execute(text("SELECT pg_notify(:ch, :p)"), {"ch": NOTIFY_CHANNEL, "p": json.dumps(payload)})

    def asyncpg_dsn(self) -> str:
        url = make_url(self.async_url).set(drivername="postgresql")
        return url.render_as_string(hide_password=False)

    async def try_leadership(self, name: str) -> bool:
        """Take the named advisory lock on a connection of its own; held until ``release_leadership``.

        SQLite is one process by design, so there the caller always leads.
        """
        if not self.is_postgres:
            return True
        if name in self._locks:
            return True
        import asyncpg

        conn = await asyncpg.connect(self.asyncpg_dsn())
        try:
            got = await conn.fetchval("SELECT pg_try_advisory_lock($1)", _lock_key("leader:" + name))
        except BaseException:
            await conn.close()
            raise
        if not got:
            await conn.close()
            return False
        self._locks[name] = conn
        return True

    async def leadership_alive(self, name: str) -> bool:
        if not self.is_postgres:
            return True
        conn = self._locks.get(name)
        if conn is None or conn.is_closed():
            self._locks.pop(name, None)
            return False
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=5)
            return True
        except Exception:
            self._locks.pop(name, None)
            with contextlib.suppress(Exception):
                await conn.close()
            return False

    async def release_leadership(self, name: str) -> None:
        conn = self._locks.pop(name, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    # -- helpers ---------------------------------------------------------------

    async def _one(self, stmt: Any, conn: AsyncConnection | None) -> dict[str, Any] | None:
        if conn is not None:
            row = (await conn.execute(stmt)).first()
        else:
            async with self.reader() as c:
                row = (await c.execute(stmt)).first()
        return None if row is None else dict(row._mapping)

    async def count(self, table: str, tenant_id: str) -> int:
        t = {"requests": requests_t, "annotations": annotations_t, "journal": journal_t}[table]
        async with self.reader() as conn:
            return (await conn.execute(select(func.count()).select_from(t).where(t.c.tenant_id == tenant_id))).scalar_one()


def _journal_entry(r: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(r["seq"], r["tenant_id"], r["request_id"], r["run_id"], r["event"], r["principal"],
                        r["channel"], json.loads(r["data_json"]), r["at"], r["prev_hash"], r["hash"])


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin (BEGIN IMMEDIATE below).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA foreign_keys=ON")
        # Deleted sensitive values are overwritten with zeros, not left in free pages.
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        options = conn.get_execution_options()
        if options.get("isolation_level") == "AUTOCOMMIT":
            return
        if options.get("handraise_read"):
            conn.exec_driver_sql("BEGIN")
            return
        # Writers take the lock up front: a compare-and-set never fails half-way on a lock upgrade.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _upgrade(sync_conn: Any) -> None:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", "core:migrations")
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")

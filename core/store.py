"""The store: SQLAlchemy on SQLite (WAL, driven from one dedicated thread) or PostgreSQL (asyncpg), migrated at open.

Every statement here filters by tenant where a tenant is involved. State changes
are compare-and-set updates (``WHERE status = 'pending'``) so that exactly one
writer wins, and each change appends its journal entry in the same transaction.

Each store operation is a synchronous function of a SQLAlchemy ``Connection`` that
returns plain data. On SQLite it runs on the store's one database thread (one thread
switch per unit of work); on PostgreSQL it runs through ``AsyncConnection.run_sync``.
Hot statements are built once, here, with bind parameters.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import and_, bindparam, create_engine, event, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from handraise.core.canonical import canonical_json
from handraise.core.errors import UnavailableError
from handraise.core.models import (
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

T = TypeVar("T")

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

# -- prebuilt statements -------------------------------------------------------
# Built once so that a call neither constructs a statement nor recomputes its cache key.
# Bind names of UPDATE conditions start with ``w_``: a bind named like a column would
# collide with that column's SET parameter.

_b = bindparam
_GET_REQUEST = select(requests_t).where(requests_t.c.id == _b("id"), requests_t.c.tenant_id == _b("tenant_id"))
_GET_REQUEST_ANY_TENANT = select(requests_t).where(requests_t.c.id == _b("id"))
_GET_REQUEST_BY_UNIQUE_ID = select(requests_t).where(requests_t.c.tenant_id == _b("tenant_id"),
                                                     requests_t.c.unique_id == _b("unique_id"))
_RESOLVE_UNEXPIRED = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
    requests_t.c.expires_at > _b("w_now"))
_RESOLVE_EXPIRED = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
    requests_t.c.expires_at <= _b("w_now"))
_CANCEL_REQUEST = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
).values(status="cancelled", resolved_at=_b("w_now"), resolved_by=_b("w_principal"), resolved_via="api")
_PURGE_RESPONSE = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"),
    requests_t.c.response_json.is_not(None),
).values(response_json=None, response_purged=True)

_JOURNAL_LOCK = text("SELECT pg_advisory_xact_lock(:k)")
_JOURNAL_HEAD = select(journal_t.c.seq, journal_t.c.hash).order_by(journal_t.c.seq.desc()).limit(1)
_JOURNAL_INSERT = insert(journal_t)

_INSERT_LINK = insert(links_t)
_GET_LINK_BY_HASH = select(links_t).where(links_t.c.token_sha256 == _b("token_sha256"))
_USE_LINK = update(links_t).where(links_t.c.id == _b("w_id"), links_t.c.used_at.is_(None)).values(used_at=_b("w_now"))

_FIND_DELIVERY = select(deliveries_t.c.id).where(
    deliveries_t.c.request_id == _b("request_id"), deliveries_t.c.channel == _b("channel"),
    deliveries_t.c.target == _b("target"))
_INSERT_DELIVERY = insert(deliveries_t)
_UPDATE_DELIVERY = update(deliveries_t).where(deliveries_t.c.id == _b("w_id"))
_DELIVERIES_FOR = (select(deliveries_t)
                   .where(deliveries_t.c.tenant_id == _b("tenant_id"), deliveries_t.c.request_id == _b("request_id"))
                   .order_by(deliveries_t.c.id))

_INSERT_CHAT_ACTION = insert(chat_actions_t)
_GET_CHAT_ACTION = select(chat_actions_t).where(chat_actions_t.c.token == _b("token"),
                                                chat_actions_t.c.channel == _b("channel"))
_GET_MESSAGE_REF = select(message_refs_t).where(message_refs_t.c.channel == _b("channel"),
                                                message_refs_t.c.message_key == _b("message_key"))

_INSERT_API_KEY = insert(api_keys_t)
_FIND_API_KEY = select(api_keys_t).where(api_keys_t.c.key_sha256 == _b("key_sha256"), api_keys_t.c.revoked_at.is_(None))
_REVOKE_API_KEY = (update(api_keys_t).where(api_keys_t.c.id == _b("w_id"), api_keys_t.c.revoked_at.is_(None))
                   .values(revoked_at=_b("w_now")))

_INSERT_ANNOTATION = insert(annotations_t)
_GET_ANNOTATION = select(annotations_t).where(annotations_t.c.tenant_id == _b("tenant_id"),
                                              annotations_t.c.annotation_id == _b("annotation_id"))

_GET_STATE = select(state_t.c.value).where(state_t.c.namespace == _b("namespace"), state_t.c.key == _b("key"))
_UPDATE_STATE = update(state_t).where(state_t.c.namespace == _b("w_namespace"), state_t.c.key == _b("w_key"))
_INSERT_STATE = insert(state_t)

_NOTIFY = text("SELECT pg_notify(:ch, :p)")
_SELECT_1 = text("SELECT 1")


class _Inserts:
    """``INSERT … ON CONFLICT DO NOTHING`` per dialect: a duplicate is a rowcount of 0, no savepoint needed."""

    def __init__(self, dialect: str) -> None:
        make = pg_insert if dialect == "postgresql" else sqlite_insert
        self.request = make(requests_t).on_conflict_do_nothing()
        self.message_ref = make(message_refs_t).on_conflict_do_nothing()
        self.state = make(state_t).on_conflict_do_nothing()


_INSERTS = {"sqlite": _Inserts("sqlite"), "postgresql": _Inserts("postgresql")}


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


# -- units of work (synchronous; run on the SQLite thread or under run_sync) -------


def _first(c: Connection, stmt: Any, params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    row = c.execute(stmt, params).mappings().first()
    return None if row is None else dict(row)


def _all(c: Connection, stmt: Any, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return [dict(r) for r in c.execute(stmt, params).mappings()]


def _scalar(c: Connection, stmt: Any, params: Mapping[str, Any] | None = None) -> Any:
    return c.execute(stmt, params).scalar()


def _rowcount(c: Connection, stmt: Any, params: Any = None) -> int:
    return c.execute(stmt, params).rowcount


def _inserted_pk(c: Connection, stmt: Any, params: Mapping[str, Any]) -> Any:
    return c.execute(stmt, params).inserted_primary_key[0]


def _put_state(c: Connection, namespace: str, key: str, value: str, now: float) -> None:
    params = {"value": value, "updated_at": now, "w_namespace": namespace, "w_key": key}
    if c.execute(_UPDATE_STATE, params).rowcount == 0:
        c.execute(_INSERT_STATE, {"namespace": namespace, "key": key, "value": value, "updated_at": now})


def _append_journal(c: Connection, is_postgres: bool, row: dict[str, Any]) -> tuple[int, str, str]:
    if is_postgres:
        c.execute(_JOURNAL_LOCK, {"k": _JOURNAL_LOCK_ID})
    last = c.execute(_JOURNAL_HEAD).first()
    seq = 1 if last is None else last.seq + 1
    prev_hash = GENESIS_HASH if last is None else last.hash
    digest = entry_hash(prev_hash=prev_hash, seq=seq, **row)
    c.execute(_JOURNAL_INSERT, {**row, "seq": seq, "prev_hash": prev_hash, "hash": digest})
    # The head is kept apart so that cutting entries off the end is detected too.
    _put_state(c, "journal", "head", json.dumps({"seq": seq, "hash": digest}), row["at"])
    return seq, prev_hash, digest


def _upsert_delivery(c: Connection, row: dict[str, Any]) -> int:
    existing = c.execute(_FIND_DELIVERY, {k: row[k] for k in ("request_id", "channel", "target")}).first()
    if existing is not None:
        return existing.id
    return c.execute(_INSERT_DELIVERY, row).inserted_primary_key[0]


def _set_state_if_absent(c: Connection, insert_stmt: Any, namespace: str, key: str, value: str) -> str:
    current = c.execute(_GET_STATE, {"namespace": namespace, "key": key}).scalar()
    if current is not None:
        return current
    c.execute(insert_stmt, {"namespace": namespace, "key": key, "value": value, "updated_at": time.time()})
    # A concurrent first writer (another instance) may have won: what is stored is the answer.
    return c.execute(_GET_STATE, {"namespace": namespace, "key": key}).scalar_one()


def _buffered(c: Connection, statement: Any, parameters: Any, driver_sql: bool) -> Buffered:
    result = c.exec_driver_sql(statement, parameters) if driver_sql else c.execute(statement, parameters)
    rows = result.all() if result.returns_rows else []
    pk = None
    if not result.returns_rows and result.context.isinsert and not result.context.executemany:
        pk = result.inserted_primary_key
    return Buffered(rows, result.rowcount, pk)


@dataclass(frozen=True)
class Buffered:
    """A statement's result read in full where it ran, so it can cross threads."""

    rows: list[Any]
    rowcount: int
    inserted_primary_key: Any

    def __iter__(self) -> Any:
        return iter(self.rows)

    def all(self) -> list[Any]:
        return list(self.rows)

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None

    def scalar_one(self) -> Any:
        if len(self.rows) != 1:
            raise ValueError(f"expected one row, got {len(self.rows)}")
        return self.rows[0][0]

    def mappings(self) -> list[Mapping[str, Any]]:
        return [r._mapping for r in self.rows]


class StoreConnection(ABC):
    """What ``transaction()`` and ``reader()`` yield: store methods run their units of work on it."""

    @abstractmethod
    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(sync_connection, *args)`` in this transaction; ``fn`` must return plain data."""

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``AsyncConnection.run_sync``'s name for ``run``."""
        return await self.run(fn, *args)

    async def execute(self, statement: Any, parameters: Any = None) -> Buffered:
        return await self.run(_buffered, statement, parameters, False)

    async def exec_driver_sql(self, statement: str, parameters: Any = None) -> Buffered:
        return await self.run(_buffered, statement, parameters, True)


class _PgConnection(StoreConnection):
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._conn.run_sync(fn, *args)


# -- SQLite: one database thread ------------------------------------------------


class _WriteQueue:
    """The statements of one write transaction, in order, waiting for the database thread."""

    __slots__ = ("jobs", "queued")

    def __init__(self) -> None:
        self.jobs: deque[_Job] = deque()
        self.queued = False


_Job = tuple["asyncio.Future[Any]", asyncio.AbstractEventLoop, Callable[..., Any], tuple[Any, ...], bool, bool]


class _DbThread:
    """The one thread every SQLite connection is used on.

    Write transactions are ordered here rather than on an asyncio lock: the next transaction's
    first statement runs right after the previous one's COMMIT without a trip through the event
    loop, and the open transaction's next statement runs before queued reads. Reads run while the
    open transaction waits for its caller (WAL: they need no lock). Results reach the event loop
    in batches: one wake-up for every job that finished while the loop was busy.
    """

    def __init__(self, *, name: str) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._reads: deque[_Job] = deque()
        self._writes: deque[_WriteQueue] = deque()
        self._active: _WriteQueue | None = None
        self._stopping = False
        self._done_lock = threading.Lock()
        self._done: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...], *, tx: _WriteQueue | None = None,
               last: bool = False, must_run: bool = False) -> asyncio.Future[T]:
        """Queue ``fn(*args)``; with ``tx``, after that transaction's earlier statements (``last`` ends it).

        A job whose future is cancelled before it starts is skipped, unless ``must_run`` (a COMMIT/ROLLBACK).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = (future, loop, fn, args, last, must_run)
        with self._cv:
            if self._stopping:
                raise UnavailableError("store is not open")
            if tx is None:
                self._reads.append(job)
            else:
                tx.jobs.append(job)
                if not tx.queued and tx is not self._active:
                    tx.queued = True
                    self._writes.append(tx)
            self._cv.notify()
        return future

    def stop(self) -> None:
        """The thread ends once nothing it can run is left."""
        with self._cv:
            self._stopping = True
            self._cv.notify()

    def _next(self) -> _Job | None:
        with self._cv:
            while True:
                if self._active is None and self._writes:
                    self._active = self._writes.popleft()
                active = self._active
                if active is not None and active.jobs:
                    job = active.jobs.popleft()
                    if job[4]:
                        self._active = None
                    return job
                if self._reads:
                    return self._reads.popleft()
                if self._stopping:
                    return None
                self._cv.wait()

    def _main(self) -> None:
        while (job := self._next()) is not None:
            future, loop, fn, args, _last, must_run = job
            if future.cancelled() and not must_run:
                continue  # its caller was cancelled before it started
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as e:  # handed to the caller, whatever it is
                error = e
            with self._done_lock:
                batch = self._done.get(loop)
                if batch is None:
                    self._done[loop] = [(future, result, error)]
                else:
                    batch.append((future, result, error))
            if batch is None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                    loop.call_soon_threadsafe(self._deliver, loop)
            del job, future, fn, args, result, error

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        # On the event loop.
        with self._done_lock:
            batch = self._done.pop(loop, [])
        for future, result, error in batch:
            if future.cancelled():
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)


async def _result(future: asyncio.Future[T]) -> T:
    return await future


async def _result_to_the_end(future: asyncio.Future[T]) -> T:
    # A cancelled caller must not cancel a COMMIT that is queued: the transaction's body completed.
    return await asyncio.shield(future)


class _SqliteRunner:
    """Owns the SQLite engine, its database thread and the connections used on that thread."""

    def __init__(self, *, url: str) -> None:
        # hide_parameters: a statement's values (answers) never appear in an exception's text.
        # max_overflow=-1: a checkout never waits, which on the one thread would wait forever.
        self.engine: Engine = create_engine(url, pool_size=2, max_overflow=-1, hide_parameters=True)
        _configure_sqlite(self.engine)
        self.thread = _DbThread(name="handraise-sqlite")
        self._writing: set[asyncio.Task[Any] | None] = set()
        # Used only on the database thread:
        self._reader: Connection | None = None  # autocommit: a lone SELECT needs no BEGIN/ROLLBACK
        self._writer: Connection | None = None

    def enter_write(self) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task in self._writing:
            # Would wait for itself forever: a store write inside an open transaction() needs conn=.
            raise RuntimeError("a second write transaction inside an open one on the same task")
        self._writing.add(task)
        return task

    def leave_write(self, task: asyncio.Task[Any] | None) -> None:
        self._writing.discard(task)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await _result(self.thread.submit(self._read_job, (fn, args)))

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` in a transaction of its own (BEGIN IMMEDIATE … COMMIT): one submit."""
        if asyncio.current_task() in self._writing:
            raise RuntimeError("a second write transaction inside an open one on the same task")
        return await _result(self.thread.submit(self._write_job, (fn, args), tx=_WriteQueue(), last=True))

    # The jobs below run on the database thread.

    def _read_job(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        c = self._reader
        if c is None:
            c = self._reader = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            return fn(c, *args)
        finally:
            c.rollback()  # ends SQLAlchemy's bookkeeping only; no transaction is open in autocommit

    def begin_writer(self) -> Connection:
        c = self._writer
        if c is None:
            c = self._writer = self.engine.connect()
        if c.in_transaction():  # left open by a transaction whose end never came: never carry it over
            c.rollback()
        c.begin()
        return c

    def _write_job(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        c = self.begin_writer()
        try:
            out = fn(c, *args)
            c.commit()
            return out
        except BaseException:
            c.rollback()
            raise

    def checkpoint_job(self) -> None:
        # Runs as a write transaction's only statement: no writer of ours is mid-transaction, which
        # TRUNCATE would wait for. Read to the end: an unfinished statement keeps a read transaction open.
        self._read_job(lambda c: c.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").all(), ())

    def migrate_job(self) -> None:
        with self.engine.begin() as c:
            _upgrade(c)

    def close_job(self) -> None:
        for c in (self._reader, self._writer):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        self._reader = self._writer = None
        self.engine.dispose()

    async def close(self) -> None:
        try:
            await _result_to_the_end(self.thread.submit(self.close_job, (), must_run=True))
        finally:
            self.thread.stop()


class _SqliteConnection(StoreConnection):
    """A write transaction (or a read snapshot) on the database thread; each ``run`` is one submit."""

    def __init__(self, runner: _SqliteRunner, *, write: bool) -> None:
        self._runner = runner
        self._tx: _WriteQueue | None = None  # a writer's place in the thread's order, from its first statement
        self._write = write
        self._used = False
        self._conn: Connection | None = None  # set and used on the database thread only

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        self._used = True
        if self._write and self._tx is None:
            self._tx = _WriteQueue()
        return await _result(self._runner.thread.submit(self._job, (fn, args), tx=self._tx))

    def _job(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        c = self._conn
        if c is None:
            if self._write:
                c = self._runner.begin_writer()
            else:
                # A deferred BEGIN: the statements of this reader see one snapshot.
                c = self._runner.engine.connect().execution_options(handraise_read=True)
                c.begin()
            self._conn = c
        return fn(c, *args)

    def end(self, *, commit: bool) -> asyncio.Future[None] | None:
        """Queue the COMMIT (or ROLLBACK); None when no statement ran."""
        if not self._used:
            return None
        return self._runner.thread.submit(self._end_job, (commit,), tx=self._tx, last=True, must_run=True)

    def _end_job(self, commit: bool) -> None:
        c = self._conn
        if c is None:
            return
        self._conn = None
        try:
            if commit and c.in_transaction():
                c.commit()
        except BaseException:
            c.rollback()
            raise
        finally:
            try:
                if c.in_transaction():
                    c.rollback()
            except Exception:
                # Nobody awaits a rollback; the next transaction's begin rolls back whatever is left.
                log.exception("store: rollback failed")
            if not self._write:
                c.close()  # back to the pool; the writer connection stays with the runner


class _SqliteEngine:
    """``Store.engine`` on SQLite: the AsyncEngine calls callers use, served by the database thread."""

    def __init__(self, store: Store, runner: _SqliteRunner) -> None:
        self._store = store
        self.sync_engine = runner.engine

    def connect(self) -> contextlib.AbstractAsyncContextManager[StoreConnection]:
        return self._store.reader()

    def begin(self) -> contextlib.AbstractAsyncContextManager[StoreConnection]:
        return self._store.transaction()


class Store:
    def __init__(self, *, url: str) -> None:
        self.url = url
        self.async_url = to_async_url(url)
        self.dialect = "postgresql" if self.async_url.startswith("postgresql") else "sqlite"
        self._engine: AsyncEngine | None = None
        self._read_engine: AsyncEngine | None = None
        self._runner: _SqliteRunner | None = None
        self._inserts = _INSERTS[self.dialect]
        self._locks: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------

    @property
    def engine(self) -> AsyncEngine | _SqliteEngine:
        """PostgreSQL: the writers' engine. SQLite: its ``connect()`` is ``reader()``, its ``begin()`` ``transaction()``."""
        if self._runner is not None:
            return _SqliteEngine(self, self._runner)
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
        # Statements and their parameters (answers) must never reach a log.
        logging.getLogger("sqlalchemy.engine").setLevel(logging.WARNING)
        if self.dialect == "sqlite":
            path = self.sqlite_path
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            runner = _SqliteRunner(url=make_url(self.async_url).set(drivername="sqlite").render_as_string(False))
            try:
                await _result(runner.thread.submit(runner.migrate_job, (), tx=_WriteQueue(), last=True))
            except BaseException:
                await runner.close()
                raise
            self._runner = runner
        else:
            # No pool_pre_ping (a round trip per checkout): a dead pooled connection fails its statement,
            # SQLAlchemy invalidates the pool, and reads are retried once on a fresh connection.
            engine = create_async_engine(self.async_url, pool_size=10, max_overflow=20, hide_parameters=True)
            # Readers run without BEGIN/ROLLBACK: each statement is its own snapshot, as under READ COMMITTED.
            self._read_engine = create_async_engine(self.async_url, pool_size=5, max_overflow=15,
                                                    isolation_level="AUTOCOMMIT", hide_parameters=True)
            self._engine = engine
            async with engine.begin() as conn:
                # Two instances starting at once must not both run the migrations.
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key("migrations")})
                await conn.run_sync(_upgrade)
        log.info("store open", extra={"dialect": self.dialect})

    async def close(self) -> None:
        for lock_conn in list(self._locks.values()):
            with contextlib.suppress(Exception):
                await lock_conn.close()
        self._locks.clear()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.close()
        for engine in (self._engine, self._read_engine):
            if engine is not None:
                await engine.dispose()
        self._engine = self._read_engine = None

    async def ping(self) -> bool:
        try:
            await self._read(_scalar, _SELECT_1)
            return True
        except (OperationalError, OSError, UnavailableError):
            return False
        except Exception:  # a driver error of any kind means "not serving"
            log.exception("store ping failed")
            return False

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[StoreConnection]:
        runner = self._runner
        if runner is None:
            async with self._pg_engine().begin() as conn:
                yield _PgConnection(conn)
            return
        task = runner.enter_write()
        tx = _SqliteConnection(runner, write=True)
        ok = False
        try:
            yield tx
            ok = True
        finally:
            runner.leave_write(task)
            # A failed body's ROLLBACK is queued, not awaited: the next transaction runs after it anyway.
            end = tx.end(commit=ok)
        if end is not None:
            await _result_to_the_end(end)

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[StoreConnection]:
        """A read-only connection: on SQLite a deferred BEGIN, so readers never queue behind writers."""
        runner = self._runner
        if runner is None:
            if self._read_engine is None:
                raise UnavailableError("store is not open")
            async with self._read_engine.connect() as conn:
                yield _PgConnection(conn)
            return
        snapshot = _SqliteConnection(runner, write=False)
        try:
            yield snapshot
        finally:
            end = snapshot.end(commit=False)
            if end is not None:
                await _result_to_the_end(end)

    async def checkpoint(self) -> None:
        """Flush the SQLite WAL into the database file and truncate it (deleted values leave the disk)."""
        runner = self._runner
        if runner is None:
            return
        await _result(runner.thread.submit(runner.checkpoint_job, (), tx=_WriteQueue(), last=True))

    # -- running units of work -------------------------------------------------

    def _pg_engine(self) -> AsyncEngine:
        if self._engine is None:
            raise UnavailableError("store is not open")
        return self._engine

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        runner = self._runner
        if runner is not None:
            return await runner.read(fn, *args)
        if self._read_engine is None:
            raise UnavailableError("store is not open")
        for attempt in (1, 2):
            try:
                async with self._read_engine.connect() as conn:
                    return await conn.run_sync(fn, *args)
            except DBAPIError as e:
                # A pooled connection the server dropped: SQLAlchemy has invalidated the pool; a read is safe to repeat.
                if attempt == 2 or not e.connection_invalidated:
                    raise
                log.warning("store: a pooled connection was dead; reading again on a fresh one")
        raise AssertionError("unreachable")

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        runner = self._runner
        if runner is not None:
            return await runner.write(fn, *args)
        async with self._pg_engine().begin() as conn:
            return await conn.run_sync(fn, *args)

    async def _on(self, conn: StoreConnection | None, fn: Callable[..., T], *args: Any) -> T:
        """In the caller's transaction when given one, else as a read of its own."""
        if conn is not None:
            return await conn.run(fn, *args)
        return await self._read(fn, *args)

    # -- requests --------------------------------------------------------------

    async def insert_request(self, conn: StoreConnection, row: Mapping[str, Any]) -> bool:
        """Insert; False when (tenant, unique_id) exists already."""
        return await conn.run(_rowcount, self._inserts.request, dict(row)) == 1

    async def get_request(self, tenant_id: str, request_id: str, *,
                          conn: StoreConnection | None = None) -> dict[str, Any] | None:
        return await self._on(conn, _first, _GET_REQUEST, {"id": request_id, "tenant_id": tenant_id})

    async def get_request_any_tenant(self, request_id: str) -> dict[str, Any] | None:
        # Only for internal wake-ups (a NOTIFY carries an id); never exposed to a caller.
        return await self._read(_first, _GET_REQUEST_ANY_TENANT, {"id": request_id})

    async def get_request_by_unique_id(self, tenant_id: str, unique_id: str, *,
                                       conn: StoreConnection | None = None) -> dict[str, Any] | None:
        return await self._on(conn, _first, _GET_REQUEST_BY_UNIQUE_ID,
                              {"tenant_id": tenant_id, "unique_id": unique_id})

    async def list_requests(self, tenant_id: str, *, status: str | None = None, run_id: str | None = None,
                            limit: int = 100) -> list[dict[str, Any]]:
        stmt = select(requests_t).where(requests_t.c.tenant_id == tenant_id)
        if status is not None:
            stmt = stmt.where(requests_t.c.status == status)
        if run_id is not None:
            stmt = stmt.where(requests_t.c.run_id == run_id)
        stmt = stmt.order_by(requests_t.c.created_at).limit(limit)
        return await self._read(_all, stmt)

    async def resolve_request(self, conn: StoreConnection, *, request_id: str, tenant_id: str, status: str,
                              now: float, values: Mapping[str, Any], require_unexpired: bool) -> bool:
        """Compare-and-set pending → ``status``. True for the one winner."""
        stmt = _RESOLVE_UNEXPIRED if require_unexpired else _RESOLVE_EXPIRED
        params = {"status": status, "resolved_at": now, **values,
                  "w_id": request_id, "w_tenant_id": tenant_id, "w_now": now}
        return await conn.run(_rowcount, stmt, params) == 1

    async def cancel_request(self, conn: StoreConnection, *, request_id: str, tenant_id: str, now: float,
                             principal: str) -> bool:
        params = {"w_id": request_id, "w_tenant_id": tenant_id, "w_now": now, "w_principal": principal}
        return await conn.run(_rowcount, _CANCEL_REQUEST, params) == 1

    async def overdue_requests(self, now: float, *, limit: int = 500) -> list[tuple[str, str]]:
        stmt = (
            select(requests_t.c.id, requests_t.c.tenant_id)
            .where(and_(requests_t.c.status == "pending", requests_t.c.expires_at <= now))
            .order_by(requests_t.c.expires_at)
            .limit(limit)
        )
        return [(r["id"], r["tenant_id"]) for r in await self._read(_all, stmt)]

    async def uncollected_sensitive(self, *, resolved_before: float, limit: int = 500) -> list[tuple[str, str]]:
        stmt = (select(requests_t.c.id, requests_t.c.tenant_id)
                .where(and_(requests_t.c.sensitive.is_(True), requests_t.c.response_json.is_not(None),
                            requests_t.c.resolved_at < resolved_before))
                .limit(limit))
        return [(r["id"], r["tenant_id"]) for r in await self._read(_all, stmt)]

    async def purge_response(self, *, request_id: str, tenant_id: str) -> bool:
        return await self._write(_rowcount, _PURGE_RESPONSE, {"w_id": request_id, "w_tenant_id": tenant_id}) == 1

    # -- journal ---------------------------------------------------------------

    async def append_journal(self, conn: StoreConnection, *, tenant_id: str, event: str,
                             request_id: str | None = None, run_id: str | None = None,
                             principal: str | None = None, channel: str | None = None,
                             data: Mapping[str, Any] | None = None, at: float | None = None) -> JournalEntry:
        at = time.time() if at is None else at
        plain = dict(data or {})
        row = {"tenant_id": tenant_id, "request_id": request_id, "run_id": run_id, "event": event,
               "principal": principal, "channel": channel, "data_json": canonical_json(plain), "at": at}
        seq, prev_hash, digest = await conn.run(_append_journal, self.is_postgres, row)
        return JournalEntry(seq, tenant_id, request_id, run_id, event, principal, channel, plain, at,
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
        return [_journal_entry(r) for r in await self._read(_all, stmt)]

    async def journal_rows_for_run(self, *, tenant_id: str, run_id: str, limit: int = 10000) -> list[JournalEntry]:
        stmt = (select(journal_t).where(and_(journal_t.c.tenant_id == tenant_id, journal_t.c.run_id == run_id))
                .order_by(journal_t.c.seq).limit(limit))
        return [_journal_entry(r) for r in await self._read(_all, stmt)]

    async def verify_journal(self) -> list[str]:
        """Every break in the chain, as sentences; [] when it is whole."""
        problems: list[str] = []
        prev_hash, expected_seq, after = GENESIS_HASH, 1, 0
        while True:
            stmt = select(journal_t).where(journal_t.c.seq > after).order_by(journal_t.c.seq).limit(5000)
            rows = await self._read(_all, stmt)
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

    async def insert_link(self, conn: StoreConnection, row: Mapping[str, Any]) -> None:
        await conn.run(_rowcount, _INSERT_LINK, dict(row))

    async def get_link_by_hash(self, token_sha256: str) -> dict[str, Any] | None:
        return await self._read(_first, _GET_LINK_BY_HASH, {"token_sha256": token_sha256})

    async def use_link(self, conn: StoreConnection, *, link_id: str, now: float) -> bool:
        return await conn.run(_rowcount, _USE_LINK, {"w_id": link_id, "w_now": now}) == 1

    # -- deliveries ------------------------------------------------------------

    async def upsert_delivery(self, *, tenant_id: str, request_id: str, channel: str, target: str,
                              now: float) -> int:
        return await self._write(_upsert_delivery, {
            "tenant_id": tenant_id, "request_id": request_id, "channel": channel, "target": target,
            "status": "pending", "attempts": 0, "created_at": now, "updated_at": now,
        })

    async def update_delivery(self, delivery_id: int, *, conn: StoreConnection | None = None,
                              **values: Any) -> None:
        values.setdefault("updated_at", time.time())
        params = {**values, "w_id": delivery_id}
        if conn is not None:
            await conn.run(_rowcount, _UPDATE_DELIVERY, params)
            return
        await self._write(_rowcount, _UPDATE_DELIVERY, params)

    async def deliveries_for(self, tenant_id: str, request_id: str) -> list[dict[str, Any]]:
        return await self._read(_all, _DELIVERIES_FOR, {"tenant_id": tenant_id, "request_id": request_id})

    async def deliveries_for_many(self, tenant_id: str, request_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {rid: [] for rid in request_ids}
        if not request_ids:
            return out
        stmt = (select(deliveries_t).where(and_(deliveries_t.c.tenant_id == tenant_id,
                                                deliveries_t.c.request_id.in_(request_ids)))
                .order_by(deliveries_t.c.id))
        for r in await self._read(_all, stmt):
            out[r["request_id"]].append(r)
        return out

    async def find_delivery_by_ref(self, *, channel: str, ref_key: str) -> dict[str, Any] | None:
        """A delivery whose ``ref_json`` contains ``ref_key`` (connectors index their message ids this way)."""
        stmt = select(deliveries_t).where(and_(deliveries_t.c.channel == channel,
                                              deliveries_t.c.ref_json.contains(ref_key)))
        return await self._read(_first, stmt)

    # -- chat actions ----------------------------------------------------------

    async def insert_chat_actions(self, rows: list[Mapping[str, Any]]) -> None:
        if not rows:
            return
        await self._write(_rowcount, _INSERT_CHAT_ACTION, [dict(r) for r in rows])

    async def get_chat_action(self, token: str, *, channel: str) -> dict[str, Any] | None:
        return await self._read(_first, _GET_CHAT_ACTION, {"token": token, "channel": channel})

    # -- message refs ----------------------------------------------------------

    async def insert_message_ref(self, row: Mapping[str, Any]) -> None:
        # ON CONFLICT DO NOTHING: the same message remembered twice (a retried delivery) keeps the first.
        await self._write(_rowcount, self._inserts.message_ref, dict(row))

    async def get_message_ref(self, *, channel: str, message_key: str) -> dict[str, Any] | None:
        return await self._read(_first, _GET_MESSAGE_REF, {"channel": channel, "message_key": message_key})

    # -- api keys --------------------------------------------------------------

    async def insert_api_key(self, row: Mapping[str, Any]) -> None:
        await self._write(_rowcount, _INSERT_API_KEY, dict(row))

    async def find_api_key(self, key_sha256: str) -> dict[str, Any] | None:
        return await self._read(_first, _FIND_API_KEY, {"key_sha256": key_sha256})

    async def list_api_keys(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        stmt = select(api_keys_t).order_by(api_keys_t.c.created_at)
        if tenant_id is not None:
            stmt = stmt.where(api_keys_t.c.tenant_id == tenant_id)
        return await self._read(_all, stmt)

    async def revoke_api_key(self, key_id: str, *, now: float) -> bool:
        return await self._write(_rowcount, _REVOKE_API_KEY, {"w_id": key_id, "w_now": now}) == 1

    # -- annotations -----------------------------------------------------------

    async def insert_annotation(self, conn: StoreConnection, row: Mapping[str, Any]) -> int:
        return await conn.run(_inserted_pk, _INSERT_ANNOTATION, dict(row))

    async def get_annotation(self, tenant_id: str, annotation_id: str) -> dict[str, Any] | None:
        return await self._read(_first, _GET_ANNOTATION, {"tenant_id": tenant_id, "annotation_id": annotation_id})

    async def list_annotations(self, tenant_id: str, run_id: str, *, after_seq: int = 0,
                               limit: int = 100) -> list[dict[str, Any]]:
        stmt = (select(annotations_t)
                .where(and_(annotations_t.c.tenant_id == tenant_id, annotations_t.c.run_id == run_id,
                            annotations_t.c.seq > after_seq))
                .order_by(annotations_t.c.seq).limit(limit))
        return await self._read(_all, stmt)

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
        return await self._read(_all, stmt)

    # -- state -----------------------------------------------------------------

    async def get_state(self, namespace: str, key: str) -> str | None:
        return await self._read(_scalar, _GET_STATE, {"namespace": namespace, "key": key})

    async def set_state(self, namespace: str, key: str, value: str) -> None:
        await self._write(_put_state, namespace, key, value, time.time())

    async def set_state_if_absent(self, namespace: str, key: str, value: str) -> str:
        """Store ``value`` unless a value is there already; return what is stored (first writer wins)."""
        return await self._write(_set_state_if_absent, self._inserts.state, namespace, key, value)

    # -- notifications and leadership (PostgreSQL) -----------------------------

    async def notify(self, conn: StoreConnection, payload: Mapping[str, Any]) -> None:
        """Queue a NOTIFY in this transaction: other instances hear it only once it commits."""
        if self.is_postgres:
            await conn.run(_rowcount, _NOTIFY, {"ch": NOTIFY_CHANNEL, "p": json.dumps(payload)})

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

    async def count(self, table: str, tenant_id: str) -> int:
        t = {"requests": requests_t, "annotations": annotations_t, "journal": journal_t}[table]
        return await self._read(_scalar, select(func.count()).select_from(t).where(t.c.tenant_id == tenant_id))


def _journal_entry(r: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(r["seq"], r["tenant_id"], r["request_id"], r["run_id"], r["event"], r["principal"],
                        r["channel"], json.loads(r["data_json"]), r["at"], r["prev_hash"], r["hash"])


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
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

    @event.listens_for(engine, "begin")
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
    cfg.set_main_option("script_location", "handraise.core:migrations")
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")

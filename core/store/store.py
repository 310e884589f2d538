"""The store: SQLAlchemy on SQLite (WAL, driven from one database thread) or PostgreSQL (asyncpg),
migrated at open, and the queries the lifecycle needs.

Every statement here filters by tenant where a tenant is involved. State changes are
compare-and-set updates (``WHERE status = 'pending'``) so that exactly one writer wins, and each
change appends its journal entry in the same transaction. Storage exceptions end here: callers see
the core error tree (``units.raise_translated``). Hot statements are built once, with bind parameters
(core/store/statements.py); the hot units run on the raw driver connection, asyncpg's
(core/store/pgunits.py) or sqlite3's (core/store/sqliteunits.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import and_, select, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from handraise.core.errors import ConfigError, UnavailableError
from handraise.core.sealing import Sealer
from handraise.core.serversecret import ServerSecret
from handraise.core.store.breaker import StoreBreaker
from handraise.core.store.chatrefs import ChatRefRecords
from handraise.core.store.deliveries import FOR_REQUEST as DELIVERIES_FOR_REQUEST
from handraise.core.store.deliveries import DeliveryRecords
from handraise.core.store.inbox import InboxRecords
from handraise.core.store.journal import Journal, JournalEntry, entry_row
from handraise.core.store.leadership import LeaderLocks, lock_key
from handraise.core.store.links import LinkRecords
from handraise.core.store.reviews import ReviewRecords
from handraise.core.store.schedule import ScheduleRecords
from handraise.core.store.sealed import REWRITE, SealedRecords, carrying, first_request, insert_in, split
from handraise.core.store.runs import RunRecords
from handraise.core.store.sqlite import SqliteRunner
from handraise.core.store.sqliteunits import SqliteHotUnits
from handraise.core.store.pgunits import PgHotUnits
from handraise.core.store.oidc import OidcLoginRecords
from handraise.core.store.pruning import prune_spent
from handraise.core.store.state import StateRecords
from handraise.core.store.statements import (
    annotations_t,
    api_keys_t,
    CANCEL_RETURNING,
    GET_ANNOTATION,
    GET_REQUEST,
    GET_REQUEST_BY_UNIQUE_ID,
    INSERT_ANNOTATION,
    INSERT_API_KEY,
    INSERTS,
    list_requests_statement,
    NOTIFY,
    overdue_statement,
    RequestWithDeliveries,
    Resolution,
    RESOLVE,
    REVOKE_API_KEY,
    SELECT_1,
)
from handraise.core.store.votes import VoteRecords
from handraise.core.store.units import (
    PgConnection,
    StoreConnection,
    all_rows,
    first,
    inserted_pk,
    raise_translated,
    rowcount,
    scalar,
    storage_errors,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

NOTIFY_CHANNEL = "handraise_events"

def to_async_url(url: str) -> str:
    """``sqlite:///x.db`` → aiosqlite, ``postgresql://`` → asyncpg."""
    if url.startswith("sqlite:///"):
        return "sqlite+aiosqlite:///" + url[len("sqlite:///"):]
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        return "postgresql+asyncpg://" + url[len("postgresql://"):]
    return url


@contextlib.asynccontextmanager
async def _pg_connection(opening: Any, breaker: StoreBreaker) -> AsyncIterator[Any]:
    """``async with`` an engine's ``connect()`` or ``begin()``, its opening and its end (COMMIT or
    ROLLBACK) translated as a unit's statements are: a server that is gone is ``UnavailableError``
    (and opens the ``breaker``). The body's own errors pass as they are (translated where they run)."""
    if breaker.lost_since is not None:
        breaker.admit()
    try:
        with storage_errors():
            conn = await opening.__aenter__()
        try:
            yield conn
        except BaseException as e:
            with storage_errors():
                await opening.__aexit__(type(e), e, e.__traceback__)
            raise
        with storage_errors():
            await opening.__aexit__(None, None, None)
    except UnavailableError as e:
        breaker.failed(e)
        raise
    if breaker.lost_since is not None:
        breaker.succeeded()


def upgrade(sync_conn: Connection, secret: ServerSecret | None, revision: str = "head") -> None:
    """Migrate the database on this connection to ``revision``."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", "handraise.core:migrations")
    cfg.attributes["connection"] = sync_conn
    # Migration 0004 re-chains an older journal and seals held sensitive answers: it needs the key.
    cfg.attributes["server_secret"] = secret
    command.upgrade(cfg, revision)


# What an instance opens beside its two pools: the LISTEN connection, and one per loop it may lead
# (dispatch recovery, Telegram polling, Matrix sync, Slack Socket Mode, the mailbox).
EXTRA_CONNECTIONS = 6
# Connections name their instance (pg_stat_activity.application_name): doctor counts instances by it.
APPLICATION_NAME = "handraise"


def connection_budget(pool_size: int) -> int:
    """The most PostgreSQL connections one instance opens with ``[storage] pool_size``."""
    return 2 * pool_size + EXTRA_CONNECTIONS


class Store:
    def __init__(self, *, url: str, secret: ServerSecret | None = None, pool_size: int = 10,
                 instance_id: str | None = None, connect_timeout: float = 5.0) -> None:
        """``secret``: the server secret (core/serversecret.py); without it the store can be migrated and
        read, but the journal cannot be written or verified. ``pool_size``: on PostgreSQL, the writers'
        pool and the readers' pool hold at most this many connections each (no overflow), so an
        instance never opens more than ``connection_budget(pool_size)``. ``connect_timeout``: on PostgreSQL,
        seconds opening a connection may take; a server found gone makes calls fail fast (``breaker``)."""
        self.url = url
        self.connect_timeout = connect_timeout
        # PostgreSQL: open while the server is gone (core/store/breaker.py); its pooled connections are stale then.
        self.breaker = StoreBreaker(on_lost=self.invalidate_pools)
        self._secret = secret
        self.pool_size = pool_size
        self.application_name = APPLICATION_NAME + (f"/{instance_id}" if instance_id else "")
        self.async_url = to_async_url(url)
        self.dialect = "postgresql" if self.async_url.startswith("postgresql") else "sqlite"
        self._engine: AsyncEngine | None = None
        self._read_engine: AsyncEngine | None = None
        self._runner: SqliteRunner | None = None
        # PostgreSQL's hot units on raw asyncpg connections (core/store/pgunits.py); None on SQLite.
        self._hot: PgHotUnits | None = None
        self._inserts = INSERTS[self.dialect]
        self.journal = Journal(read=self._read, dialect=self.dialect,
                               key=None if secret is None else secret.key("journal chain"))
        # SQLite's hot units on the database thread's raw connection (core/store/sqliteunits.py); None on PostgreSQL.
        self._lite = None if self.journal.sqlite is None else SqliteHotUnits(self.journal.sqlite)
        self.leadership = LeaderLocks(dsn=self.asyncpg_dsn() if self.is_postgres else None)
        # The operator inbox's sign-in links and sessions (core/store/inbox.py).
        self.inbox = InboxRecords(read=self._read, write=self._write)
        # Sign-ins through the identity provider under way (core/store/oidc.py).
        self.oidc_logins = OidcLoginRecords(write=self._write)
        # One-time form links (core/store/links.py).
        self.links = LinkRecords(read=self._read, dialect=self.dialect)
        # How far a person got with a request, and the HITL-protocol cases (core/store/reviews.py).
        self.reviews = ReviewRecords(read=self._read, dialect=self.dialect)
        # Runs, registered or made by first use (core/store/runs.py).
        self.runs = RunRecords(read=self._read, dialect=self.dialect)
        # Escalation steps and reminders that are due (core/store/schedule.py).
        self.schedule = ScheduleRecords(read=self._read)
        # A quorum request's votes, one compare-and-set each (core/store/votes.py).
        self.votes = VoteRecords(journal=self.journal, notice=self._notify_arg)
        # Button tokens and the chat messages posted about requests (core/store/chatrefs.py).
        self.chat_refs = ChatRefRecords(read=self._read, write=self._write, dialect=self.dialect)
        # Small durable key/value state (core/store/state.py).
        self.state = StateRecords(read=self._read, write=self._write, dialect=self.dialect)
        # Where requests were posted, each change journaled with it (core/store/deliveries.py).
        self.deliveries = DeliveryRecords(read=self._read, write=self._write, journal=self.journal)
        # Held sensitive answers, their hand-over and shredding, and cleaning the files (core/store/sealed.py).
        self.sealed = SealedRecords(read=self._read, write=self._write, clean=self._clean_files)

    # -- lifecycle -------------------------------------------------------------

    @property
    def secret(self) -> ServerSecret:
        if self._secret is None:
            raise RuntimeError("the store was opened without the server secret")
        return self._secret

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
            runner = SqliteRunner(url=make_url(self.async_url).set(drivername="sqlite").render_as_string(False))
            try:
                await runner.migrate(self._migrate)
            except BaseException:
                await runner.close()
                raise
            self._runner = runner
        else:
            # No pool_pre_ping (a round trip per checkout): a dead pooled connection fails its statement, SQLAlchemy
            # invalidates the pool, and reads are retried once on a fresh connection. No overflow: past pool_size,
            # callers wait (pool_timeout) rather than open connections max_connections may not have for every instance.
            named = {"server_settings": {"application_name": self.application_name}, "timeout": self.connect_timeout}
            pooled: dict[str, Any] = {"pool_size": self.pool_size, "max_overflow": 0, "connect_args": named,
                                       "hide_parameters": True}
            engine = create_async_engine(self.async_url, **pooled)
            # Readers run without BEGIN/ROLLBACK: each statement is its own snapshot, as under READ COMMITTED.
            self._read_engine = create_async_engine(self.async_url, isolation_level="AUTOCOMMIT", **pooled)
            self._engine = engine
            self._hot = PgHotUnits(write_engine=engine, read_engine=self._read_engine, key=self.journal.chain_key,
                                   breaker=self.breaker, keep_idle=min(2, self.pool_size // 2))
            async with engine.begin() as conn:
                # Two instances starting at once must not both run the migrations.
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key("migrations")})
                await conn.run_sync(self._migrate)
        if self._secret is not None:
            try:
                await self._check_secret(self._secret)
            except BaseException:
                await self.close()
                raise
        log.info("store open", extra={"dialect": self.dialect})

    def _migrate(self, sync_conn: Connection) -> None:
        upgrade(sync_conn, self._secret)

    async def _check_secret(self, secret: ServerSecret) -> None:
        stored = await self.state.set_if_absent("server", "secret_fingerprint", secret.fingerprint)
        if stored != secret.fingerprint:
            raise ConfigError("this database was set up with another server secret: give every instance the "
                              "same one ([security] secret or secret_file, or HANDRAISE_SECURITY__SECRET)")

    async def close(self) -> None:
        await self.leadership.release_all()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.close()
        self.invalidate_pools()  # gives back what the hot units keep idle (checked out), so dispose closes it too
        for engine in (self._engine, self._read_engine):
            if engine is not None:
                await engine.dispose()
        self._engine = self._read_engine = self._hot = None

    async def ping(self) -> bool:
        try:
            await self._read(scalar, SELECT_1)
            return True
        except (UnavailableError, OSError):
            return False
        except Exception:  # a driver error of any kind means "not serving"
            log.exception("store ping failed")
            return False

    def transaction(self) -> AsyncContextManager[StoreConnection]:
        """A write transaction: ``async with store.transaction() as conn``; COMMIT when the body completes."""
        if self._runner is not None:
            return self._runner.transaction()  # no generator around it: two of these a cycle
        return PgConnection(lambda: _pg_connection(self._pg_engine().begin(), self.breaker))

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[StoreConnection]:
        """A read-only connection: on SQLite a deferred BEGIN, so readers never queue behind writers."""
        runner = self._runner
        if runner is None:
            if self._read_engine is None:
                raise UnavailableError("store is not open")
            async with PgConnection(lambda: _pg_connection(self._read_engine.connect(),  # type: ignore[union-attr]
                                                            self.breaker)) as reader:
                yield reader
            return
        async with runner.reader() as snapshot:
            yield snapshot

    async def checkpoint(self) -> None:
        """Flush the SQLite WAL into the database file and truncate it (deleted values leave the disk)."""
        if self._runner is not None:
            await self._runner.checkpoint()

    async def _clean_files(self) -> bool:
        """Leave nothing of deleted sensitive answers in the files (core/store/sealed.py); True when done."""
        if self._runner is not None:
            return await self._runner.checkpoint()
        if self._hot is None:
            raise UnavailableError("store is not open")
        await self._hot.execute_alone(REWRITE)
        return True

    # -- running units of work -------------------------------------------------

    def _pg_engine(self) -> AsyncEngine:
        if self._engine is None:
            raise UnavailableError("store is not open")
        return self._engine

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        runner = self._runner
        if runner is not None:
            return await runner.read(fn, *args)
        breaker = self.breaker
        if breaker.lost_since is not None:
            breaker.admit()
        try:
            value = await self._read_pg(fn, *args)
        except UnavailableError as e:
            breaker.failed(e)
            raise
        if breaker.lost_since is not None:
            breaker.succeeded()
        return value

    def invalidate_pools(self) -> None:
        """The server went away: pooled connections, and those the hot units keep idle, are replaced at their next
        checkout (SQLAlchemy's whole-pool invalidation, closed without a round trip): none fails a call once back."""
        if self._hot is not None:
            self._hot.release_idle()
        for engine in (self._engine, self._read_engine):
            if engine is not None:
                engine.sync_engine.pool._invalidate(None)  # type: ignore[arg-type]

    async def _read_pg(self, fn: Callable[..., T], *args: Any) -> T:
        if self._read_engine is None:
            raise UnavailableError("store is not open")
        for attempt in (1, 2):
            try:
                async with self._read_engine.connect() as conn:
                    return await conn.run_sync(fn, *args)
            except OSError as e:  # no connection to be had: a restart, a refused or reset connect
                raise UnavailableError("the store does not answer") from e
            except DBAPIError as e:
                # A pooled connection the server dropped: SQLAlchemy has invalidated the pool; a read is safe to repeat.
                if attempt == 2 or not e.connection_invalidated:
                    raise_translated(e)
                    raise
                log.warning("store: a pooled connection was dead; reading again on a fresh one")
        raise AssertionError("unreachable")

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        runner = self._runner
        if runner is not None:
            return await runner.write(fn, *args)
        async with self.transaction() as conn:
            return await conn.run(fn, *args)

    async def _on(self, conn: StoreConnection | None, fn: Callable[..., T], *args: Any) -> T:
        """In the caller's transaction when given one, else as a read of its own."""
        if conn is not None:
            return await conn.run(fn, *args)
        return await self._read(fn, *args)

    async def _on_raw(self, conn: StoreConnection | None, fn: Callable[..., T], *args: Any) -> T:
        """SQLite: ``fn(raw connection, *args)`` (core/store/sqliteunits.py), in ``conn`` or as a read of its own."""
        if self._runner is None:
            raise UnavailableError("store is not open")
        return await self._runner.run_raw(conn, fn, *args)

    # -- requests --------------------------------------------------------------

    async def get_request(self, tenant_id: str, request_id: str, *,
                          conn: StoreConnection | None = None) -> dict[str, Any] | None:
        if self._lite is not None:
            return await self._on_raw(conn, self._lite.request, tenant_id, request_id, None)
        return await self._on(conn, first_request, GET_REQUEST, {"id": request_id, "tenant_id": tenant_id})

    async def get_request_by_unique_id(self, tenant_id: str, unique_id: str, *,
                                       conn: StoreConnection | None = None) -> dict[str, Any] | None:
        if self._lite is not None:
            return await self._on_raw(conn, self._lite.request, tenant_id, None, unique_id)
        return await self._on(conn, first_request, GET_REQUEST_BY_UNIQUE_ID,
                              {"tenant_id": tenant_id, "unique_id": unique_id})

    async def get_request_with_deliveries(self, tenant_id: str, *, request_id: str | None = None,
                                          unique_id: str | None = None) -> RequestWithDeliveries | None:
        """The row and its delivery rows (channel, target, status, attempts, last_error, updated_at), in one
        statement, by id or by the agent's unique_id."""
        if self._hot is not None:
            return await self._hot.request_with_deliveries(tenant_id, request_id=request_id, unique_id=unique_id)
        if self._lite is not None:
            return await self._on_raw(None, self._lite.request_with_deliveries, tenant_id, request_id, unique_id)
        raise UnavailableError("store is not open")

    async def create_request(self, conn: StoreConnection, row: Mapping[str, Any], *, journal: Mapping[str, Any],
                             notify: Mapping[str, Any] | None = None) -> JournalEntry | None:
        """Insert and journal as one unit of work (NOTIFY folded into the journal's statement on PostgreSQL);
        None when (tenant, unique_id) exists already. On PostgreSQL, as its transaction's first unit it is one
        statement that commits at once (core/store/pgunits.py), so it must also be the transaction's last."""
        if self._lite is not None:
            return await self._on_raw(conn, self._lite.create, dict(row), entry_row(**journal))
        args = (dict(row), entry_row(**journal), self._notify_arg(notify))
        if self._hot is not None and conn.commit_alone():
            return await self._hot.create(*args, fallback=lambda: self._write(self._create_unit, *args))
        return await conn.run(self._create_unit, *args)

    def _create_unit(self, c: Connection, row: dict[str, Any], entry: dict[str, Any],
                     notify: tuple[str, Mapping[str, Any]] | None) -> JournalEntry | None:
        if c.execute(self._inserts.request, row).rowcount != 1:
            return None
        if row.get("run_id") is not None:
            # A run named by use is made with its first request (tenant-scoped, unregistered).
            self.runs.ensure_in(c, row["tenant_id"], row["run_id"], row["created_by"], row["created_at"])
        return self.journal.append_in(c, entry, notify)

    async def resolve(self, conn: StoreConnection, *, request_id: str, tenant_id: str, status: str, now: float,
                      values: Mapping[str, Any], require_unexpired: bool, journal: Mapping[str, Any],
                      notify: Mapping[str, Any] | None = None, with_deliveries: bool = True) -> Resolution | None:
        """Compare-and-set pending → ``status`` and journal it, as one unit of work; None when another
        writer won. ``journal`` is the entry's fields but its run id (the row's is used). On PostgreSQL,
        as a transaction's first unit it commits at once (see ``create_request`` and pgunits.py)."""
        # A sensitive answer's sealed parts go to their own table (core/store/sealed.py), in the same unit.
        sets, pair = split({"status": status, "resolved_at": now, **values})
        where = {"w_id": request_id, "w_tenant_id": tenant_id, "w_now": now}
        done = None
        try:
            done = await self._change(conn, RESOLVE[require_unexpired], {**sets, **where}, sets, require_unexpired,
                                      journal, notify, with_deliveries, pair)
        finally:
            # An answer not taken may have left its sealed parts in a row version undone: clean the files.
            self.sealed.dirty = self.sealed.dirty or (pair is not None and done is None)
        return done

    async def cancel(self, conn: StoreConnection, *, request_id: str, tenant_id: str, now: float, principal: str,
                     journal: Mapping[str, Any], notify: Mapping[str, Any] | None = None) -> Resolution | None:
        params = {"w_id": request_id, "w_tenant_id": tenant_id, "w_now": now, "w_principal": principal}
        sets = {"status": "cancelled", "resolved_at": now, "resolved_by": principal, "resolved_via": "api"}
        return await self._change(conn, CANCEL_RETURNING, params, sets, None, journal, notify, True, None)

    async def _change(self, conn: StoreConnection, stmt: Any, params: dict[str, Any], sets: dict[str, Any],
                      require_unexpired: bool | None, journal: Mapping[str, Any], notify: Mapping[str, Any] | None,
                      with_deliveries: bool, pair: tuple[str, str] | None) -> Resolution | None:
        if self._lite is not None:
            return await self._on_raw(conn, self._lite.change, sets, params, require_unexpired, journal,
                                      with_deliveries, pair)
        args = (stmt, params, dict(journal), self._notify_arg(notify), with_deliveries, pair)
        if self._hot is not None and conn.commit_alone():
            return await self._hot.change(sets=sets, where=params, require_unexpired=require_unexpired,
                                          journal=journal, notify=args[3], with_deliveries=with_deliveries,
                                          sealed=pair, fallback=lambda: self._write(self._resolve_unit, *args))
        return await conn.run(self._resolve_unit, *args)

    def _resolve_unit(self, c: Connection, stmt: Any, params: dict[str, Any], journal: dict[str, Any],
                      notify: tuple[str, Mapping[str, Any]] | None, with_deliveries: bool,
                      pair: tuple[str, str] | None) -> Resolution | None:
        changed = c.execute(stmt, params).mappings().first()
        if changed is None:
            return None
        row = carrying(dict(changed), pair)
        if pair is not None:
            insert_in(c, row, pair)
        deliveries: list[dict[str, Any]] = []
        if with_deliveries:
            deliveries = all_rows(c, DELIVERIES_FOR_REQUEST,
                                  {"tenant_id": row["tenant_id"], "request_id": row["id"]})
        if notify is not None:
            notify = (notify[0], {**notify[1], "run_id": row["run_id"]})
        entry = self.journal.append_in(c, entry_row(**journal, run_id=row["run_id"]), notify)
        return Resolution(row, deliveries, entry)

    def _notify_arg(self, payload: Mapping[str, Any] | None) -> tuple[str, Mapping[str, Any]] | None:
        return (NOTIFY_CHANNEL, payload) if payload is not None and self.is_postgres else None

    async def list_requests(self, tenant_id: str, *, status: str | None = None, run_id: str | None = None,
                            limit: int = 100, after: tuple[float, str] | None = None) -> list[dict[str, Any]]:
        return await self._read(all_rows, list_requests_statement(tenant_id, status=status, run_id=run_id,
                                                                  limit=limit, after=after))

    async def overdue_requests(self, now: float, *, limit: int = 500) -> list[tuple[str, str, str | None]]:
        """Pending requests past their deadline: (id, tenant id, on_timeout_json: None for "expire")."""
        rows = await self._read(all_rows, overdue_statement(now, limit=limit))
        return [(r["id"], r["tenant_id"], r["on_timeout_json"]) for r in rows]

    # -- journal (core/store/journal.py) ---------------------------------------

    async def append_journal(self, conn: StoreConnection, **fields: Any) -> JournalEntry:
        # Always in the caller's transaction: its body may still fail after the entry and roll it back.
        return await self.journal.append(conn, **fields)

    async def journal_entries(self, **query: Any) -> list[JournalEntry]:
        return await self.journal.entries(**query)

    async def journal_rows_for_run(self, *, tenant_id: str, run_id: str, limit: int = 10000) -> list[JournalEntry]:
        return await self.journal.for_run(tenant_id=tenant_id, run_id=run_id, limit=limit)

    async def verify_journal(self, *, anchor: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
        return await self.journal.verify(sealer=Sealer(self.secret), anchor=anchor)

    # -- api keys --------------------------------------------------------------

    async def insert_api_key(self, row: Mapping[str, Any]) -> None:
        await self._write(rowcount, INSERT_API_KEY, dict(row))

    async def list_api_keys(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        stmt = select(api_keys_t).order_by(api_keys_t.c.created_at)
        if tenant_id is not None:
            stmt = stmt.where(api_keys_t.c.tenant_id == tenant_id)
        return await self._read(all_rows, stmt)

    async def revoke_api_key(self, key_id: str, *, now: float) -> bool:
        return await self._write(rowcount, REVOKE_API_KEY, {"w_id": key_id, "w_now": now}) == 1

    # -- annotations -----------------------------------------------------------

    async def insert_annotation(self, conn: StoreConnection, row: Mapping[str, Any]) -> int:
        """The new annotation's seq; ConflictError when its ``supersedes`` has a successor already."""
        return await conn.run(inserted_pk, INSERT_ANNOTATION, dict(row))

    async def get_annotation(self, tenant_id: str, annotation_id: str) -> dict[str, Any] | None:
        return await self._read(first, GET_ANNOTATION, {"tenant_id": tenant_id, "annotation_id": annotation_id})

    async def list_annotations(self, tenant_id: str, run_id: str, *, after_seq: int = 0,
                               limit: int = 100) -> list[dict[str, Any]]:
        stmt = (select(annotations_t)
                .where(and_(annotations_t.c.tenant_id == tenant_id, annotations_t.c.run_id == run_id,
                            annotations_t.c.seq > after_seq))
                .order_by(annotations_t.c.seq).limit(limit))
        return await self._read(all_rows, stmt)

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
        return await self._read(all_rows, stmt)

    # -- pruning (core/store/pruning.py) ---------------------------------------

    async def prune_spent(self, *, before: float, now: float, limit: int = 1000) -> dict[str, int]:
        """Delete what requests no longer pending left behind before ``before``: button tokens, message refs,
        links and per-request state (and sign-ins through the identity provider past their end at ``now``);
        at most ``limit`` rows of each per call. How many went, per table."""
        return await self._write(prune_spent, before, limit, now)

    # -- notifications and leadership (PostgreSQL) -----------------------------

    async def notify(self, conn: StoreConnection, payload: Mapping[str, Any]) -> None:
        """Queue a NOTIFY in this transaction: other instances hear it only once it commits."""
        if self.is_postgres:
            await conn.run(rowcount, NOTIFY, {"ch": NOTIFY_CHANNEL, "p": json.dumps(payload)})

    def asyncpg_dsn(self) -> str:
        """For asyncpg's own connections (the listener, leader locks): a query parameter asyncpg does not
        know is a server setting, so they carry the instance's application_name too."""
        url = make_url(self.async_url).set(drivername="postgresql")
        if "application_name" not in url.query:
            url = url.update_query_dict({"application_name": self.application_name})
        return url.render_as_string(hide_password=False)

    async def try_leadership(self, name: str) -> bool:
        """Lead the named loop (PostgreSQL: an advisory lock on a connection of its own; SQLite: always)."""
        return await self.leadership.take(name)

    async def leadership_alive(self, name: str) -> bool:
        return await self.leadership.alive(name)

    async def release_leadership(self, name: str) -> None:
        await self.leadership.release(name)

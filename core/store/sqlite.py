"""SQLite driven from one dedicated thread: every statement of every connection runs there.

One thread switch per unit of work, write transactions ordered on the thread rather than on an
asyncio lock, results handed to the event loop in batches (the measured design of the bench's
SQLite figures: keep it). The hot units run on the raw sqlite3 connection beneath SQLAlchemy's
(core/store/sqliteunits.py); a write that is its transaction's only unit runs from BEGIN IMMEDIATE
to COMMIT in one job.

A hot unit arriving while the thread is idle with nothing queued is run by the event loop itself, the
thread kept off the connections meanwhile (``_DbThread.try_inline``): tens of microseconds of SQLite,
against a hand-off, a wake-up of the loop and, measured on a 2-core machine, the thread waiting for the
GIL on each return from SQLite while the loop ran callbacks. The loop's writer never waits for a lock
another process holds: that unit goes to the thread, which does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from handraise.core.errors import UnavailableError
from handraise.core.store.units import StoreConnection, raise_translated, raise_translated_sqlite

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a statement waits for another process's lock (the ``handraise`` CLI's, a backup's).
BUSY_TIMEOUT_MS = 10000
# How long the checkpoint that truncates the WAL waits for another process's readers (``checkpoint_job``).
CHECKPOINT_WAIT_MS = 100


class WriteQueue:
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
        self._writes: deque[WriteQueue] = deque()
        self._active: WriteQueue | None = None
        self._stopping = False
        self._running = False  # the thread is running a job (set under _cv; cleared once the job's fn returned)
        self._inline = False  # the event loop runs a job itself (try_inline): the thread keeps off
        self._done_lock = threading.Lock()
        self._done: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...], *, tx: WriteQueue | None = None,
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

    def cpu_seconds(self) -> float:
        """The CPU time this thread has used so far (the bench's measure of the store's work per cycle)."""
        ident = self._thread.ident
        return 0.0 if ident is None else time.clock_gettime(time.pthread_getcpuclockid(ident))

    def stop(self) -> None:
        """The thread ends once nothing it can run is left."""
        with self._cv:
            self._stopping = True
            self._cv.notify()

    def try_inline(self, *, write: bool) -> bool:
        """True when the caller may run one job itself, now, on its own thread, with the thread kept off the
        connections until ``end_inline``: only when the thread would run it at once anyway (idle, nothing
        queued, no write transaction open for a write; for a read, none with a statement queued)."""
        with self._cv:
            if self._running or self._inline or self._reads or self._stopping or self._writes:
                return False
            if self._active is not None and (write or self._active.jobs):
                return False
            self._inline = True
            return True

    def end_inline(self) -> None:
        with self._cv:
            self._inline = False
            self._cv.notify()

    def _next(self) -> _Job | None:
        with self._cv:
            self._running = False
            while True:
                if self._inline:
                    self._cv.wait()
                    continue
                if self._active is None and self._writes:
                    self._active = self._writes.popleft()
                active = self._active
                if active is not None and active.jobs:
                    job = active.jobs.popleft()
                    if job[4]:
                        self._active = None
                    self._running = True
                    return job
                if self._reads:
                    self._running = True
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
            # Off the connections before the result can reach the loop, whose next unit may then run inline
            # (a plain store: try_inline reads it under _cv, and _next waits while _inline is set).
            self._running = False
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


async def _others_turn() -> None:
    # After a unit the loop ran itself, the tasks ready meanwhile run before its caller goes on, as they
    # did while a hand-off was awaited: a sweep expiring thousands of requests one unit at a time never
    # holds the loop for the whole of it.
    await asyncio.sleep(0)


async def result(future: asyncio.Future[T]) -> T:
    return await future


async def result_to_the_end(future: asyncio.Future[T]) -> T:
    # A cancelled caller must not cancel a COMMIT that is queued: the transaction's body completed.
    return await asyncio.shield(future)


class SqliteRunner:
    """Owns the SQLite engine, its database thread and the connections used on that thread."""

    def __init__(self, *, url: str) -> None:
        # hide_parameters: a statement's values (answers) never appear in an exception's text.
        # max_overflow=-1: a checkout never waits, which on the one thread would wait forever.
        self.engine: Engine = create_engine(url, pool_size=2, max_overflow=-1, hide_parameters=True)
        configure_sqlite(self.engine)
        self.thread = _DbThread(name="handraise-sqlite")
        self._writing: set[asyncio.Task[Any] | None] = set()
        # Used on the database thread, or by the loop while the thread keeps off (``try_inline``):
        self._reader: Connection | None = None  # autocommit: a lone SELECT needs no BEGIN/ROLLBACK
        self._writer: Connection | None = None
        # The loop's own writer (``_write_raw_inline``), used only while the thread keeps off: it never
        # waits for a lock (busy_timeout 0), so another process's write cannot stall the event loop.
        self._loop_writer: Connection | None = None

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
        try:
            return await result(self.thread.submit(self._read_job, (fn, args)))
        except DBAPIError as e:
            raise_translated(e)
            raise

    async def read_raw(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(raw sqlite3 connection, *args)`` on the autocommit reader: each statement its own snapshot."""
        try:
            if self.thread.try_inline(write=False):
                try:
                    out = self._read_raw_job(fn, args)
                finally:
                    self.thread.end_inline()
                await _others_turn()
                return out
            return await result(self.thread.submit(self._read_raw_job, (fn, args)))
        except sqlite3.Error as e:
            raise_translated_sqlite(e)
            raise

    async def write_raw(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(raw sqlite3 connection, *args)`` in a transaction of its own (BEGIN IMMEDIATE … COMMIT): run by
        the loop itself while the thread is idle, else one submit. Unlike ``write`` it may be called inside an
        open ``transaction()`` that has run nothing (``SqliteConnection.commit_alone``): that one takes no
        place in the thread's order."""
        try:
            if self.thread.try_inline(write=True):
                try:
                    done, out = self._write_raw_inline(fn, args)
                finally:
                    self.thread.end_inline()
                if done:
                    await _others_turn()
                    return out
            return await result(self.thread.submit(self._write_raw_job, (fn, args), tx=WriteQueue(), last=True))
        except sqlite3.Error as e:
            raise_translated_sqlite(e)
            raise

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` in a transaction of its own (BEGIN IMMEDIATE … COMMIT): one submit."""
        if asyncio.current_task() in self._writing:
            raise RuntimeError("a second write transaction inside an open one on the same task")
        try:
            return await result(self.thread.submit(self._write_job, (fn, args), tx=WriteQueue(), last=True))
        except DBAPIError as e:
            raise_translated(e)
            raise

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[SqliteConnection]:
        snapshot = SqliteConnection(self, write=False)
        try:
            yield snapshot
        finally:
            end = snapshot.end(commit=False)
            if end is not None:
                await result_to_the_end(end)

    async def run_raw(self, conn: StoreConnection | None, fn: Callable[..., T], *args: Any) -> T:
        """``fn(raw connection, *args)`` in ``conn`` (one of this runner's), or as a read of its own; a write
        that is its transaction's only unit runs from BEGIN to COMMIT in one job."""
        if conn is None:
            return await self.read_raw(fn, *args)
        if conn.commit_alone():
            return await self.write_raw(fn, *args)
        assert isinstance(conn, SqliteConnection)
        return await conn.run_raw(fn, *args)

    # The jobs below run on the database thread.

    def _read_job(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        c = self._reader
        if c is None:
            c = self._reader = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            return fn(c, *args)
        finally:
            c.rollback()  # ends SQLAlchemy's bookkeeping only; no transaction is open in autocommit

    def _read_raw_job(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        c = self._reader
        if c is None:
            c = self._reader = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return fn(c.connection.driver_connection, *args)

    def _write_raw_job(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        c = self._writer
        if c is None:
            c = self._writer = self.engine.connect()
        if c.in_transaction():  # left open by a transaction whose end never came: never carry it over
            c.rollback()
        raw = c.connection.driver_connection
        raw.execute("BEGIN IMMEDIATE")
        try:
            out = fn(raw, *args)
            raw.commit()
            return out
        except BaseException:
            if raw.in_transaction:
                raw.rollback()
            raise

    def _write_raw_inline(self, fn: Callable[..., T], args: tuple[Any, ...]) -> tuple[bool, Any]:
        """``_write_raw_job`` run by the event loop itself, the thread kept off (``try_inline``): no
        hand-off, no wake-up. ``(False, None)`` when the write lock is another process's (the ``handraise``
        CLI's): nothing ran, and the caller queues the unit for the thread, which waits for the lock."""
        c = self._loop_writer
        if c is None:
            c = self._loop_writer = self.engine.connect()
            c.connection.driver_connection.execute("PRAGMA busy_timeout=0")
        raw = c.connection.driver_connection
        try:
            raw.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return False, None
            raise
        try:
            out = fn(raw, *args)
            raw.commit()
            return True, out
        except BaseException:
            if raw.in_transaction:
                raw.rollback()
            raise

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

    async def checkpoint(self) -> bool:
        """Copy the WAL into the database file and truncate it; False when a reader (of another process) kept
        it from finishing, and the WAL still holds what it held."""
        return await result(self.thread.submit(self.checkpoint_job, (), tx=WriteQueue(), last=True))

    async def migrate(self, upgrade: Callable[[Connection], None]) -> None:
        await result(self.thread.submit(self.migrate_job, (upgrade,), tx=WriteQueue(), last=True))

    def checkpoint_job(self) -> bool:
        # Runs as a write transaction's only statement: no writer of ours is mid-transaction, which
        # TRUNCATE would wait for. Read to the end: an unfinished statement keeps a read transaction open.
        # Its row is (busy, WAL frames, frames copied): busy 1 when it could not finish. Another process's
        # reader would keep it waiting for the whole busy timeout, and the database thread with it: it waits
        # CHECKPOINT_WAIT_MS at most, and the sweeper's next tick tries again (core/store/sealed.py).
        def run(c: Connection) -> list[Any]:
            c.exec_driver_sql(f"PRAGMA busy_timeout={CHECKPOINT_WAIT_MS}")
            try:
                return list(c.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").all())
            finally:
                c.exec_driver_sql(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")

        rows = self._read_job(run, ())
        return bool(rows) and rows[0][0] == 0

    def migrate_job(self, upgrade: Callable[[Connection], None]) -> None:
        with self.engine.begin() as c:
            upgrade(c)

    def close_job(self) -> None:
        for c in (self._reader, self._writer, self._loop_writer):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        self._reader = self._writer = self._loop_writer = None
        self.engine.dispose()

    async def close(self) -> None:
        try:
            await result_to_the_end(self.thread.submit(self.close_job, (), must_run=True))
        finally:
            self.thread.stop()


class _Transaction:
    """``async with runner.transaction() as tx``: COMMIT when the body completes, else ROLLBACK (a class, not
    a generator: the cheaper ``async with`` on every write)."""

    __slots__ = ("_runner", "_task", "_tx")

    def __init__(self, runner: SqliteRunner) -> None:
        self._runner = runner

    async def __aenter__(self) -> SqliteConnection:
        self._task = self._runner.enter_write()
        self._tx = SqliteConnection(self._runner, write=True)
        return self._tx

    async def __aexit__(self, exc_type: type[BaseException] | None, *_exc: Any) -> None:
        self._runner.leave_write(self._task)
        end = self._tx.end(commit=exc_type is None)
        # A failed body's ROLLBACK is queued, not awaited: the next transaction runs after it anyway.
        if end is not None and exc_type is None:
            await result_to_the_end(end)


class SqliteConnection(StoreConnection):
    """A write transaction (or a read snapshot) on the database thread; each ``run`` is one submit."""

    def __init__(self, runner: SqliteRunner, *, write: bool) -> None:
        self._runner = runner
        self._tx: WriteQueue | None = None  # a writer's place in the thread's order, from its first statement
        self._write = write
        self._used = False
        self._alone = False
        self._conn: Connection | None = None  # set and used on the database thread only

    def commit_alone(self) -> bool:
        """A writer whose first unit is also its last runs it in one job, BEGIN IMMEDIATE to COMMIT
        (``SqliteRunner.write_raw``): one trip to the database thread instead of two."""
        if not self._write or self._used or self._alone:
            return False
        self._alone = True
        return True

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._alone:
            raise RuntimeError("a unit that commits alone must be the last of its transaction")
        self._used = True
        if self._write and self._tx is None:
            self._tx = WriteQueue()
        try:
            return await result(self._runner.thread.submit(self._job, (fn, args), tx=self._tx))
        except DBAPIError as e:
            raise_translated(e)
            raise
        except sqlite3.Error as e:  # a raw unit's (run_raw)
            raise_translated_sqlite(e)
            raise

    async def run_raw(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(raw sqlite3 connection, *args)`` in this transaction (core/store/sqliteunits.py)."""
        return await self.run(_on_raw, fn, *args)

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


def _on_raw(c: Connection, fn: Callable[..., T], *args: Any) -> T:
    return fn(c.connection.driver_connection, *args)


def configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin (BEGIN IMMEDIATE below).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
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

"""PostgreSQL's hot units of work (create, resolve or cancel, a request with its deliveries) as prepared statements on the raw asyncpg connection, not through SQLAlchemy (the statements: core/store/pgstatements.py).

Each write is one statement: the change, the journal entry chained after the tenant's head, the head
moved, the NOTIFY. The entry's HMAC needs the head's hash and the key never leaves the process, so the
head is read beforehand: this instance remembers the head it last wrote or read (``ChainHeads``) and
the statement checks it (its guard fails, and nothing of it is applied, when the head is not where the
entry follows; the journal's primary key (tenant, seq) is the last arbiter). A tenant's writes on this
instance go through its lane: one batch at a time, a write that finds the lane free alone at once, those
arriving meanwhile together in the next batch, pipelined in one implicit transaction (one round trip,
one commit). A stale head costs a retry, never a broken chain; once another instance moved the head
under this one twice in a row, the tenant's batches lock the head first (BEGIN, SELECT … FOR UPDATE, the batch,
COMMIT) while both write, and after a few misses in a row a unit runs on the store's locked path.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from handraise.core.errors import UnavailableError
from handraise.core.store.breaker import StoreBreaker
from handraise.core.store.sealed import Pair, carrying, held
from handraise.core.store.journal import GENESIS_HASH, JournalEntry, chain_hash, entry_row
from handraise.core.store.pgstatements import (
    ANALYZE,
    ANALYZED,
    CHANGES,
    CONDITIONS,
    CREATES,
    DELIVERY_COLUMNS,
    GET_JOINED,
    GET_SEALED,
    LOCK_HEAD,
    NEVER_ANALYZED,
    READ_HEAD,
    REQUEST_DEFAULTS,
    Statement,
)
from handraise.core.store.statements import Resolution
from handraise.core.store.units import storage_errors

log = logging.getLogger(__name__)

# Misses in a row (another writer moved the head each time) before the unit takes the locked path.
MAX_HEAD_MISSES = 3
# After the head moved under this instance twice in a row (another instance writes the tenant too), the
# tenant's batches here lock the head first, until this long has passed without finding it moved by
# another (while two instances write at once, a batch built on the head this one last saw would mostly
# find it moved). A single move is not enough: this instance's own locked path moves it too.
CONTENDED_SECONDS = 2.0


class HeadMoved(Exception):
    """Another writer moved the tenant's head since this instance read it: read it again, rebuild the entry."""


# A new database's tables have no planner statistics until autovacuum first analyzes them, a minute or
# more after they grew. Without them every index that starts with the tenant costs the same as the key
# the hot statements look a request up by (its id, or the tenant and its unique_id), and PostgreSQL's
# cached plan may take one: each read and compare-and-set then walks the tenant's rows (measured: 0.3 ms
# of backend CPU a statement at 3,000 rows, growing with them). So after its first STATISTICS_AFTER
# writes, an instance analyzes these tables if nothing has yet.
STATISTICS_AFTER = 200

# At most this many writes of one tenant in one batch (one round trip, one transaction, one commit).
MAX_BATCH = 64
# What a unit's future holds when it must take the store's locked path (its caller runs that, outside the lane).
_LOCKED_PATH = object()


class _Unit:
    """One write waiting for its place in its tenant's chain: the entry; ``prepare(params)``, which adds the
    unit's own parameters to the placed entry's and returns its statement; ``finish(row, params)``, what the
    unit returns (``row`` None when it changed nothing); and the future its caller awaits."""

    __slots__ = ("entry", "prepare", "finish", "future")

    def __init__(self, entry: Mapping[str, Any], prepare: Callable[[dict[str, Any]], Statement],
                 finish: Callable[[Any, dict[str, Any]], Any]) -> None:
        self.entry = entry
        self.prepare = prepare
        self.finish = finish
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def settle(self, result: Any) -> None:
        if not self.future.done():
            self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class _Lane:
    """A tenant's writes on this instance: whether a batch is on its way, and those waiting for the next."""

    __slots__ = ("busy", "queue", "task", "contended_until")

    def __init__(self) -> None:
        self.busy = False
        # Until when (time.monotonic) its batches lock the head first (CONTENDED_SECONDS).
        self.contended_until = 0.0
        self.queue: collections.deque[_Unit] = collections.deque()
        self.task: asyncio.Task[None] | None = None


class ChainHeads:
    """The last head (seq, hash) this instance wrote or read per tenant, and each tenant's lane."""

    def __init__(self) -> None:
        self._heads: dict[str, tuple[int, str]] = {}
        self._lanes: dict[str, _Lane] = {}

    def lane(self, tenant_id: str) -> _Lane:
        lane = self._lanes.get(tenant_id)
        if lane is None:
            lane = self._lanes[tenant_id] = _Lane()
        return lane

    def get(self, tenant_id: str) -> tuple[int, str] | None:
        return self._heads.get(tenant_id)

    def set(self, tenant_id: str, seq: int, digest: str) -> None:
        self._heads[tenant_id] = (seq, digest)

    def forget(self, tenant_id: str) -> None:
        self._heads.pop(tenant_id, None)


Fallback = Callable[[], Awaitable[Any]]
Planned = list[tuple[_Unit, dict[str, Any]]]


class PgHotUnits:
    """The hot units on raw connections checked out of the store's two SQLAlchemy pools (so an
    instance's connection budget is unchanged): writes from the writers' pool, reads from the readers'."""

    def __init__(self, *, write_engine: AsyncEngine, read_engine: AsyncEngine, key: Callable[[], bytes],
                 breaker: StoreBreaker, keep_idle: int = 0) -> None:
        self._write_engine = write_engine
        self._keep_idle = keep_idle
        self._idle: dict[AsyncEngine, list[Any]] = {write_engine: [], read_engine: []}
        # The store's: open while the server is gone, so these units fail fast like the others.
        self._breaker = breaker
        self._read_engine = read_engine
        self._key = key
        self.heads = ChainHeads()
        # Writes until this instance makes sure the hot tables have statistics; its task, once started.
        self._writes_before_statistics = STATISTICS_AFTER
        self.statistics: asyncio.Task[None] | None = None

    def release_idle(self) -> None:
        """Give the connections kept idle back to their pools (before the pools are disposed, or when the
        server went away: the pool then replaces them at their next checkout, as it does its own; one the
        server closed while kept is found closed before use and replaced)."""
        for idle in self._idle.values():
            while idle:
                idle.pop().close()

    async def _fetch(self, engine: AsyncEngine, statement: Statement, args: list[list[Any]]) -> list[Any]:
        """The statement once per argument list: one list, one statement; several, pipelined in one round
        trip and one implicit transaction (asyncpg's fetchmany: Bind/Execute each, one Sync), so they
        commit together or not at all. The rows of all, in order."""
        if len(args) == 1:
            return await self._connected(engine, lambda conn: conn.fetch(statement.sql, *args[0]))
        return await self._connected(engine, lambda conn: conn.fetchmany(statement.sql, args))

    async def _connected(self, engine: AsyncEngine, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
        """``work(conn)`` on a pooled connection's raw asyncpg connection, outside any transaction; errors
        leave translated (units.storage_errors), the guard's and a clash on the journal's key as HeadMoved.
        A few connections are kept checked out between statements (``keep_idle`` per pool), which spares
        the pool's checkout and checkin (about 55 Python calls, 17 µs) on most statements. A server that is
        gone makes the pool drop every connection of its generation, as SQLAlchemy does on a disconnect; a
        statement cut short (cancelled) drops its connection, whose protocol state is unknown."""
        breaker = self._breaker
        if breaker.lost_since is not None:
            breaker.admit()
            self.release_idle()  # kept from before the server went: the pool replaces them
        try:
            with storage_errors():
                idle = self._idle[engine]
                fairy = idle.pop() if idle else await engine.raw_connection()
                conn = fairy.driver_connection
                if conn.is_closed():
                    # Lost while idle or pooled (a restart): nothing was sent on it, so take a fresh one.
                    engine.sync_engine.pool._invalidate(fairy)  # noqa: SLF001
                    await greenlet_spawn(fairy.close)
                    fairy = await engine.raw_connection()
                    conn = fairy.driver_connection
                try:
                    result = await work(conn)
                except BaseException as e:
                    if _sound(e) and not conn.is_closed():
                        fairy.close()  # the statement's own error: the connection is fine, no transaction is open
                    else:
                        pool = engine.sync_engine.pool
                        pool._invalidate(fairy, e if isinstance(e, Exception) else None)  # noqa: SLF001
                        await greenlet_spawn(fairy.close)
                    # The guard (the head did not follow the change), or the journal's key taken by another
                    # writer (the request's and the run's inserts skip a duplicate).
                    if isinstance(e, asyncpg.DivisionByZeroError) or (
                            isinstance(e, asyncpg.UniqueViolationError) and e.table_name == "journal"):
                        raise HeadMoved from e
                    raise
                if len(idle) < self._keep_idle:
                    idle.append(fairy)
                else:
                    fairy.close()
        except UnavailableError as e:
            breaker.failed(e)
            self.release_idle()
            raise
        if breaker.lost_since is not None:
            breaker.succeeded()
        return result

    # -- reads -----------------------------------------------------------------

    async def request_with_deliveries(self, tenant_id: str, *, request_id: str | None, unique_id: str | None
                                      ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """By id or by the agent's unique_id; a dead pooled connection is read again once."""
        if request_id is not None:
            statement, params = GET_JOINED["id"], {"tenant_id": tenant_id, "id": request_id}
        else:
            statement, params = GET_JOINED["unique_id"], {"tenant_id": tenant_id, "unique_id": unique_id}
        for attempt in (1, 2):
            try:
                rows = await self._fetch(self._read_engine, statement, [statement.args(params)])
                break
            except Exception as e:
                if attempt == 2 or not _dead_connection(e):
                    raise
                log.warning("store: a pooled connection was dead; reading again on a fresh one")
        if not rows:
            return None
        # The request's columns come first (r.*), the delivery's after them, its id last.
        width = len(rows[0]) - len(DELIVERY_COLUMNS) - 1
        request = dict(itertools.islice(rows[0].items(), width))
        deliveries = [dict(zip(DELIVERY_COLUMNS, itertools.islice(r.values(), width, None)))
                      for r in rows if r["delivery_id"] is not None]
        pair = None
        if held(request):
            found = await self._fetch(self._read_engine, GET_SEALED, [GET_SEALED.args(request)])
            pair = (found[0]["sealed"], found[0]["wrapped_key"]) if found else None
        return carrying(request, pair), deliveries

    async def execute_alone(self, sql: str) -> None:
        """``sql`` (statements without parameters) on a writers' connection, outside any transaction."""
        await self._connected(self._write_engine, lambda conn: conn.execute(sql))

    async def _read_head(self, tenant_id: str) -> tuple[int, str]:
        rows = await self._fetch(self._read_engine, READ_HEAD, [[tenant_id]])
        head = (0, GENESIS_HASH) if not rows else (rows[0]["seq"], rows[0]["hash"])
        self.heads.set(tenant_id, *head)
        return head

    # -- writes ----------------------------------------------------------------

    async def _chained(self, entry: Mapping[str, Any], prepare: Callable[[dict[str, Any]], Statement],
                       finish: Callable[[Any, dict[str, Any]], Any], fallback: Fallback) -> Any:
        """The unit with its entry placed after the tenant's head. One batch of a tenant's is on its way
        at a time; a write that finds none goes at once, alone, and those arriving meanwhile wait in the
        lane and go in the next batch together (``_drain``): one round trip and one commit for them all,
        in the order they came."""
        tenant_id = entry["tenant_id"]
        lane = self.heads.lane(tenant_id)
        unit = _Unit(entry, prepare, finish)
        if lane.busy:
            lane.queue.append(unit)
        else:
            lane.busy = True
            try:
                await self._run(tenant_id, [unit])
            finally:
                self._pass_on(tenant_id, lane)
        result = await unit.future
        if result is _LOCKED_PATH:
            return await fallback()
        return result

    def _pass_on(self, tenant_id: str, lane: _Lane) -> None:
        if lane.queue:
            lane.task = asyncio.ensure_future(self._drain(tenant_id, lane))
        else:
            lane.busy = False

    async def _drain(self, tenant_id: str, lane: _Lane) -> None:
        """The lane's waiting writes, a batch at a time, until none waits (a task of its own, so a caller
        that goes away does not take the others' batch with it)."""
        try:
            while lane.queue:
                batch = []
                while lane.queue and len(batch) < MAX_BATCH:
                    unit = lane.queue.popleft()
                    if not unit.future.done():  # its caller went away before it was sent
                        batch.append(unit)
                if batch:
                    await self._run(tenant_id, batch)
        finally:
            while lane.queue:
                lane.queue.popleft().future.cancel()
            lane.task = None
            lane.busy = False

    def _plan(self, key: bytes, head: tuple[int, str], units: list[_Unit]) -> tuple[Planned, Statement]:
        """The first units that share a statement, their entries chained one after the other from ``head``."""
        seq, prev_hash = head
        planned: Planned = []
        statement: Statement | None = None
        for unit in units[:MAX_BATCH]:
            digest = chain_hash(key, prev_hash=prev_hash, seq=seq + 1, **unit.entry)
            params = {f"e_{k}": v for k, v in unit.entry.items()}
            params.update(e_seq=seq + 1, e_prev_hash=prev_hash, e_hash=digest)
            shaped = unit.prepare(params)
            if statement is None:
                statement = shaped
            elif shaped is not statement:
                break
            planned.append((unit, params))
            seq, prev_hash = seq + 1, digest
        assert statement is not None
        return planned, statement

    async def _run(self, tenant_id: str, units: list[_Unit]) -> None:
        """Apply ``units`` in order, settling each one's future: its result, its error, or the locked path.

        A batch is one statement per unit, pipelined in one implicit transaction: each unit's entry follows
        the one before it, so a unit that changes nothing (another writer won, the request exists) leaves the
        head where the next one's guard fails, and the whole batch is undone unless every unit after it
        changed nothing too. So what a batch applies is always its first units. A head another writer moved
        means reading it and trying again, and when it moved again, locking it first for the batches of the
        next CONTENDED_SECONDS (past MAX_HEAD_MISSES, the locked path); a batch that failed with the head
        unmoved, or with a statement's own error, runs again one unit at a time, which says which."""
        key = self._key()
        lane = self.heads.lane(tenant_id)
        misses = 0
        pending = units
        try:
            while pending:
                if lane.contended_until > time.monotonic():
                    planned, rows = await self._locked(tenant_id, key, pending, lane)
                    pending = pending[len(planned):]
                    if rows is not None:
                        self._applied(tenant_id, planned, rows)
                    continue
                head = self.heads.get(tenant_id) or await self._read_head(tenant_id)
                planned, statement = self._plan(key, head, pending)
                pending = pending[len(planned):]
                try:
                    rows = await self._fetch(self._write_engine, statement, [statement.args(p) for _, p in planned])
                except HeadMoved:
                    moved = await self._read_head(tenant_id) != head
                    if moved:
                        misses += 1
                        if misses > 1:
                            # Moved again between reading it and the retry: another instance writes this
                            # tenant too. (Once is this instance's own locked path as often as not.)
                            lane.contended_until = time.monotonic() + CONTENDED_SECONDS
                        if misses < MAX_HEAD_MISSES:
                            pending = [u for u, _ in planned] + pending
                            continue
                    await self._undone(tenant_id, planned)
                    continue
                except Exception as e:
                    await self._failed(tenant_id, planned, e)
                    continue
                misses = 0
                self._applied(tenant_id, planned, rows)
        except Exception as e:  # reading the head failed (the server gone): every unit not settled fails with it
            for unit in units:
                unit.fail(e)
        except BaseException:
            for unit in units:
                unit.future.cancel()  # cut short (the caller or the lane's task cancelled): its outcome unknown
            raise

    async def _locked(self, tenant_id: str, key: bytes, pending: list[_Unit],
                      lane: _Lane) -> tuple[Planned, list[Any] | None]:
        """The next batch in a transaction that first locks the head and reads it (BEGIN, SELECT … FOR
        UPDATE, the batch pipelined, COMMIT), so no other writer moves it in between; the batch and its
        rows, or None when it failed (its units settled)."""
        box: list[Planned] = []

        async def work(conn: asyncpg.Connection) -> list[Any]:
            async with conn.transaction():
                locked = await conn.fetch(LOCK_HEAD.sql, tenant_id)
                head = (locked[0]["seq"], locked[0]["hash"]) if locked else (0, GENESIS_HASH)
                if head != self.heads.get(tenant_id):  # another writer was there since: still contended
                    lane.contended_until = time.monotonic() + CONTENDED_SECONDS
                self.heads.set(tenant_id, *head)
                planned, statement = self._plan(key, head, pending)
                box.append(planned)
                args = [statement.args(p) for _, p in planned]
                if len(args) == 1:
                    return await conn.fetch(statement.sql, *args[0])
                return await conn.fetchmany(statement.sql, args)

        try:
            rows = await self._connected(self._write_engine, work)
            return box[0], rows
        except HeadMoved:
            await self._undone(tenant_id, box[0])
        except Exception as e:
            await self._failed(tenant_id, box[0] if box else [(u, {}) for u in pending], e)
        return box[0] if box else [(u, {}) for u in pending], None

    async def _undone(self, tenant_id: str, planned: Planned) -> None:
        """A batch the guard undid with the head where it was (a unit changed nothing and a later one did;
        a row whose run id is not the caller's; a head record gone): one unit at a time says which; a unit
        alone goes to the locked path, which decides."""
        if len(planned) > 1:
            for unit, _ in planned:
                await self._run(tenant_id, [unit])
            return
        log.info("store: the journal head moved under every try, or did not move; appending on the locked path",
                 extra={"tenant_id": tenant_id})
        self.heads.forget(tenant_id)
        for unit, _ in planned:
            unit.settle(_LOCKED_PATH)

    async def _failed(self, tenant_id: str, planned: Planned, e: Exception) -> None:
        """A batch failed with a statement's own error (one unit at a time says whose) or the server gone."""
        if len(planned) > 1 and not isinstance(e, UnavailableError):
            for unit, _ in planned:
                await self._run(tenant_id, [unit])
        else:
            for unit, _ in planned:
                unit.fail(e)

    def _applied(self, tenant_id: str, planned: Planned, rows: list[Any]) -> None:
        by_seq = {row["entry_seq"]: row for row in rows}
        if self.statistics is None:
            self._writes_before_statistics -= len(by_seq)
            if self._writes_before_statistics <= 0:
                self.statistics = asyncio.ensure_future(self._ensure_statistics())
        for unit, params in planned:
            try:
                unit.settle(unit.finish(by_seq.get(params["e_seq"]), params))
            except Exception as e:  # noqa: BLE001 (the unit's caller gets it)
                unit.fail(e)
        if by_seq:
            last = planned[len(by_seq) - 1][1]
            if last["e_seq"] in by_seq:
                self.heads.set(tenant_id, last["e_seq"], last["e_hash"])
            else:  # not the first units: cannot be, but the head is then read again rather than guessed
                self.heads.forget(tenant_id)

    async def _ensure_statistics(self) -> None:
        """Analyze the hot tables if they never were (see STATISTICS_AFTER); a failure is only logged."""
        try:
            rows = await self._fetch(self._read_engine, NEVER_ANALYZED, [[list(ANALYZED)]])
            if rows[0]["n"]:
                await self._fetch(self._read_engine, ANALYZE, [[]])
                log.info("store: analyzed the new database's tables", extra={"tables": ANALYZED})
        except Exception as e:  # noqa: BLE001 (autovacuum will analyze them in the end)
            log.info("store: could not analyze the new database's tables: %s", type(e).__name__)

    @staticmethod
    def _notice(params: dict[str, Any], notify: tuple[str, Mapping[str, Any]] | None,
                seq: int, **extra: Any) -> bool:
        if notify is None:
            return False
        params["n_channel"] = notify[0]
        params["n_payload"] = json.dumps({**notify[1], **extra, "seq": seq})
        return True

    async def create(self, row: Mapping[str, Any], entry: Mapping[str, Any],
                     notify: tuple[str, Mapping[str, Any]] | None, *, fallback: Fallback) -> JournalEntry | None:
        """Insert the request and its ``created`` entry (and its run, made by use); None when (tenant,
        unique_id) exists already."""
        values = {**REQUEST_DEFAULTS, **row}
        columns = tuple(values)
        run_id = values.get("run_id")

        def prepare(params: dict[str, Any]) -> Statement:
            params.update({f"r_{c}": v for c, v in values.items()}, run_id=run_id)
            return CREATES.get(columns, self._notice(params, notify, params["e_seq"]))

        def finish(row: Any, params: dict[str, Any]) -> JournalEntry | None:
            return None if row is None else _entry(params)

        return await self._chained(entry, prepare, finish, fallback)

    async def change(self, *, sets: Mapping[str, Any], where: Mapping[str, Any], require_unexpired: bool | None,
                     journal: Mapping[str, Any], notify: tuple[str, Mapping[str, Any]] | None, with_deliveries: bool,
                     sealed: Pair | None, fallback: Fallback) -> Resolution | None:
        """Compare-and-set a pending request (``where``: w_id, w_tenant_id, w_now) to ``sets`` and journal
        it (``journal``: the entry's fields but its run id); None when another writer won. The entry's run
        id is the row's, which the caller read and put in its notice (a request's run id never changes);
        a row with another (the sweeper does not read first) takes the locked path, which journals the row's.
        ``sealed``: a sensitive answer's sealed parts, held in their own table by the same statement."""
        columns = tuple(sets)
        where = {k: where[k] for k in ("w_id", "w_tenant_id", "w_now")}
        entry = entry_row(**journal, run_id=(notify[1] if notify else {}).get("run_id"))

        def prepare(params: dict[str, Any]) -> Statement:
            params.update({f"s_{c}": v for c, v in sets.items()}, **where)
            if sealed is not None:
                params["k_sealed"], params["k_key"] = sealed
            return CHANGES.get(columns, CONDITIONS[require_unexpired],
                                self._notice(params, notify, params["e_seq"]), with_deliveries, sealed is not None)

        def finish(row: Any, params: dict[str, Any]) -> Resolution | None:
            if row is None:
                return None
            changed = dict(row)
            del changed["chained"], changed["entry_seq"]
            deliveries = json.loads(changed.pop("deliveries_json")) if with_deliveries else []
            return Resolution(carrying(changed, sealed), deliveries, _entry(params))

        return await self._chained(entry, prepare, finish, fallback)


def _entry(params: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(params["e_seq"], params["e_tenant_id"], params["e_request_id"], params["e_run_id"],
                        params["e_event"], params["e_principal"], params["e_channel"],
                        json.loads(params["e_data_json"]), params["e_at"], params["e_prev_hash"], params["e_hash"])


def _sound(e: BaseException) -> bool:
    """Whether a connection that raised ``e`` may go back to the pool: a statement's own error (a clash,
    the guard) leaves it as it was; a lost server, a protocol error or a cancellation does not."""
    return isinstance(e, asyncpg.PostgresError) and not isinstance(e, asyncpg.PostgresConnectionError)


def _dead_connection(e: BaseException) -> bool:
    """A pooled connection the server dropped (a read is safe to repeat on a fresh one)."""
    return isinstance(e, UnavailableError) and isinstance(e.__cause__, (asyncpg.PostgresConnectionError,
                                                                        asyncpg.InterfaceError, OSError))


__all__: Sequence[str] = ("PgHotUnits", "ChainHeads", "HeadMoved", "MAX_HEAD_MISSES", "MAX_BATCH", "STATISTICS_AFTER")

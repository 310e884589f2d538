"""PostgreSQL's hot units on the raw asyncpg connection (core/store/pgunits.py): what a cycle costs in
round trips, that a server lost in the middle of each unit is ``unavailable`` (503), and that writers of
one tenant on two instances keep one gapless chain that verifies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from harness.pgproxy import StallableProxy
from sqlalchemy import event

from handraise.core.errors import ConflictError, UnavailableError
from handraise.core.sealing import Sealer
from handraise.core.serversecret import ServerSecret
from handraise.core.store import Store
from handraise.core.store import pgunits
from handraise.core.store.pgunits import MAX_HEAD_MISSES

SECRET = ServerSecret(b"k" * 32)


class RoundTrips:
    """Every statement a store sends: SQLAlchemy's (its events, BEGIN and COMMIT included) and those on
    the raw asyncpg connection (asyncpg's query logger; SQLAlchemy's prepared statements are not logged
    there, its BEGIN/COMMIT are, so those are left to its events)."""

    def __init__(self, store: Store) -> None:
        self.statements: list[str] = []
        logged: weakref.WeakSet[Any] = weakref.WeakSet()
        for engine in (store._engine, store._read_engine):  # noqa: SLF001
            assert engine is not None
            sync = engine.sync_engine
            event.listen(sync, "before_cursor_execute", lambda _c, _cur, sql, *_a: self.statements.append(sql))
            for name in ("begin", "commit", "rollback"):
                event.listen(sync, name, lambda *_a, name=name: self.statements.append(name.upper()))

            def checkout(dbapi_connection: Any, *_a: Any) -> None:
                raw = dbapi_connection.driver_connection
                if raw not in logged:
                    logged.add(raw)
                    raw.add_query_logger(self._logged)

            event.listen(sync.pool, "checkout", checkout)
        if store._hot is not None:  # noqa: SLF001
            store._hot.release_idle()  # noqa: SLF001 (kept checked out: logged from their next checkout)

    def _logged(self, record: Any) -> None:
        if not record.query.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            self.statements.append(record.query)

    async def settled(self) -> list[str]:
        await asyncio.sleep(0)  # asyncpg hands its log records over with call_soon
        taken, self.statements = self.statements, []
        return taken


def request_row(i: str, *, tenant_id: str = "t", run_id: str | None = None) -> dict[str, Any]:
    now = time.time()
    return {"id": f"req_{i}", "tenant_id": tenant_id, "unique_id": f"u-{i}", "body_sha256": "0" * 64,
            "message_for_user": "Deploy?", "form_schema_json": None, "kind": "input", "sensitive": False,
            "run_id": run_id, "channels_json": "[]", "status": "pending", "created_by": "agent:a",
            "created_at": now, "expires_at": now + 600}


async def create(store: Store, i: str, **row: Any) -> Any:
    r = request_row(i, **row)
    async with store.transaction() as conn:
        return await store.create_request(conn, r, notify={"type": "request.created", "id": r["id"]}, journal={
            "tenant_id": r["tenant_id"], "event": "created", "request_id": r["id"], "run_id": r["run_id"],
            "principal": "agent:a", "data": {"unique_id": r["unique_id"]}, "at": r["created_at"]})


async def answer(store: Store, i: str, *, tenant_id: str = "t", run_id: str | None = None,
                 with_deliveries: bool = False) -> Any:
    now = time.time()
    # As the service answers: the answer's keyed digest in the row and its entry (journal verify recomputes it).
    digest = Sealer(SECRET).digest(tenant_id=tenant_id, request_id=f"req_{i}", canonical='"yes"')
    async with store.transaction() as conn:
        return await store.resolve(
            conn, request_id=f"req_{i}", tenant_id=tenant_id, status="answered", now=now, require_unexpired=True,
            values={"response_json": '"yes"', "response_digest": digest, "resolved_by": "operator:o",
                    "resolved_via": "api"},
            with_deliveries=with_deliveries,
            journal={"tenant_id": tenant_id, "event": "answered", "request_id": f"req_{i}", "principal": "operator:o",
                     "channel": "api", "data": {"response_digest": digest}, "at": now},
            notify={"type": "request.resolved", "id": f"req_{i}", "run_id": run_id})


async def cycle(store: Store, i: str) -> Any:
    """One agent's cycle on the store: create request i, read it (the submit's look), answer it, read it
    again (the wait's); each step checked. The ``created`` entry."""
    entry = await create(store, i)
    assert entry is not None and entry.event == "created"
    found = await store.get_request_with_deliveries("t", request_id=f"req_{i}")
    assert found is not None and found[0]["status"] == "pending"
    done = await answer(store, i)
    assert done is not None and done.row["status"] == "answered" and done.entry.event == "answered"
    read = await store.get_request_with_deliveries("t", request_id=f"req_{i}")
    assert read is not None and read[0]["response_json"] == '"yes"'
    return entry


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[Store]:
    store = Store(url=url, secret=SECRET, pool_size=3)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_cycle_is_four_round_trips_none_of_them_a_transaction(pg_url: str) -> None:
    async with opened(pg_url) as store:
        trips = RoundTrips(store)
        assert await create(store, "0") is not None
        first = await trips.settled()
        assert len(first) == 2 and "journal_heads" in first[0]  # this instance reads the head once
        for i in ("1", "2"):
            await cycle(store, i)
            sent = await trips.settled()
            # create, the submit's read, the compare-and-set, the wait's read: one statement each, and no
            # BEGIN/COMMIT, so no lock is held across a round trip.
            assert len(sent) == 4, sent
            assert not {"BEGIN", "COMMIT", "ROLLBACK"} & set(sent)
        assert await create(store, "1") is None  # the same unique_id: nothing made, nothing journaled
        assert len(await trips.settled()) == 1
        assert await answer(store, "1") is None  # answered already: another writer won
        assert [e.seq for e in await store.journal_entries(tenant_id="t")] == [1, 2, 3, 4, 5]
        assert await store.verify_journal() == []


async def test_a_row_whose_run_id_the_caller_did_not_know_is_journaled_with_its_own(pg_url: str) -> None:
    """The sweeper does not read a request before expiring it: its entry still names the row's run."""
    async with opened(pg_url) as store:
        await create(store, "0", run_id="run-9")
        done = await answer(store, "0", run_id=None, with_deliveries=True)
        assert done is not None and done.entry.run_id == "run-9" and done.deliveries == []
        assert [e.run_id for e in await store.journal_entries(tenant_id="t")] == ["run-9", "run-9"]
        assert (await store.runs.get("t", "run-9") or {}).get("status") == "running"
        assert await store.verify_journal() == []


async def test_concurrent_writers_of_one_tenant_on_two_instances_keep_one_gapless_chain(pg_url: str) -> None:
    async with opened(pg_url) as a, opened(pg_url) as b:
        async def writer(store: Store, name: str) -> None:
            for n in range(8):
                i = f"{name}-{n}"
                assert await create(store, i) is not None
                assert await answer(store, i) is not None
                if n % 3 == 0:  # an entry on the locked path (SELECT … FOR UPDATE) between the hot ones
                    async with store.transaction() as conn:
                        await store.append_journal(conn, tenant_id="t", event="delivered", request_id=f"req_{i}")

        await asyncio.gather(*(writer(store, f"{s}{k}") for s, store in (("a", a), ("b", b)) for k in range(4)))
        entries = await a.journal_entries(tenant_id="t", limit=10000)
        assert [e.seq for e in entries] == list(range(1, 2 * 4 * (8 * 2 + 3) + 1))
        assert all(e.prev_hash == p.hash for p, e in zip(entries, entries[1:]))
        assert await a.verify_journal() == [] and await b.verify_journal() == []


async def test_an_entry_the_head_would_not_follow_is_never_committed(pg_url: str) -> None:
    """A head rewound behind what this instance last wrote (a restore, tampering): the hot statement's
    guard undoes it, and the locked path refuses to write over an entry that exists."""
    async with opened(pg_url) as store:
        await create(store, "0")
        await create(store, "1")
        conn = await asyncpg.connect(pg_url)
        try:
            first = await conn.fetchrow("SELECT seq, hash FROM journal WHERE tenant_id = 't' AND seq = 1")
            await conn.execute("UPDATE journal_heads SET seq = $1, hash = $2 WHERE tenant_id = 't'", *first)
            with pytest.raises(ConflictError):
                await create(store, "2")
            assert await conn.fetchval("SELECT count(*) FROM journal WHERE tenant_id = 't'") == 2
            assert await conn.fetchval("SELECT count(*) FROM requests WHERE id = 'req_2'") == 0
        finally:
            await conn.close()
    assert MAX_HEAD_MISSES >= 2


class HeldProxy(StallableProxy):
    """A stall that says when it holds a chunk: a statement is on its way and not answered."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.holding = asyncio.Event()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                if not self.flowing.is_set():
                    self.holding.set()
                await self.flowing.wait()
                writer.write(chunk)
                await writer.drain()


@pytest.mark.parametrize("unit", ["create", "resolve", "read"])
async def test_a_server_lost_during_each_hot_unit_is_unavailable_then_it_recovers(pg_url: str, unit: str) -> None:
    parts = urlsplit(pg_url)
    proxy = HeldProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    await proxy.start()
    try:
        url = pg_url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}")
        async with opened(url) as store:
            # Every call after the outage probes the server (the breaker's pacing has tests of its own).
            store.breaker.probe_every = 0.0
            await create(store, "0")
            await create(store, "1")  # warm: the head is known, the pools hold connections
            run = {"create": lambda: create(store, "2"), "resolve": lambda: answer(store, "1"),
                   "read": lambda: store.get_request_with_deliveries("t", request_id="req_1")}[unit]
            proxy.flowing.clear()
            task = asyncio.ensure_future(run())
            await asyncio.wait_for(proxy.holding.wait(), 10)
            await proxy.cut()
            proxy.flowing.set()
            with pytest.raises(UnavailableError) as lost:
                await asyncio.wait_for(task, 10)
            assert (lost.value.status, lost.value.code) == (503, "unavailable")
            await proxy.restore()
            # Back: the pool's dead connections were dropped, the unit runs again on fresh ones.
            assert await create(store, "3") is not None
            assert await answer(store, "0") is not None
            assert await store.verify_journal() == []
    finally:
        proxy.flowing.set()
        await proxy.close()


def writes(statements: list[str]) -> list[str]:
    return [s for s in statements if s.startswith("WITH")]


async def test_writes_of_one_tenant_arriving_together_share_one_round_trip_and_one_commit(pg_url: str) -> None:
    """One write goes at once; those arriving while it is on its way wait and go together in the next
    batch (one pipelined statement each, one implicit transaction), in the order they came."""
    async with opened(pg_url) as store:
        await create(store, "warm")
        trips = RoundTrips(store)
        made = await asyncio.gather(*(create(store, str(i)) for i in range(20)))
        assert [e.seq for e in made] == list(range(2, 22))  # each got its own entry, in the order called
        sent = writes(await trips.settled())
        assert len(sent) == 2, len(sent)  # the first alone, the 19 that arrived meanwhile in one batch
        done = await asyncio.gather(*(answer(store, str(i)) for i in range(20)))
        assert all(d is not None and d.row["status"] == "answered" for d in done)
        assert [d.entry.seq for d in done] == list(range(22, 42))
        assert len(writes(await trips.settled())) == 2
        entries = await store.journal_entries(tenant_id="t", limit=1000)
        assert [e.seq for e in entries] == list(range(1, 42))
        assert await store.verify_journal() == []


async def test_a_write_that_loses_inside_a_batch_leaves_the_others_applied_and_the_chain_whole(pg_url: str) -> None:
    """Two answers to one request in one batch: exactly one wins; the unit after the loser finds the head
    where the loser left it, so the batch is undone and its units run one at a time; a duplicate create
    last in a batch changes nothing and the batch commits without it."""
    async with opened(pg_url) as store:
        for i in range(4):
            await create(store, str(i))
        trips = RoundTrips(store)
        first, won, lost, other = await asyncio.gather(answer(store, "0"), answer(store, "1"), answer(store, "1"),
                                                       answer(store, "2"))
        assert first is not None and other is not None
        assert (won is None) != (lost is None)
        # answer 0 alone; the batch of the other three, undone; each of them alone.
        assert len(writes(await trips.settled())) == 1 + 1 + 3
        made = await asyncio.gather(create(store, "4"), create(store, "5"), create(store, "6"), create(store, "3"))
        assert [m is not None for m in made] == [True, True, True, False]
        assert len(writes(await trips.settled())) == 2
        assert await answer(store, "3") is not None  # the head this instance kept is the one written
        entries = await store.journal_entries(tenant_id="t", limit=1000)
        assert [e.seq for e in entries] == list(range(1, 12))
        assert [e.event for e in entries].count("answered") == 4
        assert await store.verify_journal() == []


async def test_a_write_whose_caller_went_away_before_its_batch_is_not_made(pg_url: str) -> None:
    async with opened(pg_url) as store:
        await create(store, "warm")
        tasks = [asyncio.ensure_future(create(store, str(i))) for i in range(4)]
        await asyncio.sleep(0)  # the first is on its way, the others wait in the lane
        tasks[2].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[2], asyncio.CancelledError)
        assert all(r is not None and not isinstance(r, BaseException) for i, r in enumerate(results) if i != 2)
        assert await store.get_request_with_deliveries("t", request_id="req_2") is None
        assert [e.seq for e in await store.journal_entries(tenant_id="t")] == [1, 2, 3, 4]
        assert await store.verify_journal() == []


async def test_a_lane_serves_each_tenant_apart_and_mixed_writes_keep_their_order(pg_url: str) -> None:
    async with opened(pg_url) as store:
        await create(store, "a0", tenant_id="a")
        await create(store, "b0", tenant_id="b")
        calls = []
        for i in range(1, 6):
            calls += [create(store, f"a{i}", tenant_id="a"), create(store, f"b{i}", tenant_id="b"),
                      answer(store, f"a{i - 1}", tenant_id="a")]
        results = await asyncio.gather(*calls)
        assert all(r is not None for r in results)
        for tenant in ("a", "b"):
            entries = await store.journal_entries(tenant_id=tenant, limit=1000)
            assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert len(await store.journal_entries(tenant_id="a", limit=1000)) == 11
        assert await store.verify_journal() == []


async def test_warm_hot_units_keep_a_few_connections_and_skip_the_pools_checkout(pg_url: str) -> None:
    """What the hot units keep idle between statements is spared the pool's checkout; it is at most
    keep_idle a pool, given back when the store closes, and one the server closed meanwhile is replaced."""
    async with opened(pg_url) as store:
        checkouts = []
        for engine in (store._engine, store._read_engine):  # noqa: SLF001
            assert engine is not None
            event.listen(engine.sync_engine.pool, "checkout", lambda *_a: checkouts.append(1))
        await create(store, "0")
        await store.get_request_with_deliveries("t", request_id="req_0")
        checkouts.clear()
        for i in range(1, 4):
            await create(store, str(i))
            await store.get_request_with_deliveries("t", unique_id=f"u-{i}")
            await answer(store, str(i))
            await store.get_request_with_deliveries("t", request_id=f"req_{i}")
        assert checkouts == []
        await asyncio.gather(*(store.get_request_with_deliveries("t", request_id=f"req_{i}") for i in range(3)))
        hot = store._hot  # noqa: SLF001
        assert hot is not None and all(len(idle) <= 1 for idle in hot._idle.values())  # noqa: SLF001 (pool_size 3)
        conn = await asyncpg.connect(pg_url)
        try:
            database = await conn.fetchval("SELECT current_database()")
            await conn.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 "
                             "AND pid <> pg_backend_pid()", database)
            await asyncio.sleep(0.3)  # the client sees its sockets closed
            assert await create(store, "4") is not None
            assert (await store.get_request_with_deliveries("t", request_id="req_4")) is not None
            assert await store.verify_journal() == []
            await store.close()
            await asyncio.sleep(0.1)
            left = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                                       "AND pid <> pg_backend_pid()", database)
            assert left == 0
        finally:
            await conn.close()


async def test_a_new_databases_tables_are_analyzed_after_the_first_writes(pg_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Never analyzed, every index that starts with the tenant costs what the key does, and the cached plan
    of a lookup by id or unique_id may walk the tenant's rows; after STATISTICS_AFTER writes the instance
    analyzes the tables, and the plans find the row by its key."""
    monkeypatch.setattr(pgunits, "STATISTICS_AFTER", 5)
    never = ("SELECT count(*) FROM pg_stat_user_tables WHERE relname IN ('requests', 'deliveries', 'journal') "
             "AND last_analyze IS NULL AND last_autoanalyze IS NULL")
    conn = await asyncpg.connect(pg_url)
    try:
        async with opened(pg_url) as store:
            hot = store._hot  # noqa: SLF001
            assert hot is not None and await conn.fetchval(never) == 3
            for i in range(4):
                await create(store, str(i))
            assert hot.statistics is None
            await create(store, "4")
            assert hot.statistics is not None
            await asyncio.wait_for(hot.statistics, 10)
            assert await conn.fetchval(never) == 0
            for n in range(5, 400, 50):
                await asyncio.gather(*(create(store, str(i)) for i in range(n, n + 50)))
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        for name, statement, args, index in (
                ("by_id", pgunits.GET_JOINED["id"], "('req_7', 't')", "requests_pkey"),
                ("by_unique_id", pgunits.GET_JOINED["unique_id"], "('t', 'u-7')", "uq_requests_tenant_unique_id")):
            await conn.execute(f"PREPARE {name} AS {statement.sql}")
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE {name}{args}"))
            assert f"Index Scan using {index} on requests" in plan, plan
    finally:
        await conn.close()


async def test_once_another_instance_moved_the_head_batches_lock_it_first(pg_url: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A head moved by another instance makes this one's batches of that tenant lock the head first (SELECT …
    FOR UPDATE in a transaction of their own) for CONTENDED_SECONDS: while both write, no batch fails on a
    stale head and no write falls back to the locked path; the chain stays whole."""
    async with opened(pg_url) as a, opened(pg_url) as b:
        hot = a._hot  # noqa: SLF001
        assert hot is not None
        await create(a, "a0")
        await create(b, "b0")  # a's head is stale now
        assert await create(a, "a1") is not None  # found moved once: read again, and the retry went
        assert hot.heads.lane("t").contended_until == 0
        await create(b, "b1")
        read_head = hot._read_head  # noqa: SLF001

        async def read_then_b_writes(tenant_id: str) -> tuple[int, str]:
            head = await read_head(tenant_id)
            if not hasattr(read_then_b_writes, "done"):
                read_then_b_writes.done = True  # type: ignore[attr-defined]
                await create(b, "b2")  # moves it again before a's retry
            return head

        hot._read_head = read_then_b_writes  # type: ignore[method-assign]  # noqa: SLF001
        trips = RoundTrips(a)
        assert await create(a, "a2") is not None
        sent = await trips.settled()
        assert [s for s in sent if "FOR UPDATE" in s] and not any("FOR UPDATE" in s for s in sent[:1])
        assert hot.heads.lane("t").contended_until > time.monotonic()
        caplog.set_level(logging.INFO, logger="handraise.core.store.pgunits")

        async def writer(store: Store, name: str) -> None:
            for n in range(6):
                assert await create(store, f"{name}{n}") is not None
                assert await answer(store, f"{name}{n}") is not None

        await asyncio.gather(*(writer(s, f"{tag}{k}-") for tag, s in (("x", a), ("y", b)) for k in range(4)))
        assert "locked path" not in caplog.text
        entries = await a.journal_entries(tenant_id="t", limit=10000)
        assert [e.seq for e in entries] == list(range(1, 6 + 2 * 4 * 6 * 2 + 1))
        assert await a.verify_journal() == []


async def test_this_instances_own_locked_path_does_not_make_the_lane_contended(pg_url: str) -> None:
    async with opened(pg_url) as store:
        await create(store, "0")
        for i in range(1, 4):
            async with store.transaction() as conn:  # an entry on the locked path moves the head
                await store.append_journal(conn, tenant_id="t", event="delivered", request_id="req_0")
            trips = RoundTrips(store)
            assert await create(store, str(i)) is not None
            assert not any("FOR UPDATE" in s for s in await trips.settled())
        assert store._hot is not None and store._hot.heads.lane("t").contended_until == 0  # noqa: SLF001
        assert await store.verify_journal() == []


async def test_a_transaction_that_ran_nothing_sends_nothing_and_a_failed_body_rolls_back(pg_url: str) -> None:
    """store.transaction() on PostgreSQL is the connection itself as its context manager: nothing begun,
    nothing to end; a body that raised after a unit ran rolls it back."""
    async with opened(pg_url) as store:
        trips = RoundTrips(store)
        async with store.transaction():
            pass
        assert await trips.settled() == []
        with pytest.raises(RuntimeError):
            async with store.transaction() as conn:
                await store.append_journal(conn, tenant_id="t", event="delivered")
                raise RuntimeError("the body failed")
        sent = await trips.settled()
        assert sent[0] == "BEGIN" and sent[-1] == "ROLLBACK", sent
        assert await store.journal_entries(tenant_id="t") == []
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="t", event="delivered")
        assert (await trips.settled())[-1] == "COMMIT"
        assert [e.seq for e in await store.journal_entries(tenant_id="t")] == [1]

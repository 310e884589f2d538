"""The store's own guarantees, on SQLite (one database thread) and PostgreSQL: atomic transactions,
one writer at a time with an intact journal chain, and a committed body surviving a cancelled caller."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest

from handraise.core.deliveries import DeliveryLog
from handraise.core.serversecret import ServerSecret
from handraise.core.store import Store

SECRET = ServerSecret(bytes(range(32)))


@pytest.fixture
async def store(storage_url: str) -> AsyncIterator[Store]:
    s = Store(url=storage_url, secret=SECRET)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_a_failed_transaction_leaves_nothing_behind(store: Store) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="t", event="created", data={"n": 1})
            raise RuntimeError("boom")
    assert await store.journal_entries(tenant_id="t") == []
    assert await store.verify_journal() == []
    async with store.transaction() as conn:
        await store.append_journal(conn, tenant_id="t", event="created", data={"n": 2})
    entries = await store.journal_entries(tenant_id="t")
    assert [(e.seq, e.data) for e in entries] == [(1, {"n": 2})]


async def test_concurrent_writers_keep_one_unbroken_chain(store: Store) -> None:
    async def write(i: int) -> None:
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="t", event="created", data={"i": i})
            await asyncio.sleep(0)  # yield inside the transaction: others must queue, not interleave
            await store.append_journal(conn, tenant_id="t", event="answered", data={"i": i})

    await asyncio.gather(*(write(i) for i in range(40)))
    entries = await store.journal_entries(tenant_id="t", limit=1000)
    assert [e.seq for e in entries] == list(range(1, 81))
    # Each transaction's two entries are adjacent: no writer slipped in between.
    pairs = [(entries[k].data["i"], entries[k + 1].data["i"]) for k in range(0, 80, 2)]
    assert all(a == b for a, b in pairs)
    assert await store.verify_journal() == []


async def test_reads_see_committed_writes_and_state_is_first_writer_wins(store: Store) -> None:
    await store.state.set("ns", "k", "v1")
    assert await store.state.get("ns", "k") == "v1"
    results = await asyncio.gather(*(store.state.set_if_absent("ns", "secret", f"s{i}") for i in range(10)))
    assert len(set(results)) == 1 and await store.state.get("ns", "secret") == results[0]


async def test_a_completed_body_commits_even_if_its_caller_is_cancelled(store: Store) -> None:
    body_done = asyncio.Event()

    async def write() -> None:
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="c", event="created", data={})
            body_done.set()

    task = asyncio.create_task(write())
    await body_done.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # Whatever the cancellation hit, the store is consistent and usable afterwards.
    async with store.transaction() as conn:
        await store.append_journal(conn, tenant_id="c", event="answered", data={})
    events = [e.event for e in await store.journal_entries(tenant_id="c")]
    assert events[-1] == "answered" and events in (["created", "answered"], ["answered"])
    assert await store.verify_journal() == []


async def test_ping_and_closed_store(storage_url: str) -> None:
    s = Store(url=storage_url)
    await s.open()
    assert await s.ping() is True
    await s.close()
    assert await s.ping() is False


async def test_storage_errors_reach_callers_as_core_errors(store: Store) -> None:
    from handraise.core.errors import ConflictError

    row = {"annotation_id": "ann_1", "tenant_id": "t", "run_id": "r", "kind": "flag", "principal": "p",
           "supersedes": None, "created_at": 1.0}
    async with store.transaction() as conn:
        await store.insert_annotation(conn, row)
    # A broken uniqueness rule is the core's ConflictError, on both stores, and the transaction rolls back.
    with pytest.raises(ConflictError):
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="t", event="annotation_recorded")
            await store.insert_annotation(conn, row)
    assert await store.journal_entries(tenant_id="t") == []


def test_only_the_store_imports_sqlalchemy() -> None:
    """Storage exceptions and statements stay behind the store: no other core module names SQLAlchemy."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for folder in ("core", "bots", "webforms"):
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(("core/store/", "core/migrations/")) or rel == "core/models.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{rel}: {n}" for n in names if n.split(".")[0] in ("sqlalchemy", "sqlmodel")]
    assert offenders == []


async def test_two_stores_setting_one_new_key_at_once_both_succeed(storage_url: str) -> None:
    # Two instances on one database write a key neither has seen: an update-then-insert lets both
    # miss the update and one insert fail; an upsert stores one value and raises nothing.
    a, b = Store(url=storage_url, secret=SECRET), Store(url=storage_url, secret=SECRET)
    await a.open()
    await b.open()
    try:
        for round_ in range(5):
            key = f"k{round_}"
            await asyncio.gather(*(s.state.set("ns", key, f"{i}") for i in range(20) for s in (a, b)))
            assert await a.state.get("ns", key) in {str(i) for i in range(20)}
        await a.state.set("ns", "k0", "last")
        assert await b.state.get("ns", "k0") == "last"
    finally:
        await a.close()
        await b.close()


async def test_the_postgresql_pools_never_open_more_than_pool_size(pg_url: str) -> None:
    import asyncpg
    from sqlalchemy import text

    from handraise.core.store.units import scalar

    store = Store(url=pg_url, secret=SECRET, pool_size=3, instance_id="pooltest")
    await store.open()
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute("SELECT pg_advisory_lock(4242)")
        # Twenty reads that each hold a connection until the lock is released.
        readers = asyncio.gather(*(store._read(scalar, text("SELECT pg_advisory_lock_shared(4242)"))
                                   for _ in range(20)))
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'"
        deadline = asyncio.get_running_loop().time() + 30
        while await admin.fetchval(waiting, store.application_name) < 3:
            assert asyncio.get_running_loop().time() < deadline, "the readers never got their connections"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # an overflow would open more now
        assert await admin.fetchval(waiting, store.application_name) == 3
        await admin.execute("SELECT pg_advisory_unlock(4242)")
        await asyncio.wait_for(readers, timeout=30)
    finally:
        await admin.close()
        await store.close()


async def test_concurrent_read_modify_writes_of_one_value_lose_nothing(storage_url: str) -> None:
    # Two instances each appending to one stored list at once (Telegram's private link messages): a
    # get-then-set keeps only the last writer's list; update_state's compare-and-set keeps every entry.
    a, b = Store(url=storage_url, secret=SECRET), Store(url=storage_url, secret=SECRET)
    await a.open()
    await b.open()
    try:
        def adding(item: int) -> Callable[[str | None], str]:
            return lambda kept: json.dumps([*json.loads(kept or "[]"), item])

        await asyncio.gather(*(s.state.update("ns", "list", adding(i)) for i in range(20) for s in (a, b)))
        assert sorted(json.loads(await a.state.get("ns", "list") or "[]")) == sorted([*range(20), *range(20)])
    finally:
        await a.close()
        await b.close()


class _AnsweringConnection:
    """Stands for asyncpg's connection at the one moment that matters: its query's answer arrives in
    the same turn of the loop as the caller's cancellation."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.asked = asyncio.Event()

    def is_closed(self) -> bool:
        return False

    async def fetchval(self, query: str) -> int:
        self.asked.set()
        return await self.answer

    async def close(self, timeout: float | None = None) -> None:
        return None


async def test_a_leadership_check_never_swallows_its_callers_cancellation() -> None:
    # Python 3.11's asyncio.wait_for returns the result when it lands with the cancellation: the sync
    # loop being stopped then led on (and deadlocked stop()). A check must raise CancelledError.
    from handraise.core.store.leadership import LeaderLocks

    leadership = LeaderLocks(dsn="postgresql://unused")
    conn = _AnsweringConnection()
    leadership._locks["loop"] = conn
    check = asyncio.create_task(leadership.alive("loop"))
    await conn.asked.wait()
    conn.answer.set_result(1)
    check.cancel()
    with pytest.raises(asyncio.CancelledError):
        await check


async def test_a_standby_polling_for_leadership_keeps_one_connection(pg_url: str) -> None:
    # A follower tries every few seconds (0.2 s in tests): a new connection per try costs the server a
    # backend each time and, under load, connect failures that grew the follower's backoff.
    import asyncpg

    from handraise.core.store.leadership import LeaderLocks

    leader, follower = LeaderLocks(dsn=pg_url), LeaderLocks(dsn=pg_url)
    admin = await asyncpg.connect(pg_url)
    try:
        assert await leader.take("loop")
        sessions = "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        before = await admin.fetchval(sessions)
        assert not any(await asyncio.gather(*(follower.take("loop") for _ in range(10))))
        for _ in range(10):
            assert not await follower.take("loop")
        assert await admin.fetchval(sessions) - before <= 1
        await leader.release("loop")
        assert await follower.take("loop") and await follower.alive("loop")
    finally:
        await leader.release_all()
        await follower.release_all()
        await admin.close()


async def test_a_delivery_change_and_its_journal_entry_commit_together(store: Store, storage_url: str) -> None:
    # The lifecycle's rule holds for deliveries too: a journal entry that cannot be written (here: an
    # instance without the server secret cannot chain one) leaves the delivery as it was.
    log = DeliveryLog(records=store.deliveries, clock=time.time)
    delivery = await log.open(tenant_id="t", request_id="req_1", channel="chat", target="room-1")
    unkeyed = Store(url=storage_url)
    await unkeyed.open()
    try:
        with pytest.raises(RuntimeError, match="server secret"):
            await DeliveryLog(records=unkeyed.deliveries, clock=time.time).record(
                delivery, event="delivered", run_id=None, data={"attempt": 1}, status="sent", attempts=1,
                ref={"message": 7})
    finally:
        await unkeyed.close()
    [row] = await log.of_request(tenant_id="t", request_id="req_1")
    assert (row.status, row.attempts, row.ref) == ("pending", 0, {})
    assert await store.journal_entries(tenant_id="t") == []

    await log.record(delivery, event="delivered", run_id=None, data={"attempt": 1}, status="sent", attempts=1,
                     ref={"message": 7})
    [row] = await log.of_request(tenant_id="t", request_id="req_1")
    assert (row.status, row.attempts, row.ref) == ("sent", 1, {"message": 7})
    [entry] = await store.journal_entries(tenant_id="t")
    assert (entry.event, entry.request_id, entry.channel, entry.data) == (
        "delivered", "req_1", "chat", {"target": "room-1", "attempt": 1})
    assert await store.verify_journal() == []

"""SQLite's hot units on the database thread's raw connection (core/store/sqliteunits.py): what a cycle
costs in statements and trips to the database thread, the journal head remembered and moved by
compare-and-set while another process appends to the same file, rows as SQLAlchemy would hand them
over, and storage errors as the core's."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.core.test_pg_hot_path import answer, create, cycle, opened, request_row

from handraise.core.errors import ConflictError, UnavailableError
from handraise.core.store import Store
from handraise.core.store.sealed import attach, first_request
from handraise.core.store.statements import GET_REQUEST, GET_REQUEST_JOINED, row_and_deliveries


@contextlib.contextmanager
def traced() -> Iterator[list[str]]:
    """Every statement SQLite runs on the connections opened meanwhile (its trace callback)."""
    statements: list[str] = []

    def connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.set_trace_callback(statements.append)

    event.listen(Engine, "connect", connect)
    try:
        yield statements
    finally:
        event.remove(Engine, "connect", connect)


def counting_trips(store: Store) -> list[int]:
    """How many jobs the store hands its database thread (one trip, and one wake-up of the loop, each)."""
    runner = store._runner  # noqa: SLF001
    assert runner is not None
    trips = [0]
    submit = runner.thread.submit

    def counted(*a: Any, **k: Any) -> Any:
        trips[0] += 1
        return submit(*a, **k)

    runner.thread.submit = counted  # type: ignore[method-assign]
    return trips


def verbs(statements: list[str]) -> list[str]:
    return [" ".join(s.split()[:3]) for s in statements]


async def test_a_cycle_on_an_idle_store_is_twelve_statements_run_by_the_loop_itself(sqlite_url: str) -> None:
    with traced() as statements:
        async with opened(sqlite_url) as store:
            assert await create(store, "0") is not None
            assert await store.get_request_with_deliveries("t", request_id="req_0") is not None  # opens the reader
            trips = counting_trips(store)
            statements.clear()
            for i in ("1", "2"):
                assert (await cycle(store, i)).seq == 2 * int(i)
                # Each write is one job from BEGIN IMMEDIATE to COMMIT; the head is moved, never read.
                assert verbs(statements) == [
                    "BEGIN IMMEDIATE", "INSERT INTO requests", "UPDATE journal_heads SET", "INSERT INTO journal",
                    "COMMIT", "SELECT r.*, d.id,",
                    "BEGIN IMMEDIATE", "UPDATE requests SET", "UPDATE journal_heads SET", "INSERT INTO journal",
                    "COMMIT", "SELECT r.*, d.id,"], statements
                statements.clear()
            assert trips[0] == 0  # the thread was idle each time: no hand-off, no wake-up of the loop
            assert await create(store, "1") is None  # the same unique_id: nothing made, nothing journaled
            assert await answer(store, "1") is None  # answered already: another writer won
            assert [e.seq for e in await store.journal_entries(tenant_id="t")] == [1, 2, 3, 4, 5]
            assert await store.verify_journal() == []


async def until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0)


async def test_a_write_lock_held_by_another_process_never_stalls_the_event_loop(sqlite_url: str) -> None:
    """The loop runs a unit itself only while the database thread is idle, and its own writer never waits
    for a lock: while another process (the ``handraise`` CLI) holds the file's write lock, the unit goes
    to the thread, which waits for the lock, and the loop goes on."""
    async with opened(sqlite_url) as store:
        await create(store, "0")
        trips = counting_trips(store)
        db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            creating = asyncio.ensure_future(create(store, "1"))
            await asyncio.wait_for(until(lambda: trips[0] == 1), 10)  # the loop runs while the unit waits
            assert not creating.done()
            db.execute("COMMIT")
        finally:
            db.close()
        entry = await asyncio.wait_for(creating, 10)
        assert entry is not None and entry.seq == 2 and trips[0] == 1
        # Refused at once rather than after the thread's wait (which would stall the loop as long).
        runner = store._runner  # noqa: SLF001
        assert runner is not None and runner._loop_writer is not None  # noqa: SLF001
        raw = runner._loop_writer.connection.driver_connection  # noqa: SLF001
        assert raw.execute("PRAGMA busy_timeout").fetchone() == (0,)
        assert await store.verify_journal() == []


async def test_units_the_loop_runs_itself_give_other_tasks_their_turn(sqlite_url: str) -> None:
    """A loop of units (a sweep expiring many requests) never holds the event loop for all of them: after
    each, the tasks ready meanwhile run, as they did while a hand-off to the thread was awaited."""
    async with opened(sqlite_url) as store:
        await create(store, "0")
        trips = counting_trips(store)
        turns = 0

        async def other() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        started = turns
        for i in range(1, 11):
            assert await create(store, str(i)) is not None
            assert await store.get_request("t", f"req_{i}") is not None
        task.cancel()
        assert trips[0] == 0  # all twenty ran on the loop
        assert turns - started >= 20


async def test_a_unit_waits_behind_an_open_write_transaction_and_a_read_does_not(sqlite_url: str) -> None:
    async with opened(sqlite_url) as store:
        await create(store, "0")
        trips = counting_trips(store)
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="t", event="link_minted")  # seq 2, not committed
            assert trips[0] == 1
            creating = asyncio.ensure_future(create(store, "1"))
            await asyncio.wait_for(until(lambda: trips[0] == 2), 10)  # queued behind this transaction
            # A read while the transaction waits for its caller runs at once, on the last commit.
            assert [e.seq for e in await store.journal_entries(tenant_id="t")] == [1]
            assert not creating.done()
        entry = await asyncio.wait_for(creating, 10)
        assert entry is not None and entry.seq == 3
        assert await store.verify_journal() == []


async def test_another_process_appending_between_two_of_ours_leaves_one_gapless_chain(sqlite_url: str) -> None:
    """Two stores on one file stand for the server and the ``handraise`` CLI: each remembers the head it
    moved last, which the other's appends make stale; a stale head is read again, never chained after."""
    with traced() as statements:
        async with opened(sqlite_url) as a, opened(sqlite_url) as b:
            for i in range(6):
                writer = (a, b)[i % 2]
                assert await create(writer, str(i)) is not None
            statements.clear()
            assert await create(a, "6") is not None  # a's head (seq 5) is stale: b wrote seq 6
            assert verbs(statements)[2:5] == ["UPDATE journal_heads SET", "SELECT seq, hash",
                                              "UPDATE journal_heads SET"], statements
            results = await asyncio.gather(*(answer((a, b)[k % 2], str(k)) for k in range(7)))
            assert all(r is not None for r in results)
            for store in (a, b):
                assert [e.seq for e in await store.journal_entries(tenant_id="t")] == list(range(1, 15))
                assert await store.verify_journal() == []


def joined_with_sealed(c: Any, params: dict[str, Any]) -> Any:
    """The store's joined read as SQLAlchemy would make it: the request with what it holds sealed."""
    found = row_and_deliveries(c, GET_REQUEST_JOINED, params)
    return None if found is None else (attach(c, found[0]), found[1])


async def test_rows_are_what_sqlalchemy_hands_over(sqlite_url: str) -> None:
    async with opened(sqlite_url) as store:
        r = request_row("0", run_id="run-1") | {"sensitive": True}
        async with store.transaction() as conn:
            await store.create_request(conn, r, journal={"tenant_id": "t", "event": "created", "request_id": "req_0",
                                                         "run_id": "run-1", "at": r["created_at"]})
        await store.deliveries.open(tenant_id="t", request_id="req_0", channel="telegram", target="42", now=1.0)
        await store.deliveries.open(tenant_id="t", request_id="req_0", channel="slack", target="C1", now=2.0)
        raw = await store.get_request("t", "req_0")
        assert raw is not None and raw["sensitive"] is True and raw["response_purged"] is False
        via_sqlalchemy = await store._read(first_request, GET_REQUEST, {"id": "req_0", "tenant_id": "t"})  # noqa: SLF001
        assert raw == via_sqlalchemy
        assert {k: type(v) for k, v in raw.items()} == {k: type(v) for k, v in via_sqlalchemy.items()}
        assert await store.get_request_by_unique_id("t", "u-0") == raw
        joined = await store.get_request_with_deliveries("t", unique_id="u-0")
        joined_via_sqlalchemy = await store._read(joined_with_sealed, {"id": "req_0", "tenant_id": "t"})  # noqa: SLF001
        assert joined == joined_via_sqlalchemy and joined is not None and len(joined[1]) == 2
        done = await answer(store, "0", with_deliveries=True)
        assert done is not None and done.row == await store.get_request("t", "req_0")
        assert done.row["status"] == "answered" and done.entry.run_id == "run-1"
        assert [d["channel"] for d in done.deliveries] == ["telegram", "slack"]
        assert (await store.runs.get("t", "run-1") or {}).get("status") == "running"
        assert await store.get_request("t", "req_x") is None
        assert await store.get_request_with_deliveries("t", request_id="req_x") is None


async def test_a_hot_unit_in_a_larger_transaction_rolls_back_with_it(sqlite_url: str) -> None:
    async with opened(sqlite_url) as store:
        with pytest.raises(RuntimeError, match="boom"):
            async with store.transaction() as conn:
                await store.append_journal(conn, tenant_id="t", event="link_minted")
                r = request_row("0")
                entry = await store.create_request(conn, r, journal={
                    "tenant_id": "t", "event": "created", "request_id": r["id"], "at": r["created_at"]})
                assert entry is not None and entry.seq == 2
                raise RuntimeError("boom")
        assert await store.get_request("t", "req_0") is None
        assert await create(store, "0") is not None
        assert [e.seq for e in await store.journal_entries(tenant_id="t")] == [1]
        assert await store.verify_journal() == []
        # A unit that committed alone is its transaction's last.
        with pytest.raises(RuntimeError, match="last of its transaction"):
            async with store.transaction() as conn:
                r = request_row("1")
                await store.create_request(conn, r, journal={
                    "tenant_id": "t", "event": "created", "request_id": r["id"], "at": r["created_at"]})
                await store.append_journal(conn, tenant_id="t", event="link_minted")


async def test_storage_errors_of_the_raw_connection_reach_callers_as_core_errors(sqlite_url: str) -> None:
    async with opened(sqlite_url) as store:
        await create(store, "0")
        # An entry planted past the head (tampering): the next append's seq is taken.
        db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            db.execute("INSERT INTO journal (tenant_id, seq, event, data_json, at, prev_hash, hash) "
                       "VALUES ('t', 2, 'planted', '{}', 0, '', '')")
            with pytest.raises(ConflictError):
                await create(store, "1")
            assert await store.get_request("t", "req_1") is None  # the unit rolled back whole
            db.execute("DELETE FROM journal WHERE event = 'planted'")
            # Another connection holds the file's write lock past the busy timeout: unavailable, not a 500.
            runner = store._runner  # noqa: SLF001
            assert runner is not None
            # (The thread's writer: the loop's own never waits for a lock and hands the unit to the thread.)
            await runner.write(lambda c: c.exec_driver_sql("PRAGMA busy_timeout = 50"))
            db.execute("BEGIN IMMEDIATE")
            with pytest.raises(UnavailableError):
                await create(store, "1")
            db.execute("ROLLBACK")
        finally:
            db.close()
        assert await create(store, "1") is not None
        assert await store.verify_journal() == []


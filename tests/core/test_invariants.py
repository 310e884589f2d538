"""DESIGN.md's invariants that need more than one call: events, sensitive answers, the journal, several instances."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sse import streams

from conftest import (
    AGENT_KEY,
    OTHER_READER_KEY,
    READER_KEY,
    Api,
    base_config,
    running_app,
    settings_from,
    sweeper_held,
)
from handraise.core.appkeys import SERVICE, STORE, SWEEPER


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Enter the code", "timeout_seconds": 60, **extra}


# -- events -----------------------------------------------------------------------


async def test_events_stream_to_read_keys_of_the_same_tenant_only(api: Api) -> None:
    async with streams() as start:
        mine = await start(api, READER_KEY)
        theirs = await start(api, OTHER_READER_KEY)
        filtered = await start(api, READER_KEY, run_id="run-b")
        req = await api.create(body("ev-1", run_id="run-a"))
        event, data = await mine.next()
        assert event == "request.created" and data["id"] == req["id"]
        await api.submit("ev-1", "hello")
        event, data = await mine.next()
        assert event == "request.resolved" and data["status"] == "answered" and data["response"] == "hello"
        other = await api.create(body("ev-2", run_id="run-b"))
        event, data = await filtered.next()
        assert data["id"] == other["id"]  # run-a's events never reached the run-b subscriber
        assert theirs.events.empty()


async def test_events_need_a_read_key(sqlite_api: Api) -> None:
    status, _ = await sqlite_api.call("GET", "/v1/events", key=AGENT_KEY)
    assert status == 403
    status, _ = await sqlite_api.call("GET", "/v1/events", key=None)
    assert status == 401
    status, _ = await sqlite_api.call("GET", "/v1/events", key=READER_KEY, params={"types": "request.exploded"})
    assert status == 400


# -- sensitive answers ------------------------------------------------------------

SECRET = "918273645546"


async def test_sensitive_answer_reaches_the_agent_then_leaves_log_events_and_disk(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "secret.db"
    async with running_app(settings_from(base_config(f"sqlite:///{db}"))) as api:
        async with streams() as start:
            reader = await start(api, READER_KEY)
            req = await api.create(body("otp", sensitive=True, schema={"type": "string", "pattern": "^[0-9]{12}$"}))
            status, _ = await api.submit("otp", SECRET)
            assert status == 200
            _, created = await reader.next()
            _, resolved = await reader.next()
        assert resolved["status"] == "answered" and "response" not in resolved
        # A read key never sees it; the agent does, once.
        status, seen_by_reader = await api.call("GET", f"/v1/requests/{req['id']}", key=READER_KEY)
        assert "response" not in seen_by_reader
        got = await api.wait(req["id"])
        assert got["response"] == SECRET
        # Its next call gets it once more (the first response may have died on the way), then it is gone.
        again = await api.wait(req["id"])
        assert again["response"] == SECRET
        gone = await api.wait(req["id"])
        assert "response" not in gone and gone["response_deleted"] is True
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
        answered = next(e for e in entries if e["event"] == "answered")
        # Neither the answer nor its digest is shown outside the store.
        assert answered["data"] == {}
    for path in tmp_path.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path.name
    assert SECRET not in caplog.text
    assert SECRET not in json.dumps([created, resolved])


async def test_sensitive_answer_is_deleted_on_postgres_too(pg_url: str) -> None:
    async with running_app(settings_from(base_config(pg_url))) as api:
        req = await api.create(body("otp-pg", sensitive=True))
        await api.submit("otp-pg", SECRET)
        assert (await api.wait(req["id"]))["response"] == SECRET
        status, acked = await api.call("POST", f"/v1/requests/{req['id']}/ack")
        assert status == 200 and acked["response_deleted"] is True and "response" not in acked
    from handraise.core.store import Store

    store = Store(url=pg_url)
    await store.open()
    try:
        row = await store.get_request("acme", req["id"])
    finally:
        await store.close()
    assert row["response_json"] is None and row["response_purged"]
    # The sealed answer and its key are gone together: what is left on disk can never be opened.
    assert row["response_sealed"] is None and row["response_key"] is None


# -- journal ----------------------------------------------------------------------


async def test_journal_records_the_whole_chain_and_verifies(api: Api) -> None:
    req = await api.create(body("j", schema={"type": "integer"}))
    await api.submit("j", "not a number")
    await api.submit("j", 7)
    await api.wait(req["id"])
    entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
    events = [e["event"] for e in entries]
    assert events == ["created", "invalid_attempt", "answered"]
    created, invalid, answered = entries
    assert created["data"]["message_for_user"] == "Enter the code" and created["principal"] == "agent:agent-1"
    assert invalid["data"]["errors"] and "not a number" not in json.dumps(invalid)
    assert answered["principal"] == "operator:op-1" and answered["channel"] == "api"
    assert answered["data"]["response"] == 7
    assert await api.app[STORE].verify_journal() == []


def _tamper(db: Path, sql: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("sql", [
    "UPDATE journal SET data_json = replace(data_json, '7', '8') WHERE event = 'answered'",
    "UPDATE journal SET principal = 'operator:mallory' WHERE event = 'answered'",
    "DELETE FROM journal WHERE seq = 2",
    "DELETE FROM journal WHERE seq = (SELECT max(seq) FROM journal)",
])
async def test_journal_tampering_is_detected_by_the_cli(tmp_path: Path, sql: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from handraise.core.cli import main

    db = tmp_path / "j.db"
    config = tmp_path / "handraise.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{db}"\n')
    async with running_app(settings_from(base_config(f"sqlite:///{db}"))) as api:
        req = await api.create(body("t", schema={"type": "integer"}))
        await api.submit("t", 7)
        await api.wait(req["id"])
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify"]) == 0
    assert "intact" in capsys.readouterr().out
    _tamper(db, sql)
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify"]) == 1
    assert "BROKEN" in capsys.readouterr().err


# -- several instances on one PostgreSQL --------------------------------------------


async def test_agent_waiting_on_one_instance_wakes_when_another_commits(pg_url: str) -> None:
    settings = settings_from(base_config(pg_url))
    async with running_app(settings, instance_id="a") as a, running_app(settings, instance_id="b") as b:
        req = await a.create(body("multi"))
        loop = asyncio.get_running_loop()
        waiter = asyncio.create_task(a.wait(req["id"], 30))
        await asyncio.sleep(0.05)
        status, _ = await b.submit("multi", "from b")
        answered_at = loop.time()
        assert status == 200
        done = await asyncio.wait_for(waiter, 5)
        assert done["response"] == "from b"
        assert loop.time() - answered_at < 1.0
        # b's event reached a's subscribers too
        async with streams() as start:
            reader = await start(a, READER_KEY)
            await b.create(body("multi-2"))
            event, data = await reader.next()
        assert event == "request.created" and data["unique_id"] == "multi-2"


async def test_racing_instances_have_one_winner(pg_url: str) -> None:
    settings = settings_from(base_config(pg_url))
    async with running_app(settings, instance_id="a") as a, running_app(settings, instance_id="b") as b:
        await a.create(body("race2"))
        results = await asyncio.gather(*[(a if i % 2 else b).submit("race2", f"v{i}") for i in range(20)])
        assert [s for s, _ in results].count(200) == 1


async def test_a_held_sweeper_has_no_tick_under_way_and_sweeps_again_once_released(sqlite_url: str) -> None:
    """``sweeper_held`` (what tests that sweep themselves on a moved clock rely on): the sweeper's task has
    ended when the block begins, so a request overdue on the moved clock is left to the test; released, the
    sweeper runs again; and the app stops with its sweeper already stopped."""
    import time

    from handraise.core.events import REQUEST_RESOLVED

    async with running_app(settings_from(base_config(sqlite_url))) as api:
        sweeper, service = api.app[SWEEPER], api.app[SERVICE]
        running = sweeper.task
        assert running is not None and not running.done()
        req = await api.create(body("held"))
        expired = asyncio.Event()
        service.bus.add_listener(lambda ev: expired.set() if ev.type == REQUEST_RESOLVED else None)
        async with sweeper_held(api):
            assert running.done() and sweeper.task is None  # ended, not only asked to end
            service.clock = lambda: time.time() + 3600
            assert (await service.store.get_request("acme", req["id"]))["status"] == "pending"
        assert sweeper.task is not None and not sweeper.task.done()
        await asyncio.wait_for(expired.wait(), 10)  # the sweeper's own tick, the test swept nothing
        assert (await service.store.get_request("acme", req["id"]))["status"] == "expired"
        await sweeper.stop()
        await sweeper.stop()  # a second stop, and the app's cleanup after them, find nothing to stop


async def test_uncollected_sensitive_answer_is_deleted_after_the_retention(tmp_path: Path) -> None:
    config = base_config(f"sqlite:///{tmp_path / 'r.db'}", limits={"sweep_interval_seconds": 0.05,
                                                                  "sensitive_retention_seconds": 1})
    async with running_app(settings_from(config)) as api:
        req = await api.create(body("never-collected", sensitive=True))
        await api.submit("never-collected", SECRET)
        store = api.app[STORE]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while (row := await store.get_request("acme", req["id"]))["response_sealed"] is not None:
            assert loop.time() < deadline, "the sweeper never deleted the uncollected answer"
            await asyncio.sleep(0.05)  # polling the store for the sweeper's change
        assert row["response_purged"]
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
        assert entries[-1]["event"] == "response_deleted" and entries[-1]["data"] == {"reason": "retention"}
        # The agent is told the answer existed but was deleted, never handed a value.
        late = await api.wait(req["id"])
        assert late["status"] == "answered" and "response" not in late and late["response_deleted"] is True
    assert not any(SECRET.encode() in p.read_bytes() for p in tmp_path.iterdir())

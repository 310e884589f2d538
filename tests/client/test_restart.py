"""kill -9 and restart of the server while the client waits: the client still returns the one answer."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from harness.live import AGENT_KEY, OPERATOR_KEY, LiveServer

from client.helpers import count_requests
from handraise.client import AsyncHandraise, Handraise, RetryPolicy, new_unique_id

FAST = RetryPolicy(attempts=5, base_seconds=0.05, cap_seconds=0.5)


@pytest.fixture
def server(tmp_path: Path) -> LiveServer:
    live = LiveServer(tmp_path)
    live.start()
    yield live
    live.stop()


def _created(server: LiveServer, unique_id: str, start: Any) -> str:
    """Subscribe, run ``start()``, return the id of ``unique_id`` once the server has stored it."""
    with Handraise(server.url, OPERATOR_KEY) as op, op.events(types=["request.created"]) as events:
        start()
        for event in events:
            if event.request is not None and event.request.unique_id == unique_id:
                return event.request.id
    raise AssertionError("the event stream ended")


def test_sync_client_survives_kill_9_and_restart_mid_wait(server: LiveServer) -> None:
    uid = new_unique_id("restart")
    result: dict[str, Any] = {}

    def ask() -> None:
        try:
            with Handraise(server.url, AGENT_KEY, retry=FAST) as hr:
                result["answer"] = hr.ask("Survive a crash?", schema={"type": "integer"}, unique_id=uid, timeout=120)
        except BaseException as e:  # noqa: BLE001
            result["error"] = e

    thread = threading.Thread(target=ask, daemon=True)
    request_id = _created(server, uid, thread.start)
    server.kill()
    assert thread.is_alive()  # nothing to return: the server died with the request pending
    server.start()
    with Handraise(server.url, OPERATOR_KEY) as op:
        assert op.get(request_id).status == "pending"  # the restart lost nothing
        op.submit(uid, 7)
    thread.join(60)
    assert not thread.is_alive() and "error" not in result, result
    assert result["answer"] == 7
    assert count_requests(server.url, uid) == 1


async def test_async_client_survives_two_kills_and_gets_a_sensitive_answer_once(server: LiveServer) -> None:
    uid = new_unique_id("restart")
    schema = {"type": "string", "pattern": "^[0-9]{6}$"}
    async with AsyncHandraise(server.url, AGENT_KEY, retry=FAST) as hr:
        task: asyncio.Task[Any] | None = None

        def start() -> None:
            nonlocal task
            task = loop.create_task(hr.ask("Code?", schema=schema, sensitive=True, unique_id=uid, timeout=120))

        loop = asyncio.get_running_loop()
        # The subscription blocks this thread, so it runs in another while the loop drives the ask.
        await asyncio.to_thread(_created, server, uid, lambda: loop.call_soon_threadsafe(start))
        assert task is not None
        for _ in range(2):
            await asyncio.to_thread(server.kill)
            assert not task.done()
            await asyncio.to_thread(server.start)
        async with AsyncHandraise(server.url, OPERATOR_KEY) as op:
            await op.submit(uid, "654321")
        assert await asyncio.wait_for(task, 60) == "654321"
    assert count_requests(server.url, uid) == 1


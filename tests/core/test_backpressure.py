"""Backpressure (issue 19): past ``limits.max_writes_in_flight`` an instance sheds writes at once with
503 ``overloaded`` and Retry-After, having done nothing for them, and every write it accepted is stored."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from conftest import AGENT_KEY, OPERATOR_KEY, base_config, running_app, settings_from
from handraise.core.appkeys import ADMISSION, SERVICE, STORE


def ask_body(uid: str) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Code?", "timeout_seconds": 60,
            "schema": {"type": "string", "pattern": "^[0-9]{6}$"}}


async def test_an_overloaded_instance_sheds_with_retry_after_and_loses_no_accepted_write(storage_url: str) -> None:
    settings = settings_from(base_config(storage_url, limits={"max_writes_in_flight": 2,
                                                              "overload_retry_after_seconds": 3}))
    async with running_app(settings) as api:
        service = api.app[SERVICE]
        gate = asyncio.Event()
        entered = asyncio.Queue[str]()
        create = service.create

        async def held_create(**kwargs: Any) -> Any:
            # The first writes stay in flight until the test lets them go: the instance is "at capacity".
            await entered.put(kwargs["body"].unique_id)
            await gate.wait()
            return await create(**kwargs)

        service.create = held_create  # type: ignore[method-assign]
        run = secrets.token_hex(3)
        held = [asyncio.create_task(api.call("POST", "/v1/requests", json=ask_body(f"{run}-held-{i}")))
                for i in range(2)]
        for _ in range(2):
            await asyncio.wait_for(entered.get(), timeout=30)
        assert api.app[ADMISSION].in_flight == 2

        # At capacity: creates, answers and the blocking call are refused at once, reads still served.
        shed: list[tuple[int, Any, str | None]] = []
        for i in range(10):
            async with api.session.post(api.url("/v1/requests"), json=ask_body(f"{run}-shed-{i}"),
                                        headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
                shed.append((resp.status, await resp.json(), resp.headers.get("Retry-After")))
        async with api.session.post(api.url("/v1/human-feedback"), json=ask_body(f"{run}-blocking"),
                                    headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            shed.append((resp.status, await resp.json(), resp.headers.get("Retry-After")))
        async with api.session.post(api.url("/api/human-feedback/submit"),
                                    json={"unique_id": f"{run}-held-0", "response": "123456"},
                                    headers={"Authorization": f"Bearer {OPERATOR_KEY}"}) as resp:
            shed.append((resp.status, await resp.json(), resp.headers.get("Retry-After")))
        for status, body, retry_after in shed:
            assert status == 503, body
            assert body["error"] == "overloaded" and "retry" in body["message"]
            assert retry_after == "3"
        status, _ = await api.call("GET", "/healthz", key=None)
        assert status == 200
        assert api.app[ADMISSION].shed == len(shed)

        gate.set()
        accepted = [await t for t in held]
        assert [s for s, _ in accepted] == [201, 201]
        assert api.app[ADMISSION].in_flight == 0

        store = api.app[STORE]
        # Every accepted write is stored; nothing of a refused one is.
        for _, body in accepted:
            row = await store.get_request("acme", body["id"])
            assert row is not None and row["status"] == "pending"
            entries = await service.journal_entries(tenant_id="acme", request_id=body["id"])
            assert [e["event"] for e in entries] == ["created"]
        for i in range(10):
            assert await store.get_request_by_unique_id("acme", f"{run}-shed-{i}") is None
        assert await store.get_request_by_unique_id("acme", f"{run}-blocking") is None
        assert (await store.get_request_by_unique_id("acme", f"{run}-held-0"))["status"] == "pending"

        # Once under the bound again, the refused writes go through when retried.
        service.create = create  # type: ignore[method-assign]
        status, body = await api.call("POST", "/v1/requests", json=ask_body(f"{run}-shed-0"))
        assert status == 201, body
        status, body = await api.submit(f"{run}-held-0", "123456")
        assert status == 200 and body["accepted"] is True
        assert (await api.wait(accepted[0][1]["id"]))["response"] == "123456"


async def test_waiting_agents_do_not_hold_places_that_writes_need(storage_url: str) -> None:
    """Long-polls and the blocking call's wait are not writes in flight: a full house of waiting
    agents leaves the bound to creates and answers."""
    settings = settings_from(base_config(storage_url, limits={"max_writes_in_flight": 1}))
    async with running_app(settings) as api:
        run = secrets.token_hex(3)
        service = api.app[SERVICE]
        blocking = []
        for i in range(3):  # one after the other: two creates at once would be over the bound of one
            blocking.append(asyncio.create_task(api.call("POST", "/v1/human-feedback",
                                                         json=ask_body(f"{run}-b{i}"))))
            for _ in range(600):  # until this blocking call has created its request and waits
                if service.waiting == i + 1:
                    break
                await asyncio.sleep(0.05)
            assert service.waiting == i + 1
        assert api.app[ADMISSION].in_flight == 0
        for i in range(3):
            status, body = await api.submit(f"{run}-b{i}", "123456")
            assert status == 200, body
        results = [await t for t in blocking]
        assert [(s, b["status"], b["response"]) for s, b in results] == [(200, "answered", "123456")] * 3
        assert api.app[ADMISSION].shed == 0

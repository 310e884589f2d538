"""Views held for the next call (issue 19, core/held.py): a request created here is answered as it was made,
and one resolved here with no wait parked is handed to the agent's next wait as the resolution made it,
neither reading the store again; only while a read could give nothing else that the call uses, and an
answer that any check would refuse, or that came too late, fares exactly as it did the long way."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from conftest import OPERATOR_KEY, OTHER_AGENT_KEY, Api, base_config, running_app, settings_from
from tests.core.test_dispatch import ScriptedConnector, fast

from handraise.core import held as held_module
from handraise.core.api import DeliveryView, RequestView
from handraise.core.appkeys import DISPATCHER, SERVICE
from handraise.core.held import HeldViews
from handraise.core.schedule import Schedule


def counting_reads(api: Api) -> list[str]:
    """The store reads of a request the service makes from now on (either kind), by request id."""
    store = api.app[SERVICE].store
    reads: list[str] = []
    with_deliveries, plain = store.get_request_with_deliveries, store.get_request

    async def read_with_deliveries(tenant_id: str, **kw: Any) -> Any:
        reads.append(kw.get("request_id") or kw.get("unique_id"))
        return await with_deliveries(tenant_id, **kw)

    async def read(tenant_id: str, request_id: str) -> Any:
        reads.append(request_id)
        return await plain(tenant_id, request_id)

    store.get_request_with_deliveries = read_with_deliveries
    store.get_request = read
    return reads


def code(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Code?", "timeout_seconds": 60,
            "schema": {"type": "string", "pattern": "^[0-9]{6}$"}, **extra}


async def test_the_wait_after_an_answer_takes_the_answers_view_and_reads_nothing(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        created = await api.create(code("c-1"))
        assert (await api.submit("c-1", "123456"))[0] == 200
        reads = counting_reads(api)
        collected = await api.wait(created["id"])
        assert reads == []
        assert collected["status"] == "answered" and collected["response"] == "123456"
        # What a read gives, to the byte: the next wait is not held for, and reads.
        again = await api.wait(created["id"])
        assert reads == [created["id"]]
        assert collected == again
        status, got = await api.call("GET", f"/v1/requests/{created['id']}")
        assert status == 200 and got == collected
        assert len(api.app[SERVICE].held) == 0


async def test_another_tenants_wait_neither_sees_nor_takes_the_held_view(sqlite_api: Api) -> None:
    created = await sqlite_api.create(code("c-2"))
    assert (await sqlite_api.submit("c-2", "654321"))[0] == 200
    status, data = await sqlite_api.call("GET", f"/v1/requests/{created['id']}/wait?timeout=0", key=OTHER_AGENT_KEY)
    assert status == 404 and "654321" not in str(data)
    reads = counting_reads(sqlite_api)
    assert (await sqlite_api.wait(created["id"]))["response"] == "654321"
    assert reads == []


async def test_a_parked_wait_is_woken_with_the_view_and_nothing_is_held(sqlite_api: Api) -> None:
    created = await sqlite_api.create(code("c-3"))
    service = sqlite_api.app[SERVICE]
    waiting = asyncio.create_task(sqlite_api.wait(created["id"]))
    while not service.waiting:
        await asyncio.sleep(0.005)
    assert (await sqlite_api.submit("c-3", "111111"))[0] == 200
    assert (await waiting)["response"] == "111111"
    assert len(service.held) == 0


async def test_a_sensitive_answer_is_never_held_its_wait_reads_the_store(sqlite_api: Api) -> None:
    created = await sqlite_api.create(code("c-4", sensitive=True))
    assert (await sqlite_api.submit("c-4", "222222"))[0] == 200
    assert len(sqlite_api.app[SERVICE].held) == 0
    reads = counting_reads(sqlite_api)
    assert (await sqlite_api.wait(created["id"]))["response"] == "222222"
    assert reads == [created["id"]]


async def test_a_delivered_request_is_read_with_its_deliveries_as_they_stand(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        fast(api)
        created = await api.create(code("c-5", channels=["scripted"]))
        await api.app[DISPATCHER].idle()
        assert (await api.submit("c-5", "333333"))[0] == 200
        assert len(api.app[SERVICE].held) == 0
        await api.app[DISPATCHER].idle()
        reads = counting_reads(api)
        collected = await api.wait(created["id"])
        assert reads == [created["id"]]
        assert {d["status"] for d in collected["deliveries"]} == {"withdrawn"}


async def test_the_answer_to_a_request_created_here_reads_nothing(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        created = await api.create(code("a-1"))
        reads = counting_reads(api)
        status, answered = await api.submit("a-1", "123456")
        assert status == 200 and reads == []
        status, again = await api.submit("a-1", "654321")  # taken: the second answer reads, and loses
        assert status == 409 and reads == ["a-1"]
        status, got = await api.call("GET", f"/v1/requests/{created['id']}", key=OPERATOR_KEY)
        assert got["response"] == "123456"
        assert answered["request"] == {k: v for k, v in got.items() if k != "response"}
        assert [e["event"] for e in await api.journal(created["id"])] == ["created", "answered"]
        assert await api.app[SERVICE].store.verify_journal() == []


async def test_an_answer_a_check_refuses_goes_the_long_way(sqlite_api: Api) -> None:
    created = await sqlite_api.create(code("a-2"))
    reads = counting_reads(sqlite_api)
    status, data = await sqlite_api.submit("a-2", "12345")
    assert status == 422 and data["error"] == "invalid_answer" and reads[0] == "a-2"  # read, as the long way reads
    assert [e["event"] for e in await sqlite_api.journal(created["id"])] == ["created", "invalid_attempt"]
    assert (await sqlite_api.submit("a-2", "123456"))[0] == 200


async def test_a_held_request_cancelled_or_expired_since_refuses_the_answer_as_before(sqlite_api: Api) -> None:
    service = sqlite_api.app[SERVICE]
    cancelled = await sqlite_api.create(code("a-3"))
    assert (await sqlite_api.call("POST", f"/v1/requests/{cancelled['id']}/cancel"))[0] == 200
    status, data = await sqlite_api.submit("a-3", "123456")
    assert status == 410 and data["error"] == "cancelled"
    expired = await sqlite_api.create(code("a-4"))
    real = service.clock
    service.clock = lambda: real() + 3600
    status, data = await sqlite_api.submit("a-4", "123456")
    assert status == 410 and data["error"] == "expired"
    service.clock = real
    for request in (cancelled, expired):
        assert "answered" not in [e["event"] for e in await sqlite_api.journal(request["id"])]


async def test_the_held_views_are_bounded_oldest_dropped_first(sqlite_api: Api,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_module, "MAX_HELD", 2)
    ids = [(await sqlite_api.create(code(f"b-{i}")))["id"] for i in range(3)]
    for i in range(3):
        assert (await sqlite_api.submit(f"b-{i}", "444444"))[0] == 200
    assert list(sqlite_api.app[SERVICE].held._resolved) == ids[1:]
    reads = counting_reads(sqlite_api)
    for request_id in ids:
        assert (await sqlite_api.wait(request_id))["response"] == "444444"
    assert reads == ids[:1]


_ANSWERED = RequestView(id="req_1", tenant_id="acme", unique_id="u", status="answered", message_for_user="m",
                        schema=None, kind="input", sensitive=False, run_id=None, channels=["web"], created_at=1.0,
                        expires_at=61.0, created_by="agent-1", response="x", resolved_by="op-1",
                        resolved_channel="api", resolved_at=2.0)


@pytest.mark.parametrize(("change", "delivering", "held"), [
    ({}, False, True),
    ({"status": "expired", "response": None}, False, True),
    ({}, True, False),
    ({"status": "pending", "response": None}, False, False),
    ({"sensitive": True}, False, False),
    ({"deliveries": [DeliveryView("scripted", "t1", "withdrawn", 1, None, 2.0)]}, False, False),
    ({"callback_url": "https://cb.example/x"}, False, False),
    ({"schedule": Schedule((), (), 1.0)}, False, False),
    ({"approvals_required": 2, "reject_policy": "any"}, False, False),
], ids=["answered", "expired", "a-channel-delivers", "pending", "sensitive", "delivered", "callback", "schedule",
        "quorum"])
def test_only_a_view_nothing_can_change_is_held(change: dict[str, Any], delivering: bool, held: bool) -> None:
    views = HeldViews()
    asked: list[tuple[str, list[str]]] = []
    views.may_deliver = lambda tenant_id, channels: asked.append((tenant_id, channels)) or delivering
    views.resolved(dataclasses.replace(_ANSWERED, **change))
    assert (views.collecting("acme", "req_1") is not None) is held
    assert asked in ([], [("acme", ["web"])])
    assert views.collecting("acme", "req_1") is None  # taken once


def test_nothing_is_held_until_the_app_says_which_channels_deliver() -> None:
    views = HeldViews()
    views.resolved(_ANSWERED)
    assert views.collecting("acme", "req_1") is None

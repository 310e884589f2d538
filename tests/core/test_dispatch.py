"""The dispatcher through the real app: immediate delivery, retries, journaling, withdraw, reminders, recovery."""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from conftest import OPERATOR_KEY, base_config, running_app, settings_from

from handraise.core.api import RequestView
from handraise.core.appkeys import CONNECTORS, DELIVERIES, DISPATCHER, SERVICE
from handraise.core.connectors import Connector
from handraise.core.outcomes import outcome_text
from handraise.core.errors import ConnectorError


class ScriptedConnector(Connector):
    """A real connector whose sends are scripted per target: failures to raise, gates to wait on."""

    name: ClassVar[str] = "scripted"
    serve: ClassVar[dict[str, list[str]]] = {"acme": ["t1", "t2"]}
    remind_seconds: ClassVar[float | None] = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attempts: list[tuple[str, float]] = []
        self.withdrawn: list[tuple[str, dict[str, Any], str]] = []
        self.reminded: list[str] = []
        self.failures: dict[str, list[Exception]] = {}
        self.gates: dict[str, asyncio.Event] = {}
        self.sent = asyncio.Event()

    def targets(self, tenant_id: str) -> list[str]:
        return list(self.serve.get(tenant_id, []))

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        self.attempts.append((target, time.monotonic()))
        if self.failures.get(target):
            raise self.failures[target].pop(0)
        gate = self.gates.get(target)
        if gate is not None:
            await gate.wait()
        self.sent.set()
        return {"message": f"{target}:{len(self.attempts)}"}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.withdrawn.append((target, ref, outcome_text(request)))

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        self.reminded.append(target)
        return {"message": f"reminder:{target}"}

    def remind_after(self) -> float | None:
        return self.remind_seconds


class OtherConnector(ScriptedConnector):
    name = "other"
    serve = {"acme": ["o1"]}


def question(uid: str, channels: list[str], **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Deploy?", "kind": "approval", "channels": channels,
            "timeout_seconds": 60, **extra}


def fast(api: Any) -> None:
    dispatcher = api.app[DISPATCHER]
    dispatcher.backoff_initial = 0.02
    dispatcher.backoff_cap = 0.05


async def test_delivers_at_once_and_shows_deliveries(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url)), connector_classes=[ScriptedConnector]) as api:
        created = await api.create(question("d-1", ["scripted"]))
        await api.app[DISPATCHER].idle()

        status, body = await api.call("GET", f"/v1/requests/{created['id']}")
        assert status == 200
        rows = sorted(body["deliveries"], key=lambda d: d["target"])
        assert [(d["channel"], d["target"], d["status"], d["attempts"], d["last_error"]) for d in rows] == [
            ("scripted", "t1", "sent", 1, None), ("scripted", "t2", "sent", 1, None)]
        delivered = [e for e in await api.journal(created["id"]) if e["event"] == "delivered"]
        assert sorted(e["data"]["target"] for e in delivered) == ["t1", "t2"]
        assert all(e["channel"] == "scripted" for e in delivered)


async def test_failed_send_is_retried_with_backoff_and_each_attempt_journaled(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        fast(api)
        connector = api.app[CONNECTORS]["scripted"]
        connector.failures["t1"] = [ConnectorError("HTTP 502 from upstream"), RuntimeError("socket closed")]
        created = await api.create(question("d-2", ["scripted"]))
        await api.app[DISPATCHER].idle()

        _, body = await api.call("GET", f"/v1/requests/{created['id']}")
        t1 = next(d for d in body["deliveries"] if d["target"] == "t1")
        assert (t1["status"], t1["attempts"], t1["last_error"]) == ("sent", 3, None)
        failed = [e for e in await api.journal(created["id"])
                  if e["event"] == "delivery_failed" and e["data"]["target"] == "t1"]
        assert [(e["data"]["attempt"], e["data"]["final"]) for e in failed] == [(1, False), (2, False)]
        assert failed[0]["data"]["error"] == "HTTP 502 from upstream"
        assert failed[1]["data"]["error"] == "RuntimeError: socket closed"


async def test_retry_after_is_honoured(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        fast(api)
        connector = api.app[CONNECTORS]["scripted"]
        connector.failures["t1"] = [ConnectorError("Too Many Requests", retry_after=0.4)]
        await api.create(question("d-3", ["scripted"]))
        await api.app[DISPATCHER].idle()

        times = [at for target, at in connector.attempts if target == "t1"]
        assert len(times) == 2
        assert times[1] - times[0] >= 0.39


async def test_permanent_failure_stops_and_is_shown(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        fast(api)
        connector = api.app[CONNECTORS]["scripted"]
        connector.failures["t1"] = [ConnectorError("Bad Request: chat not found", permanent=True)]
        created = await api.create(question("d-4", ["scripted"]))
        await api.app[DISPATCHER].idle()

        _, body = await api.call("GET", f"/v1/requests/{created['id']}")
        t1 = next(d for d in body["deliveries"] if d["target"] == "t1")
        assert (t1["status"], t1["attempts"], t1["last_error"]) == ("failed", 1, "Bad Request: chat not found")
        assert len([t for t, _ in connector.attempts if t == "t1"]) == 1


async def test_attempts_are_capped(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        fast(api)
        api.app[DISPATCHER].max_attempts = 3
        connector = api.app[CONNECTORS]["scripted"]
        connector.failures["t1"] = [ConnectorError("HTTP 503") for _ in range(10)]
        created = await api.create(question("d-5", ["scripted"]))
        await api.app[DISPATCHER].idle()

        _, body = await api.call("GET", f"/v1/requests/{created['id']}")
        t1 = next(d for d in body["deliveries"] if d["target"] == "t1")
        assert (t1["status"], t1["attempts"]) == ("failed", 3)
        finals = [e["data"]["final"] for e in await api.journal(created["id"])
                  if e["event"] == "delivery_failed"]
        assert finals == [False, False, True]


async def test_error_text_is_redacted(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        connector = api.app[CONNECTORS]["scripted"]
        leaky = "rejected Authorization: Bearer sk-abcdefghijklmnopqrstuvwxyz0123456789"
        connector.failures["t1"] = [ConnectorError(leaky, permanent=True)]
        created = await api.create(question("d-6", ["scripted"]))
        await api.app[DISPATCHER].idle()

        _, body = await api.call("GET", f"/v1/requests/{created['id']}")
        t1 = next(d for d in body["deliveries"] if d["target"] == "t1")
        assert "sk-abcdefghijklmnopqrstuvwxyz" not in t1["last_error"]
        assert "[REDACTED]" in t1["last_error"]


async def test_a_failing_channel_never_delays_another(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)),
                           connector_classes=[ScriptedConnector, OtherConnector]) as api:
        scripted = api.app[CONNECTORS]["scripted"]
        other = api.app[CONNECTORS]["other"]
        # One target hangs and another retries slowly; the other channel goes out regardless.
        scripted.gates["t1"] = asyncio.Event()
        scripted.failures["t2"] = [ConnectorError("slow down", retry_after=600)]
        created = await api.create(question("d-7", ["scripted", "other"]))

        # Far less than the 600 s retry wait, however loaded the machine.
        await asyncio.wait_for(other.sent.wait(), timeout=60)
        assert [t for t, _ in other.attempts] == ["o1"]
        # Cancelling cuts the 600 s retry wait short; the hung send is released and withdrawn.
        status, _ = await api.call("POST", f"/v1/requests/{created['id']}/cancel")
        assert status == 200
        scripted.gates["t1"].set()
        await asyncio.wait_for(api.app[DISPATCHER].idle(), timeout=60)
        _, body = await api.call("GET", f"/v1/requests/{created['id']}")
        states = {d["target"]: d["status"] for d in body["deliveries"]}
        assert states == {"t1": "withdrawn", "t2": "withdrawn", "o1": "withdrawn"}


async def test_withdraw_on_every_terminal_route(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[ScriptedConnector]) as api:
        connector = api.app[CONNECTORS]["scripted"]
        answered = await api.create(question("w-1", ["scripted"]))
        cancelled = await api.create(question("w-2", ["scripted"]))
        expiring = await api.create(question("w-3", ["scripted"], timeout_seconds=1))
        await api.app[DISPATCHER].idle()

        status, _ = await api.submit("w-1", {"decision": "approve"})
        assert status == 200
        status, _ = await api.call("POST", f"/v1/requests/{cancelled['id']}/cancel")
        assert status == 200
        assert (await api.wait(expiring["id"], timeout=30))["status"] == "expired"
        await api.app[DISPATCHER].idle()

        outcomes = sorted({(ref["message"].split(":")[0], text) for _, ref, text in connector.withdrawn})
        assert ("t1", "Approved by operator op-1 via the API") in outcomes  # an approval says its decision
        assert ("t1", "Cancelled") in outcomes and ("t1", "Expired") in outcomes
        assert len(connector.withdrawn) == 6  # two targets each
        for request in (answered, cancelled, expiring):
            _, body = await api.call("GET", f"/v1/requests/{request['id']}")
            assert {d["status"] for d in body["deliveries"]} == {"withdrawn"}
            assert sum(e["event"] == "withdrawn" for e in await api.journal(request["id"])) == 2


async def test_reminder_once_and_withdrawn_with_the_question(sqlite_url: str) -> None:
    class Reminding(ScriptedConnector):
        serve = {"acme": ["t1"]}
        remind_seconds = 0.2

    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[Reminding]) as api:
        connector = api.app[CONNECTORS]["scripted"]
        created = await api.create(question("r-1", ["scripted"]))
        await api.app[DISPATCHER].idle()
        assert connector.reminded == []  # the sleeping reminder is not work in flight

        deadline = asyncio.get_running_loop().time() + 3
        while not connector.reminded and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        await api.app[DISPATCHER].idle()
        assert connector.reminded == ["t1"]
        await asyncio.sleep(0.3)  # a second reminder would be due by now
        assert connector.reminded == ["t1"]

        await api.submit("r-1", {"decision": "reject"})
        await api.app[DISPATCHER].idle()
        assert sorted(ref["message"] for _, ref, _ in connector.withdrawn) == ["reminder:t1", "t1:1"]
        assert any(e["event"] == "reminded" for e in await api.journal(created["id"]))


async def test_no_reminder_after_resolution(sqlite_url: str) -> None:
    class Reminding(ScriptedConnector):
        serve = {"acme": ["t1"]}
        remind_seconds = 0.3

    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[Reminding]) as api:
        connector = api.app[CONNECTORS]["scripted"]
        await api.create(question("r-2", ["scripted"]))
        await api.app[DISPATCHER].idle()
        await api.submit("r-2", {"decision": "approve"})
        await api.app[DISPATCHER].idle()
        await asyncio.sleep(0.01)
        # The sleeping reminder ended with the request rather than at its time.
        assert not [t for t in api.app[DISPATCHER]._timers if t.get_name().startswith("remind:")]
        await asyncio.sleep(0.4)
        assert connector.reminded == []


async def test_recovery_sends_what_a_stopped_instance_left(sqlite_url: str) -> None:
    class Hanging(ScriptedConnector):
        serve = {"acme": ["t1"]}

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.gates["t1"] = asyncio.Event()  # never set: the process "dies" mid-send

    settings = settings_from(base_config(sqlite_url))
    async with running_app(settings, connector_classes=[Hanging]) as first:
        created = await first.create(question("rec-1", ["scripted"]))
        deadline = asyncio.get_running_loop().time() + 2
        while not first.app[CONNECTORS]["scripted"].attempts and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    class Working(ScriptedConnector):
        serve = {"acme": ["t1"]}

    async with running_app(settings, connector_classes=[Working]) as second:
        resumed = await second.app[DISPATCHER].recover(startup=True)
        await second.app[DISPATCHER].idle()
        assert resumed in (0, 1)  # 0 when the startup pass got there first
        assert [t for t, _ in second.app[CONNECTORS]["scripted"].attempts] == ["t1"]
        _, body = await second.call("GET", f"/v1/requests/{created['id']}")
        assert [(d["status"], d["attempts"]) for d in body["deliveries"]] == [("sent", 1)]
        # Nothing left to resume: a second pass sends nothing twice.
        assert await second.app[DISPATCHER].recover(startup=True) == 0


async def test_resolved_on_another_instance_is_withdrawn(pg_url: str) -> None:
    settings = settings_from(base_config(pg_url))
    async with running_app(settings, connector_classes=[ScriptedConnector]) as a, \
            running_app(settings, connector_classes=[ScriptedConnector]) as b:
        created = await a.create(question("x-1", ["scripted"]))
        await a.app[DISPATCHER].idle()
        assert len(a.app[CONNECTORS]["scripted"].attempts) == 2
        assert b.app[CONNECTORS]["scripted"].attempts == []  # delivered once, by the creating instance

        status, _ = await b.submit("x-1", {"decision": "approve"}, key=OPERATOR_KEY)
        assert status == 200
        await b.app[DISPATCHER].idle()
        assert len(b.app[CONNECTORS]["scripted"].withdrawn) == 2
        _, body = await a.call("GET", f"/v1/requests/{created['id']}")
        assert {d["status"] for d in body["deliveries"]} == {"withdrawn"}


class SlowWithdrawConnector(ScriptedConnector):
    """Its outcome edit is under way when the server stops."""

    name = "slow"
    serve = {"acme": ["s1"]}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.withdraw_started = asyncio.Event()
        self.release = asyncio.Event()

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.withdraw_started.set()
        await self.release.wait()
        await super().withdraw(request, target=target, ref=ref)


async def test_a_stop_lets_outcome_edits_in_flight_finish(sqlite_url: str) -> None:
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[SlowWithdrawConnector]) as api:
        connector = api.app[CONNECTORS]["slow"]
        await api.create(question("w-stop", ["slow"]))
        await api.app[DISPATCHER].idle()
        assert (await api.submit("w-stop", {"decision": "approve"}))[0] == 200
        await asyncio.wait_for(connector.withdraw_started.wait(), 5)
        stopping = asyncio.create_task(api.app[DISPATCHER].stop())
        await asyncio.sleep(0)
        assert not stopping.done()  # waiting for the edit, not cancelling it
        connector.release.set()
        await asyncio.wait_for(stopping, 5)
        assert [t for t, _, _ in connector.withdrawn] == ["s1"]


class GatedWithdrawConnector(SlowWithdrawConnector):
    """Each instance's outcome edit waits at its gate, so two instances' edits can be under way at once."""

    name = "gated"
    serve = {"acme": ["g1"]}


async def test_two_instances_seeing_one_message_end_withdraw_it_once(storage_url: str) -> None:
    # The resolver's withdraw pass and the sender's check after sending can both see a sent delivery of a
    # terminal request; without a compare-and-set on the delivery both edit (or delete) the message.
    settings = settings_from(base_config(storage_url))
    async with running_app(settings, connector_classes=[GatedWithdrawConnector]) as a, \
            running_app(settings, connector_classes=[GatedWithdrawConnector]) as b:
        ca, cb = a.app[CONNECTORS]["gated"], b.app[CONNECTORS]["gated"]
        ca.release.set()
        created = await a.create(question("once", ["gated"]))
        await a.app[DISPATCHER].idle()
        assert (await a.submit("once", {"decision": "approve"}))[0] == 200
        await a.app[DISPATCHER].idle()  # a withdrew it once, as the resolver
        assert len(ca.withdrawn) == 1 and cb.withdrawn == []

        # Both instances now race for the same sent delivery of the terminal request.
        ca.withdrawn.clear()
        ca.release.clear()
        ca.withdraw_started.clear()
        service, deliveries = a.app[SERVICE], a.app[DELIVERIES]
        delivery, = await deliveries.of_request(tenant_id="acme", request_id=created["id"])
        await deliveries.update(delivery, status="sent")  # as if b's pass had not run yet
        view = await service.get(tenant_id="acme", request_id=created["id"])
        ref = {"message": "g1"}
        tasks = [asyncio.create_task(a.app[DISPATCHER]._withdraw_one(ca, view, delivery, ref)),
                 asyncio.create_task(b.app[DISPATCHER]._withdraw_one(cb, view, delivery, ref))]
        both_started = asyncio.create_task(asyncio.wait(
            [asyncio.create_task(ca.withdraw_started.wait()), asyncio.create_task(cb.withdraw_started.wait())]))
        # Either both edits get under way (the race), or one instance stands aside and returns.
        await asyncio.wait([both_started, *tasks], return_when=asyncio.FIRST_COMPLETED, timeout=30)
        ca.release.set()
        cb.release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        both_started.cancel()
        assert len(ca.withdrawn) + len(cb.withdrawn) == 1
        delivery, = await deliveries.of_request(tenant_id="acme", request_id=created["id"])
        assert delivery.status == "withdrawn"
        withdrawn = [e for e in await a.journal(created["id"]) if e["event"] == "withdrawn"]
        assert len(withdrawn) == 2  # the first pass, then one of the two racers

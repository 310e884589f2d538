"""Escalation and scheduled reminders on the service's clock, on SQLite and on PostgreSQL.

Steps are reached by moving the service's clock and sweeping, never by sleeping: a reached step is
journaled, shown on the request, widens who may answer, and happens once however many sweeps race.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from conftest import OTHER_AGENT_KEY, Api, base_config, running_app, settings_from, sweeper_held
from handraise.core.appkeys import SERVICE
from handraise.core.errors import NotAssignedError
from handraise.webforms.connector import WebFormsConnector

PEOPLE = [
    {"id": "alice", "name": "Alice Example", "groups": ["primary"]},
    {"id": "bob", "name": "Bob Builder", "groups": ["secondary"]},
    {"id": "carol", "name": "Carol", "groups": ["secondary"]},
    {"id": "dave", "name": "Dave"},
]


@pytest.fixture
async def api(storage_url: str) -> AsyncIterator[Api]:
    config = base_config(storage_url)
    config["tenants"][0]["people"] = PEOPLE
    config["tenants"][1]["people"] = [{"id": "gus", "name": "Gus"}]
    # The app's own sweeper is held: the tests sweep themselves (``at``) on the clock they moved, and what
    # they see after a sweep is that sweep's doing, not a tick of the sweeper's that read the same clock.
    async with running_app(settings_from(config), connector_classes=[WebFormsConnector]) as a, sweeper_held(a):
        yield a


def approval(**extra: Any) -> dict[str, Any]:
    return {"unique_id": f"e-{secrets.token_hex(6)}", "message_for_user": "Deploy to production?",
            "kind": "approval", "timeout_seconds": 600, **extra}


STEPS = [{"after_seconds": 60, "to": ["group:secondary"]}, {"after_seconds": 300, "to": ["dave"]}]


class Clock:
    """The service's clock, stopped at the test's start and moved only by the test: "59 s after the
    request was made" stays 59 s however slow the machine is between the two."""

    def __init__(self) -> None:
        self.start = time.time()
        self.offset = 0.0

    def __call__(self) -> float:
        return self.start + self.offset


async def at(api: Api, clock: Clock, seconds: float) -> None:
    """Move the clock to ``seconds`` after the test's start and sweep once."""
    clock.offset = seconds
    await api.app[SERVICE].sweep()


def clocked(api: Api) -> Clock:
    clock = Clock()
    api.app[SERVICE].clock = clock
    return clock


async def journal(api: Api, request_id: str, event: str, tenant: str = "acme") -> list[dict[str, Any]]:
    return [e for e in await api.journal(request_id, tenant_id=tenant) if e["event"] == event]


async def answer(api: Api, request_id: str, person: str) -> Any:
    return await api.app[SERVICE].submit(tenant_id="acme", request_id=request_id, response={"decision": "approve"},
                                         principal=f"person:{person}", channel="api")


async def get(api: Api, request_id: str) -> dict[str, Any]:
    status, data = await api.call("GET", f"/v1/requests/{request_id}")
    assert status == 200, data
    return data


# -- reaching steps -----------------------------------------------------------------------------


async def test_steps_are_reached_on_the_clock_journaled_shown_and_widen_who_may_answer(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(assign_to=["alice"], escalation=STEPS))
    assert [(s["after_seconds"], s["reached"], s["reached_at"]) for s in created["escalation"]] == [
        (60, False, None), (300, False, None)]
    with pytest.raises(NotAssignedError):
        await answer(api, created["id"], "bob")
    await at(api, clock, 59)
    assert not (await get(api, created["id"]))["escalation"][0]["reached"]
    await at(api, clock, 61)
    now = await get(api, created["id"])
    first, second = now["escalation"]
    assert first["reached"] and first["reached_at"] is not None and not second["reached"]
    assert now["assign_to"] == ["alice", "group:secondary"]
    [entry] = await journal(api, created["id"], "escalated")
    assert entry["data"]["step"] == 1 and entry["data"]["people"] == ["bob", "carol"]
    assert entry["data"]["to"] == ["group:secondary"]
    # Dave's step is not reached yet: he is still refused; Bob may answer now.
    with pytest.raises(NotAssignedError):
        await answer(api, created["id"], "dave")
    done = await answer(api, created["id"], "bob")
    assert (done.status, done.resolved_by) == ("answered", "person:bob")
    # Answered: the clock passing the next step reaches nobody.
    await at(api, clock, 301)
    assert len(await journal(api, created["id"], "escalated")) == 1
    assert not (await get(api, created["id"]))["escalation"][1]["reached"]


async def test_a_sweeper_that_was_away_reaches_every_step_due_at_once(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(assign_to=["alice"], escalation=STEPS))
    await at(api, clock, 400)
    now = await get(api, created["id"])
    assert [s["reached"] for s in now["escalation"]] == [True, True]
    assert now["assign_to"] == ["alice", "group:secondary", "dave"]
    assert [e["data"]["step"] for e in await journal(api, created["id"], "escalated")] == [1, 2]


async def test_racing_sweeps_reach_a_step_exactly_once(api: Api) -> None:
    created = await api.create(approval(assign_to=["alice"], escalation=STEPS))
    # The six sweeps are handed a time past the first step; the service's clock, which the app's own
    # sweeper reads every 0.1 s, stays at now, so no tick of that sweeper can reach the step first and
    # leave the six rightly finding nothing to do.
    past_first_step = time.time() + 61
    escalator = api.app[SERVICE].escalations
    moved = await asyncio.gather(*(escalator.advance(tenant_id="acme", request_id=created["id"],
                                                     now=past_first_step) for _ in range(6)))
    assert sum(moved) == 1
    assert len(await journal(api, created["id"], "escalated")) == 1
    assert [s["reached"] for s in (await get(api, created["id"]))["escalation"]] == [True, False]
    assert await api.app[SERVICE].store.verify_journal() == []


async def test_an_unassigned_request_escalates_without_narrowing_who_may_answer(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(escalation=STEPS[:1]))
    await at(api, clock, 61)
    now = await get(api, created["id"])
    assert now["escalation"][0]["reached"] and "assign_to" not in now
    # Anyone allowed may still answer: Dave is in no step.
    assert (await answer(api, created["id"], "dave")).status == "answered"


async def test_an_expired_request_is_not_escalated(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(assign_to=["alice"], escalation=STEPS, timeout_seconds=400))
    await at(api, clock, 3600)
    now = await get(api, created["id"])
    assert now["status"] == "expired"
    assert [s["reached"] for s in now["escalation"]] == [False, False]
    assert await journal(api, created["id"], "escalated") == []


async def test_a_cancelled_request_is_not_escalated(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(assign_to=["alice"], escalation=STEPS))
    assert (await api.call("POST", f"/v1/requests/{created['id']}/cancel"))[0] == 200
    await at(api, clock, 61)
    assert await journal(api, created["id"], "escalated") == []


async def test_step_channels_are_added_to_the_request(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(channels=[], escalation=[{"after_seconds": 30, "to": ["bob"],
                                                                   "channels": ["web"]}]))
    assert created["channels"] == []
    await at(api, clock, 31)
    assert (await get(api, created["id"]))["channels"] == ["web"]


# -- scheduled reminders ---------------------------------------------------------------------


async def test_reminders_are_a_schedule_each_sent_once(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(reminders=[60, 300]))
    assert [r["sent_at"] for r in created["reminders"]] == [None, None]
    await at(api, clock, 61)
    await at(api, clock, 62)
    now = await get(api, created["id"])
    assert [r["sent_at"] is not None for r in now["reminders"]] == [True, False]
    assert len(await journal(api, created["id"], "reminder_due")) == 1
    await at(api, clock, 301)
    assert len(await journal(api, created["id"], "reminder_due")) == 2
    await at(api, clock, 500)
    assert len(await journal(api, created["id"], "reminder_due")) == 2


async def test_remind_after_seconds_on_a_request_is_one_reminder(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(remind_after_seconds=120))
    assert created["reminders"] == [{"after_seconds": 120, "sent_at": None}]
    await at(api, clock, 121)
    assert len(await journal(api, created["id"], "reminder_due")) == 1


async def test_a_steps_reminder_comes_after_the_step(api: Api) -> None:
    clock = clocked(api)
    created = await api.create(approval(assign_to=["alice"], escalation=[
        {"after_seconds": 60, "to": ["bob"], "remind_after_seconds": 30}]))
    await at(api, clock, 61)
    assert await journal(api, created["id"], "reminder_due") == []
    await at(api, clock, 91)
    assert len(await journal(api, created["id"], "reminder_due")) == 1
    assert (await get(api, created["id"]))["escalation"][0]["reminded_at"] is not None


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "field", "needle"), [
    ({"escalation": [{"after_seconds": 60, "to": ["bob"]}, {"after_seconds": 60, "to": ["carol"]}]},
     "escalation.1.after_seconds", "later than the step before"),
    ({"escalation": [{"after_seconds": 90, "to": ["bob"]}, {"after_seconds": 30, "to": ["carol"]}]},
     "escalation.1.after_seconds", "later than the step before"),
    ({"escalation": [{"after_seconds": 600, "to": ["bob"]}]}, "escalation.0.after_seconds", "shorter than the timeout"),
    ({"escalation": [{"after_seconds": 60, "to": ["zed"]}]}, "escalation.0.to", "zed is not one of"),
    ({"escalation": [{"after_seconds": 60, "to": ["gus"]}]}, "escalation.0.to", "gus is not one of"),  # globex's
    ({"escalation": [{"after_seconds": 60, "to": ["group:nobody"]}]}, "escalation.0.to", "group:nobody"),
    ({"escalation": [{"after_seconds": 60, "to": ["bob"], "channels": ["telegram"]}]},
     "escalation.0.channels", "does not serve this tenant"),
    ({"escalation": [{"after_seconds": 60, "to": ["bob"], "remind_after_seconds": 540}]},
     "escalation.0.remind_after_seconds", "at or after the deadline"),
    ({"escalation": [{"after_seconds": "60", "to": ["bob"]}]}, "escalation.0.after_seconds", ""),
    ({"escalation": [{"after_seconds": 0, "to": ["bob"]}]}, "escalation.0.after_seconds", ""),
    ({"escalation": [{"after_seconds": 60, "to": []}]}, "escalation.0.to", "at least 1"),
    ({"escalation": [{"after_seconds": 60}]}, "escalation.0.to", "is required"),
    ({"escalation": [{"after_seconds": 60, "to": ["bob"], "when": "now"}]}, "escalation.0.when", "unknown field"),
    ({"escalation": []}, "escalation", "at least 1"),
    ({"escalation": {"after_seconds": 60}}, "escalation", ""),
    ({"escalation": [{"after_seconds": 60, "to": ["bob"]}] * 11}, "escalation", "at most 10"),
    ({"reminders": [300, 60]}, "reminders.1", "later than the reminder before"),
    ({"reminders": [60, 600]}, "reminders.1", "shorter than the timeout"),
    ({"reminders": [True]}, "reminders.0", ""),
    ({"reminders": [60], "remind_after_seconds": 60}, "remind_after_seconds", "not both"),
    ({"remind_after_seconds": 601}, "remind_after_seconds", "shorter than the timeout"),
])
async def test_a_bad_schedule_is_a_422_naming_the_field(api: Api, extra: dict[str, Any], field: str,
                                                        needle: str) -> None:
    status, data = await api.call("POST", "/v1/requests", json=approval(**extra))
    assert status == 422, data
    assert data["error"] == "validation_error"
    fields = {f["field"]: f["message"] for f in data["details"]["fields"]}
    assert field in fields, fields
    assert needle in fields[field]
    assert await api.app[SERVICE].list(tenant_id="acme") == []  # nothing was stored


async def test_a_tenant_without_people_cannot_escalate(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        status, data = await api.call("POST", "/v1/requests", json=approval(escalation=STEPS[:1]))
        assert status == 422 and data["details"]["fields"][0]["field"] == "escalation"


async def test_another_tenants_people_are_not_this_tenants(api: Api) -> None:
    status, data = await api.call("POST", "/v1/requests", key=OTHER_AGENT_KEY,
                                  json=approval(escalation=[{"after_seconds": 60, "to": ["bob"]}]))
    assert status == 422 and "bob is not one of" in data["details"]["fields"][0]["message"]


async def test_a_retry_with_the_same_schedule_is_the_same_request_and_another_is_a_conflict(api: Api) -> None:
    body = approval(assign_to=["alice"], escalation=STEPS, reminders=[30])
    first = await api.create(body)
    status, again = await api.call("POST", "/v1/requests", json=body)
    assert status == 200 and again["id"] == first["id"]
    status, data = await api.call("POST", "/v1/requests", json={**body, "escalation": STEPS[:1]})
    assert status == 409 and data["error"] == "conflict"


# -- several instances on one PostgreSQL ---------------------------------------------------------


async def test_two_instances_sweeping_reach_a_step_once_and_both_hear_of_it(pg_url: str) -> None:
    from handraise.core.events import REQUEST_SCHEDULED

    # The four advances are handed a time past the step; the services' clocks, which the instances' own
    # sweepers read, stay at now, so no tick of theirs can reach the step first and leave the four rightly
    # finding nothing to do (moving the clocks raced a first tick still under way on a slow machine).
    config = base_config(pg_url)
    config["tenants"][0]["people"] = PEOPLE
    settings = settings_from(config)
    async with running_app(settings, instance_id="a") as a, running_app(settings, instance_id="b") as b:
        created = await a.create(approval(assign_to=["alice"], escalation=STEPS[:1]))
        heard: dict[str, asyncio.Queue[Any]] = {"a": asyncio.Queue(), "b": asyncio.Queue()}
        for name, api in (("a", a), ("b", b)):
            api.app[SERVICE].bus.add_listener(
                lambda ev, q=heard[name]: q.put_nowait(ev) if ev.type == REQUEST_SCHEDULED else None)
        past_the_step = time.time() + 61
        moved = await asyncio.gather(*(api.app[SERVICE].escalations.advance(
            tenant_id="acme", request_id=created["id"], now=past_the_step) for api in (a, b, a, b)))
        assert sum(moved) == 1
        assert len(await journal(a, created["id"], "escalated")) == 1
        # The instance that reached it, and the other through NOTIFY (its dispatcher does not act on it).
        events = [await asyncio.wait_for(q.get(), 10) for q in heard.values()]
        assert sorted(ev.local for ev in events) == [False, True]
        for ev in events:
            assert ev.object_id == created["id"] and ev.data["assign_to"] == ["alice", "group:secondary"]


def test_the_last_ping_is_the_latest_reminder_due_in_a_tick_that_reached_no_step() -> None:
    from handraise.core.schedule import EscalationStep, Schedule

    schedule = Schedule.make(escalation=[EscalationStep(after_seconds=100, to=["bob"], remind_after_seconds=50)],
                             reminders=[40, 100], created_at=1000.0)
    assert schedule is not None and schedule.last_ping_at() is None
    first = schedule.advance(1041.0)
    assert first.remind and first.schedule.last_ping_at() == 1041.0
    # The step and the second reminder fall due in one tick: the step's people are reached, nobody pinged.
    second = first.schedule.advance(1101.0)
    assert second.reached == (0,) and not second.remind and second.schedule.last_ping_at() == 1041.0
    third = second.schedule.advance(1151.0)  # the step's own reminder
    assert third.remind and third.schedule.last_ping_at() == 1151.0

"""Slack with people: assigned people reached in a DM beside the channel, everyone else refused as a
stranger is, outcomes named by the person; through FakeSlack and signed interactions."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Api, base_config, running_app, settings_from
from handraise.bots.slack import SlackConnector
from handraise.core.errors import ConfigError
from handraise.core.appkeys import DELIVERIES, DISPATCHER, SERVICE
from tests.bots.slack_helpers import (
    ACME_CHANNEL,
    ALICE,
    BOB,
    CAROL,
    ephemerals_for,
    post_signed,
    posted_message,
    request_body,
    slack_section,
    tap,
)
from tests.bots.slack_helpers import fake  # noqa: F401  (the fixture)
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def people_slack(tmp_path: Path, fake: FakeSlack, *, roomless: bool = False,
                       **overrides: Any) -> AsyncIterator[Api]:
    config = base_config(f"sqlite:///{tmp_path / 'slack-people.db'}", slack=slack_section(fake, **overrides))
    config["slack"]["tenants"]["acme"]["allowed_user_ids"] = ["group:oncall"]
    if roomless:  # acme reaches its people only in their DMs
        del config["slack"]["tenants"]["acme"]["channel"]
    config["tenants"][0]["people"] = [
        {"id": "alice", "name": "Alice Example", "slack": ALICE, "groups": ["oncall"]},
        {"id": "bob", "name": "Bob Builder", "slack": BOB, "groups": ["oncall"]},
        {"id": "dave", "name": "Dave", "groups": ["oncall"]},  # no Slack: reached elsewhere
        {"id": "carol", "name": "Carol", "slack": CAROL},  # in Slack, on no acme allowlist
    ]
    async with running_app(settings_from(config), connector_classes=[SlackConnector]) as api:
        yield api


async def deliveries(api: Api, request_id: str) -> list[tuple[str, str]]:
    await api.app[DISPATCHER].idle()
    rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)
    return sorted((r.target, r.status) for r in rows)


async def test_an_assigned_request_reaches_its_people_in_a_dm_and_refuses_the_rest(
        tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake) as api:
        req = await api.create(request_body("dm-1", kind="approval", assign_to=["alice", "dave", "carol"]))
        in_channel = await posted_message(fake, req)
        in_dm = await posted_message(fake, req, channel=ALICE)
        assert in_dm["channel"] == fake.dm_channel(ALICE)
        # Dave has no Slack id and Carol may not answer acme in Slack: neither gets a DM.
        assert await deliveries(api, req["id"]) == [(ACME_CHANNEL, "sent"), (ALICE, "sent")]
        # Bob is on the allowlist, but this request is not his: refused as a stranger is.
        assert (await post_signed(api, tap(fake, in_channel, "Approve", user=BOB)))[0] == 200
        await fake.wait_for_call("chat.postEphemeral", lambda c: c.get("user") == BOB)
        assert ephemerals_for(fake, BOB) == ["You are not authorized to answer this."]
        refused = [e for e in await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
                   if e["event"] == "answer_refused"]
        assert [(e["data"]["reason"], e["data"]["person"]) for e in refused] == [("not_assigned", "bob")]
        assert (await api.call("GET", f"/v1/requests/{req['id']}"))[1]["status"] == "pending"
        # Alice answers in her DM; both messages show her by name.
        assert (await post_signed(api, tap(fake, in_dm, "Approve", user=ALICE)))[0] == 200
        done = await api.wait(req["id"])
        assert (done["status"], done["response"]) == ("answered", {"decision": "approve"})
        await api.app[DISPATCHER].idle()
        for message in (in_channel, in_dm):
            after = fake.message(message["channel"], message["ts"])
            assert after["text"] == "✅ Approved by Alice Example via Slack", after["text"]
        assert await deliveries(api, req["id"]) == [(ACME_CHANNEL, "withdrawn"), (ALICE, "withdrawn")]


@pytest.mark.parametrize(("mode", "assign_to", "expected"), [
    ("direct", ["group:oncall"], [ALICE, BOB]),
    ("direct", ["dave"], [ACME_CHANNEL]),  # nobody assigned is reachable in Slack: the channel
    ("room", ["alice"], [ACME_CHANNEL]),
    ("room_and_direct", None, [ACME_CHANNEL]),  # not assigned: the channel only
])
async def test_assigned_delivery_chooses_dms_the_channel_or_both(tmp_path: Path, fake: FakeSlack, mode: str,
                                                                 assign_to: list[str] | None,
                                                                 expected: list[str]) -> None:
    async with people_slack(tmp_path, fake, assigned_delivery=mode) as api:
        extra = {"assign_to": assign_to} if assign_to is not None else {}
        req = await api.create(request_body("dm-2", kind="approval", **extra))
        assert [t for t, _ in await deliveries(api, req["id"])] == sorted(expected)


async def test_four_eyes_in_slack(tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake) as api:
        req = await api.create(request_body("fe-1", kind="approval", on_behalf_of="alice"))
        message = await posted_message(fake, req)
        assert (await post_signed(api, tap(fake, message, "Approve", user=ALICE)))[0] == 200
        await fake.wait_for_call("chat.postEphemeral", lambda c: c.get("user") == ALICE)
        assert "asked on your behalf" in ephemerals_for(fake, ALICE)[0]
        assert (await api.call("GET", f"/v1/requests/{req['id']}"))[1]["status"] == "pending"
        assert (await post_signed(api, tap(fake, message, "Approve", user=BOB)))[0] == 200
        assert (await api.wait(req["id"]))["answered_by"].endswith(f"/{BOB}")


# -- escalation and scheduled reminders (the service's clock, moved by the test) -----------------


async def _at(api: Api, seconds: float) -> None:
    import time

    api.app[SERVICE].clock = lambda: time.time() + seconds
    await api.app[SERVICE].sweep()
    await api.app[DISPATCHER].idle()


async def test_an_escalation_step_reaches_its_people_in_their_dms_and_lets_them_answer(
        tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake) as api:
        req = await api.create(request_body("esc-1", kind="approval", timeout_seconds=600, assign_to=["alice"],
                                            escalation=[{"after_seconds": 60, "to": ["bob", "dave"]}]))
        await posted_message(fake, req, channel=ALICE)
        assert await deliveries(api, req["id"]) == [(ACME_CHANNEL, "sent"), (ALICE, "sent")]
        await _at(api, 61)
        # Bob is reached in his DM; Dave has no Slack identity. Nothing already posted is posted again.
        in_dm = await posted_message(fake, req, channel=BOB)
        assert await deliveries(api, req["id"]) == [(ACME_CHANNEL, "sent"), (ALICE, "sent"), (BOB, "sent")]
        assert len([c for c in fake.calls_of("chat.postMessage") if c.ok and not c.get("thread_ts")]) == 3
        # Another sweep at the same time reaches nobody twice.
        await _at(api, 62)
        assert len([c for c in fake.calls_of("chat.postMessage") if c.ok and not c.get("thread_ts")]) == 3
        assert (await post_signed(api, tap(fake, in_dm, "Approve", user=BOB)))[0] == 200
        done = await api.wait(req["id"])
        assert done["answered_by"].endswith(f"/{BOB}") and done["escalation"][0]["reached"]


async def test_an_unassigned_request_escalates_to_dms_too(tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake) as api:
        req = await api.create(request_body("esc-2", kind="approval", timeout_seconds=600,
                                            escalation=[{"after_seconds": 60, "to": ["group:oncall"]}]))
        await posted_message(fake, req)
        await _at(api, 61)
        assert [t for t, _ in await deliveries(api, req["id"])] == sorted([ACME_CHANNEL, ALICE, BOB])


async def test_scheduled_reminders_ping_every_place_it_was_posted_once_each(tmp_path: Path, fake: FakeSlack) -> None:
    # The connector's own one reminder would come at 0.2 s: the request's schedule replaces it.
    async with people_slack(tmp_path, fake, remind_after_seconds=0.2) as api:
        req = await api.create(request_body("rem-1", kind="approval", timeout_seconds=600, assign_to=["alice"],
                                            reminders=[60, 120]))
        message = await posted_message(fake, req)

        def reminders() -> list[Any]:
            return [c for c in fake.calls_of("chat.postMessage") if c.ok and c.get("thread_ts")]

        await _at(api, 30)
        assert reminders() == []
        # No timer of the connector's own is waiting: the request's schedule replaced it.
        assert [t for t in api.app[DISPATCHER]._timers if t.get_name().startswith("remind:")] == []
        await _at(api, 61)
        await _at(api, 62)
        assert sorted(c.get("channel") for c in reminders()) == sorted([ACME_CHANNEL, fake.dm_channel(ALICE)])
        await _at(api, 121)
        assert len(reminders()) == 4
        assert any(c.get("thread_ts") == message["ts"] for c in reminders())
        journal = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
        assert [e["event"] for e in journal].count("reminded") == 4
        assert [e["event"] for e in journal].count("reminder_due") == 2


async def test_a_scheduled_ping_whose_instance_stopped_is_sent_by_the_recovery_pass(
        tmp_path: Path, fake: FakeSlack) -> None:
    """The sweeper decided a reminder (a compare-and-set, once for all instances) and its instance stopped
    before its dispatcher pinged: recovery pings every place once, and only once it is clearly abandoned."""
    import time

    from handraise.core.events import REQUEST_SCHEDULED

    async with people_slack(tmp_path, fake) as api:
        req = await api.create(request_body("rem-lost", kind="approval", timeout_seconds=900, assign_to=["alice"],
                                            reminders=[60]))
        await posted_message(fake, req)
        service, dispatcher = api.app[SERVICE], api.app[DISPATCHER]

        def reminders() -> list[Any]:
            return [c for c in fake.calls_of("chat.postMessage") if c.ok and c.get("thread_ts")]

        publish = service.bus.publish
        service.bus.publish = lambda ev: None if ev.type == REQUEST_SCHEDULED else publish(ev)
        await _at(api, 61)
        service.bus.publish = publish
        assert reminders() == []
        assert await dispatcher.recover() == 0  # its own instance may still be pinging
        later = 61 + 2 * dispatcher.backoff_cap + 31
        service.clock = lambda: time.time() + later
        assert await dispatcher.recover() == 2
        await dispatcher.idle()
        assert sorted(c.get("channel") for c in reminders()) == sorted([ACME_CHANNEL, fake.dm_channel(ALICE)])
        assert await dispatcher.recover() == 0  # pinged once
        journal = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
        assert [e["event"] for e in journal].count("reminded") == 2


async def test_a_step_whose_notice_was_lost_is_delivered_by_the_recovery_pass(tmp_path: Path, fake: FakeSlack) -> None:
    """The instance that reached the step stopped before its dispatcher acted: the step's people are in the
    request's targets from then on, so recovery (on any instance) reaches them."""
    import time

    from handraise.core.events import REQUEST_SCHEDULED

    async with people_slack(tmp_path, fake) as api:
        req = await api.create(request_body("esc-lost", kind="approval", timeout_seconds=900,
                                            escalation=[{"after_seconds": 300, "to": ["bob"]}]))
        await posted_message(fake, req)
        service, dispatcher = api.app[SERVICE], api.app[DISPATCHER]
        publish = service.bus.publish
        service.bus.publish = lambda ev: None if ev.type == REQUEST_SCHEDULED else publish(ev)
        await _at(api, 301)
        service.bus.publish = publish
        assert [t for t, _ in await deliveries(api, req["id"])] == [ACME_CHANNEL]
        service.clock = lambda: time.time() + 301
        assert await dispatcher.recover() == 1
        await posted_message(fake, req, channel=BOB)
        assert [t for t, _ in await deliveries(api, req["id"])] == sorted([ACME_CHANNEL, BOB])


@pytest.mark.parametrize("mode", ["direct", "room_and_direct"])
async def test_a_tenant_without_a_channel_is_reached_and_withdrawn_in_dms_only(tmp_path: Path, fake: FakeSlack,
                                                                               mode: str) -> None:
    # The dispatcher decides from targets_for (the assigned people's DMs), not from the tenant's rooms:
    # with no channel at all, an assigned request is still posted, and its messages still withdrawn.
    async with people_slack(tmp_path, fake, assigned_delivery=mode, roomless=True) as api:
        req = await api.create(request_body("nr-1", kind="approval", assign_to=["alice"]))
        in_dm = await posted_message(fake, req, channel=ALICE)
        assert await deliveries(api, req["id"]) == [(ALICE, "sent")]
        assert (await post_signed(api, tap(fake, in_dm, "Approve", user=ALICE)))[0] == 200
        assert (await api.wait(req["id"]))["status"] == "answered"
        await api.app[DISPATCHER].idle()
        assert fake.message(in_dm["channel"], in_dm["ts"])["text"] == "✅ Approved by Alice Example via Slack"
        assert await deliveries(api, req["id"]) == [(ALICE, "withdrawn")]
        # Nobody to reach without assignment: the request is taken, and posted nowhere in Slack.
        posts = len(fake.calls_of("chat.postMessage"))
        unassigned = await api.create(request_body("nr-2", kind="approval"))
        assert await deliveries(api, unassigned["id"]) == []
        assert len(fake.calls_of("chat.postMessage")) == posts


async def test_a_tenant_without_a_channel_needs_direct_delivery(tmp_path: Path, fake: FakeSlack) -> None:
    with pytest.raises(ConfigError, match="acme have no channel"):
        async with people_slack(tmp_path, fake, assigned_delivery="room", roomless=True):
            pass


# -- direct delivery that reaches nobody: the tenant's channel instead ---------------------------


async def _journal(api: Api, request_id: str) -> list[dict[str, Any]]:
    return await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request_id)


async def test_a_direct_only_request_whose_dms_all_fail_goes_to_the_channel_and_says_so(
        tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake, assigned_delivery="direct") as api:
        fake.fail_next("chat.postMessage", error="channel_not_found")  # Alice's DM: refused for good
        req = await api.create(request_body("fb-1", kind="approval", assign_to=["alice"]))
        message = await posted_message(fake, req)  # in the channel after all
        assert await deliveries(api, req["id"]) == [(ACME_CHANNEL, "sent"), (ALICE, "failed")]
        events = [(e["event"], e["data"].get("target")) for e in await _journal(api, req["id"])]
        assert events.index(("delivery_failed", ALICE)) < events.index(("delivery_fallback", ACME_CHANNEL)) \
            < events.index(("delivered", ACME_CHANNEL))
        fallback = next(e for e in await _journal(api, req["id"]) if e["event"] == "delivery_fallback")
        assert fallback["data"] == {"target": ACME_CHANNEL, "instead_of": [ALICE]}
        # Still Alice's request: Bob may not answer it in the channel, Alice may.
        assert (await post_signed(api, tap(fake, message, "Approve", user=BOB)))[0] == 200
        await fake.wait_for_call("chat.postEphemeral", lambda c: c.get("user") == BOB)
        assert (await post_signed(api, tap(fake, message, "Approve", user=ALICE)))[0] == 200
        assert (await api.wait(req["id"]))["answered_by"].endswith(f"/{ALICE}")


async def test_one_dm_that_reaches_its_person_is_enough(tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake, assigned_delivery="direct") as api:
        fake.fail_next("chat.postMessage", error="channel_not_found")  # one of the two DMs
        req = await api.create(request_body("fb-2", kind="approval", assign_to=["alice", "bob"]))
        rows = await deliveries(api, req["id"])
        assert sorted(status for _, status in rows) == ["failed", "sent"]
        assert {t for t, _ in rows} == {ALICE, BOB}
        assert not [e for e in await _journal(api, req["id"]) if e["event"] == "delivery_fallback"]
        assert not [c for c in fake.calls_of("chat.postMessage") if c.get("channel") == ACME_CHANNEL]


async def test_no_fallback_for_a_request_that_ended_while_its_dm_was_failing(tmp_path: Path, fake: FakeSlack) -> None:
    async with people_slack(tmp_path, fake, assigned_delivery="direct") as api:
        fake.fail_next("chat.postMessage", status=500, count=1000)  # retried with backoff, never posted
        req = await api.create(request_body("fb-3", kind="approval", assign_to=["alice"]))
        await fake.wait_for_call("chat.postMessage", lambda c: c.get("channel") == ALICE)
        assert (await api.call("POST", f"/v1/requests/{req['id']}/cancel"))[0] == 200
        await api.app[DISPATCHER].idle()
        assert not [e for e in await _journal(api, req["id"]) if e["event"] == "delivery_fallback"]
        assert not [c for c in fake.calls_of("chat.postMessage") if c.get("channel") == ACME_CHANNEL]


async def test_the_recovery_pass_makes_a_fallback_an_instance_stopped_before(
        tmp_path: Path, fake: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    async with people_slack(tmp_path, fake, assigned_delivery="direct") as api:
        dispatcher, service = api.app[DISPATCHER], api.app[SERVICE]
        stopped: list[str] = []

        async def stops_first(connector: Any, view: Any, failed: list[str], fallback: list[str]) -> None:
            stopped.append(view.id)  # the instance went away between the failed DM and its fallback

        monkeypatch.setattr(dispatcher, "_fall_back", stops_first)
        fake.fail_next("chat.postMessage", error="channel_not_found")
        req = await api.create({**request_body("fb-4", kind="approval", assign_to=["alice"]), "timeout_seconds": 3600})
        assert await deliveries(api, req["id"]) == [(ALICE, "failed")]
        assert stopped == [req["id"]]
        monkeypatch.undo()
        # Another instance's recovery pass, once the failure is older than a live instance's horizon.
        assert await dispatcher.recover() == 0  # too fresh: its own instance may be falling back
        later = 2 * dispatcher.backoff_cap + 31
        service.clock = lambda: time.time() + later
        assert await dispatcher.recover() == 1
        await posted_message(fake, req)
        assert await deliveries(api, req["id"]) == [(ACME_CHANNEL, "sent"), (ALICE, "failed")]
        assert await dispatcher.recover() == 0  # made once

"""The contract every chat connector passes: deliver, a human answers with the right principal;
a stranger's answer and a chat reply to a sensitive request are refused. And what issue 10 found
written once per bot: secret-shaped replies refused and never stored, personal form links,
remarks that decide nothing, no stale buttons, outcomes and deadlines in the same words everywhere.

Where a messenger cannot do something (Slack cannot delete a person's message; it takes approvals
from buttons only) the driver says so (``removes_replies``, ``typed_decisions``) and the case checks
what the messenger does instead. A connector that does not pass a case yet lists it in its driver's
``pending`` with the reason: a strict xfail. Drivers live in ``tests/bots/contract_<name>.py`` (see ``tests/bots/contract.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Api, question

from handraise.core import wording
from handraise.core.appkeys import SERVICE
from tests.bots.contract import ConnectorDriver, load_drivers

DRIVERS = load_drivers()


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> ConnectorDriver:
    made = DRIVERS[request.param](request)
    reason = made.pending.get(request.function.__name__)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    return made


@pytest.fixture
async def api(driver: ConnectorDriver, tmp_path: Path) -> AsyncIterator[Api]:
    async with driver.running(f"sqlite:///{tmp_path / 'contract.db'}") as running:
        yield running


def ask(driver: ConnectorDriver, uid: str, **extra: Any) -> dict[str, Any]:
    return question(uid, message=f"Contract question {uid}", channels=[driver.channel], **extra)


async def status_of(api: Api, request_id: str) -> str:
    status, body = await api.call("GET", f"/v1/requests/{request_id}")
    assert status == 200, body
    return body["status"]


async def test_delivered_and_answered_by_button_with_principal(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-approve", kind="approval"))
    posted = await driver.posted(api, request)
    _, body = await api.call("GET", f"/v1/requests/{request['id']}")
    assert [(d["channel"], d["status"]) for d in body["deliveries"]] == [(driver.channel, "sent")]

    await driver.press(posted, "approve")
    done = await api.wait(request["id"], timeout=10)
    assert done["status"] == "answered"
    assert done["response"] == {"decision": "approve"}
    assert done["answered_by"] == driver.principal()
    assert done["answered_via"] == driver.channel
    await driver.assert_withdrawn(posted, "approved")


async def test_answered_by_chat_reply(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-reply"))
    posted = await driver.posted(api, request)

    await driver.reply(posted, "blue, like the sea")
    done = await api.wait(request["id"], timeout=10)
    assert (done["status"], done["response"]) == ("answered", "blue, like the sea")
    assert done["answered_by"] == driver.principal()


async def test_stranger_is_refused_and_nothing_changes(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-stranger", kind="approval"))
    posted = await driver.posted(api, request)

    await driver.assert_refused(await driver.press(posted, "approve", stranger=True))
    await driver.assert_refused(await driver.reply(posted, "approve", stranger=True))
    assert await status_of(api, request["id"]) == "pending"

    await driver.press(posted, "reject")
    done = await api.wait(request["id"], timeout=10)
    assert (done["response"], done["answered_by"]) == ({"decision": "reject"}, driver.principal())


async def test_chat_reply_to_sensitive_request_is_refused(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-sensitive", sensitive=True,
                                   schema={"type": "string", "pattern": "^[0-9]{6}$"}))
    posted = await driver.posted(api, request)

    await driver.assert_reply_removed(await driver.reply(posted, "493817"))
    assert await status_of(api, request["id"]) == "pending"
    status, body = await api.call("GET", f"/v1/requests/{request['id']}/wait", params={"timeout": "0"})
    assert status == 200 and "493817" not in str(body)


# -- issue 10: secrets, personal links, casual remarks, stale buttons, outcome wording -------------

SECRET = "ghp_" + "0123456789abcdefghijABCDEFGHIJ012345"


async def everything_stored(api: Api, request_id: str) -> str:
    """The request as the agent and an operator read it, and its journal, as one text."""
    _, body = await api.call("GET", f"/v1/requests/{request_id}")
    journal = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request_id)
    return str(body) + str(journal)


async def test_secret_shaped_reply_is_refused_removed_and_never_stored(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-secret", message_for_user="Which repository token should I use?"))
    posted = await driver.posted(api, request)

    action = await driver.reply(posted, f"use this: {SECRET}")
    told = await driver.told(action)
    assert "looked like a secret" in told and "form" in told, told
    if driver.removes_replies:
        await driver.assert_removed(action)
    assert await status_of(api, request["id"]) == "pending"
    assert SECRET not in await everything_stored(api, request["id"])

    await driver.reply(posted, "the deploy key, not a token")
    done = await api.wait(request["id"], timeout=15)
    assert done["response"] == "the deploy key, not a token"
    assert SECRET not in await everything_stored(api, request["id"])


async def test_casual_remarks_on_an_approval_change_nothing(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-remarks", kind="approval"))
    posted = await driver.posted(api, request)

    for remark in ("no idea, asking @bob", "ok, let me look at the graphs first", "n/a"):
        told = (await driver.told(await driver.reply(posted, remark))).lower()
        assert "approve" in told and "reject" in told and "nothing was changed" in told, (remark, told)
        assert len(told) < 200, told  # a short hint, not the question again
    assert await status_of(api, request["id"]) == "pending"
    journal = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
    assert not [e for e in journal if e["event"] == "answered"]


@pytest.mark.parametrize(("typed", "decision"), [
    ("approve", {"decision": "approve"}),
    ("lgtm", {"decision": "approve"}),
    ("reject: too risky", {"decision": "reject", "reason": "too risky"}),
])
async def test_a_decision_on_its_own_decides_where_typed_decisions_are_taken(
        driver: ConnectorDriver, api: Api, typed: str, decision: dict[str, Any]) -> None:
    request = await api.create(ask(driver, "c-decision", kind="approval"))
    posted = await driver.posted(api, request)

    action = await driver.reply(posted, typed)
    if driver.typed_decisions:
        done = await api.wait(request["id"], timeout=15)
        assert (done["response"], done["answered_by"]) == (decision, driver.principal())
    else:
        told = (await driver.told(action)).lower()
        assert "approve" in told and "reject" in told and "nothing was changed" in told, told
        assert await status_of(api, request["id"]) == "pending"


async def test_a_templates_placeholder_is_not_a_value(driver: ConnectorDriver, api: Api) -> None:
    schema = {"type": "object", "required": ["host", "port"],
              "properties": {"host": {"type": "string", "title": "Host"}, "port": {"type": "integer", "title": "Port"}}}
    request = await api.create(ask(driver, "c-placeholder", schema=schema))
    posted = await driver.posted(api, request)

    told = await driver.told(await driver.reply(posted, "host: …\nport: 5432"))
    assert "host" in told.lower() and "not valid" in told.lower(), told
    assert await status_of(api, request["id"]) == "pending"

    await driver.reply(posted, "host: db.internal\nport: 5432")
    done = await api.wait(request["id"], timeout=15)
    assert done["response"] == {"host": "db.internal", "port": 5432}


async def test_a_link_reached_through_the_chat_is_personal(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-link", kind="approval"))
    posted = await driver.posted(api, request)

    assert "/f/" not in await driver.shared_view(posted)  # nothing anyone in the chat could open
    assert await driver.open_form(posted, stranger=True) is None
    url = await driver.open_form(posted)
    assert url is not None and "/f/" in url, url

    token = url.rsplit("/f/", 1)[1]
    await api.app[SERVICE].submit_link(token=token, response={"decision": "reject", "reason": "not today"})
    done = await api.wait(request["id"], timeout=15)
    assert (done["answered_by"], done["answered_via"]) == (driver.principal(), driver.channel)
    assert done["response"] == {"decision": "reject", "reason": "not today"}


async def test_no_message_about_an_ended_request_keeps_a_button(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-stale", kind="approval"))
    posted = await driver.posted(api, request)

    await driver.assert_refused(await driver.press(posted, "approve", stranger=True))
    await driver.told(await driver.reply(posted, f"use this: {SECRET}"))  # a notice about the request
    await driver.open_form(posted)  # a private message with the person's link
    await driver.press(posted, "approve")
    assert (await api.wait(request["id"], timeout=15))["status"] == "answered"
    await driver.assert_withdrawn(posted, "approved")
    await driver.assert_no_buttons_left()


async def test_outcomes_say_the_decision_the_reason_and_who(driver: ConnectorDriver, api: Api) -> None:
    rejected = await api.create(ask(driver, "c-rejected", kind="approval"))
    posted = await driver.posted(api, rejected)
    assert (await api.submit("c-rejected", {"decision": "reject", "reason": "too risky"}))[0] == 200
    await driver.assert_withdrawn(posted, "rejected")
    shown = await driver.outcome_text(posted)
    assert "❌" in shown and "Rejected" in shown and "too risky" in shown, shown
    assert "✅" not in shown, shown

    approved = await api.create(ask(driver, "c-approved", kind="approval"))
    posted = await driver.posted(api, approved)
    await driver.press(posted, "approve")
    await driver.assert_withdrawn(posted, "approved")
    shown = await driver.outcome_text(posted)
    assert "✅" in shown and f"Approved by {driver.display_name()}" in shown, shown


async def test_outcomes_show_fields_in_schema_order_never_a_sensitive_answer(driver: ConnectorDriver,
                                                                             api: Api) -> None:
    schema = {"type": "object", "required": ["zone", "count"],
              "properties": {"zone": {"type": "string", "title": "Target zone"},
                             "count": {"type": "integer", "title": "Replica count"}}}
    form = await api.create(ask(driver, "c-form", schema=schema))
    posted = await driver.posted(api, form)
    assert (await api.submit("c-form", {"count": 3, "zone": "eu-west"}))[0] == 200
    await driver.assert_withdrawn(posted, "answered")
    shown = await driver.outcome_text(posted)
    assert "Target zone: eu-west" in shown and "Replica count: 3" in shown, shown
    assert shown.index("Target zone") < shown.index("Replica count"), shown

    private = await api.create(ask(driver, "c-private", sensitive=True, schema={"type": "string"}))
    posted = await driver.posted(api, private)
    assert (await api.submit("c-private", "493817"))[0] == 200
    await driver.assert_withdrawn(posted, "answered")
    assert "493817" not in await driver.outcome_text(posted)


async def test_deadlines_read_in_the_tenants_time_zone_and_reminders_round_up(driver: ConnectorDriver,
                                                                               tmp_path: Path) -> None:
    driver.timezone = "Asia/Kathmandu"  # +05:45: no other zone's clock reads the same
    driver.section_overrides = {"remind_after_seconds": 1}
    async with driver.running(f"sqlite:///{tmp_path / 'zone.db'}") as api:
        request = await api.create(ask(driver, "c-zone", kind="approval", timeout_seconds=600))
        posted = await driver.posted(api, request)
        expires = dt.datetime.fromisoformat(request["expires_at"].replace("Z", "+00:00")).timestamp()
        expected = wording.when(expires, wording.zone(driver.timezone))
        assert expected.endswith("+0545")
        shown = await driver.question_text(posted)
        assert expected in shown, (expected, shown)

        reminder = await driver.reminder_text(posted)
        assert expected in reminder, (expected, reminder)
        # Reminded a second or a few in: 9 min 5x s are left, which reads "10 min", never "9 min".
        assert "10 min left" in reminder, reminder


async def test_a_stranger_is_told_at_most_once_in_the_shared_chat(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-stranger-once"))
    posted = await driver.posted(api, request)

    await driver.assert_refused(await driver.reply(posted, "me?", stranger=True))
    for text in ("hello?", "anyone?"):
        await driver.reply(posted, text, stranger=True)
    await driver.reply(posted, "Friday")
    done = await api.wait(request["id"], timeout=15)
    assert (done["response"], done["answered_by"]) == ("Friday", driver.principal())
    await refusals(api, request["id"], count=3)
    # Told privately (ephemeral, a private chat) where the messenger allows; in the chat once at most.
    assert (await driver.shared_view(posted)).lower().count("not authorized") <= 1


async def refusals(api: Api, request_id: str, *, count: int, timeout: float = 15) -> None:
    """Return once the journal holds ``count`` refused answers of the request (each journaled as it is handled)."""
    async with asyncio.timeout(timeout):
        while True:
            journal = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request_id)
            if sum(e["event"] == "answer_refused" for e in journal) >= count:
                return
            await asyncio.sleep(0.05)


async def test_cancelled_and_expired_questions_say_so_and_late_replies_are_told(driver: ConnectorDriver,
                                                                               api: Api) -> None:
    cancelled = await api.create(ask(driver, "c-cancel", kind="approval"))
    posted = await driver.posted(api, cancelled)
    status, _ = await api.call("POST", f"/v1/requests/{cancelled['id']}/cancel")
    assert status == 200
    await driver.assert_withdrawn(posted, "cancelled")
    told = await driver.told(await driver.reply(posted, "approve"))
    assert "cancelled" in told.lower(), told
    assert await status_of(api, cancelled["id"]) == "cancelled"

    expired = await api.create(ask(driver, "c-expire", kind="approval", timeout_seconds=600))
    posted = await driver.posted(api, expired)
    service = api.app[SERVICE]
    service.clock = lambda: time.time() + 3600  # past the deadline once posted, without waiting for it
    await service.sweep()
    service.clock = time.time
    assert (await api.wait(expired["id"], timeout=15))["status"] == "expired"
    await driver.assert_withdrawn(posted, "expired")
    shown = await driver.outcome_text(posted)
    assert "approved" not in shown.lower(), shown  # an expired approval is never an approval


async def test_a_masked_field_is_asked_only_in_the_form(driver: ConnectorDriver, api: Api) -> None:
    schema = {"type": "object", "required": ["account", "passphrase"],
              "properties": {"account": {"type": "string", "title": "Account"},
                             "passphrase": {"type": "string", "format": "password", "title": "Passphrase"}}}
    request = await api.create(ask(driver, "c-masked", schema=schema))
    posted = await driver.posted(api, request)
    assert "passphrase:" not in (await driver.question_text(posted)).lower()  # no line invites the secret

    action = await driver.reply(posted, "account: ops\npassphrase: hunter2 horse")
    told = (await driver.told(action)).lower()
    assert "form" in told, told
    assert await status_of(api, request["id"]) == "pending"
    assert "hunter2" not in await everything_stored(api, request["id"])


async def test_the_timeout_policy_shows_in_the_question(driver: ConnectorDriver, api: Api) -> None:
    """An approval nobody answered, rejected by its ``on_timeout``: the message says so in core's words."""
    request = await api.create(ask(driver, "c-timeout", kind="approval", on_timeout="reject"))
    posted = await driver.posted(api, request)
    service = api.app[SERVICE]
    service.clock = lambda: time.time() + 3600  # past the deadline, without waiting for it
    await service.sweep()
    done = await api.wait(request["id"], timeout=10)
    assert done["status"] == "answered" and done["timed_out"] is True
    await driver.assert_withdrawn(posted, "Rejected automatically: no answer came in time")


async def test_a_strangers_secret_shaped_reply_is_removed_too(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-stranger-secret"))
    posted = await driver.posted(api, request)

    # A secret left in a shared chat leaks whoever typed it: removed before the allowlist is asked.
    action = await driver.reply(posted, f"use this: {SECRET}", stranger=True)
    await driver.assert_refused(action)
    if driver.removes_replies:
        await driver.assert_removed(action)
    assert await status_of(api, request["id"]) == "pending"
    assert SECRET not in await everything_stored(api, request["id"])


async def test_a_proposal_shows_read_only_and_a_tap_approves_it_as_it_stands(driver: ConnectorDriver,
                                                                             api: Api) -> None:
    """Approve with edits: chat shows the proposal and where to change it; a button approves it unedited."""
    schema = {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1, "title": "Replicas"}},
              "required": ["replicas"]}
    request = await api.create(ask(driver, "c-proposal", kind="approval", proposal={"replicas": 4},
                                   proposal_schema=schema))
    posted = await driver.posted(api, request)
    shown = await driver.question_text(posted)
    assert "Replicas: 4" in shown and "open the form" in shown, shown
    await driver.press(posted, "approve")
    done = await api.wait(request["id"], timeout=10)
    assert done["response"] == {"decision": "approve", "proposal": {"replicas": 4}, "edited": False}

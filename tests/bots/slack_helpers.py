"""Helpers for the Slack connector tests: config, a running app wired to FakeSlack, signed posts,
finding buttons in posted blocks, modal state values, and a FakeSlack that can hold a method."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from handraise.bots.slack import SlackConnector
from conftest import Api, base_config, question, running_app, settings_from
from tests.fakes.slack import FakeSlack, SlackCall, post_interaction, sign_request

SIGNING_SECRET = "5a1f3e0c9b8d7a6f5e4d3c2b1a0f9e8d"
ACME_CHANNEL = "C0ACME"
GLOBEX_CHANNEL = "C0GLOBEX"
ALICE, BOB, CAROL, MALLORY = "U0ALICE", "U0BOB", "U0CAROL", "U0MALLORY"


def slack_section(fake: FakeSlack, **overrides: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "bot_token": fake.bot_token,
        "signing_secret": SIGNING_SECRET,
        "api_url": fake.api_url,
        "tenants": {
            "acme": {"channel": ACME_CHANNEL, "allowed_user_ids": [ALICE, BOB]},
            "globex": {"channel": GLOBEX_CHANNEL, "allowed_user_ids": [CAROL]},
        },
    }
    section.update(overrides)
    return section


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    """A fake Slack of this test's own."""
    async with FakeSlack() as f:
        yield f


@contextlib.asynccontextmanager
async def slack_app(storage_url: str, fake: FakeSlack, **overrides: Any) -> AsyncIterator[Api]:
    settings = settings_from(base_config(storage_url, slack=slack_section(fake, **overrides)))
    async with running_app(settings, connector_classes=[SlackConnector]) as api:
        yield api


def request_body(uid: str, **extra: Any) -> dict[str, Any]:
    return question(uid, message="Deploy build 42 to production?", channels=["slack"], timeout=120, **extra)


async def posted_message(fake: FakeSlack, request: dict[str, Any], *, channel: str = ACME_CHANNEL) -> dict[str, Any]:
    """The request's message as the fake stores it now, once chat.postMessage has happened."""
    call = await fake.wait_for_call(
        "chat.postMessage", lambda c: c.ok and c.get("channel") == channel and not c.get("thread_ts"))
    return fake.message(call.response["channel"], call.response["ts"]) | {"channel": call.response["channel"]}


def buttons(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The message's buttons by their text."""
    out: dict[str, dict[str, Any]] = {}
    for block in message.get("blocks") or []:
        for element in block.get("elements", []):
            if element.get("type") == "button":
                out[element["text"]["text"]] = element
    return out


def tap(fake: FakeSlack, message: dict[str, Any], label: str, *, user: str) -> dict[str, Any]:
    """A block_actions payload for a click on the button labelled ``label``."""
    button = buttons(message)[label]
    return fake.make_block_action(user_id=user, action_id=button["action_id"], value=button["value"],
                                  channel=message["channel"], message_ts=message["ts"])


async def post_signed(api: Api, payload: dict[str, Any], **kwargs: Any) -> tuple[int, Any]:
    kwargs.setdefault("signing_secret", SIGNING_SECRET)
    return await post_interaction(api.url("/bots/slack/events"), payload, session=api.session, **kwargs)


async def post_event(api: Api, event: dict[str, Any], *, team_id: str) -> tuple[int, Any]:
    """An Events API callback, JSON and signed, as Slack posts it."""
    body = json.dumps({"token": "x", "team_id": team_id, "api_app_id": "A0FAKEAPP", "type": "event_callback",
                       "event_id": "Ev0001", "event_time": 1, "event": event})
    headers = {**sign_request(SIGNING_SECRET, body), "Content-Type": "application/json"}
    async with api.session.post(api.url("/bots/slack/events"), data=body.encode(), headers=headers) as resp:
        return resp.status, await resp.text()


async def wait_for_count(fake: FakeSlack, method: str, count: int, *, timeout: float = 5.0) -> list[SlackCall]:
    await fake.wait_for_call(method, lambda _: len(fake.calls_of(method)) >= count, timeout=timeout)
    return fake.calls_of(method)


def ephemerals_for(fake: FakeSlack, user: str) -> list[str]:
    return [e["text"] for e in fake.ephemeral_messages if e["user"] == user]


# -- modal state values, as Slack submits them ----------------------------------------


def text_value(value: str, kind: str = "plain_text_input") -> dict[str, Any]:
    return {"value": {"type": kind, "value": value}}


def option_value(value: int | str, kind: str = "radio_buttons") -> dict[str, Any]:
    """A chosen option: choices are numbered from 0; a yes/no field's options are "true" and "false"."""
    return {"value": {"type": kind, "selected_option": {"text": {"type": "plain_text", "text": "x"},
                                                        "value": str(value)}}}


def options_value(indexes: list[int], kind: str = "checkboxes") -> dict[str, Any]:
    return {"value": {"type": kind, "selected_options": [
        {"text": {"type": "plain_text", "text": "x"}, "value": str(i)} for i in indexes]}}


def date_value(day: str) -> dict[str, Any]:
    return {"value": {"type": "datepicker", "selected_date": day}}


def time_value(clock: str) -> dict[str, Any]:
    return {"value": {"type": "timepicker", "selected_time": clock, "timezone": "Europe/Berlin"}}


def datetime_value(epoch: int) -> dict[str, Any]:
    return {"value": {"type": "datetimepicker", "selected_date_time": epoch}}


# -- a FakeSlack that holds chosen methods --------------------------------------------


class HoldingFakeSlack(FakeSlack):
    """FakeSlack whose chosen Web API methods wait until ``release`` (to prove acks come first)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._holds: dict[str, asyncio.Event] = {}
        self.held: dict[str, asyncio.Event] = {}

    def hold(self, method: str) -> None:
        self._holds[method] = asyncio.Event()
        self.held[method] = asyncio.Event()

    def release(self, method: str) -> None:
        self._holds.pop(method).set()

    async def _handle_api(self, request: web.Request) -> web.Response:
        gate = self._holds.get(request.match_info["method"])
        if gate is not None:
            self.held[request.match_info["method"]].set()
            await gate.wait()
        return await super()._handle_api(request)

"""The Slack contract driver: the human taps buttons and replies in threads through the wire-level fake Web API,
with interactions and events signed as Slack posts them to the app.

Slack lets a bot post privately only as ephemeral messages, and a bot token cannot delete a
person's message: refusals are ephemeral, and a reply that must not stay is refused, not removed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import Api

from handraise.bots.slack import SlackConnector
from handraise.core.connectors import Connector
from tests.bots.contract import Action, ConnectorDriver, Posted, register_driver
from tests.bots.slack_helpers import (
    ACME_CHANNEL,
    ALICE,
    MALLORY,
    buttons,
    post_event,
    post_signed,
    slack_section,
)
from tests.fakes.slack import DEFAULT_TEAM_ID, FakeSlack, SlackCall


class SlackDriver(ConnectorDriver):
    channel = "slack"
    removes_replies = False  # a bot token cannot delete a person's message
    typed_decisions = False  # approvals are decided with the buttons (Reject has a confirm)

    def __init__(self) -> None:
        self.fake = FakeSlack()
        self._api: Api | None = None

    async def start(self) -> None:
        await self.fake.start()

    async def stop(self) -> None:
        await self.fake.stop()

    def connector_classes(self) -> list[type[Connector]]:
        return [SlackConnector]

    def config(self) -> dict[str, Any]:
        return {"slack": slack_section(self.fake)}

    async def ready(self, api: Api) -> None:
        self._api = api

    @property
    def api(self) -> Api:
        assert self._api is not None, "the app is not running"
        return self._api

    def principal(self) -> str:
        return f"slack:{DEFAULT_TEAM_ID}/{ALICE}"

    def display_name(self) -> str:
        return f"<@{ALICE}>"  # Slack shows each reader the person's current name

    # -- the human's side ------------------------------------------------------

    def message(self, posted: Posted) -> dict[str, Any]:
        channel, ts = posted.ref["channel"], posted.ref["ts"]
        return self.fake.message(channel, ts) | {"channel": channel}

    def button(self, posted: Posted, choice: str) -> dict[str, Any]:
        """The button whose label contains ``choice`` (case-insensitive)."""
        found = buttons(self.message(posted))
        for label, button in found.items():
            if choice.lower() in label.lower():
                return button
        raise AssertionError(f"no button like {choice!r} in {list(found)}")

    async def press(self, posted: Posted, choice: str, *, stranger: bool = False) -> Action:
        # A tap on Reject reaches the app after its confirm dialog, as here.
        user = MALLORY if stranger else ALICE
        button = self.button(posted, choice)
        seen = len(self.fake.calls)
        payload = self.fake.make_block_action(user_id=user, action_id=button["action_id"], value=button["value"],
                                              channel=posted.ref["channel"], message_ts=posted.ref["ts"])
        status, body = await post_signed(self.api, payload)
        assert status == 200, body
        return Action(posted=posted, kind="press", stranger=stranger, handle={"user": user, "seen": seen})

    async def reply(self, posted: Posted, text: str, *, stranger: bool = False) -> Action:
        user = MALLORY if stranger else ALICE
        seen = len(self.fake.calls)
        event = {"type": "message", "channel": posted.ref["channel"], "user": user, "text": text,
                 "team": DEFAULT_TEAM_ID, "ts": f"{time.time():.6f}", "thread_ts": posted.ref["ts"]}
        status, body = await post_event(self.api, event, team_id=DEFAULT_TEAM_ID)
        assert status == 200, body
        return Action(posted=posted, kind="reply", stranger=stranger, handle={"user": user, "seen": seen})

    async def ephemeral(self, action: Action) -> SlackCall:
        """The bot's ephemeral message to the person after what they did."""
        seen, user = action.handle["seen"], action.handle["user"]

        def after_action(call: SlackCall) -> bool:
            made = next(i for i, c in enumerate(self.fake.calls) if c is call)
            return made >= seen and call.ok and call["user"] == user

        return await self.fake.wait_for_call("chat.postEphemeral", after_action, timeout=10)

    async def told(self, action: Action) -> str:
        return str((await self.ephemeral(action))["text"])

    async def question_text(self, posted: Posted) -> str:
        return shown(self.message(posted))

    async def outcome_text(self, posted: Posted) -> str:
        return shown(self.message(posted))

    async def open_form(self, posted: Posted, *, stranger: bool = False) -> str | None:
        call = await self.ephemeral(await self.press(posted, "open form", stranger=stranger))
        urls = [block["accessory"]["url"] for block in call.get("blocks") or []
                if "url" in (block.get("accessory") or {})]
        return urls[0] if urls else None

    async def reminder_text(self, posted: Posted) -> str:
        ts = posted.ref["ts"]
        call = await self.fake.wait_for_call("chat.postMessage", lambda c: c.ok and c.get("thread_ts") == ts,
                                             timeout=15)
        return str(call["text"])

    async def shared_view(self, posted: Posted) -> str:
        return "\n".join(str(message) for message in self.fake.messages(posted.ref["channel"]))

    async def assert_no_buttons_left(self) -> None:
        # Ephemeral messages (refusals, personal links) cannot be edited by a bot, and Slack drops them
        # on reload; every message that stays must have lost its buttons.
        for message in self.fake.messages():
            assert buttons(message) == {}, message

    async def assert_refused(self, action: Action) -> None:
        call = await self.ephemeral(action)
        assert "not authorized" in call["text"].lower(), call.args
        assert call["channel"] == ACME_CHANNEL  # ephemeral: seen by the tapper only

    async def assert_reply_removed(self, action: Action) -> None:
        # A bot token cannot delete a person's message: the person is asked to, and pointed to the form.
        call = await self.ephemeral(action)
        text = call["text"]
        assert "only taken in the form" in text and "please delete your reply" in text, text

    async def assert_withdrawn(self, posted: Posted, outcome: str) -> None:
        ts = posted.ref["ts"]
        await self.fake.wait_for_call("chat.update", lambda c: c.ok and c["ts"] == ts, timeout=10)
        message = self.message(posted)
        shown = message["text"] + "\n" + str(message["blocks"])
        assert outcome.lower() in shown.lower(), shown
        assert buttons(message) == {}, buttons(message)


def shown(message: dict[str, Any]) -> str:
    """A message as people read it: its blocks' text (mrkdwn's bold marks dropped), then its buttons."""
    lines = []
    for block in message.get("blocks") or []:
        for part in [block.get("text") or {}, *(block.get("elements") or [])]:
            text = part.get("text")
            lines.append(text["text"] if isinstance(text, dict) else str(text or ""))
    return "\n".join(line for line in lines if line).replace("*", "")


@register_driver("slack")
def slack_driver(request: pytest.FixtureRequest) -> SlackDriver:
    return SlackDriver()

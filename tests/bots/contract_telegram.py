"""The Telegram contract driver: the human taps and replies through the wire-level fake Bot API.

Also the helpers the Telegram tests share (``TelegramDriver`` is usable on its own).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Api

from handraise.bots.telegram import TelegramConnector
from handraise.core.connectors import Connector
from tests.bots.contract import Action, ConnectorDriver, Posted, register_driver
from tests.fakes.telegram import Call, FakeTelegram, StoredMessage

CHAT = -1001234567  # a supergroup serving tenant acme
ALLOWED = 4242  # on acme's allowlist
STRANGER = 6666  # on no allowlist
GLOBEX_CHAT = -1007654321
GLOBEX_USER = 5151  # may answer globex's questions, not acme's


class TelegramDriver(ConnectorDriver):
    channel = "telegram"

    def __init__(self, **overrides: Any) -> None:
        self.overrides = overrides
        self.tg = FakeTelegram()
        self.last_private: Call | None = None

    async def start(self) -> None:
        await self.tg.start()
        self.tg.add_user(ALLOWED, first_name="Alice", username="alice")
        self.tg.add_user(STRANGER, first_name="Mallory", username="mallory")

    async def stop(self) -> None:
        await self.tg.stop()

    def connector_classes(self) -> list[type[Connector]]:
        return [TelegramConnector]

    def config(self) -> dict[str, Any]:
        section: dict[str, Any] = {
            "token": self.tg.token, "base_url": self.tg.base_url, "leader_check_seconds": 0.2,
            "tenants": {"acme": {"chat_ids": [CHAT], "allowed_user_ids": [ALLOWED]},
                        "globex": {"chat_ids": [GLOBEX_CHAT], "allowed_user_ids": [GLOBEX_USER]}},
        }
        section.update(self.overrides)
        return {"telegram": section}

    async def ready(self, api: Api) -> None:
        if self.config()["telegram"].get("mode", "polling") == "polling":
            await self.tg.wait_until_polling()
        else:
            await self.tg.wait_for_call("setWebhook")

    def principal(self) -> str:
        return f"telegram:{ALLOWED}"

    def display_name(self) -> str:
        return "Alice (@alice)"

    # -- the human's side ------------------------------------------------------

    def message(self, posted: Posted) -> StoredMessage:
        return self.tg.message(posted.ref["chat_id"], posted.ref["message_id"])

    def button(self, posted: Posted, choice: str) -> dict[str, Any]:
        """The inline button whose label contains ``choice`` (case-insensitive)."""
        rows = (self.message(posted).reply_markup or {}).get("inline_keyboard") or []
        for row in rows:
            for button in row:
                if choice.lower() in button["text"].lower():
                    return button
        raise AssertionError(f"no button like {choice!r} in {rows}")

    def push(self, update: dict[str, Any]) -> None:
        self.tg.push_update(update)

    async def press(self, posted: Posted, choice: str, *, stranger: bool = False,
                    user_id: int | None = None) -> Action:
        data = self.button(posted, choice)["callback_data"]
        user = user_id if user_id is not None else (STRANGER if stranger else ALLOWED)
        seen = len(self.tg.calls)
        update = self.tg.make_callback(chat_id=posted.ref["chat_id"], user_id=user,
                                       message_id=posted.ref["message_id"], data=data)
        self.push(update)
        return Action(posted=posted, kind="press", stranger=stranger,
                      handle={"query_id": update["callback_query"]["id"], "user": user, "seen": seen})

    async def reply(self, posted: Posted, text: str, *, stranger: bool = False,
                    user_id: int | None = None, to_message_id: int | None = None) -> Action:
        user = user_id if user_id is not None else (STRANGER if stranger else ALLOWED)
        seen = len(self.tg.calls)
        update = self.tg.make_text_message(chat_id=posted.ref["chat_id"], user_id=user, text=text,
                                           reply_to_message_id=to_message_id or posted.ref["message_id"])
        self.push(update)
        return Action(posted=posted, kind="reply", stranger=stranger,
                      handle={"message_id": update["message"]["message_id"], "user": user, "seen": seen})

    async def open_form(self, posted: Posted, *, stranger: bool = False, user_id: int | None = None) -> str | None:
        """Tap "Open form" as a person would: in a group it is a ``t.me/<bot>?start=<token>`` deep
        link, so Telegram opens the private chat and sends ``/start <token>`` there; the bot answers
        in private. The form link the person got, or None (then the bot's private answer says why)."""
        user = user_id if user_id is not None else (STRANGER if stranger else ALLOWED)
        url = self.button(posted, "open form")["url"]
        if "/f/" in url:
            return url
        assert url.startswith(f"https://t.me/{self.tg.bot_user['username']}?start="), url
        token = url.rsplit("=", 1)[1]
        seen = len(self.tg.calls_of("sendMessage"))
        update = self.tg.make_text_message(chat_id=user, user_id=user, text=f"/start {token}")
        self.push(update)
        answer = await self.tg.wait_for_call(
            "sendMessage", predicate=lambda c: c.params.get("chat_id") == user
            and self.tg.calls_of("sendMessage").index(c) >= seen)
        self.last_private = answer
        buttons = [b for row in (answer.params.get("reply_markup") or {}).get("inline_keyboard", []) for b in row]
        return next((b["url"] for b in buttons if "/f/" in b.get("url", "")), None)

    async def callback_answer(self, action: Action) -> Call:
        """The bot's answerCallbackQuery for a press."""
        query_id = action.handle["query_id"]
        return await self.tg.wait_for_call(
            "answerCallbackQuery", predicate=lambda c: str(c.params.get("callback_query_id")) == query_id)

    async def bot_reply(self, action: Action, *, containing: str = "") -> Call:
        """The bot's message quoting a reply (sendMessage with reply_parameters to it)."""
        message_id = action.handle["message_id"]

        def quoting(call: Call) -> bool:
            to = (call.params.get("reply_parameters") or {}).get("message_id")
            return to == message_id and containing.lower() in str(call.params.get("text", "")).lower()

        return await self.tg.wait_for_call("sendMessage", predicate=quoting)

    async def told(self, action: Action) -> str:
        if action.kind == "press":
            return str((await self.callback_answer(action)).params.get("text", ""))
        seen, user, chat_id = action.handle["seen"], action.handle["user"], action.posted.ref["chat_id"]

        def to_them(call: Call) -> bool:
            made = next(i for i, c in enumerate(self.tg.calls) if c is call)
            return made >= seen and call.ok and call.params.get("chat_id") in (chat_id, user)

        return str((await self.tg.wait_for_call("sendMessage", predicate=to_them)).params.get("text", ""))

    async def assert_removed(self, action: Action) -> None:
        message_id = action.handle["message_id"]
        await self.tg.wait_for_call("deleteMessage", predicate=lambda c: c.params.get("message_id") == message_id)
        assert self.tg.message(action.posted.ref["chat_id"], message_id).deleted

    async def question_text(self, posted: Posted) -> str:
        message = self.message(posted)
        labels = [b["text"] for row in (message.reply_markup or {}).get("inline_keyboard", []) for b in row]
        return "\n".join([message.text or "", *labels])

    async def outcome_text(self, posted: Posted) -> str:
        return self.message(posted).text or ""

    async def reminder_text(self, posted: Posted) -> str:
        chat_id = posted.ref["chat_id"]
        call = await self.tg.wait_for_call("sendMessage", predicate=lambda c: c.ok and c.params.get("chat_id") == chat_id
                                           and "Reminder" in str(c.params.get("text", "")), timeout=15)
        return str(call.params["text"])

    async def shared_view(self, posted: Posted) -> str:
        shown = []
        for message in self.tg.messages(posted.ref["chat_id"]):
            if message.from_bot and not message.deleted:
                shown.append(f"{message.text}\n{message.reply_markup}")
        return "\n".join(shown)

    async def assert_no_buttons_left(self) -> None:
        # The withdraw strips private links before it edits the question, which assert_withdrawn awaited.
        for chat_id in (CHAT, ALLOWED, STRANGER):
            for message in self.tg.messages(chat_id):
                if message.from_bot:
                    assert not (message.reply_markup or {}).get("inline_keyboard"), (chat_id, message)

    async def assert_refused(self, action: Action) -> None:
        if action.kind == "press":
            call = await self.callback_answer(action)
        else:
            call = await self.bot_reply(action)
        assert "not authorized" in call.params.get("text", "").lower(), call.params

    async def assert_reply_removed(self, action: Action) -> None:
        message_id = action.handle["message_id"]
        chat_id = action.posted.ref["chat_id"]
        await self.tg.wait_for_call("deleteMessage", predicate=lambda c: c.params.get("message_id") == message_id)
        assert self.tg.message(chat_id, message_id).deleted
        notice = await self.tg.wait_for_call(
            "sendMessage", predicate=lambda c: c.params.get("chat_id") == chat_id
            and str(c.params.get("text", "")).startswith("Your reply was deleted"))
        assert "Open form" in notice.params["text"]  # pointed to the question's button
        assert not notice.params.get("reply_markup")  # nothing that outlives the request

    async def assert_withdrawn(self, posted: Posted, outcome: str) -> None:
        await self.tg.wait_for_call(
            "editMessageText", predicate=lambda c: c.params.get("message_id") == posted.ref["message_id"]
            and c.params.get("chat_id") == posted.ref["chat_id"])
        message = self.message(posted)
        assert outcome.lower() in (message.text or "").lower(), message.text
        assert not (message.reply_markup or {}).get("inline_keyboard"), message.reply_markup


@register_driver("telegram")
def telegram_driver(request: pytest.FixtureRequest) -> TelegramDriver:
    return TelegramDriver()

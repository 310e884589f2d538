"""A wire-level fake of the Telegram Bot API for tests: the real python-telegram-bot
client talks to it over loopback HTTP, and tests inspect what it was sent.

Typical use::

    async with FakeTelegram() as tg:
        app = (ApplicationBuilder().token(tg.token)
               .base_url(tg.base_url).base_file_url(tg.base_file_url).build())
        await app.initialize()                      # calls getMe
        ...                                         # the code under test sends a question
        sent = await tg.wait_for_call("sendMessage")
        tg.push_update(tg.make_callback(chat_id=42, user_id=42,
                                        message_id=sent.result["message_id"], data="yes"))
        await tg.wait_for_call("answerCallbackQuery")
        assert tg.message(42, sent.result["message_id"]).text == "Answered: yes"

What it models, and where it is simpler than Telegram:

- Requests: form-encoded (nested objects such as ``reply_markup`` as JSON strings inside
  the form), multipart (uploads become :class:`Upload`) or JSON bodies; GET query strings
  too. Method names are case-insensitive, as on Telegram.
- Answers ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code", "description",
  "parameters"?}`` with Telegram's HTTP statuses and descriptions. A wrong token that looks
  like a token gets 401 ``Unauthorized``, anything else 404 ``Not Found``; neither is recorded.
- Implemented methods: getMe, sendMessage, editMessageText, editMessageReplyMarkup,
  answerCallbackQuery, deleteMessage, sendChatAction, getChat, getUpdates, setWebhook,
  deleteWebhook, getWebhookInfo. Any other method is recorded and answered 404
  ``Not Found: method not found`` (python-telegram-bot raises ``InvalidToken`` for it, or
  ``EndPointNotFound`` from ``Bot.do_api_request``).
- Limits: text over 4096 UTF-16 code units (after HTML parsing) is "message is too long",
  empty text "message text is empty", ``callback_data`` outside 1..64 bytes
  ``BUTTON_DATA_INVALID``. ``parse_mode="HTML"`` is checked for unknown or unbalanced tags
  and stored as the plain text Telegram would show; MarkdownV2 is stored verbatim.
- Editing a message to the same text and markup is "message is not modified"; like
  Telegram, ``editMessageText`` without ``reply_markup`` removes the inline keyboard.
- Webhook URLs may be plain http (Telegram insists on https) so tests can use loopback.
- No files are served under :attr:`FakeTelegram.base_file_url`.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.server import FakeServer

log = logging.getLogger(__name__)

DEFAULT_TOKEN = "123456789:AAHandraiseFakeTokenForTests_0123456789"
MAX_TEXT_LENGTH = 4096
MAX_CALLBACK_DATA_BYTES = 64
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
QUERY_INVALID = (
    "Bad Request: query is too old and response timeout expired or query ID is invalid"
)
WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

# Form fields arrive as strings; these are the ones Telegram's schema types otherwise.
_JSON_FIELDS = frozenset({
    "reply_markup", "entities", "caption_entities", "reply_parameters",
    "link_preview_options", "allowed_updates", "media", "message_ids", "commands",
    "scope", "results", "options", "reaction",
})
_NUMBER_FIELDS = frozenset({
    "chat_id", "message_id", "from_chat_id", "offset", "limit", "timeout",
    "reply_to_message_id", "message_thread_id", "user_id", "cache_time",
    "max_connections", "until_date", "duration", "width", "height",
})
_BOOL_FIELDS = frozenset({
    "disable_notification", "protect_content", "show_alert", "drop_pending_updates",
    "disable_web_page_preview", "allow_sending_without_reply", "allow_paid_broadcast",
    "revoke_messages", "only_if_banned",
})
_HTML_TAGS = frozenset({
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
    "a", "code", "pre", "blockquote", "tg-emoji",
})
_HTML_TAG = re.compile(r"<(/?)([A-Za-z][\w-]*)((?:\s[^<>]*)?)>")
_TOKEN_SHAPE = re.compile(r"\d+:[\w-]+")
_SECRET_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,256}")
_UPDATE_KINDS = ("message", "edited_message", "callback_query", "channel_post",
                 "inline_query", "my_chat_member", "chat_member")


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request."""

    filename: str | None
    content_type: str
    data: bytes


@dataclass(frozen=True)
class Call:
    """One API request as the fake understood it.

    ``params`` holds decoded values (ints, bools, ``reply_markup`` as a dict, uploads as
    :class:`Upload`); ``at`` is ``time.monotonic()`` on arrival; ``status`` and ``response``
    are what the fake answered, so ``call.result`` is e.g. the sent Message as a dict.
    """

    method: str
    params: dict[str, Any]
    at: float
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.response.get("ok"))

    @property
    def result(self) -> Any:
        return self.response.get("result")


@dataclass
class StoredMessage:
    """The current state of one message in a chat, as Telegram's servers hold it."""

    chat_id: int
    message_id: int
    sender: dict[str, Any]
    date: int
    text: str | None
    raw_text: str | None = None
    parse_mode: str | None = None
    entities: list[dict[str, Any]] | None = None
    reply_markup: dict[str, Any] | None = None
    reply_to_message_id: int | None = None
    edit_date: int | None = None
    deleted: bool = False
    history: list[str | None] = field(default_factory=list)

    @property
    def from_bot(self) -> bool:
        return bool(self.sender.get("is_bot"))

    def button_data(self) -> list[str]:
        """The ``callback_data`` of every inline button, row by row."""
        rows = (self.reply_markup or {}).get("inline_keyboard") or []
        return [b["callback_data"] for row in rows for b in row if "callback_data" in b]


class ApiError(Exception):
    """An error answer of the Bot API; raised inside method handlers."""

    def __init__(self, status: int, description: str, *,
                 parameters: dict[str, Any] | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error_code": self.status,
                                "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return body


def _bad_request(what: str) -> ApiError:
    return ApiError(400, f"Bad Request: {what}")


def utf16_length(text: str) -> int:
    """Telegram measures text and entity offsets in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def html_to_plain(text: str) -> str:
    """Check Telegram-style HTML and return the plain text a client would display."""
    out: list[str] = []
    open_tags: list[str] = []
    pos = 0
    while pos < len(text):
        start = text.find("<", pos)
        if start < 0:
            out.append(text[pos:])
            break
        out.append(text[pos:start])
        offset = len(text[:start].encode())
        match = _HTML_TAG.match(text, start)
        if match is None:
            raise _bad_request(
                f"can't parse entities: Unexpected end of name token at byte offset {offset}")
        closing, name = match.group(1), match.group(2).lower()
        if name not in _HTML_TAGS:
            raise _bad_request(
                f'can\'t parse entities: Unsupported start tag "{name}" at byte offset {offset}')
        if not closing:
            open_tags.append(name)
        elif not open_tags or open_tags[-1] != name:
            raise _bad_request(
                f'can\'t parse entities: Unexpected end tag at byte offset {offset}')
        else:
            open_tags.pop()
        pos = match.end()
    if open_tags:
        raise _bad_request("can't parse entities: Can't find end tag corresponding to "
                           f'start tag "{open_tags[-1]}"')
    return html.unescape("".join(out))


def _decode_value(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if name in _JSON_FIELDS:
        try:
            return json.loads(value)
        except ValueError:
            what = "reply keyboard markup" if name == "reply_markup" else name
            raise _bad_request(f"can't parse {what} JSON object") from None
    if name in _NUMBER_FIELDS:
        for parse in (int, float):
            try:
                return parse(value)
            except ValueError:
                pass
        return value  # "@channelname" is a valid chat_id
    if name in _BOOL_FIELDS:
        return value.strip().lower() == "true"
    return value


async def decode_params(request: web.Request) -> dict[str, Any]:
    """Decode a Bot API request the way Telegram does, whatever its encoding."""
    raw: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.text()
        if body.strip():
            try:
                decoded = json.loads(body)
            except ValueError:
                raise _bad_request("can't parse JSON encoded request") from None
            if not isinstance(decoded, dict):
                raise _bad_request("JSON object expected")
            raw.update(decoded)
    elif request.can_read_body:
        for name, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                raw[name] = Upload(filename=value.filename, content_type=value.content_type,
                                   data=value.file.read())
            else:
                raw[name] = value
    return {name: _decode_value(name, value) for name, value in raw.items()}


def _check_markup(markup: Any) -> dict[str, Any] | None:
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise _bad_request("can't parse reply keyboard markup JSON object")
    for row in markup.get("inline_keyboard") or []:
        for button in row:
            if "callback_data" in button:
                size = len(str(button["callback_data"]).encode())
                if not 1 <= size <= MAX_CALLBACK_DATA_BYTES:
                    raise _bad_request("BUTTON_DATA_INVALID")
    return markup


class FakeTelegram(FakeServer[Call]):
    """A fake Bot API server on 127.0.0.1 (ephemeral port); see the module docstring."""

    name = "FakeTelegram"
    quiet_methods = frozenset({"getUpdates"})
    # A client that gives up on a long poll frees its handler.
    runner_options = {"handler_cancellation": True}

    def __init__(self, *, token: str = DEFAULT_TOKEN, bot_username: str = "handraise_test_bot",
                 bot_first_name: str = "Handraise Test Bot") -> None:
        super().__init__()
        self.token = token
        bot_id = token.split(":", 1)[0]
        self.bot_user: dict[str, Any] = {
            "id": int(bot_id) if bot_id.isdigit() else 123456789, "is_bot": True,
            "first_name": bot_first_name, "username": bot_username,
        }
        self.webhook_url: str | None = None
        self.webhook_secret: str | None = None
        self._users: dict[int, dict[str, Any]] = {}
        # People who wrote to the bot in a private chat: only they can be sent private messages.
        self.started: set[int] = set()
        self._chats: dict[int, dict[int, StoredMessage]] = {}
        self._updates: list[dict[str, Any]] = []
        self._next_update_id = 100_000_001
        self._next_query_id = 4_000_000_000_000_000_001
        self._open_queries: set[str] = set()
        self._allowed_updates: list[str] = []
        self._faults: dict[str, deque[ApiError]] = {}
        # Replaced after each set() so that waiters only see changes after their check.
        self._updates_changed = asyncio.Event()
        self._poll_parked = asyncio.Event()
        self._parked_polls = 0
        self._closing = False
        self._methods: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "getMe": self._get_me, "sendMessage": self._send_message,
            "editMessageText": self._edit_message_text,
            "editMessageReplyMarkup": self._edit_message_reply_markup,
            "answerCallbackQuery": self._answer_callback_query,
            "deleteMessage": self._delete_message, "sendChatAction": self._send_chat_action,
            "getChat": self._get_chat, "getUpdates": self._get_updates,
            "setWebhook": self._set_webhook, "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._get_webhook_info,
        }
        self._canonical = {name.lower(): name for name in self._methods}

    # -- lifecycle -------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle)

    async def closing(self) -> None:
        self._closing = True
        self._wake_polls()  # long polls answer at once instead of holding shutdown

    @property
    def base_url(self) -> str:
        """For ``ApplicationBuilder().base_url(...)``: the client appends the token."""
        return self.url("/bot")

    @property
    def base_file_url(self) -> str:
        return self.url("/file/bot")

    # -- recorded calls ----------------------------------------------------------------

    def method_name(self, method: str) -> str:
        # The Bot API takes method names in any case.
        return self._canonical.get(method.lower(), method)

    async def wait_until_polling(self, *, timeout: float = 5.0) -> None:
        """Wait until a getUpdates long poll is parked waiting for updates."""
        await asyncio.wait_for(self._poll_parked.wait(), timeout)

    def fail_next(self, method: str, *, status: int, retry_after: int | None = None,
                  description: str | None = None, count: int = 1) -> None:
        """Make the next ``count`` calls of ``method`` fail with ``status``, doing nothing.

        429 answers carry ``parameters.retry_after`` (``RetryAfter`` in the client); other
        statuses use ``description`` or Telegram's usual wording for the status.
        """
        method = self._canonical.get(method.lower(), method)
        parameters = None
        if status == 429:
            retry_after = 1 if retry_after is None else retry_after
            parameters = {"retry_after": retry_after}
            description = description or f"Too Many Requests: retry after {retry_after}"
        elif description is None:
            phrase = HTTPStatus(status).phrase
            description = phrase if status >= 500 or status == 401 else f"{phrase}: injected"
        error = ApiError(status, description, parameters=parameters)
        self._faults.setdefault(method, deque()).extend([error] * count)

    # -- message store -----------------------------------------------------------------

    def message(self, chat_id: int, message_id: int) -> StoredMessage:
        """The current state of a message (sent by the bot or made by a ``make_*``)."""
        try:
            return self._chats[chat_id][message_id]
        except KeyError:
            raise KeyError(f"no message {message_id} in chat {chat_id}") from None

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """Every message of a chat, deleted ones included, oldest first."""
        return sorted(self._chats.get(chat_id, {}).values(), key=lambda m: m.message_id)

    def add_user(self, user_id: int, *, first_name: str, username: str | None = None,
                 last_name: str | None = None) -> dict[str, Any]:
        """Name a user for later ``make_*`` updates; unnamed users get ``User <id>``."""
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if last_name:
            user["last_name"] = last_name
        if username:
            user["username"] = username
        self._users[user_id] = user
        return user

    def _user(self, user_id: int) -> dict[str, Any]:
        if user_id not in self._users:
            self.add_user(user_id, first_name=f"User {user_id}", username=f"user{user_id}")
        return dict(self._users[user_id])

    def _chat(self, chat_id: int) -> dict[str, Any]:
        if chat_id > 0:  # a private chat's id is the user's id
            user = self._user(chat_id)
            chat = {"id": chat_id, "type": "private", "first_name": user["first_name"]}
            if "username" in user:
                chat["username"] = user["username"]
            return chat
        kind = "supergroup" if str(chat_id).startswith("-100") else "group"
        return {"id": chat_id, "type": kind, "title": f"Chat {chat_id}"}

    def _store(self, *, chat_id: int, sender: dict[str, Any], text: str | None,
               **fields: Any) -> StoredMessage:
        chat = self._chats.setdefault(chat_id, {})
        message = StoredMessage(chat_id=chat_id, message_id=max(chat, default=0) + 1,
                                sender=sender, date=int(time.time()), text=text, **fields)
        chat[message.message_id] = message
        return message

    def message_dict(self, message: StoredMessage, *, with_reply: bool = True) -> dict[str, Any]:
        """A message as Telegram serialises it (in results and in updates)."""
        out: dict[str, Any] = {"message_id": message.message_id, "from": dict(message.sender),
                               "chat": self._chat(message.chat_id), "date": message.date}
        if message.edit_date is not None:
            out["edit_date"] = message.edit_date
        if message.text is not None:
            out["text"] = message.text
        if message.entities:
            out["entities"] = message.entities
        if with_reply and message.reply_to_message_id is not None:
            replied = self._chats.get(message.chat_id, {}).get(message.reply_to_message_id)
            out["reply_to_message"] = (
                self.message_dict(replied, with_reply=False) if replied is not None else
                {"message_id": message.reply_to_message_id, "date": message.date,
                 "chat": self._chat(message.chat_id)})
        markup = message.reply_markup or {}
        if markup.get("inline_keyboard"):  # only inline keyboards are echoed back
            out["reply_markup"] = markup
        return out

    # -- inbound updates ---------------------------------------------------------------

    def _new_update(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": self._next_update_id, kind: payload}
        self._next_update_id += 1
        return update

    def make_text_message(self, *, chat_id: int, user_id: int, text: str,
                          reply_to_message_id: int | None = None) -> dict[str, Any]:
        """A ``message`` update from a user, stored in the chat as Telegram would."""
        entities = None
        if text.startswith("/"):  # CommandHandler needs the bot_command entity
            entities = [{"type": "bot_command", "offset": 0,
                         "length": utf16_length(text.split()[0])}]
        message = self._store(chat_id=chat_id, sender=self._user(user_id), text=text,
                              raw_text=text, entities=entities,
                              reply_to_message_id=reply_to_message_id)
        if chat_id == user_id:  # a person who wrote to the bot in private may be written to
            self.started.add(user_id)
        return self._new_update("message", self.message_dict(message))

    def make_callback(self, *, chat_id: int, user_id: int, message_id: int,
                      data: str) -> dict[str, Any]:
        """A ``callback_query`` update: ``user_id`` pressed a button of ``message_id``."""
        query_id = str(self._next_query_id)
        self._next_query_id += 1
        self._open_queries.add(query_id)
        stored = self._chats.get(chat_id, {}).get(message_id)
        message = (self.message_dict(stored) if stored is not None else
                   {"message_id": message_id, "date": int(time.time()),
                    "chat": self._chat(chat_id), "from": dict(self.bot_user)})
        return self._new_update("callback_query", {
            "id": query_id, "from": self._user(user_id), "message": message,
            "chat_instance": str(abs(chat_id) * 7919 % 10**19), "data": data,
        })

    def push_update(self, update: dict[str, Any]) -> None:
        """Queue an update for getUpdates (polling)."""
        self._updates.append(update)
        self._wake_polls()

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by a getUpdates offset."""
        return list(self._updates)

    async def post_webhook(self, url: str, update: dict[str, Any], *,
                           secret_token: str | None = None) -> int:
        """POST an update to a webhook as Telegram does; returns the HTTP status."""
        headers = {"Content-Type": "application/json"}
        if secret_token is not None:
            headers[SECRET_HEADER] = secret_token
        async with aiohttp.ClientSession() as session, \
                session.post(url, data=json.dumps(update).encode(), headers=headers) as resp:
            await resp.read()
            return resp.status

    async def deliver_webhook(self, update: dict[str, Any]) -> int:
        """POST an update to the URL and secret last given to setWebhook."""
        if not self.webhook_url:
            raise RuntimeError("no webhook set: the client has not called setWebhook")
        return await self.post_webhook(self.webhook_url, update, secret_token=self.webhook_secret)

    # -- HTTP ----------------------------------------------------------------------------

    def _wake_polls(self) -> None:
        self._updates_changed.set()
        self._updates_changed = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if token != self.token:
            if _TOKEN_SHAPE.fullmatch(token):
                return web.json_response(ApiError(401, "Unauthorized").body(), status=401)
            return web.json_response(ApiError(404, "Not Found").body(), status=404)
        at = time.monotonic()
        name = request.match_info["method"]
        method = self._canonical.get(name.lower(), name)
        params: dict[str, Any] = {}
        try:
            params = await decode_params(request)
            faults = self._faults.get(method)
            if faults:
                raise faults.popleft()
            handler = self._methods.get(method)
            if handler is None:
                raise ApiError(404, "Not Found: method not found")
            body: dict[str, Any] = {"ok": True, "result": await handler(params)}
        except ApiError as error:
            body = error.body()
        status = body.get("error_code", 200)
        self.record(Call(method=method, params=params, at=at, status=status, response=body))
        log.debug("fake telegram answered %s with %s", method, status)
        return web.json_response(body, status=status)

    # -- methods ---------------------------------------------------------------------------

    async def _get_me(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**self.bot_user, "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False, "can_connect_to_business": False,
                "has_main_web_app": False}

    def _chat_id(self, params: dict[str, Any]) -> int:
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _bad_request("chat_id is empty")
        if not isinstance(chat_id, int):
            raise _bad_request("chat not found")
        return chat_id

    def _render_text(self, params: dict[str, Any]) -> str:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _bad_request("message text is empty")
        if str(params.get("parse_mode") or "").lower() == "html":
            text = html_to_plain(text)
            if not text.strip():
                raise _bad_request("message text is empty")
        if utf16_length(text) > MAX_TEXT_LENGTH:
            raise _bad_request("message is too long")
        return text

    def _editable(self, params: dict[str, Any]) -> StoredMessage:
        if "inline_message_id" in params:
            raise _bad_request("MESSAGE_ID_INVALID")  # inline mode is not modelled
        if "message_id" not in params:
            raise _bad_request("message identifier is not specified")
        chat_id = self._chat_id(params)
        stored = self._chats.get(chat_id, {}).get(params["message_id"])
        if stored is None or stored.deleted:
            raise _bad_request("message to edit not found")
        if not stored.from_bot:
            raise _bad_request("message can't be edited")
        return stored

    async def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        if chat_id > 0 and chat_id not in self.started:
            # As Telegram: a bot cannot write first to someone who never started it.
            raise ApiError(403, "Forbidden: bot can't initiate conversation with a user")
        text = self._render_text(params)
        markup = _check_markup(params.get("reply_markup"))
        reply_to = (params.get("reply_parameters") or {}).get("message_id")
        reply_to = reply_to if reply_to is not None else params.get("reply_to_message_id")
        may_dangle = params.get("allow_sending_without_reply") or (
            params.get("reply_parameters") or {}).get("allow_sending_without_reply")
        replied = self._chats.get(chat_id, {}).get(reply_to)
        if reply_to is not None and (replied is None or replied.deleted):
            if not may_dangle:
                raise _bad_request("message to be replied not found")
            reply_to = None
        message = self._store(chat_id=chat_id, sender=dict(self.bot_user), text=text,
                              raw_text=params["text"], parse_mode=params.get("parse_mode"),
                              entities=params.get("entities"), reply_markup=markup,
                              reply_to_message_id=reply_to)
        return self.message_dict(message)

    async def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        stored = self._editable(params)
        text = self._render_text(params)
        markup = _check_markup(params.get("reply_markup"))
        parse_mode, entities = params.get("parse_mode"), params.get("entities")
        if ((params["text"], parse_mode, entities, markup)
                == (stored.raw_text, stored.parse_mode, stored.entities, stored.reply_markup)):
            raise ApiError(400, NOT_MODIFIED)
        stored.history.append(stored.text)
        stored.text, stored.raw_text, stored.parse_mode = text, params["text"], parse_mode
        stored.entities, stored.reply_markup = entities, markup
        stored.edit_date = int(time.time())
        return self.message_dict(stored)

    async def _edit_message_reply_markup(self, params: dict[str, Any]) -> dict[str, Any]:
        stored = self._editable(params)
        markup = _check_markup(params.get("reply_markup"))
        if markup == stored.reply_markup:
            raise ApiError(400, NOT_MODIFIED)
        stored.reply_markup = markup
        stored.edit_date = int(time.time())
        return self.message_dict(stored)

    async def _answer_callback_query(self, params: dict[str, Any]) -> bool:
        query_id = str(params.get("callback_query_id", ""))
        if query_id not in self._open_queries:  # unknown, or answered already
            raise ApiError(400, QUERY_INVALID)
        self._open_queries.discard(query_id)
        return True

    async def _delete_message(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        stored = self._chats.get(chat_id, {}).get(params.get("message_id"))
        if stored is None or stored.deleted:
            raise _bad_request("message to delete not found")
        stored.deleted = True
        return True

    async def _send_chat_action(self, params: dict[str, Any]) -> bool:
        self._chat_id(params)
        if not params.get("action"):
            raise _bad_request("action is empty")
        return True

    async def _get_chat(self, params: dict[str, Any]) -> dict[str, Any]:
        gifts = dict.fromkeys(("unlimited_gifts", "limited_gifts", "unique_gifts",
                               "premium_subscription", "gifts_from_channels"), False)
        return {**self._chat(self._chat_id(params)), "accent_color_id": 0,
                "max_reaction_count": 11, "accepted_gift_types": gifts}

    def _remember_allowed_updates(self, params: dict[str, Any]) -> None:
        if isinstance(params.get("allowed_updates"), list):
            self._allowed_updates = [str(kind) for kind in params["allowed_updates"]]

    def _deliverable(self, limit: int) -> list[dict[str, Any]]:
        allowed = set(self._allowed_updates or _UPDATE_KINDS)
        return [u for u in self._updates if allowed.intersection(u)][:limit]

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook_url:
            raise ApiError(409, WEBHOOK_CONFLICT)
        self._remember_allowed_updates(params)
        offset = int(params.get("offset") or 0)
        if offset < 0:
            self._updates = self._updates[offset:]
        elif offset:  # an offset confirms every update below it
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        limit = min(max(int(params.get("limit") or 100), 1), 100)
        deadline = asyncio.get_running_loop().time() + float(params.get("timeout") or 0)
        while not self._closing:
            updates = self._deliverable(limit)
            remaining = deadline - asyncio.get_running_loop().time()
            if updates or remaining <= 0:
                return updates
            changed = self._updates_changed
            self._parked_polls += 1
            self._poll_parked.set()
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass
            finally:
                self._parked_polls -= 1
                if not self._parked_polls:
                    self._poll_parked.clear()
            if self.webhook_url:
                raise ApiError(409, "Conflict: terminated by setWebhook request")
        return []

    async def _set_webhook(self, params: dict[str, Any]) -> bool:
        url = str(params.get("url") or "")
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_SHAPE.fullmatch(str(secret)):
            raise _bad_request("secret token contains unallowed characters")
        if params.get("drop_pending_updates"):
            self._updates.clear()
        self._remember_allowed_updates(params)
        self.webhook_url = url or None
        self.webhook_secret = str(secret) if url and secret is not None else None
        self._wake_polls()  # a parked getUpdates must now see the conflict
        return True

    async def _delete_webhook(self, params: dict[str, Any]) -> bool:
        if params.get("drop_pending_updates"):
            self._updates.clear()
        self.webhook_url = self.webhook_secret = None
        return True

    async def _get_webhook_info(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.webhook_url or "", "has_custom_certificate": False,
                "pending_update_count": len(self._updates)}

"""Wire-level fake of Slack's Web API and Socket Mode on 127.0.0.1, plus builders
for the signed interaction payloads Slack posts to an app; see ``FakeSlack``."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import itertools
import json
import logging
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import ClientSession, WSCloseCode, WSMsgType, web

from tests.fakes.server import FakeServer

log = logging.getLogger(__name__)

Payload = dict[str, Any]

DEFAULT_BOT_TOKEN = "xoxb-0000000001-0000000002-fakebottoken"
DEFAULT_APP_TOKEN = "xapp-1-A0FAKEAPP-0000000003-fakeapptoken"
DEFAULT_TEAM_ID = "T0FAKETEAM"
DEFAULT_TEAM_DOMAIN = "fake-team"
DEFAULT_BOT_USER_ID = "U0FAKEBOT"
DEFAULT_BOT_ID = "B0FAKEBOT"
DEFAULT_APP_ID = "A0FAKEAPP"
# Slack still puts the deprecated verification token in every payload; Bolt ignores it.
VERIFICATION_TOKEN = "fakeverificationtoken"

# Methods that take the app-level (xapp-) token; every other method wants the bot token.
_APP_TOKEN_METHODS = frozenset({"apps.connections.open"})
# Form-encoded calls carry nested objects as JSON strings; Slack accepts both shapes.
_JSON_FIELDS = {
    "blocks": "invalid_blocks",
    "attachments": "invalid_attachments",
    "view": "invalid_arguments",
    "metadata": "invalid_metadata",
}
_MAX_TEXT = 40_000


class _SlackError(Exception):
    """An ``ok: false`` answer with Slack's error code."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


@dataclass(frozen=True)
class SlackCall:
    """One request the fake received and what it answered.

    ``args`` merges the query string and the form or JSON body, with JSON-string
    fields of form bodies (``blocks``, ``view``, ...) decoded and the token removed.
    ``call["channel"]`` is short for ``call.args["channel"]``.
    """

    method: str
    args: Payload
    token: str | None
    http_method: str
    content_type: str
    status: int
    response: Payload

    def __getitem__(self, key: str) -> Any:
        return self.args[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.args.get(key, default)

    @property
    def ok(self) -> bool:
        return self.status == 200 and bool(self.response.get("ok"))


@dataclass
class FakeSocket:
    """One Socket Mode WebSocket connection; ``number`` counts connections from 1."""

    number: int
    ws: web.WebSocketResponse = field(repr=False)
    received: list[Payload] = field(default_factory=list)

    @property
    def closed(self) -> bool:
        return self.ws.closed


@dataclass
class _Fault:
    status: int
    error: str
    retry_after: int | None
    remaining: int


class FakeSlack(FakeServer[SlackCall]):
    """A fake Slack on an ephemeral 127.0.0.1 port, spoken to by the real slack_sdk.

    Usage::

        async with FakeSlack() as slack:
            client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
            resp = await client.chat_postMessage(channel="C1", text="hi", blocks=[...])
            slack.message("C1", resp["ts"])["blocks"]          # the stored message
            call = await slack.wait_for_call("chat.update")     # past or future call

    Web API (``POST /api/<method>``, bodies form-encoded or JSON, token as
    ``Authorization: Bearer``): ``auth.test``, ``chat.postMessage``, ``chat.update``,
    ``chat.postEphemeral``, ``chat.delete``, ``conversations.open`` (one user),
    ``views.open``, ``views.update``, ``views.push`` and ``apps.connections.open``
    (app token). Answers are HTTP 200 ``{"ok": true, ...}`` or ``{"ok": false,
    "error": ...}``: ``not_authed``, ``invalid_auth``, ``not_allowed_token_type``,
    ``channel_not_found`` (only when ``channels`` is given, or no channel),
    ``message_not_found``, ``no_text``, ``invalid_blocks``, ``not_found`` and
    ``hash_conflict`` (views), ``unknown_method``. Every request is recorded in
    ``calls``. ``fail_next`` injects rate limits, 5xx and ``ok: false`` answers.

    Posting to a user id (``U...``) lands in that user's DM ``D...``, as in Slack.
    Blocks without a ``block_id`` get one, as Slack assigns them.

    Socket Mode: ``apps.connections.open`` returns ``ws://127.0.0.1:PORT/socket/<ticket>``
    (single-use ticket); the socket sends ``hello`` first, then whatever
    ``socket_send_interactive`` / ``socket_send`` push, and resolves them with the
    client's ack. ``socket_disconnect`` asks the client to reconnect as Slack does;
    ``close_sockets`` drops connections. Close your Socket Mode client before the
    fake: the SDK reconnects on its own and would retry against a dead port.

    Interactions: ``make_block_action`` / ``make_view_submission`` build payloads from
    what the fake stored (blocks, view, a working ``response_url``), to be posted
    with ``post_interaction`` or pushed with ``socket_send_interactive``.
    """

    name = "FakeSlack"
    runner_options = {"shutdown_timeout": 1.0}

    def __init__(
        self,
        *,
        bot_token: str = DEFAULT_BOT_TOKEN,
        app_token: str = DEFAULT_APP_TOKEN,
        team_id: str = DEFAULT_TEAM_ID,
        team_domain: str = DEFAULT_TEAM_DOMAIN,
        bot_user_id: str = DEFAULT_BOT_USER_ID,
        bot_id: str = DEFAULT_BOT_ID,
        app_id: str = DEFAULT_APP_ID,
        channels: Iterable[str] | None = None,
    ) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.team_domain = team_domain
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        # None accepts any channel id; a set makes other channels channel_not_found.
        self.channels: set[str] | None = set(channels) if channels is not None else None
        self.ephemeral_messages: list[Payload] = []
        self._messages: dict[tuple[str, str], Payload] = {}
        self._deleted: set[tuple[str, str]] = set()
        self._dms: dict[str, str] = {}
        self._views: dict[str, Payload] = {}
        self._faults: dict[str, deque[_Fault]] = {}
        self._tickets: set[str] = set()
        self._sockets: list[FakeSocket] = []
        self._acks: dict[str, tuple[FakeSocket, asyncio.Future[Payload]]] = {}
        # response_url key -> (channel, message ts, clicking user)
        self._response_urls: dict[str, tuple[str, str, str]] = {}
        self._ids = itertools.count(1)
        self._last_ts_us = 0
        self._handlers: dict[str, Callable[[Payload], Payload]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.delete": self._chat_delete,
            "conversations.open": self._conversations_open,
            "views.open": self._views_open,
            "views.push": self._views_push,
            "views.update": self._views_update,
            "apps.connections.open": self._apps_connections_open,
        }

    # ----------------------------------------------------------------- lifecycle

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_get("/socket/{ticket}", self._handle_socket)
        app.router.add_post("/response_url/{key}", self._handle_response_url)

    async def closing(self) -> None:
        for _, future in self._acks.values():
            if not future.done():
                future.set_exception(ConnectionResetError("FakeSlack stopped"))
        # Close sockets first: aiohttp would otherwise wait for their handlers.
        await self.close_sockets()

    @property
    def base_url(self) -> str:
        return self.url()

    @property
    def api_url(self) -> str:
        """``base_url`` for ``AsyncWebClient``; it needs the trailing slash."""
        return f"{self.base_url}/api/"

    # ------------------------------------------------------------ call records

    def fail_next(
        self,
        method: str,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after: int | None = None,
        count: int = 1,
    ) -> None:
        """Make the next ``count`` calls of ``method`` fail, before any other check.

        ``status=429`` answers ``{"ok": false, "error": "ratelimited"}`` with a
        ``Retry-After`` header (``retry_after``, default 1 second); ``status=500``/``503``
        answer ``internal_error``; ``error="channel_not_found"`` alone answers HTTP 200
        ``ok: false``. Successive ``fail_next`` calls queue up in order.
        """
        if status is None and error is None:
            raise ValueError("fail_next needs a status or an error")
        status = 200 if status is None else status
        if error is None:
            if status == 429:
                error = "ratelimited"
            elif status >= 500:
                error = "internal_error"
            else:
                raise ValueError(f"fail_next needs an error for status {status}")
        if status == 429 and retry_after is None:
            retry_after = 1
        if count < 1:
            raise ValueError("count must be at least 1")
        fault = _Fault(status=status, error=error, retry_after=retry_after, remaining=count)
        self._faults.setdefault(method, deque()).append(fault)

    # ------------------------------------------------------------ stored state

    def message(self, channel: str, ts: str) -> Payload:
        """The message as it stands now (after updates), shaped like Slack's ``message``."""
        key = (self._dms.get(channel, channel), ts)
        if key in self._deleted:
            raise KeyError(f"message {ts} in {channel} was deleted")
        if key not in self._messages:
            raise KeyError(f"no message {ts} in {channel}")
        return copy.deepcopy(self._messages[key])

    def messages(self, channel: str | None = None) -> list[Payload]:
        """Live (not deleted) messages in posting order, each with its ``channel``."""
        channel = self._dms.get(channel, channel) if channel is not None else None
        return [
            {"channel": ch, **copy.deepcopy(msg)}
            for (ch, _), msg in self._messages.items()
            if channel is None or ch == channel
        ]

    def view(self, view_id: str) -> Payload:
        """The view as last opened, pushed or updated."""
        if view_id not in self._views:
            raise KeyError(f"no view {view_id}")
        return copy.deepcopy(self._views[view_id])

    def dm_channel(self, user_id: str) -> str:
        """The id of the app's DM with ``user_id`` (what posting to the user returns)."""
        if user_id not in self._dms:
            self._dms[user_id] = "D" + user_id[1:]
        return self._dms[user_id]

    # --------------------------------------------------------- payload builders

    def make_block_action(
        self,
        *,
        user_id: str,
        action_id: str,
        value: str,
        channel: str,
        message_ts: str,
        block_id: str | None = None,
        response_url: str | None = None,
        trigger_id: str | None = None,
        username: str | None = None,
    ) -> Payload:
        """A ``block_actions`` payload for a button in a message this fake stored.

        The message, the button's ``block_id`` and text come from the store; an
        ephemeral message gives ``container.is_ephemeral`` and no ``message``, as in
        Slack. The default ``response_url`` points at this fake: it answers
        ``{"ok": true}``, is recorded as a ``response_url`` call and applies
        ``replace_original`` / ``delete_original`` to the message, ephemeral or not.
        """
        channel = self._dms.get(channel, channel)
        stored = self._messages.get((channel, message_ts))
        ephemeral = next(
            (e for e in self.ephemeral_messages if e["channel"] == channel and e["message_ts"] == message_ts), None
        )
        shown = stored if stored is not None else ephemeral
        button: Payload | None = None
        found = _find_element((shown or {}).get("blocks") or [], action_id)
        if found is not None:
            block_id = block_id or found[0]
            button = found[1]
        if response_url is None:
            key = secrets.token_urlsafe(12)
            self._response_urls[key] = (channel, message_ts, user_id)
            response_url = f"{self.base_url}/response_url/{key}"
        return make_block_action(
            user_id=user_id,
            action_id=action_id,
            value=value,
            channel=channel,
            message_ts=message_ts,
            block_id=block_id,
            response_url=response_url,
            trigger_id=trigger_id,
            username=username,
            message=copy.deepcopy(stored) if stored is not None else None,
            is_ephemeral=stored is None and ephemeral is not None,
            button_text=button.get("text") if button is not None else None,
            team_id=self.team_id,
            team_domain=self.team_domain,
            app_id=self.app_id,
        )

    def make_view_submission(
        self,
        *,
        user_id: str,
        values: dict[str, dict[str, Payload]],
        view_id: str | None = None,
        callback_id: str | None = None,
        private_metadata: str | None = None,
        trigger_id: str | None = None,
        username: str | None = None,
    ) -> Payload:
        """A ``view_submission`` for a view this fake opened (or a bare one).

        With ``view_id`` of a stored view, its ``callback_id``, ``private_metadata``,
        blocks and title are used unless overridden. ``values`` is
        ``{block_id: {action_id: state value}}``, e.g.
        ``{"answer": {"text": {"type": "plain_text_input", "value": "yes"}}}``.
        """
        stored = self._views.get(view_id) if view_id is not None else None
        if view_id is not None and stored is None:
            raise KeyError(f"no view {view_id}")
        return make_view_submission(
            user_id=user_id,
            callback_id=callback_id if callback_id is not None else (stored or {}).get("callback_id", ""),
            private_metadata=(
                private_metadata if private_metadata is not None else (stored or {}).get("private_metadata", "")
            ),
            values=values,
            view_id=view_id,
            view=copy.deepcopy(stored) if stored is not None else None,
            trigger_id=trigger_id,
            username=username,
            team_id=self.team_id,
            team_domain=self.team_domain,
            app_id=self.app_id,
            bot_id=self.bot_id,
        )

    # -------------------------------------------------------------- Socket Mode

    @property
    def sockets(self) -> list[FakeSocket]:
        """Socket Mode connections still open, oldest first."""
        return [s for s in self._sockets if not s.closed]

    async def wait_for_socket(self, *, nth: int = 1, timeout: float = 5.0) -> FakeSocket:
        """The ``nth`` Socket Mode connection ever made (1 = the first), once ``hello`` is sent."""

        def find() -> FakeSocket | None:
            return self._sockets[nth - 1] if len(self._sockets) >= nth else None

        try:
            async with asyncio.timeout(timeout):
                return await self.wait_until(find)
        except TimeoutError:
            raise TimeoutError(
                f"Socket Mode connection #{nth} not made within {timeout}s ({len(self._sockets)} so far)"
            ) from None

    async def socket_send_interactive(
        self, payload: Payload, *, socket: FakeSocket | None = None, timeout: float = 5.0
    ) -> Payload:
        """Push an ``interactive`` envelope and return the client's ack.

        The ack is ``{"envelope_id": ..., "payload": {...}?}``; Bolt puts what ``ack()``
        was given (``response_action``, ``errors``) in ``payload``.
        """
        return await self.socket_send("interactive", payload, socket=socket, timeout=timeout)

    async def socket_send(
        self,
        envelope_type: str,
        payload: Payload,
        *,
        accepts_response_payload: bool | None = None,
        socket: FakeSocket | None = None,
        timeout: float = 5.0,
    ) -> Payload:
        """Push an envelope (``interactive``, ``events_api``, ``slash_commands``) and await its ack.

        Goes to ``socket`` or the newest open connection, waiting for one if none is
        open yet; ``timeout`` covers that wait and the ack. Raises ``TimeoutError``
        without an ack and ``ConnectionResetError`` if the socket closes first.
        """
        if accepts_response_payload is None:
            accepts_response_payload = envelope_type != "events_api"
        envelope_id = str(uuid.uuid4())
        envelope: Payload = {
            "envelope_id": envelope_id,
            "type": envelope_type,
            "payload": payload,
            "accepts_response_payload": accepts_response_payload,
        }
        if envelope_type == "events_api":
            envelope.update(retry_attempt=0, retry_reason="")
        try:
            async with asyncio.timeout(timeout):
                target = socket or await self.wait_until(self._newest_socket)
                future: asyncio.Future[Payload] = asyncio.get_running_loop().create_future()
                self._acks[envelope_id] = (target, future)
                try:
                    await target.ws.send_json(envelope)
                    return await future
                finally:
                    self._acks.pop(envelope_id, None)
        except TimeoutError:
            raise TimeoutError(f"no ack for {envelope_type} envelope within {timeout}s") from None

    async def socket_disconnect(self, *, reason: str = "refresh_requested", socket: FakeSocket | None = None) -> None:
        """Send Slack's ``disconnect`` message; the SDK answers by opening a new connection."""
        target = socket or self._newest_socket()
        if target is None:
            raise RuntimeError("no open Socket Mode connection")
        await target.ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-slack"}})

    async def close_sockets(self) -> None:
        """Close every open Socket Mode connection from the server side (a dropped link)."""
        for sock in self.sockets:
            await sock.ws.close(code=WSCloseCode.GOING_AWAY, message=b"fake slack closing")

    def _newest_socket(self) -> FakeSocket | None:
        open_sockets = self.sockets
        return open_sockets[-1] if open_sockets else None

    # ------------------------------------------------------------ HTTP handlers

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        read_error: str | None = None
        try:
            args = await _read_args(request)
        except _SlackError as e:
            args, read_error = {}, e.error
        token = _bearer_token(request)
        form_token = args.pop("token", None)
        token = token or (form_token if isinstance(form_token, str) else None)

        status, body, headers = self._answer(method, args, token, read_error)
        log.debug("fake slack %s -> %s %s", method, status, body.get("error", "ok"))
        self.record(
            SlackCall(
                method=method,
                args=args,
                token=token,
                http_method=request.method,
                content_type=request.content_type,
                status=status,
                response=copy.deepcopy(body),
            )
        )
        return web.json_response(body, status=status, headers=headers)

    def _answer(
        self, method: str, args: Payload, token: str | None, read_error: str | None
    ) -> tuple[int, Payload, dict[str, str]]:
        fault = self._take_fault(method)
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            return fault.status, {"ok": False, "error": fault.error}, headers
        handler = self._handlers.get(method)
        if handler is None:
            return 200, {"ok": False, "error": "unknown_method"}, {}
        if read_error is not None:
            return 200, {"ok": False, "error": read_error}, {}
        auth_error = self._check_token(method, token)
        if auth_error is not None:
            return 200, {"ok": False, "error": auth_error}, {}
        try:
            return 200, {"ok": True, **handler(args)}, {}
        except _SlackError as e:
            return 200, {"ok": False, "error": e.error}, {}

    def _take_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault.remaining -= 1
        if fault.remaining == 0:
            queue.popleft()
        return fault

    def _check_token(self, method: str, token: str | None) -> str | None:
        if not token:
            return "not_authed"
        if token == self.bot_token:
            is_app_token = False
        elif token == self.app_token:
            is_app_token = True
        else:
            return "invalid_auth"
        if (method in _APP_TOKEN_METHODS) != is_app_token:
            return "not_allowed_token_type"
        return None

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.match_info["ticket"]
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid_ticket")
        self._tickets.discard(ticket)
        # autoping answers the SDK's own pings; timeout bounds close handshakes.
        ws = web.WebSocketResponse(autoping=True, timeout=2.0)
        await ws.prepare(request)
        sock = FakeSocket(number=len(self._sockets) + 1, ws=ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self.sockets) + 1,
                "debug_info": {"host": "fake-slack", "build_number": 1, "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }
        )
        self._sockets.append(sock)
        self.notify()
        log.debug("socket mode connection %s open", sock.number)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_socket_text(sock, msg.data)
        finally:
            for envelope_id, (owner, future) in list(self._acks.items()):
                if owner is sock and not future.done():
                    future.set_exception(ConnectionResetError(f"socket closed before ack of {envelope_id}"))
            self.notify()
            log.debug("socket mode connection %s closed", sock.number)
        return ws

    def _on_socket_text(self, sock: FakeSocket, data: str) -> None:
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            log.warning("socket mode connection %s sent non-JSON text", sock.number)
            return
        if not isinstance(message, dict):
            return
        sock.received.append(message)
        pending = self._acks.get(str(message.get("envelope_id")))
        if pending is not None and not pending[1].done():
            pending[1].set_result(message)

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        target = self._response_urls.get(key)
        if not isinstance(body, dict):
            status, answer = 400, {"ok": False, "error": "invalid_payload"}
        elif target is None:
            status, answer = 404, {"ok": False, "error": "expired_url"}
        else:
            try:
                self._apply_response_url(target, body)
                status, answer = 200, {"ok": True}
            except _SlackError as e:
                status, answer = 400, {"ok": False, "error": e.error}
        self.record(
            SlackCall(
                method="response_url",
                args=body if isinstance(body, dict) else {},
                token=None,
                http_method=request.method,
                content_type=request.content_type,
                status=status,
                response=answer,
            )
        )
        return web.json_response(answer, status=status)

    def _apply_response_url(self, target: tuple[str, str, str], body: Payload) -> None:
        channel, ts, user_id = target
        key = (channel, ts)
        # Unlike chat.update, a response_url may also replace or delete an ephemeral message.
        ephemeral = next(
            (e for e in self.ephemeral_messages if e["channel"] == channel and e["message_ts"] == ts), None
        )
        if _truthy(body.get("delete_original")):
            if ephemeral is not None:
                self.ephemeral_messages.remove(ephemeral)
            elif self._messages.pop(key, None) is not None:
                self._deleted.add(key)
            else:
                raise _SlackError("message_not_found")
            return
        text, blocks = _message_content(body, required=True)
        if _truthy(body.get("replace_original")):
            if ephemeral is not None:
                ephemeral.update(text=text or "", blocks=_with_block_ids(blocks) if blocks else None)
            elif key in self._messages:
                self._edit(self._messages[key], body)
            else:
                raise _SlackError("message_not_found")
        elif body.get("response_type") == "in_channel":
            new_ts = self._next_ts()
            self._messages[(channel, new_ts)] = self._new_message(new_ts, body)
        else:
            self.ephemeral_messages.append(
                {
                    "channel": channel,
                    "user": user_id,
                    "message_ts": self._next_ts(),
                    "text": text or "",
                    "blocks": _with_block_ids(blocks) if blocks else None,
                    "thread_ts": body.get("thread_ts"),
                }
            )

    # ---------------------------------------------------------- Web API methods

    def _auth_test(self, args: Payload) -> Payload:
        return {
            "url": f"https://{self.team_domain}.slack.com/",
            "team": "Fake Team",
            "user": "fakebot",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _chat_post_message(self, args: Payload) -> Payload:
        channel = self._resolve_channel(args)
        _message_content(args, required=True)
        ts = self._next_ts()
        message = self._new_message(ts, args)
        self._messages[(channel, ts)] = message
        return {"channel": channel, "ts": ts, "message": copy.deepcopy(message)}

    def _chat_update(self, args: Payload) -> Payload:
        channel = self._resolve_channel(args)
        key = (channel, str(args.get("ts") or ""))
        stored = self._messages.get(key)
        if stored is None:
            raise _SlackError("message_not_found")
        _message_content(args, required=True)
        self._edit(stored, args)
        return {"channel": channel, "ts": key[1], "text": stored["text"], "message": copy.deepcopy(stored)}

    def _chat_post_ephemeral(self, args: Payload) -> Payload:
        channel = self._resolve_channel(args)
        user = args.get("user")
        if not isinstance(user, str) or not user:
            raise _SlackError("user_not_found")
        text, blocks = _message_content(args, required=True)
        ts = self._next_ts()
        self.ephemeral_messages.append(
            {
                "channel": channel,
                "user": user,
                "message_ts": ts,
                "text": text or "",
                "blocks": _with_block_ids(blocks) if blocks else None,
                "thread_ts": args.get("thread_ts"),
            }
        )
        return {"message_ts": ts}

    def _chat_delete(self, args: Payload) -> Payload:
        channel = self._resolve_channel(args)
        key = (channel, str(args.get("ts") or ""))
        if self._messages.pop(key, None) is None:
            raise _SlackError("message_not_found")
        self._deleted.add(key)
        return {"channel": channel, "ts": key[1]}

    def _conversations_open(self, args: Payload) -> Payload:
        users = args.get("users")
        names = users if isinstance(users, list) else str(users or "").split(",")
        names = [u.strip() for u in names if u and u.strip()]
        if len(names) != 1:
            # Group DMs are not modelled: refuse rather than answer something wrong.
            raise _SlackError("users_list_not_supplied" if not names else "not_supported_by_fake")
        return {"channel": {"id": self.dm_channel(names[0])}}

    def _views_open(self, args: Payload) -> Payload:
        if not args.get("trigger_id"):
            raise _SlackError("invalid_arguments")
        view_id = f"V{next(self._ids):08d}"
        view = self._build_view(_check_view(args.get("view")), view_id=view_id, root_view_id=view_id)
        self._views[view_id] = view
        return {"view": copy.deepcopy(view)}

    def _views_push(self, args: Payload) -> Payload:
        return self._views_open(args)

    def _views_update(self, args: Payload) -> Payload:
        view_id, external_id = args.get("view_id"), args.get("external_id")
        if not view_id and not external_id:
            raise _SlackError("invalid_arguments")
        stored = self._views.get(view_id) if view_id else next(
            (v for v in self._views.values() if external_id and v.get("external_id") == external_id), None
        )
        if stored is None:
            raise _SlackError("not_found")
        if args.get("hash") and args["hash"] != stored["hash"]:
            raise _SlackError("hash_conflict")
        view = self._build_view(
            _check_view(args.get("view")),
            view_id=stored["id"],
            root_view_id=stored["root_view_id"],
            previous_view_id=stored["previous_view_id"],
        )
        self._views[stored["id"]] = view
        return {"view": copy.deepcopy(view)}

    def _apps_connections_open(self, args: Payload) -> Payload:
        ticket = secrets.token_urlsafe(16)
        self._tickets.add(ticket)
        return {"url": f"ws://127.0.0.1:{self.port}/socket/{ticket}"}

    # ------------------------------------------------------------------ helpers

    def _resolve_channel(self, args: Payload) -> str:
        channel = args.get("channel")
        if not isinstance(channel, str) or not channel:
            raise _SlackError("channel_not_found")
        if channel[0] in "UW":
            # Slack delivers a post addressed to a user into the app's DM with them.
            return self.dm_channel(channel)
        if self.channels is not None and channel not in self.channels and channel not in self._dms.values():
            raise _SlackError("channel_not_found")
        return channel

    def _next_ts(self) -> str:
        # Slack ts strings are unique and increase; keep that within one microsecond too.
        self._last_ts_us = max(int(time.time() * 1_000_000), self._last_ts_us + 1)
        return f"{self._last_ts_us // 1_000_000}.{self._last_ts_us % 1_000_000:06d}"

    def _new_message(self, ts: str, args: Payload) -> Payload:
        message: Payload = {
            "user": self.bot_user_id,
            "type": "message",
            "ts": ts,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": str(args.get("text") or ""),
            "team": self.team_id,
            "bot_profile": {
                "id": self.bot_id,
                "app_id": self.app_id,
                "name": "fakebot",
                "team_id": self.team_id,
                "deleted": False,
            },
        }
        if args.get("blocks"):
            message["blocks"] = _with_block_ids(args["blocks"])
        for optional in ("attachments", "thread_ts", "metadata"):
            if args.get(optional):
                message[optional] = copy.deepcopy(args[optional])
        return message

    def _edit(self, stored: Payload, args: Payload) -> None:
        if "text" in args:
            stored["text"] = str(args.get("text") or "")
        if "blocks" in args:
            # An empty list removes the blocks; an absent field keeps them, as in Slack.
            if args["blocks"]:
                stored["blocks"] = _with_block_ids(args["blocks"])
            else:
                stored.pop("blocks", None)
        if "attachments" in args:
            stored["attachments"] = copy.deepcopy(args["attachments"])
        stored["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}

    def _build_view(
        self, spec: Payload, *, view_id: str, root_view_id: str, previous_view_id: str | None = None
    ) -> Payload:
        return {
            "id": view_id,
            "team_id": self.team_id,
            "type": spec["type"],
            "blocks": _with_block_ids(spec.get("blocks", [])),
            "private_metadata": spec.get("private_metadata", ""),
            "callback_id": spec.get("callback_id", ""),
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
            "title": spec.get("title"),
            "clear_on_close": bool(spec.get("clear_on_close", False)),
            "notify_on_close": bool(spec.get("notify_on_close", False)),
            "close": spec.get("close"),
            "submit": spec.get("submit"),
            "previous_view_id": previous_view_id,
            "root_view_id": root_view_id,
            "app_id": self.app_id,
            "external_id": spec.get("external_id", ""),
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }


# ---------------------------------------------------------------- module level


def make_block_action(
    *,
    user_id: str,
    action_id: str,
    value: str,
    channel: str,
    message_ts: str,
    block_id: str | None = None,
    response_url: str | None = None,
    trigger_id: str | None = None,
    username: str | None = None,
    message: Payload | None = None,
    is_ephemeral: bool = False,
    button_text: Payload | None = None,
    team_id: str = DEFAULT_TEAM_ID,
    team_domain: str = DEFAULT_TEAM_DOMAIN,
    app_id: str = DEFAULT_APP_ID,
) -> Payload:
    """A ``block_actions`` payload for a button click, shaped as Slack posts it.

    ``message`` is the clicked message (Slack sends it whole); without one a minimal
    message with ``message_ts`` is used. Ephemeral messages carry no ``message``.
    """
    username = username or f"user-{user_id.lower()}"
    payload: Payload = {
        "type": "block_actions",
        "user": {"id": user_id, "username": username, "name": username, "team_id": team_id},
        "api_app_id": app_id,
        "token": VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": is_ephemeral,
        },
        "trigger_id": trigger_id or new_trigger_id(),
        "team": {"id": team_id, "domain": team_domain},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "directmessage" if channel.startswith("D") else channel.lower()},
        "state": {"values": {}},
        "response_url": response_url or f"https://hooks.slack.com/actions/{team_id}/{secrets.token_hex(6)}/x",
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id or secrets.token_urlsafe(4),
                "text": button_text or {"type": "plain_text", "text": value, "emoji": True},
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    if not is_ephemeral:
        payload["message"] = message or {"type": "message", "ts": message_ts, "text": ""}
    return payload


def make_view_submission(
    *,
    user_id: str,
    callback_id: str,
    values: dict[str, dict[str, Payload]],
    private_metadata: str = "",
    view_id: str | None = None,
    view: Payload | None = None,
    trigger_id: str | None = None,
    username: str | None = None,
    team_id: str = DEFAULT_TEAM_ID,
    team_domain: str = DEFAULT_TEAM_DOMAIN,
    app_id: str = DEFAULT_APP_ID,
    bot_id: str = DEFAULT_BOT_ID,
) -> Payload:
    """A ``view_submission`` payload, shaped as Slack posts it when a modal is submitted.

    ``values`` becomes ``view.state.values``: ``{block_id: {action_id: {"type":
    "plain_text_input", "value": "..."}}}``. ``view`` (as ``views.open`` returned it)
    supplies blocks and title; ``callback_id`` and ``private_metadata`` always win.
    """
    username = username or f"user-{user_id.lower()}"
    view_id = view_id or (view or {}).get("id") or f"V{secrets.token_hex(4).upper()}"
    full_view: Payload = {
        "id": view_id,
        "team_id": team_id,
        "type": "modal",
        "blocks": [],
        "external_id": "",
        "state": {"values": {}},
        "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
        "title": {"type": "plain_text", "text": "Form", "emoji": True},
        "clear_on_close": False,
        "notify_on_close": False,
        "close": None,
        "submit": {"type": "plain_text", "text": "Submit", "emoji": True},
        "previous_view_id": None,
        "root_view_id": view_id,
        "app_id": app_id,
        "app_installed_team_id": team_id,
        "bot_id": bot_id,
    }
    full_view.update(view or {})
    full_view.update(
        id=view_id,
        callback_id=callback_id,
        private_metadata=private_metadata,
        state={"values": copy.deepcopy(values)},
    )
    return {
        "type": "view_submission",
        "team": {"id": team_id, "domain": team_domain},
        "user": {"id": user_id, "username": username, "name": username, "team_id": team_id},
        "api_app_id": app_id,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id or new_trigger_id(),
        "view": full_view,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def new_trigger_id() -> str:
    """A fresh id in Slack's ``<digits>.<digits>.<hex>`` trigger_id shape."""
    return f"{secrets.randbelow(10**13)}.{secrets.randbelow(10**12)}.{secrets.token_hex(16)}"


def sign_request(signing_secret: str, body: str, *, timestamp: int | None = None) -> dict[str, str]:
    """Slack's signature headers for ``body``: ``v0=HMAC-SHA256(secret, "v0:{ts}:{body}")``."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    base = f"v0:{timestamp}:{body}".encode()
    digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": f"v0={digest}"}


def form_body(payload: Payload) -> str:
    """The form body Slack posts for interactions: ``payload=<urlencoded JSON>``."""
    return urlencode({"payload": json.dumps(payload, separators=(",", ":"))})


async def post_interaction(
    url: str,
    payload: Payload,
    *,
    signing_secret: str,
    timestamp: int | None = None,
    session: ClientSession | None = None,
) -> tuple[int, Any]:
    """POST ``payload`` to an app as Slack does: form-encoded and signed.

    Returns ``(status, body)`` with the body parsed when it is JSON, else its text
    (``""`` for the empty 200 a plain ``ack()`` gives).
    """
    body = form_body(payload)
    headers = {
        **sign_request(signing_secret, body, timestamp=timestamp),
        "Content-Type": "application/x-www-form-urlencoded",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
    own_session = session is None
    session = session or ClientSession()
    try:
        async with session.post(url, data=body.encode(), headers=headers) as resp:
            text = await resp.text()
            if resp.content_type == "application/json" and text:
                return resp.status, json.loads(text)
            return resp.status, text
    finally:
        if own_session:
            await session.close()


async def _read_args(request: web.Request) -> Payload:
    args: Payload = dict(request.query)
    if request.body_exists:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except json.JSONDecodeError:
                raise _SlackError("invalid_json") from None
            if not isinstance(body, dict):
                raise _SlackError("invalid_json")
            args.update(body)
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            for key, value in form.items():
                args[key] = value if isinstance(value, str) else {"filename": value.filename}
    for key, error in _JSON_FIELDS.items():
        if isinstance(args.get(key), str):
            try:
                args[key] = json.loads(args[key])
            except json.JSONDecodeError:
                raise _SlackError(error) from None
    return args


def _bearer_token(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _message_content(args: Payload, *, required: bool) -> tuple[str | None, list[Payload] | None]:
    text, blocks = args.get("text"), args.get("blocks")
    if blocks is not None and not (
        isinstance(blocks, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks)
    ):
        raise _SlackError("invalid_blocks")
    if required and not text and not blocks and not args.get("attachments"):
        raise _SlackError("no_text")
    if text is not None and len(str(text)) > _MAX_TEXT:
        raise _SlackError("msg_too_long")
    return (str(text) if text is not None else None), blocks


def _check_view(view: Any) -> Payload:
    if not isinstance(view, dict) or view.get("type") not in ("modal", "home"):
        raise _SlackError("invalid_arguments")
    if view["type"] == "modal" and not view.get("title"):
        raise _SlackError("invalid_arguments")
    blocks = view.get("blocks", [])
    if not isinstance(blocks, list) or not all(isinstance(b, dict) and "type" in b for b in blocks):
        raise _SlackError("invalid_arguments")
    return view


def _with_block_ids(blocks: list[Payload]) -> list[Payload]:
    # Slack gives every block without a block_id a short random one.
    result = copy.deepcopy(blocks)
    for block in result:
        block.setdefault("block_id", secrets.token_urlsafe(4))
    return result


def _find_element(blocks: list[Payload], action_id: str) -> tuple[str, Payload] | None:
    for block in blocks:
        candidates = [*block.get("elements", []), block.get("accessory"), block.get("element")]
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return block["block_id"], element
    return None


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1"))

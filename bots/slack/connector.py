"""The Slack connector: a slack-bolt AsyncApp behind Handraise's own server (HTTP) or Socket Mode.

Requests are posted with buttons; taps, modal submissions and thread replies are
answered through the lifecycle service. Every interaction is acknowledged first
and the slow work (Web API calls) runs afterwards in a tracked task.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from handraise.bots.slack.blocks import (
    ACTION_PREFIX,
    FORM_INTENT,
    LINK_ACTION,
    MODAL_CALLBACK,
    MODAL_INTENT,
    block_errors,
    form_link_content,
    link_content,
    message_content,
    modal_view,
    notice_view,
    outcome_content,
    plan_buttons,
    read_answer,
    reminder_text,
)
from handraise.bots.slack.settings import SlackSettings
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import ChatConnector, Sender
from handraise.core.config import PersonSettings, Settings
from handraise.core.errors import ConnectorError, NotFoundError
from handraise.core.outcomes import AnswerOutcome
from handraise.core.personal import PrivateNote
from handraise.core.ratings import rating_value

LEADER = "slack-socket"
# How often a follower asks for the Socket Mode lock, and the leader checks it still holds it.
LEADER_POLL_SECONDS = 5.0
# Slack's interaction payloads carry the whole view; a 20-field modal can pass the server's
# default body limit once form-encoded, so this route reads its body under its own cap.
MAX_BODY_BYTES = 1024 * 1024

# Errors no retry can fix: the delivery stops at once.
_PERMANENT = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "not_authed", "account_inactive",
    "token_revoked", "token_expired", "missing_scope", "not_allowed_token_type", "no_permission",
    "restricted_action", "invalid_blocks", "invalid_arguments", "msg_too_long", "message_not_found",
    "cant_update_message", "edit_window_closed", "team_access_not_granted",
})
# Slack's answers when the app cannot write to a person alone: no such (active) user, or no DM with them.
_NO_DM = frozenset({
    "user_not_found", "users_not_found", "user_disabled", "account_inactive", "cannot_dm_bot",
    "channel_not_found", "not_in_channel", "is_archived", "messages_tab_disabled",
})
# Slack marks up what people type: links arrive as <target|label> or <target>, and &, <, > as entities.
_SLACK_LINK = re.compile(r"<(?!@|#|!)([^<>|]+)(?:\|([^<>]*))?>")


class SlackConnector(ChatConnector[SlackSettings]):
    name = "slack"
    settings_model = SlackSettings

    @classmethod
    async def check(cls, settings: SlackSettings, *, app_settings: Settings,
                    http: aiohttp.ClientSession) -> list[str]:
        """auth.test with the bot token; in Socket Mode, apps.connections.open with the app token."""

        async def call(method: str, token: str) -> tuple[bool, str]:
            try:
                async with http.post(f"{settings.api_url}{method}", headers={"Authorization": f"Bearer {token}"},
                                     timeout=aiohttp.ClientTimeout(total=15)) as resp:
                    body = await resp.json(content_type=None)
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                return False, f"cannot reach {settings.api_url} ({type(e).__name__})"
            ok = isinstance(body, dict) and body.get("ok") is True
            return ok, "" if ok else str(body.get("error") if isinstance(body, dict) else resp.status)

        problems = []
        ok, error = await call("auth.test", settings.bot_token.get_secret_value())
        if not ok:
            problems.append(f"auth.test refused the bot token ({error}); check [slack] bot_token (xoxb-…)")
        if settings.mode == "socket" and settings.app_token is not None:
            ok, error = await call("apps.connections.open", settings.app_token.get_secret_value())
            if not ok:
                problems.append(f"apps.connections.open refused the app token ({error}); check [slack] app_token "
                                "(xapp-…, connections:write)")
        return problems

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings = self.settings
        # The libraries log payloads (modal values, message text) at DEBUG and bad-signature bodies at
        # INFO; a human's answer must never reach a log, so they get a logger that stops at WARNING.
        self._lib_log = logging.getLogger(f"{self.log.name}.lib")
        self._lib_log.setLevel(logging.WARNING)
        self.client = AsyncWebClient(token=settings.bot_token.get_secret_value(), base_url=settings.api_url,
                                     session=self.http, logger=self._lib_log)
        http_mode = settings.mode == "http"
        signing_secret = settings.signing_secret.get_secret_value() if settings.signing_secret else ""
        self._verifier = SignatureVerifier(signing_secret) if http_mode else None
        self.bolt = AsyncApp(name="handraise-slack", client=self.client, logger=self._lib_log,
                             signing_secret=signing_secret, request_verification_enabled=http_mode)
        # Bolt re-reads the level on every construction; keep its signature logger quiet regardless.
        logging.getLogger("slack_bolt.RequestVerification").setLevel(logging.WARNING)
        self.bolt.action(re.compile(f"^{ACTION_PREFIX}"))(self._on_action)
        self.bolt.view(MODAL_CALLBACK)(self._on_view_submission)
        self.bolt.event("message")(self._on_message)
        self.bolt.error(self._on_error)

    def routes(self) -> list[web.AbstractRouteDef]:
        if self.settings.mode != "http":
            return []
        return [web.post("/events", self.handle_http)]

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self.settings.mode == "socket":
            self.spawn(self.run_forever(self._socket_session, what="slack socket mode"), name="socket-mode")

    async def _socket_session(self) -> None:
        """While this instance holds the lock, keep one Socket Mode connection (the SDK reconnects it)."""
        if not await self.leadership.take(LEADER):
            await asyncio.sleep(LEADER_POLL_SECONDS)
            return
        handler = AsyncSocketModeHandler(self.bolt, app_token=self.settings.app_token.get_secret_value(),
                                         logger=self._lib_log, web_client=self.client)
        try:
            await handler.connect_async()
            self.log.info("slack socket mode connected")
            while await self.leadership.alive(LEADER):
                await asyncio.sleep(LEADER_POLL_SECONDS)
            self.log.warning("slack socket mode: leadership lost, disconnecting")
        finally:
            try:
                await handler.close_async()
            finally:
                await self.leadership.release(LEADER)

    # -- delivery ----------------------------------------------------------------

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        text, blocks, tokens = await self._content(request)
        posted = await self._call("chat.postMessage", self.client.chat_postMessage(
            channel=target, text=text, blocks=blocks, unfurl_links=False, unfurl_media=False))
        channel, ts = str(posted["channel"]), str(posted["ts"])
        await self.chat_refs.remember_message(channel=self.name, message_key=f"{channel}:{ts}",
                                            tenant_id=request.tenant_id, request_id=request.id)
        self.log.info("slack message posted", extra={"request_id": request.id, "slack_channel": channel})
        # Its button tokens, kept with it: a tally edit shows the same buttons (show_votes).
        return {"channel": channel, "ts": ts, "tokens": tokens}

    async def _content(self, request: RequestView, *, kept: Any = None) -> tuple[str, list[dict[str, Any]], list[str]]:
        """A pending request's message, with the tally of a quorum request, and its button tokens: new ones,
        or ``kept``, those of the message rendered again (a tap on it still works; a vote mints nothing)."""
        plans = plan_buttons(request)
        tokens = await self.chat_refs.create_actions(tenant_id=request.tenant_id, request_id=request.id,
                                                        channel=self.name, values=[p.intent for p in plans], kept=kept)
        text, blocks = message_content(request, list(zip(plans, tokens)), tz=self.timezone(request.tenant_id),
                                       tally=self.tally_text(request))
        return text, blocks, tokens

    async def show_votes(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        channel, ts = ref.get("channel"), ref.get("ts")
        if channel and ts:
            text, blocks, _ = await self._content(request, kept=ref.get("tokens"))
            await self._call("chat.update", self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks))

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        channel, ts = ref.get("channel"), ref.get("ts")
        if not channel or not ts:
            raise ConnectorError("slack withdraw: the delivery has no message reference", permanent=True)
        tokens = await self.ratings.tokens(request) if self.ratings.offered(request) else None
        text, blocks = outcome_content(request, await self.outcome_of(request), rating_tokens=tokens)
        await self._call("chat.update", self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks))

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        # A thread reply: posting the request again would leave a second set of buttons nobody withdraws.
        channel, ts = ref.get("channel"), ref.get("ts")
        if not channel or not ts:
            return
        await self._call("chat.postMessage", self.client.chat_postMessage(
            channel=channel, thread_ts=ts,
            text=reminder_text(request, now=self.service.clock(), tz=self.timezone(request.tenant_id))))

    async def send_private(self, person: PersonSettings, *, tenant_id: str, note: PrivateNote) -> bool:
        """The note in the person's DM with the app (conversations.open on their user id: a DM, which
        nobody else can join), the link on a button; False when Slack has no DM with them to give."""
        if person.slack is None:
            return False
        text, blocks = link_content(note.text, url=note.url, button=note.button)
        try:
            opened = await self._call("conversations.open", self.client.conversations_open(users=person.slack))
            await self._call("chat.postMessage", self.client.chat_postMessage(
                channel=str(opened["channel"]["id"]), text=text, blocks=blocks, unfurl_links=False,
                unfurl_media=False))
        except ConnectorError as e:
            cause = e.__cause__
            error = cause.response.get("error") if isinstance(cause, SlackApiError) else None
            if error not in _NO_DM:
                raise
            self.log.info("slack: no DM with the person (%s)", error, extra={"tenant_id": tenant_id})
            return False
        return True

    async def _call(self, what: str, call: Awaitable[Any]) -> Any:
        """One Web API call; the library's failure is wrapped once, with Slack's Retry-After."""
        try:
            return await call
        except SlackApiError as e:
            raise _connector_error(what, e) from e
        except (SlackClientError, aiohttp.ClientError, TimeoutError) as e:
            raise ConnectorError(f"slack {what}: {type(e).__name__}") from e

    # -- incoming HTTP -----------------------------------------------------------

    async def handle_http(self, request: web.Request) -> web.StreamResponse:
        """Slack's POSTs (interactions, events): the signature is checked before anything is parsed."""
        body = await _read_body(request, limit=MAX_BODY_BYTES)
        if body is None:
            return web.json_response({"error": "payload too large"}, status=413)
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        assert self._verifier is not None
        # is_valid refuses timestamps more than five minutes away (replays).
        if not (timestamp.isdigit() and signature and self._verifier.is_valid(body, timestamp, signature)):
            self.log.info("slack request refused: bad or stale signature")
            return web.json_response({"error": "invalid request"}, status=401)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return web.json_response({"error": "invalid request"}, status=400)
        # What to_bolt_request builds, from the body already read (it would read it again, uncapped).
        bolt_request = AsyncBoltRequest(body=text, query=request.query_string,
                                        headers=request.headers)  # type: ignore[arg-type]
        return await to_aiohttp_response(await self.bolt.async_dispatch(bolt_request))

    # -- Bolt listeners ----------------------------------------------------------

    async def _on_action(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        self._after_ack(self._handle_action(body), what="button")

    async def _on_view_submission(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        # Validation decides the ack itself (errors go back in it), so this work happens before it.
        try:
            answer = await self._handle_submission(body, view)
        except Exception as e:
            self.log.warning("slack modal submission failed (%s)", type(e).__name__)
            answer = {"response_action": "update", "view": notice_view("Not sent", "Something went wrong; "
                                                                                   "your answer was not recorded.")}
        await ack(**answer)

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        # Events are acknowledged by Bolt before this runs.
        self._after_ack(self._handle_reply(event, body), what="thread reply")

    async def _on_error(self, error: Exception) -> None:
        # Bolt's default handler logs the request body; ours names the failure only.
        self.log.warning("slack request handling failed (%s)", type(error).__name__)

    def _after_ack(self, work: Awaitable[None], *, what: str) -> None:
        async def guarded() -> None:
            try:
                await work
            except Exception as e:
                self.log.warning("slack %s handling failed (%s)", what, type(e).__name__)

        self.spawn(guarded(), name=what)

    def direct_target(self, user_id: str) -> str | None:
        # Posting to a user id lands in the app's DM with that person.
        return user_id

    # -- interactions ------------------------------------------------------------

    async def _handle_action(self, body: dict[str, Any]) -> None:
        action = (body.get("actions") or [{}])[0]
        if action.get("action_id") == LINK_ACTION:
            return  # the URL button of a form link: the browser does the rest
        sender = _sender(body)
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
        token = action.get("value")
        resolved = await self.chat_refs.resolve_action(token=str(token or ""), channel=self.name)
        if resolved is None or not isinstance(resolved[2], dict):
            await self._ephemeral(channel, sender.user_id, wording.text("button_invalid"))
            return
        tenant_id, request_id, intent = resolved
        rating = rating_value(intent)
        if rating is not None:
            # Before the terminal check: ratings are given once the request is answered.
            outcome = await self.ratings.rate(tenant_id=tenant_id, request_id=request_id, user_id=sender.user_id,
                                              principal=sender.principal, rating=rating)
        elif intent == FORM_INTENT:
            # One link per person who asks: a link in the channel message would let any member answer.
            outcome = await self.personal_link(tenant_id=tenant_id, request_id=request_id, sender=sender)
        elif intent == MODAL_INTENT:
            outcome = await self._open_modal(body, tenant_id, request_id, sender, token=str(token))
        elif "answer" in intent:
            outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                                  value=intent["answer"])
            if outcome.accepted and (outcome.view is None or outcome.view.terminal):
                return  # the dispatcher's withdraw edits the message to show who answered
            # A vote on a quorum request that more votes decide: the person hears it was counted.
        else:
            outcome = AnswerOutcome("button_invalid", wording.text("button_invalid"))
        if outcome.url is not None:
            text, blocks = form_link_content(outcome.url)
            await self._ephemeral(channel, sender.user_id, text, blocks=blocks)
        elif outcome.code != "modal":
            await self._ephemeral(channel, sender.user_id, outcome.message)

    async def _open_modal(self, body: dict[str, Any], tenant_id: str, request_id: str, sender: Sender, *,
                          token: str) -> AnswerOutcome:
        try:
            request = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return AnswerOutcome("button_invalid", wording.text("button_invalid"))
        refused = await self.gate(request, sender)
        if refused is not None:
            return refused
        try:
            await self._call("views.open", self.client.views_open(
                trigger_id=body.get("trigger_id"),
                view=modal_view(request, private_metadata=token, tz=self.timezone(tenant_id))))
        except ConnectorError as e:
            # A trigger_id lives three seconds; a slow Slack or a rate limit can outlast it.
            self.log.warning("slack modal not opened (%s)", e.message)
            return AnswerOutcome("modal_failed", "Slack did not open the form; tap “Answer here” again.")
        return AnswerOutcome("modal", "")

    async def _handle_submission(self, body: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
        """The ack for a modal submission: {} closes it, "errors" keeps it open, "update" says why not."""
        token = str(view.get("private_metadata") or "")
        resolved = await self.chat_refs.resolve_action(token=token, channel=self.name)
        if resolved is None or resolved[2] != MODAL_INTENT:
            return _notice("Not sent", "This form is no longer valid.")
        tenant_id, request_id, _ = resolved
        sender = _sender(body)
        try:
            request = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return _notice("Not sent", "This form is no longer valid.")
        refused = await self.gate(request, sender)
        if refused is None:
            answer = read_answer(request, (view.get("state") or {}).get("values") or {})
            refused = await self.submit_value(request, sender, answer)
        if refused.accepted:
            return {}
        if refused.code == "invalid":
            return {"response_action": "errors", "errors": block_errors(request, list(refused.problems))}
        title = {"not_authorized": "Not authorized", "use_the_form": "Use the form",
                 "four_eyes": "Someone else must approve"}.get(refused.code, "Closed")
        return _notice(title, refused.message)

    async def _handle_reply(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """A reply in the thread of a request's message answers it as typed text, through the shared path.

        Never an approval: Reject has a confirm on the buttons, and a remark in a thread must not
        decide one. A bot token cannot delete a person's message, so a refused reply is only refused.
        """
        thread_ts, ts = event.get("thread_ts"), event.get("ts")
        if event.get("subtype") or event.get("bot_id") or not thread_ts or thread_ts == ts:
            return
        channel, user = event.get("channel"), event.get("user")
        if not channel or not user:
            return
        found = await self.chat_refs.lookup_message(channel=self.name, message_key=f"{channel}:{thread_ts}")
        if found is None:
            return
        tenant_id, request_id = found
        team = event.get("team") or body.get("team_id") or ""
        sender = Sender(str(user), f"slack:{team}/{user}", f"<@{user}>")
        outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                              text=_plain_text(str(event.get("text") or "")),
                                              decides_approvals=False)
        if not outcome.accepted and outcome.code != "not_found":
            await self._ephemeral(channel, str(user), outcome.message, thread_ts=thread_ts)

    # -- helpers -----------------------------------------------------------------

    async def _ephemeral(self, channel: str | None, user: str, text: str, *,
                         blocks: list[dict[str, Any]] | None = None, thread_ts: str | None = None) -> None:
        if not channel or not user:
            return
        kwargs: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if blocks:
            kwargs["blocks"] = blocks
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        try:
            await self._call("chat.postEphemeral", self.client.chat_postEphemeral(**kwargs))
        except ConnectorError as e:
            self.log.warning("slack ephemeral message failed (%s)", e.message)


def _connector_error(what: str, e: SlackApiError) -> ConnectorError:
    response = e.response
    status = getattr(response, "status_code", None)
    error = response.get("error") if hasattr(response, "get") else None
    if status == 429:
        return ConnectorError(f"slack {what}: rate limited", retry_after=_retry_after(response))
    return ConnectorError(f"slack {what}: {error or status}", permanent=error in _PERMANENT)


def _retry_after(response: Any) -> float:
    headers = getattr(response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            try:
                return max(0.0, float(value[0] if isinstance(value, list) else value))
            except (TypeError, ValueError):
                break
    return 1.0


async def _read_body(request: web.Request, *, limit: int) -> bytes | None:
    """The raw body, or None past ``limit`` bytes."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _sender(body: dict[str, Any]) -> Sender:
    user = str((body.get("user") or {}).get("id") or "")
    team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id") or ""
    # Slack shows <@U…> as the person's current name to each reader.
    return Sender(user, f"slack:{team}/{user}", f"<@{user}>" if user else "")


def _notice(title: str, text: str) -> dict[str, Any]:
    return {"response_action": "update", "view": notice_view(title, text)}


def _plain_text(text: str) -> str:
    """What the person typed, from Slack's message markup (auto-links and &-escapes undone)."""
    def link(match: re.Match[str]) -> str:
        target, label = match[1], match[2]
        return label if label else target

    text = _SLACK_LINK.sub(link, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

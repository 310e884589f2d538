"""The Telegram connector (python-telegram-bot 22): questions as messages with buttons, replies or a form link.

Inbound answers (button taps, replies to a question) go through core's submit with the
principal ``telegram:<user id>``; core validates, picks the one winner and journals.
Polling runs on exactly one instance (a PostgreSQL advisory lock); webhook mode works
on any instance behind ``/bots/telegram/webhook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hmac
import logging
import re
import warnings
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from telegram import (
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
    Update,
)
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)
from telegram.warnings import PTBDeprecationWarning

from handraise.core.api import RequestView
from handraise.core.config import Settings
from handraise.core.connectors import AnswerOutcome, Connector, outcome_text, rating_value
from handraise.core.errors import ConfigError, ConnectorError, GoneError, NotFoundError
from handraise.core.redaction import redact
from handraise.core.schema import coerce_text, describe_field, fields, parse_field_lines

log = logging.getLogger(__name__)

MAX_TEXT = 4096  # Telegram's limit, in UTF-16 code units
MAX_BUTTON_CHOICES = 8
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
POLL_LOCK = "telegram-poll"
NAMES = "telegram.names"  # durable state: user id -> display name, for "Answered by …"
SENSITIVE_TEXT = ("🔒 A private answer is needed. For your safety the question is shown only in the form: "
                  "open it with the button below. Replies in this chat are deleted.")
CUT_NOTE = "[The question is cut here: the form shows all of it.]"
RATE_PROMPT = "Rate this run (1 = poor, 5 = great):"
_FORM_TOKEN = re.compile(r"/f/[A-Za-z0-9_-]+")


class TelegramTenantSettings(BaseModel):
    """Where one tenant's requests go, and who may answer them."""

    model_config = ConfigDict(extra="forbid")

    chat_ids: list[int] = Field(min_length=1)
    allowed_user_ids: list[int] = Field(min_length=1)


class TelegramSettings(BaseModel):
    """``[telegram]``. Per tenant: ``[telegram.tenants.<id>]``; or, for one tenant, the short form
    ``chat_ids`` / ``allowed_user_ids`` (with ``tenant`` when several tenants are configured)."""

    model_config = ConfigDict(extra="forbid")

    token: SecretStr
    base_url: str = "https://api.telegram.org/bot"
    mode: Literal["polling", "webhook"] = "polling"
    # Webhook mode: Telegram sends it in X-Telegram-Bot-Api-Secret-Token; checked on every update.
    webhook_secret: SecretStr | None = None
    # Webhook mode: the public URL registered with setWebhook (default: public_url + /bots/telegram/webhook).
    webhook_url: str | None = None
    tenant: str | None = None
    chat_ids: list[int] | None = None
    allowed_user_ids: list[int] | None = None
    tenants: dict[str, TelegramTenantSettings] = Field(default_factory=dict)
    remind_after_seconds: float | None = Field(default=None, gt=0)
    # Polling: how often the poller checks it still holds the lock, and a standby tries to take over.
    leader_check_seconds: float = Field(default=5.0, gt=0, le=300)
    # Polling: how long one getUpdates waits for news.
    poll_timeout_seconds: int = Field(default=25, ge=0, le=50)
    # An answered request's message offers buttons 1-5 that rate its run (needs a run_id and [feedback]).
    rating_buttons: bool = False

    @model_validator(mode="after")
    def _check(self) -> TelegramSettings:
        if self.mode == "webhook":
            if self.webhook_secret is None:
                raise ValueError("webhook_secret is required in webhook mode")
            if not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", self.webhook_secret.get_secret_value()):
                raise ValueError("webhook_secret: 16-256 characters of A-Z, a-z, 0-9, _ and -")
        if (self.chat_ids is None) != (self.allowed_user_ids is None):
            raise ValueError("chat_ids and allowed_user_ids go together")
        if self.chat_ids is None and not self.tenants:
            raise ValueError("say where to post: chat_ids and allowed_user_ids, or [telegram.tenants.<id>]")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        self.base_url = self.base_url.rstrip("/")
        return self


class TelegramConnector(Connector):
    name = "telegram"
    settings_model = TelegramSettings

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings: TelegramSettings = self.settings
        self._tenants: dict[str, TelegramTenantSettings] = dict(settings.tenants)
        self._allowed = {t: {str(u) for u in s.allowed_user_ids} for t, s in self._tenants.items()}
        self._app: Application | None = None
        self._ready = asyncio.Event()
        self.polling = False  # this instance holds the polling lock and polls

    # -- configuration ---------------------------------------------------------

    @classmethod
    def load_settings(cls, app_settings: Settings) -> TelegramSettings:
        settings: TelegramSettings = super().load_settings(app_settings)
        known = [t.id for t in app_settings.tenants]
        if settings.chat_ids is not None:
            tenant = settings.tenant or (known[0] if len(known) == 1 else None)
            if tenant is None:
                raise ConfigError("telegram.tenant: name the tenant that chat_ids serve (several are configured)")
            if tenant in settings.tenants:
                raise ConfigError(f"telegram.tenants.{tenant}: given twice (also by chat_ids)")
            try:
                settings.tenants[tenant] = TelegramTenantSettings(chat_ids=settings.chat_ids,
                                                                  allowed_user_ids=settings.allowed_user_ids or [])
            except ValidationError as e:
                raise ConfigError(f"telegram.{e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}") from None
        elif settings.tenant is not None:
            raise ConfigError("telegram.tenant: only with chat_ids and allowed_user_ids")
        owner: dict[int, str] = {}
        for tenant, section in settings.tenants.items():
            if tenant not in known:
                raise ConfigError(f"telegram.tenants.{tenant}: no such tenant")
            for chat in section.chat_ids:
                # One chat, one tenant: its members would otherwise see another tenant's questions.
                if chat in owner and owner[chat] != tenant:
                    raise ConfigError(f"telegram.tenants.{tenant}.chat_ids: chat {chat} also serves {owner[chat]}")
                owner[chat] = tenant
        return settings

    def targets(self, tenant_id: str) -> list[str]:
        section = self._tenants.get(tenant_id)
        return [str(c) for c in section.chat_ids] if section else []

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        return user_id in self._allowed.get(tenant_id, set())

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        # httpx logs every request URL at INFO, and a Bot API URL carries the bot token;
        # python-telegram-bot logs updates and call parameters at DEBUG, replies to private
        # questions included. Neither may reach the log, whatever level the server runs at.
        for name, level in (("httpx", logging.WARNING), ("telegram", logging.INFO)):
            library_log = logging.getLogger(name)
            if library_log.getEffectiveLevel() < level:
                library_log.setLevel(level)
        settings: TelegramSettings = self.settings
        base = settings.base_url
        builder = (ApplicationBuilder().token(settings.token.get_secret_value()).base_url(base)
                   .base_file_url(base[: -len("/bot")] + "/file/bot" if base.endswith("/bot") else base + "/file")
                   .concurrent_updates(True).job_queue(None))
        if settings.mode == "webhook":
            builder = builder.updater(None)
        app = builder.build()
        app.add_handler(CallbackQueryHandler(self._on_callback))
        app.add_handler(CommandHandler(["start", "id"], self._on_start))
        app.add_handler(MessageHandler(filters.REPLY & ~filters.COMMAND, self._on_reply))
        app.add_error_handler(self._on_error)
        self._app = app
        self.spawn(self._run(), name="run")

    async def _run(self) -> None:
        assert self._app is not None
        app = self._app

        async def connect() -> None:
            await app.initialize()  # getMe: fails on a bad token or an unreachable API
            if not app.running:
                await app.start()

        await self.retry(connect, what="telegram connect")
        self._ready.set()
        self.log.info("telegram connected", extra={"bot": app.bot.username, "mode": self.settings.mode})
        if self.settings.mode == "webhook":
            await self.retry(self._register_webhook, what="telegram setWebhook")
            return
        await self.run_forever(self._poll_while_leading, what="telegram polling")

    async def _register_webhook(self) -> None:
        assert self._app is not None
        settings: TelegramSettings = self.settings
        url = settings.webhook_url or f"{self.app_settings.server.public_url}/bots/telegram/webhook"
        assert settings.webhook_secret is not None
        try:
            await self._app.bot.set_webhook(url, secret_token=settings.webhook_secret.get_secret_value(),
                                            allowed_updates=["message", "callback_query"])
        except BadRequest as e:
            # Telegram refuses the URL itself (not https, not public): retrying cannot help.
            self.log.error("telegram refused the webhook URL (%s); set telegram.webhook_url or server.public_url "
                           "to a public https URL", _scrub(str(e), self.settings))

    async def _poll_while_leading(self) -> None:
        """Poll while this instance holds the lock; a standby keeps trying to take it over."""
        assert self._app is not None and self._app.updater is not None
        interval = self.settings.leader_check_seconds
        if not await self.service.leadership(POLL_LOCK):
            await asyncio.sleep(interval)
            return
        updater = self._app.updater
        try:
            await updater.start_polling(timeout=self.settings.poll_timeout_seconds,
                                        allowed_updates=["message", "callback_query"],
                                        error_callback=self._on_poll_error)
            self.polling = True
            self.log.info("telegram polling: this instance polls")
            while updater.running and await self.service.leadership_alive(POLL_LOCK):
                await asyncio.sleep(interval)
            self.log.warning("telegram polling: lost the polling lock; standing by")
        finally:
            self.polling = False
            if updater.running:
                with contextlib.suppress(Exception):
                    await updater.stop()
            await self.service.release_leadership(POLL_LOCK)

    def _on_poll_error(self, error: TelegramError) -> None:
        self.log.warning("telegram getUpdates failed: %s", _scrub(str(error), self.settings))

    async def stop(self) -> None:
        await super().stop()
        self._ready.clear()
        app = self._app
        if app is None:
            return
        with contextlib.suppress(Exception):
            if app.updater is not None and app.updater.running:
                await app.updater.stop()
        with contextlib.suppress(Exception):
            if app.running:
                await app.stop()
        with contextlib.suppress(Exception):
            await app.shutdown()
        await self.service.release_leadership(POLL_LOCK)

    async def _bot(self) -> Any:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=10)
        except TimeoutError:
            raise ConnectorError("not connected to Telegram yet") from None
        assert self._app is not None
        return self._app.bot

    # -- webhook ---------------------------------------------------------------

    def routes(self) -> list[web.AbstractRouteDef]:
        if self.settings.mode != "webhook":
            return []
        return [web.post("/webhook", self._webhook)]

    async def _webhook(self, request: web.Request) -> web.Response:
        assert self.settings.webhook_secret is not None
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self.settings.webhook_secret.get_secret_value().encode()):
            return web.json_response({"ok": False, "error": "bad secret token"}, status=403)
        if not self._ready.is_set() or self._app is None:
            return web.json_response({"ok": False, "error": "not ready"}, status=503)  # Telegram retries
        try:
            data = await request.json()
            if not isinstance(data, dict):
                raise ValueError("not an object")
            update = Update.de_json(data, self._app.bot)
        except Exception:
            return web.json_response({"ok": False, "error": "not a Telegram update"}, status=400)
        await self._app.process_update(update)
        return web.json_response({"ok": True})

    # -- outbound --------------------------------------------------------------

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        bot = await self._bot()
        chat_id = int(target)
        text, markup, link = await self._compose(request, chat_id)
        message = await self._send(bot, chat_id, text, markup, link)
        await self.service.remember_message(channel=self.name, message_key=f"{chat_id}:{message.message_id}",
                                            tenant_id=request.tenant_id, request_id=request.id)
        return {"chat_id": chat_id, "message_id": message.message_id}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        if "message_id" not in ref:
            return
        bot = await self._bot()
        line = await self._outcome_line(request)
        markup = None
        if ref.get("reminder"):
            text = f"⏰ Reminder. {line}"
        else:
            if self.offers_ratings(request):
                # One row under the outcome; the question's message is the one place people rate from.
                tokens = await self.rating_tokens(request)
                markup = InlineKeyboardMarkup([[InlineKeyboardButton(str(n), callback_data=token)
                                                for n, token in enumerate(tokens, start=1)]])
                line += "\n" + RATE_PROMPT
            text, _ = compose_text(request, hint="", outcome=line)
        try:
            await bot.edit_message_text(text, chat_id=ref["chat_id"], message_id=ref["message_id"],
                                        reply_markup=markup, link_preview_options=LinkPreviewOptions(is_disabled=True))
        except BadRequest as e:
            if "not modified" in str(e).lower():
                return  # withdrawn already (another instance, or a retry)
            raise self._wrap(e) from e
        except TelegramError as e:
            raise self._wrap(e) from e

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        bot = await self._bot()
        chat_id = int(target)
        reply = (ReplyParameters(message_id=ref["message_id"], allow_sending_without_reply=True)
                 if "message_id" in ref else None)
        text = "⏰ Reminder: the question above still needs an answer."
        if reply is None:
            text, _ = compose_text(request, hint="⏰ Reminder: this still needs an answer.", outcome=None)
        try:
            message = await bot.send_message(chat_id, text, reply_parameters=reply)
        except TelegramError as e:
            raise self._wrap(e) from e
        await self.service.remember_message(channel=self.name, message_key=f"{chat_id}:{message.message_id}",
                                            tenant_id=request.tenant_id, request_id=request.id)
        return {"chat_id": chat_id, "message_id": message.message_id, "reminder": True}

    async def _compose(self, view: RequestView, chat_id: int) -> tuple[str, Any, str | None]:
        """The message text, its markup, and the form link it carries (if any)."""
        style = presentation(view)
        rows: list[list[InlineKeyboardButton]] = []
        choices = button_choices(view) if style in ("approval", "boolean", "enum") else []
        if choices:
            tokens = await self.service.create_chat_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                            channel=self.name, values=[v for _, v in choices])
            buttons = [InlineKeyboardButton(label, callback_data=token) for (label, _), token in zip(choices, tokens)]
            per_row = 2 if all(len(label) <= 20 for label, _ in choices) else 1
            rows = [buttons[i:i + per_row] for i in range(0, len(buttons), per_row)]
        text, cut = compose_text(view, hint=hint_text(view, style), outcome=None)
        wants_form = style in ("sensitive", "form", "approval") or cut
        link = None
        if wants_form:
            minted = await self.service.mint_link(tenant_id=view.tenant_id, request_id=view.id,
                                                  principal="telegram:bot", recipient=f"telegram chat {chat_id}")
            link = minted.url
            label = "Open form (add a reason)" if style == "approval" else "Open form"
            rows.append([InlineKeyboardButton(label, url=link)])
        if style == "free_text" and not cut:
            return text, ForceReply(selective=False, input_field_placeholder="Your answer"), None
        return text, InlineKeyboardMarkup(rows) if rows else None, link

    async def _send(self, bot: Any, chat_id: int, text: str, markup: Any, link: str | None) -> Message:
        try:
            try:
                return await bot.send_message(chat_id, text, reply_markup=markup,
                                              link_preview_options=LinkPreviewOptions(is_disabled=True))
            except BadRequest as e:
                # Telegram refuses URL buttons to hosts it deems invalid (a loopback public_url):
                # keep the buttons that answer directly and put the link in the text instead.
                if link is None or "url" not in str(e).lower():
                    raise
                self.log.warning("telegram refused the form button; sending the link as text")
                kept = [row for row in markup.inline_keyboard if not any(b.url for b in row)]
                room = MAX_TEXT - utf16_len(link) - 20
                body = text if utf16_len(text) <= room else cut_utf16(text, room - 1) + "…"
                return await bot.send_message(chat_id, f"{body}\n\nForm: {link}",
                                              reply_markup=InlineKeyboardMarkup(kept) if kept else None,
                                              link_preview_options=LinkPreviewOptions(is_disabled=True))
        except TelegramError as e:
            raise self._wrap(e) from e

    async def _outcome_line(self, view: RequestView) -> str:
        who = None
        principal = view.resolved_by or ""
        if principal.startswith("telegram:"):
            who = await self.service.get_state(NAMES, principal.partition(":")[2])
        icon = {"answered": "✅", "expired": "⌛", "cancelled": "🚫"}.get(view.status, "")
        line = f"{icon} {outcome_text(view, who=who)}".strip()
        if view.status == "answered" and not view.sensitive and view.has_response:
            summary = summarize(view.response)
            if summary:
                line += f": {summary}"
        return line

    def _wrap(self, error: TelegramError) -> ConnectorError:
        """python-telegram-bot's failures, wrapped once: what to retry, when, and what is hopeless."""
        message = _scrub(str(error), self.settings)
        if isinstance(error, RetryAfter):
            return ConnectorError(f"Telegram rate limit: {message}", retry_after=retry_seconds(error))
        if isinstance(error, InvalidToken):
            return ConnectorError("Telegram refused the bot token", permanent=True)
        if isinstance(error, ChatMigrated):
            return ConnectorError(f"the chat became supergroup {error.new_chat_id}: update chat_ids", permanent=True)
        if isinstance(error, (BadRequest, Forbidden)):
            return ConnectorError(f"Telegram: {message}", permanent=True)
        if isinstance(error, (TimedOut, NetworkError, Conflict)):
            return ConnectorError(f"Telegram unreachable: {message}")
        return ConnectorError(f"Telegram: {message}")

    # -- inbound ---------------------------------------------------------------

    async def _on_callback(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None or query.from_user is None:
            return
        found = await self.service.resolve_chat_action(token=query.data or "", channel=self.name)
        message = query.message
        if found is not None and message is not None:
            # The button must sit on a message posted about the same request.
            posted = await self.service.lookup_message(channel=self.name,
                                                       message_key=f"{message.chat.id}:{message.message_id}")
            if posted != (found[0], found[1]):
                found = None
        if found is None:
            await self._answer_query(query, "This button is no longer valid.")
            return
        tenant_id, request_id, value = found
        user_id = str(query.from_user.id)
        rating = rating_value(value)
        if rating is not None:
            outcome = await self.rate(tenant_id=tenant_id, request_id=request_id, user_id=user_id,
                                      principal=self.principal(user_id), rating=rating)
            await self._answer_query(query, outcome.message, alert=not outcome.accepted)
            return
        await self._remember_name(query.from_user, tenant_id=tenant_id)
        outcome = await self.submit_answer(tenant_id=tenant_id, request_id=request_id, user_id=user_id,
                                           response=value)
        await self._answer_query(query, outcome.message, alert=outcome.code in ("not_authorized", "invalid"))

    async def _on_reply(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or message.reply_to_message is None or message.from_user is None:
            return
        chat_id = message.chat.id
        found = await self.service.lookup_message(
            channel=self.name, message_key=f"{chat_id}:{message.reply_to_message.message_id}")
        if found is None:
            return  # a reply to something that is not a question
        tenant_id, request_id = found
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return
        user_id = str(message.from_user.id)
        if view.sensitive:
            await self._refuse_sensitive_reply(message, view, user_id)
            return
        if not self.may_answer(tenant_id, user_id):
            # The shared refusal (journaled, nothing applied), before anything about the request is said.
            outcome = await self.submit_answer(tenant_id=tenant_id, request_id=request_id, user_id=user_id,
                                               response=None)
            await self._reply(message, outcome.message, view)
            return
        terminal = self.terminal_outcome(view)
        if terminal is not None:
            await self._reply(message, terminal.message, view)
            return
        text = message.text
        if text is None:
            await self._reply(message, "Please answer with a text reply.", view)
            return
        if redact(text) != text:
            await self._refuse_secret(message, view)
            return
        await self._remember_name(message.from_user, tenant_id=tenant_id)
        outcome = await self._submit_text(view, user_id, text)
        await self._reply(message, outcome.message, view)

    async def _submit_text(self, view: RequestView, user_id: str, text: str) -> AnswerOutcome:
        schema = view.schema
        if schema is not None and schema.get("type") == "object" and presentation(view) != "approval":
            # Lines that name no field would be dropped silently: explain instead of guessing.
            value, errors = parse_field_lines(schema, text)
            if errors:
                await self.service.journal(
                    tenant_id=view.tenant_id, event="invalid_attempt", request_id=view.id, run_id=view.run_id,
                    principal=self.principal(user_id), channel=self.name,
                    data={"errors": [e.to_json() for e in errors]})
                lines = [f"• {e.field}: {e.message}" if e.field else f"• {e.message}" for e in errors]
                return AnswerOutcome("invalid", "That answer is not valid:\n" + "\n".join(lines))
        else:
            value = coerce_text(schema, text)
        return await self.submit_answer(tenant_id=view.tenant_id, request_id=view.id, user_id=user_id,
                                        response=value)

    async def _refuse_sensitive_reply(self, message: Message, view: RequestView, user_id: str) -> None:
        """A chat reply to a sensitive request is refused and deleted; the masked form is the way in."""
        deleted = await self._delete(message)
        await self.service.journal(tenant_id=view.tenant_id, event="chat_reply_refused", request_id=view.id,
                                   run_id=view.run_id, principal=self.principal(user_id), channel=self.name,
                                   data={"reason": "sensitive", "deleted": deleted})
        self.log.info("reply to a sensitive request refused", extra={"request_id": view.id, "deleted": deleted})
        notice = ("Your reply was deleted: this answer is private and is only taken in the form."
                  if deleted else "This answer is private and is only taken in the form: please delete your reply.")
        await self._notice_with_form(message.chat.id, notice, view, user_id)

    async def _refuse_secret(self, message: Message, view: RequestView) -> None:
        deleted = await self._delete(message)
        await self.service.journal(tenant_id=view.tenant_id, event="chat_reply_refused", request_id=view.id,
                                   run_id=view.run_id, principal=self.principal(str(message.from_user.id)),
                                   channel=self.name, data={"reason": "secret_shaped", "deleted": deleted})
        notice = ("That reply looked like a secret (a key or token), so it was not taken"
                  + (" and was deleted" if deleted else "") + ". Secrets belong in the form, not in chat.")
        await self._notice_with_form(message.chat.id, notice, view, str(message.from_user.id))

    async def _notice_with_form(self, chat_id: int, notice: str, view: RequestView, user_id: str) -> None:
        markup = None
        if not view.terminal and self.may_answer(view.tenant_id, user_id):
            with contextlib.suppress(GoneError, NotFoundError):
                minted = await self.service.mint_link(tenant_id=view.tenant_id, request_id=view.id,
                                                      principal="telegram:bot", recipient=f"telegram chat {chat_id}")
                markup = InlineKeyboardMarkup([[InlineKeyboardButton("Open form", url=minted.url)]])
        assert self._app is not None  # updates arrive only once connected
        sent = await self._safe(self._app.bot.send_message(chat_id, notice, reply_markup=markup))
        if sent is not None:
            await self.service.remember_message(channel=self.name, message_key=f"{chat_id}:{sent.message_id}",
                                                tenant_id=view.tenant_id, request_id=view.id)

    async def _reply(self, message: Message, text: str, view: RequestView) -> None:
        sent = await self._safe(message.reply_text(text, do_quote=True))
        if sent is not None and not view.terminal:
            # A reply to our explanation still answers the same question.
            await self.service.remember_message(channel=self.name, message_key=f"{sent.chat.id}:{sent.message_id}",
                                                tenant_id=view.tenant_id, request_id=view.id)

    async def _delete(self, message: Message) -> bool:
        try:
            return bool(await message.delete())
        except RetryAfter as e:
            await asyncio.sleep(min(retry_seconds(e), 10))
            with contextlib.suppress(TelegramError):
                return bool(await message.delete())
        except TelegramError as e:
            # Without the right to delete others' messages in a group, Telegram refuses.
            self.log.warning("could not delete a chat reply: %s", _scrub(str(e), self.settings))
        return False

    async def _answer_query(self, query: Any, text: str, *, alert: bool = False) -> None:
        await self._safe(query.answer(text, show_alert=alert))

    async def _safe(self, call: Any) -> Any:
        """Send a courtesy message; a failure (a rate limit included) is logged, not raised."""
        try:
            return await call
        except RetryAfter as e:
            self.log.warning("telegram rate limit on a notice; dropped (retry after %.0fs)", retry_seconds(e))
        except TelegramError as e:
            self.log.warning("telegram notice failed: %s", _scrub(str(e), self.settings))
        return None

    async def _remember_name(self, user: Any, *, tenant_id: str) -> None:
        """Keep the display name of someone who may answer, before the answer: the withdrawn
        message ("Answered by …") may be written before the submit call returns."""
        if not self.may_answer(tenant_id, str(user.id)):
            return
        name = " ".join(p for p in (user.first_name, user.last_name) if p) or f"user {user.id}"
        if user.username:
            name += f" (@{user.username})"
        await self.service.set_state(NAMES, str(user.id), name[:200])

    async def _on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or message.from_user is None:
            return
        # Helps an operator fill in chat_ids and allowed_user_ids.
        await self._safe(message.reply_text(
            f"Handraise bot. Your Telegram user id is {message.from_user.id}; this chat's id is {message.chat.id}."))

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        # The update is not logged: it may hold a reply to a private question.
        error = context.error
        self.log.error("telegram update handling failed: %s", type(error).__name__,
                       exc_info=(type(error), error, error.__traceback__) if error else None)


# -- presentation (pure functions, shared by deliver and withdraw) --------------


def presentation(view: RequestView) -> str:
    """How a request is asked in Telegram: sensitive, approval, boolean, enum, free_text or form."""
    if view.sensitive:
        return "sensitive"
    if view.kind == "approval":
        return "approval"
    schema = view.schema
    if schema is None:
        return "free_text"
    if schema.get("type") == "boolean":
        return "boolean"
    if schema.get("type") == "string" and isinstance(schema.get("enum"), list) \
            and len(schema["enum"]) <= MAX_BUTTON_CHOICES:
        return "enum"
    return "form"


def button_choices(view: RequestView) -> list[tuple[str, Any]]:
    """(label, value) of the buttons that answer directly."""
    style = presentation(view)
    if style == "approval":
        return [("✅ Approve", {"decision": "approve"}), ("❌ Reject", {"decision": "reject"})]
    if style == "boolean":
        return [("Yes", True), ("No", False)]
    if style == "enum":
        assert view.schema is not None
        return [(_label(str(v)), v) for v in view.schema["enum"]]
    return []


def hint_text(view: RequestView, style: str) -> str:
    expires = dt.datetime.fromtimestamp(view.expires_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    until = f"Answer by {expires}."
    if style == "sensitive":
        return until
    if style == "approval":
        return f"Tap Approve or Reject, or reply “approve because …”. {until}"
    if style in ("boolean", "enum"):
        return f"Tap your answer. {until}"
    if style == "free_text":
        return f"Reply to this message with your answer. {until}"
    specs = fields(view.schema)
    if view.schema is not None and view.schema.get("type") == "object":
        lines = [f"• {s.name}: {describe_field(s)}{' (required)' if s.required else ''}" for s in specs]
        return ("Reply with one line per field (name: value), or open the form.\n"
                + "\n".join(lines) + f"\n{until}")
    return f"Reply with your answer ({describe_field(specs[0])}), or open the form. {until}"


def compose_text(view: RequestView, *, hint: str, outcome: str | None) -> tuple[str, bool]:
    """The message text within Telegram's limit; True when the question had to be cut."""
    body = SENSITIVE_TEXT if view.sensitive else view.message_for_user
    tail_parts = [p for p in (outcome if outcome is not None else hint,) if p]
    tail = "\n\n" + "\n".join(tail_parts) if tail_parts else ""
    if utf16_len(body) + utf16_len(tail) <= MAX_TEXT:
        return body + tail, False
    note = "\n\n" + CUT_NOTE
    room = MAX_TEXT - utf16_len(tail) - utf16_len(note) - 1
    if room < 200:  # an enormous hint (a long form): keep the question, shorten the hint
        tail = cut_utf16(tail, MAX_TEXT // 2) + "…"
        room = MAX_TEXT - utf16_len(tail) - utf16_len(note) - 1
    return cut_utf16(body, room) + "…" + note + tail, True


def summarize(value: Any, *, limit: int = 200) -> str:
    """A short human line for a (non-sensitive) answer."""
    if isinstance(value, dict) and set(value) <= {"decision", "reason"} and "decision" in value:
        text = str(value["decision"])
        if value.get("reason"):
            text += f" ({value['reason']})"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, dict):
        text = "; ".join(f"{k}: {summarize(v, limit=limit)}" for k, v in value.items())
    elif isinstance(value, list):
        text = ", ".join(summarize(v, limit=limit) for v in value)
    elif value is None:
        text = ""
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def cut_utf16(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` UTF-16 code units, never splitting a character."""
    if utf16_len(text) <= limit:
        return text
    out, used = [], 0
    for ch in text:
        size = 2 if ord(ch) > 0xFFFF else 1
        if used + size > limit:
            break
        out.append(ch)
        used += size
    return "".join(out)


def retry_seconds(error: RetryAfter) -> float:
    # An int or a timedelta depending on PTB_TIMEDELTA; reading the int form warns.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        period = error.retry_after
    return period.total_seconds() if isinstance(period, dt.timedelta) else float(period)


def _label(text: str) -> str:
    return text if len(text) <= 60 else text[:59] + "…"


def _scrub(text: str, settings: TelegramSettings) -> str:
    """An error text safe to show and journal: no bot token, no one-time link token."""
    text = text.replace(settings.token.get_secret_value(), "<token>")
    return redact(_FORM_TOKEN.sub("/f/…", text))

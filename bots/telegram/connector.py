"""The Telegram connector (python-telegram-bot 22): questions as messages with buttons, replies or a form link.

Inbound answers (button taps, replies to a question) go through core's submit with the
principal ``telegram:<user id>``; core validates, picks the one winner and journals.
Polling runs on exactly one instance (a PostgreSQL advisory lock); webhook mode works
on any instance behind ``/bots/telegram/webhook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import ValidationError
from telegram import (
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
    Update,
)
from telegram.error import BadRequest, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from handraise.bots.telegram import doctor
from handraise.bots.telegram.errors import retry_seconds, scrub, wrap
from handraise.bots.telegram.messages import (
    MAX_TEXT,
    answer_rows,
    button_choices,
    compose_text,
    cut_utf16,
    form_button,
    hint_text,
    presentation,
    rating_keyboard,
    utf16_len,
)
from handraise.bots.telegram.polling import POLL_LOCK, TelegramPoller
from handraise.bots.telegram.settings import TelegramSettings, TelegramTenantSettings
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import ChatConnector, Sender
from handraise.core.config import Settings
from handraise.core.outcomes import AnswerOutcome
from handraise.core.ratings import rating_value
from handraise.core.errors import ConfigError, ConnectorError

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# Durable state: request id -> the private messages with a form link sent about it (their buttons go with it).
SENT = "telegram.sent"
# What a "Open form" button's token stands for: a personal link, handed out in a private chat.
FORM_INTENT: dict[str, Any] = {"form": True}


class TelegramConnector(ChatConnector[TelegramSettings]):
    name = "telegram"
    settings_model = TelegramSettings

    @classmethod
    async def check(cls, settings: TelegramSettings, *, app_settings: Settings,
                    http: aiohttp.ClientSession) -> list[str]:
        return await doctor.check(settings, app_settings=app_settings, http=http)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._app: Application | None = None
        self._ready = asyncio.Event()
        self._poller: TelegramPoller | None = None

    @property
    def polling(self) -> bool:
        """Whether this instance holds the polling lock and polls."""
        return self._poller is not None and self._poller.polling

    # -- configuration ---------------------------------------------------------

    @classmethod
    def load_settings(cls, app_settings: Settings) -> TelegramSettings:
        settings: TelegramSettings = super(ChatConnector, cls).load_settings(app_settings)
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
                raise app_settings.config_error(e, section=("telegram",)) from None
        elif settings.tenant is not None:
            raise ConfigError("telegram.tenant: only with chat_ids and allowed_user_ids")
        try:
            # The short form joined the tenants after validation: check one tenant per chat again.
            settings._one_tenant_per_place()
        except ValueError as e:
            raise ConfigError(f"telegram.tenants: {e}") from None
        settings.check_tenants(app_settings, section=cls.name)
        return settings

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        # httpx logs every request URL at INFO, and a Bot API URL carries the bot token;
        # python-telegram-bot logs updates and call parameters at DEBUG, replies to private
        # questions included. Neither may reach the log, whatever level the server runs at.
        for name, level in (("httpx", logging.WARNING), ("telegram", logging.INFO)):
            library_log = logging.getLogger(name)
            if library_log.getEffectiveLevel() < level:
                library_log.setLevel(level)
        settings = self.settings
        base = settings.base_url
        builder = (ApplicationBuilder().token(settings.token.get_secret_value()).base_url(base)
                   .base_file_url(base[: -len("/bot")] + "/file/bot" if base.endswith("/bot") else base + "/file")
                   .concurrent_updates(True).job_queue(None))
        if settings.mode == "webhook":
            builder = builder.updater(None)
        app = builder.build()
        if app.updater is not None:
            self._poller = TelegramPoller(updater=app.updater, service=self.service, settings=settings, log=self.log)
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
        assert self._poller is not None
        await self.run_forever(self._poller.poll_while_leading, what="telegram polling")

    async def _register_webhook(self) -> None:
        assert self._app is not None
        settings = self.settings
        url = settings.webhook_url or f"{self.app_settings.server.public_url}/bots/telegram/webhook"
        assert settings.webhook_secret is not None
        try:
            await self._app.bot.set_webhook(url, secret_token=settings.webhook_secret.get_secret_value(),
                                            allowed_updates=["message", "callback_query"])
        except BadRequest as e:
            # Telegram refuses the URL itself (not https, not public): retrying cannot help.
            self.log.error("telegram refused the webhook URL (%s); set telegram.webhook_url or server.public_url "
                           "to a public https URL", scrub(str(e), self.settings))

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

    def direct_target(self, user_id: str) -> str | None:
        # A user's id is their private chat with the bot (Telegram refuses it until they start the bot).
        return user_id

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
        await self._strip_private_links(request)
        line = (await self.outcome_of(request)).plain()
        markup = None
        if ref.get("reminder"):
            text = f"{wording.ICONS['reminder']} {line}"
        else:
            if self.ratings.offered(request):
                # One row under the outcome; the question's message is the one place people rate from.
                markup = rating_keyboard(await self.ratings.tokens(request))
                line += "\n" + wording.text("rate_prompt")
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

    async def show_votes(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        if "message_id" not in ref or ref.get("reminder"):
            return
        bot = await self._bot()
        text, markup, _ = await self._compose(request, int(ref["chat_id"]))
        try:
            await bot.edit_message_text(text, chat_id=ref["chat_id"], message_id=ref["message_id"],
                                        reply_markup=markup if isinstance(markup, InlineKeyboardMarkup) else None,
                                        link_preview_options=LinkPreviewOptions(is_disabled=True))
        except BadRequest as e:
            if "not modified" not in str(e).lower():
                raise self._wrap(e) from e
        except TelegramError as e:
            raise self._wrap(e) from e

    async def _strip_private_links(self, view: RequestView) -> None:
        """The private messages that carried a personal link lose their button: the request is over."""
        kept = await self.service.get_state(SENT, view.id)
        if not kept:
            return
        assert self._app is not None
        for chat_id, message_id in json.loads(kept):
            try:
                await self._app.bot.edit_message_reply_markup(chat_id=chat_id, message_id=message_id,
                                                              reply_markup=None)
            except TelegramError as e:  # "not modified" (done already), or the person deleted it
                self.log.debug("telegram: a private link message kept its state (%s)", type(e).__name__)

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        bot = await self._bot()
        chat_id = int(target)
        reply = (ReplyParameters(message_id=ref["message_id"], allow_sending_without_reply=True)
                 if "message_id" in ref else None)
        text = f"{wording.ICONS['reminder']} " + wording.reminder(request, now=self.service.clock(),
                                                                  tz=self.timezone(request.tenant_id))
        if reply is None:
            text, _ = compose_text(request, hint=text, outcome=None)
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
        choices = button_choices(view)
        if choices:
            tokens = await self.service.create_chat_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                            channel=self.name, values=[v for _, v in choices])
            rows = answer_rows(choices, tokens)
        hint = hint_text(view, style, tz=self.timezone(view.tenant_id))
        tally = self.tally_text(view)
        text, cut = compose_text(view, hint=f"{tally}\n{hint}" if tally else hint, outcome=None)
        wants_form = style in ("sensitive", "form_only", "form", "approval") or cut
        link = None
        if wants_form:
            link = await self._form_url(view, chat_id)
            rows.append(form_button(link, style))
        if style == "free_text" and not cut:
            # Selective: in a group, the reply field opens for the people the message addresses only.
            return text, ForceReply(selective=True, input_field_placeholder="Your answer"), None
        return text, InlineKeyboardMarkup(rows) if rows else None, link

    async def _form_url(self, view: RequestView, chat_id: int) -> str:
        """Where "Open form" leads: never a link that anyone in a group could use.

        In a private chat the chat is the person: their own link. In a group, a deep link to this
        bot (``t.me/<bot>?start=<token>``): the person who taps it sends ``/start <token>`` in
        private, and gets a link of their own there if they are on the allowlist. It works for
        people who never opened a private chat with the bot.
        """
        if chat_id > 0 and self.may_answer(view.tenant_id, str(chat_id)):
            sender = Sender(str(chat_id), self.principal(str(chat_id)), "")
            outcome = await self.personal_link(tenant_id=view.tenant_id, request_id=view.id, sender=sender,
                                               recipient=f"telegram chat {chat_id}")
            if outcome.url:
                return outcome.url
        token, = await self.service.create_chat_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                        channel=self.name, values=[FORM_INTENT])
        assert self._app is not None
        return f"https://t.me/{self._app.bot.username}?start={token}"

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

    def _wrap(self, error: TelegramError) -> ConnectorError:
        return wrap(error, self.settings)

    # -- inbound ---------------------------------------------------------------

    async def _on_callback(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None or query.from_user is None:
            return
        found = await self.service.resolve_chat_action(token=query.data or "", channel=self.name)
        message = query.message
        if found is not None and message is not None:
            # The button must sit on a message posted about the same request. A message not
            # recorded yet (a tap faster than the bot's own bookkeeping) has nothing to contradict.
            posted = await self.service.lookup_message(channel=self.name,
                                                       message_key=f"{message.chat.id}:{message.message_id}")
            if posted is not None and posted != (found[0], found[1]):
                found = None
        if found is None:
            await self._answer_query(query, wording.text("button_invalid"))
            return
        tenant_id, request_id, value = found
        sender = sender_of(query.from_user)
        rating = rating_value(value)
        if rating is not None:
            outcome = await self.ratings.rate(tenant_id=tenant_id, request_id=request_id, user_id=sender.user_id,
                                              principal=sender.principal, rating=rating)
        else:
            outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                                  value=value)
        # A callback answer is seen by the tapper only: the one private way to refuse in a group.
        await self._answer_query(query, outcome.message, alert=not outcome.accepted)

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
        sender = sender_of(message.from_user)
        outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                              text=message.text, message=message)
        view = outcome.view
        if outcome.code == "not_found" or view is None:
            return
        if outcome.code == "not_authorized":
            await self._tell_stranger(message, outcome, view, sender)
        elif outcome.code in ("sensitive_removed", "sensitive_kept", "secret_removed", "secret_kept"):
            # No button: a notice outlives the request; "Open form" on the question is the way in.
            text = outcome.message + " Use “Open form” on the question."
            if outcome.code.endswith("_kept"):
                await self._reply(message, text, view)
            else:
                await self._safe(self._app.bot.send_message(chat_id, text) if self._app else _none())
        else:
            await self._reply(message, outcome.message, view)

    async def _tell_stranger(self, message: Message, outcome: AnswerOutcome, view: RequestView,
                             sender: Sender) -> None:
        """Once per request and person, privately when Telegram lets the bot (they started it), else
        as one reply in the chat: a group is not told again each time a stranger speaks."""
        if not await self.first_time_told(view, sender):
            return
        assert self._app is not None
        try:
            await self._app.bot.send_message(int(sender.user_id), outcome.message)
            return
        except TelegramError:
            pass  # a person who never started the bot cannot be written to first
        # Their message may be gone already (removed as secret-shaped): then no quote.
        await self._safe(self._app.bot.send_message(
            message.chat.id, outcome.message,
            reply_parameters=ReplyParameters(message_id=message.message_id, allow_sending_without_reply=True)))

    async def _reply(self, message: Message, text: str, view: RequestView) -> None:
        sent = await self._safe(message.reply_text(text, do_quote=True))
        if sent is not None and not view.terminal:
            # A reply to our explanation still answers the same question.
            await self.service.remember_message(channel=self.name, message_key=f"{sent.chat.id}:{sent.message_id}",
                                                tenant_id=view.tenant_id, request_id=view.id)

    async def remove_message(self, message: Any) -> bool:
        if message is None:
            return False
        try:
            return bool(await message.delete())
        except RetryAfter as e:
            await asyncio.sleep(min(retry_seconds(e), 10))
            with contextlib.suppress(TelegramError):
                return bool(await message.delete())
        except TelegramError as e:
            # Without the right to delete others' messages in a group, Telegram refuses.
            self.log.warning("could not delete a chat reply: %s", scrub(str(e), self.settings))
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
            self.log.warning("telegram notice failed: %s", scrub(str(e), self.settings))
        return None

    async def _on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None or message.from_user is None:
            return
        token = (context.args or [""])[0] if message.chat.type == "private" else ""
        if token:
            await self._send_personal_link(message, token)
            return
        # Helps an operator fill in chat_ids and allowed_user_ids.
        await self._safe(message.reply_text(
            f"Handraise bot. Your Telegram user id is {message.from_user.id}; this chat's id is {message.chat.id}."))

    async def _send_personal_link(self, message: Message, token: str) -> None:
        """``/start <token>`` in private, from a group's "Open form": this person's own link, if they may answer."""
        found = await self.service.resolve_chat_action(token=token, channel=self.name)
        if found is None or found[2] != FORM_INTENT:
            await self._safe(message.reply_text(wording.text("button_invalid")))
            return
        tenant_id, request_id, _ = found
        sender = sender_of(message.from_user)
        outcome = await self.personal_link(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                           recipient=f"telegram user {sender.user_id}")
        if outcome.url is None:
            await self._safe(message.reply_text(outcome.message))
            return
        try:
            sent = await message.reply_text(
                outcome.message, reply_markup=InlineKeyboardMarkup([[InlineKeyboardButton("Open form",
                                                                                          url=outcome.url)]]),
                link_preview_options=LinkPreviewOptions(is_disabled=True))
        except BadRequest:
            # A URL button to a host Telegram deems invalid (a loopback public_url): the link as text.
            sent = await self._safe(message.reply_text(f"{outcome.message}\n{outcome.url}",
                                                       link_preview_options=LinkPreviewOptions(is_disabled=True)))
            return  # no button to take away later
        except TelegramError as e:
            self.log.warning("telegram: the personal link was not sent (%s)", type(e).__name__)
            return
        if sent is not None:
            entry = [sent.chat.id, sent.message_id]
            # Atomic: two taps at once (here or on another instance) each keep their message.
            await self.service.update_state(SENT, request_id,
                                            lambda kept: json.dumps([*json.loads(kept or "[]"), entry]),
                                            request_id=request_id)
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
            if view.terminal:  # ended while the link was on its way: withdraw has run already
                await self._strip_private_links(view)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        # The update is not logged: it may hold a reply to a private question.
        error = context.error
        self.log.error("telegram update handling failed: %s", type(error).__name__,
                       exc_info=(type(error), error, error.__traceback__) if error else None)


def sender_of(user: Any) -> Sender:
    """A Telegram user as core's Sender: ``telegram:<id>``, shown as "Alice Smith (@alice)"."""
    name = " ".join(p for p in (user.first_name, user.last_name) if p) or f"user {user.id}"
    if user.username:
        name += f" (@{user.username})"
    return Sender(str(user.id), f"telegram:{user.id}", name[:200])


async def _none() -> None:
    return None

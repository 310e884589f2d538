"""The Telegram connector (python-telegram-bot 22): questions as messages with buttons, replies or a form link.

Inbound answers (button taps, replies to a question: ``inbound.py``) go through core's submit with
the principal ``telegram:<user id>``; core validates, picks the one winner and journals.
Polling runs on exactly one instance (a PostgreSQL advisory lock); webhook mode works
on any instance behind ``/bots/telegram/webhook``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
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
from telegram.error import BadRequest, Forbidden, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    MessageHandler,
    filters,
)

from handraise.bots.telegram import doctor
from handraise.bots.telegram.errors import scrub, wrap
from handraise.bots.telegram.inbound import FORM_INTENT, TelegramInbound
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
from handraise.core.config import PersonSettings, Settings
from handraise.core.errors import ConfigError, ConnectorError
from handraise.core.personal import PrivateNote

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class TelegramConnector(TelegramInbound):
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
            settings.check_reachable()
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
            self._poller = TelegramPoller(updater=app.updater, leadership=self.leadership, settings=settings,
                                          log=self.log)
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
        await self.leadership.release(POLL_LOCK)

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
        text, markup, link, kept = await self._compose(request, chat_id)
        message, as_text = await self._send(bot, chat_id, text, markup, link)
        await self.chat_refs.remember_message(channel=self.name, message_key=f"{chat_id}:{message.message_id}",
                                            tenant_id=request.tenant_id, request_id=request.id)
        # What the message carries, kept with it: a tally edit shows the same buttons (show_votes).
        return {"chat_id": chat_id, "message_id": message.message_id, **kept,
                **({"link_as_text": True} if as_text else {})}

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
        # The message's own tokens and link (its ref): a vote mints nothing, and a tap on it still works.
        text, markup, link, _ = await self._compose(request, int(ref["chat_id"]), kept=ref)
        if not isinstance(markup, InlineKeyboardMarkup):
            markup = None
        if ref.get("link_as_text") and link is not None and markup is not None:
            text, markup = _link_as_text(text, markup, link)
        try:
            await bot.edit_message_text(text, chat_id=ref["chat_id"], message_id=ref["message_id"],
                                        reply_markup=markup, link_preview_options=LinkPreviewOptions(is_disabled=True))
        except BadRequest as e:
            if "not modified" not in str(e).lower():
                raise self._wrap(e) from e
        except TelegramError as e:
            raise self._wrap(e) from e

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
        await self.chat_refs.remember_message(channel=self.name, message_key=f"{chat_id}:{message.message_id}",
                                            tenant_id=request.tenant_id, request_id=request.id)
        return {"chat_id": chat_id, "message_id": message.message_id, "reminder": True}

    async def send_private(self, person: PersonSettings, *, tenant_id: str, note: PrivateNote) -> bool:
        """The note in the person's private chat with the bot (its id is their user id), the link on a button.
        False when Telegram will not let the bot write there: they never started the bot, blocked it, or
        Telegram knows no such chat."""
        if person.telegram is None:
            return False
        bot = await self._bot()
        markup = InlineKeyboardMarkup([[InlineKeyboardButton(note.button, url=note.url)]])
        try:
            await self._send(bot, person.telegram, note.text, markup, note.url, label=note.button)
        except ConnectorError as e:
            if not _unreachable(e.__cause__):
                raise
            # Only the kind of refusal: the text names no link, but nothing of the note belongs in a log.
            self.log.info("telegram: no private chat with the person (%s)", type(e.__cause__).__name__,
                          extra={"tenant_id": tenant_id})
            return False
        return True

    async def _compose(self, view: RequestView, chat_id: int, *, kept: dict[str, Any] | None = None
                       ) -> tuple[str, Any, str | None, dict[str, Any]]:
        """The message text, its markup, the form link it carries (if any), and what of its buttons its
        delivery keeps (``tokens``, ``link_id`` or ``form_token``). ``kept``: that of the message rendered
        again, whose buttons stay as they are."""
        kept = kept or {}
        keep: dict[str, Any] = {}
        style = presentation(view)
        rows: list[list[InlineKeyboardButton]] = []
        choices = button_choices(view)
        if choices:
            tokens = await self.chat_refs.create_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                            channel=self.name, values=[v for _, v in choices],
                                                            kept=kept.get("tokens"))
            rows = answer_rows(choices, tokens)
            keep["tokens"] = tokens
        hint = hint_text(view, style, tz=self.timezone(view.tenant_id))
        tally = self.tally_text(view)
        text, cut = compose_text(view, hint=f"{tally}\n{hint}" if tally else hint, outcome=None)
        wants_form = style in ("sensitive", "form_only", "form", "approval") or cut
        link = None
        if wants_form:
            link, form = await self._form_url(view, chat_id, kept=kept)
            keep |= form
            rows.append(form_button(link, style))
        if style == "free_text" and not cut:
            # Selective: in a group, the reply field opens for the people the message addresses only.
            return text, ForceReply(selective=True, input_field_placeholder="Your answer"), None, keep
        return text, InlineKeyboardMarkup(rows) if rows else None, link, keep

    async def _form_url(self, view: RequestView, chat_id: int, *, kept: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Where "Open form" leads, and what the delivery keeps of it: never a link that anyone in a group could use.

        In a private chat the chat is the person (its id is their user id): their own link, the one
        "Open form" in a group would get them too (``recipient_of``). In a group, a deep link to this
        bot (``t.me/<bot>?start=<token>``): the person who taps it sends ``/start <token>`` in
        private, and gets a link of their own there if they are on the allowlist. It works for
        people who never opened a private chat with the bot.
        """
        if chat_id > 0 and self.may_answer(view.tenant_id, str(chat_id)):
            sender = Sender(str(chat_id), self.principal(str(chat_id)), "")
            link_id = kept.get("link_id")
            outcome = await self.personal_link(tenant_id=view.tenant_id, request_id=view.id, sender=sender,
                                               kept=link_id if isinstance(link_id, str) else None)
            if outcome.url:
                return outcome.url, {"link_id": outcome.link_id}
        token, = await self.chat_refs.create_actions(tenant_id=view.tenant_id, request_id=view.id,
                                                        channel=self.name, values=[FORM_INTENT],
                                                        kept=[kept["form_token"]] if "form_token" in kept else None)
        assert self._app is not None
        return f"https://t.me/{self._app.bot.username}?start={token}", {"form_token": token}

    async def _send(self, bot: Any, chat_id: int, text: str, markup: Any, link: str | None, *,
                    label: str = "Form") -> tuple[Message, bool]:
        """The message posted, and whether its link (its button's ``label``) went into the text instead."""
        try:
            try:
                return await bot.send_message(chat_id, text, reply_markup=markup,
                                              link_preview_options=LinkPreviewOptions(is_disabled=True)), False
            except BadRequest as e:
                # Telegram refuses URL buttons to hosts it deems invalid (a loopback public_url):
                # keep the buttons that answer directly and put the link in the text instead.
                if link is None or "url" not in str(e).lower():
                    raise
                self.log.warning("telegram refused the form button; sending the link as text")
                text, markup = _link_as_text(text, markup, link, label=label)
                return await bot.send_message(chat_id, text, reply_markup=markup,
                                              link_preview_options=LinkPreviewOptions(is_disabled=True)), True
        except TelegramError as e:
            raise self._wrap(e) from e

    def _wrap(self, error: TelegramError) -> ConnectorError:
        return wrap(error, self.settings)


def _link_as_text(text: str, markup: InlineKeyboardMarkup, link: str, *,
                  label: str = "Form") -> tuple[str, InlineKeyboardMarkup | None]:
    """The message with its link in the text (after it, named as its button was), for a Telegram that
    refuses the link's button."""
    kept = [row for row in markup.inline_keyboard if not any(b.url for b in row)]
    room = MAX_TEXT - utf16_len(link) - utf16_len(label) - 20
    body = text if utf16_len(text) <= room else cut_utf16(text, room - 1) + "…"
    return f"{body}\n\n{label}: {link}", InlineKeyboardMarkup(kept) if kept else None


def _unreachable(error: BaseException | None) -> bool:
    """Whether Telegram refused a private message because the bot may not write to that person (403: never
    started, blocked, deactivated) or knows no such chat, rather than failing to deliver it."""
    if isinstance(error, Forbidden):
        return True
    return isinstance(error, BadRequest) and "chat not found" in str(error).lower()

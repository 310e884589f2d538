"""What people do in Telegram: tap a button, reply to a question, ``/start`` the bot for a personal link.

Each goes through core's one answer path (``ChatConnector.answer_from_chat``) or the rating buttons;
this module adds only Telegram's ways of answering back: a callback answer only the tapper sees, a
quoted reply, a private message to a stranger, and the buttons of private link messages taken away
once their request is over. :class:`TelegramConnector` is this plus posting and its lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
    Update,
)
from telegram.error import BadRequest, RetryAfter, TelegramError
from telegram.ext import Application, ContextTypes

from handraise.bots.telegram.errors import retry_seconds, scrub
from handraise.bots.telegram.messages import cut_utf16, utf16_len
from handraise.bots.telegram.settings import TelegramSettings
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import ChatConnector, Sender
from handraise.core.outcomes import AnswerOutcome
from handraise.core.ratings import rating_value

# Durable state: request id -> the private messages with a form link sent about it (their buttons go with it).
SENT = "telegram.sent"
# What a "Open form" button's token stands for: a personal link, handed out in a private chat.
FORM_INTENT: dict[str, Any] = {"form": True}

# What Telegram shows of a tap's answer at most (answerCallbackQuery: 0-200 characters).
MAX_QUERY_ANSWER = 200


class TelegramInbound(ChatConnector[TelegramSettings]):
    """The handlers python-telegram-bot calls for updates, and the notices they send."""

    _app: Application | None = None  # set by TelegramConnector.start

    async def _on_callback(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None or query.from_user is None:
            return
        found = await self.chat_refs.resolve_action(token=query.data or "", channel=self.name)
        message = query.message
        if found is not None and message is not None:
            # The button must sit on a message posted about the same request. A message not
            # recorded yet (a tap faster than the bot's own bookkeeping) has nothing to contradict.
            posted = await self.chat_refs.lookup_message(channel=self.name,
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
        found = await self.chat_refs.lookup_message(
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
            await self.chat_refs.remember_message(channel=self.name, message_key=f"{sent.chat.id}:{sent.message_id}",
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
        if utf16_len(text) > MAX_QUERY_ANSWER:  # Telegram refuses a longer one, and the person would hear nothing
            text = cut_utf16(text, MAX_QUERY_ANSWER - 1) + "…"
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

    def recipient_of(self, sender: Sender) -> str:
        """The person, whichever chat they asked from: a private chat's id is its user's id, so the link in
        their private chat and the one a group's "Open form" sends them there are one."""
        return f"telegram user {sender.user_id}"

    def recipient_known_as(self, sender: Sender) -> tuple[str, ...]:
        # What links minted in a private chat were labelled before (its chat id, which is the user's id).
        return (f"telegram chat {sender.user_id}",)

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
        found = await self.chat_refs.resolve_action(token=token, channel=self.name)
        if found is None or found[2] != FORM_INTENT:
            await self._safe(message.reply_text(wording.text("button_invalid")))
            return
        tenant_id, request_id, _ = found
        sender = sender_of(message.from_user)
        outcome = await self.personal_link(tenant_id=tenant_id, request_id=request_id, sender=sender)
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
            await self.state.update(SENT, request_id,
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

    # -- private link messages -------------------------------------------------

    async def _strip_private_links(self, view: RequestView) -> None:
        """The private messages that carried a personal link lose their button: the request is over."""
        kept = await self.state.get(SENT, view.id)
        if not kept:
            return
        assert self._app is not None
        for chat_id, message_id in json.loads(kept):
            try:
                await self._app.bot.edit_message_reply_markup(chat_id=chat_id, message_id=message_id,
                                                              reply_markup=None)
            except TelegramError as e:  # "not modified" (done already), or the person deleted it
                self.log.debug("telegram: a private link message kept its state (%s)", type(e).__name__)


def sender_of(user: Any) -> Sender:
    """A Telegram user as core's Sender: ``telegram:<id>``, shown as "Alice Smith (@alice)"."""
    name = " ".join(p for p in (user.first_name, user.last_name) if p) or f"user {user.id}"
    if user.username:
        name += f" (@{user.username})"
    return Sender(str(user.id), f"telegram:{user.id}", name[:200])


async def _none() -> None:
    return None

"""The fake Telegram Bot API against the real python-telegram-bot 22 client: proof that
tests built on it exercise the wire format a connector really meets."""

from __future__ import annotations

import asyncio
import datetime as dtm
import hmac
import time
import warnings
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import telegram
from aiohttp import web
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter
from telegram.warnings import PTBDeprecationWarning
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.fakes.telegram import FakeTelegram, Upload

CHAT = 4242  # a private chat: its id is the user's id
KEYBOARD = InlineKeyboardMarkup(
    [[InlineKeyboardButton("Approve", callback_data="req:1:yes"),
      InlineKeyboardButton("Reject", callback_data="req:1:no")]])


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        fake.started.add(CHAT)  # the person wrote to the bot first, so it may write to them
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[telegram.Bot]:
    async with telegram.Bot(tg.token, base_url=tg.base_url,
                            base_file_url=tg.base_file_url) as client:
        yield client


def build_app(tg: FakeTelegram, *, updater: bool = True) -> Application:
    builder = (ApplicationBuilder().token(tg.token)
               .base_url(tg.base_url).base_file_url(tg.base_file_url))
    if not updater:
        builder = builder.updater(None)
    return builder.build()


def retry_seconds(error: RetryAfter) -> float:
    # An int or a timedelta depending on PTB_TIMEDELTA; reading the int form warns.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        period = error.retry_after
    return period.total_seconds() if isinstance(period, dtm.timedelta) else float(period)


async def test_application_initialize_calls_get_me(tg: FakeTelegram) -> None:
    app = build_app(tg)
    await app.initialize()
    try:
        assert app.bot.username == "handraise_test_bot"
        assert app.bot.id == 123456789
        [call] = tg.calls_of("getMe")
        assert call.ok and call.result["is_bot"] is True
    finally:
        await app.shutdown()


async def test_send_message_records_decoded_reply_markup(tg: FakeTelegram,
                                                         bot: telegram.Bot) -> None:
    sent = await bot.send_message(CHAT, "Deploy to prod?", reply_markup=KEYBOARD)

    call = await tg.wait_for_call("sendMessage")
    assert call.params["chat_id"] == CHAT  # decoded from the form string
    assert call.params["reply_markup"] == {"inline_keyboard": [[
        {"text": "Approve", "callback_data": "req:1:yes"},
        {"text": "Reject", "callback_data": "req:1:no"}]]}
    assert call.result["message_id"] == sent.message_id
    assert sent.reply_markup == KEYBOARD  # echoed back as Telegram does
    stored = tg.message(CHAT, sent.message_id)
    assert stored.text == "Deploy to prod?" and stored.from_bot
    assert stored.button_data() == ["req:1:yes", "req:1:no"]


async def test_message_ids_increase_per_chat(tg: FakeTelegram, bot: telegram.Bot) -> None:
    first = await bot.send_message(CHAT, "one")
    tg.push_update(tg.make_text_message(chat_id=CHAT, user_id=CHAT, text="two"))
    third = await bot.send_message(CHAT, "three")
    other = await bot.send_message(-1001234, "elsewhere")

    assert (first.message_id, third.message_id) == (1, 3)
    assert other.message_id == 1 and other.chat.type == "supergroup"
    assert [m.text for m in tg.messages(CHAT)] == ["one", "two", "three"]


async def test_callback_reaches_handler_through_polling(tg: FakeTelegram) -> None:
    app = build_app(tg)
    clicked = asyncio.Event()
    seen: dict[str, Any] = {}

    async def on_click(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        seen.update(data=query.data, user=query.from_user.id,
                    message_id=query.message.message_id, text=query.message.text)
        await query.answer("Recorded")
        await query.edit_message_text(f"Answered: {query.data}")
        clicked.set()

    app.add_handler(CallbackQueryHandler(on_click))
    async with app:
        await app.start()
        await app.updater.start_polling(poll_interval=0)
        try:
            sent = await app.bot.send_message(CHAT, "Deploy?", reply_markup=KEYBOARD)
            await tg.wait_until_polling()
            tg.push_update(tg.make_callback(chat_id=CHAT, user_id=CHAT,
                                            message_id=sent.message_id, data="req:1:yes"))
            await asyncio.wait_for(clicked.wait(), 5)
        finally:
            await app.updater.stop()
            await app.stop()

    assert seen == {"data": "req:1:yes", "user": CHAT, "message_id": sent.message_id,
                    "text": "Deploy?"}
    answer = await tg.wait_for_call("answerCallbackQuery")
    assert answer.params["text"] == "Recorded"
    stored = tg.message(CHAT, sent.message_id)
    assert stored.text == "Answered: req:1:yes"
    assert stored.reply_markup is None  # editMessageText without markup drops the keyboard
    assert stored.history == ["Deploy?"]
    assert tg.calls_of("deleteWebhook"), "polling starts by deleting the webhook"
    assert tg.pending_updates == []  # the updater confirmed the offset on stop


async def test_reply_message_reaches_message_handler(tg: FakeTelegram) -> None:
    app = build_app(tg)
    received: asyncio.Queue[Update] = asyncio.Queue()

    async def on_text(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await received.put(update)

    app.add_handler(MessageHandler(filters.TEXT & filters.REPLY, on_text))
    async with app:
        await app.start()
        await app.updater.start_polling(poll_interval=0)
        try:
            question = await app.bot.send_message(CHAT, "Why?")
            tg.add_user(77, first_name="Ada", username="ada")
            tg.push_update(tg.make_text_message(chat_id=CHAT, user_id=77, text="because",
                                                reply_to_message_id=question.message_id))
            update = await asyncio.wait_for(received.get(), 5)
        finally:
            await app.updater.stop()
            await app.stop()

    assert update.message.text == "because"
    assert update.message.from_user.username == "ada"
    assert update.message.reply_to_message.message_id == question.message_id
    assert update.message.reply_to_message.from_user.is_bot


async def test_get_updates_long_poll_and_offset(tg: FakeTelegram, bot: telegram.Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=5))
    await tg.wait_until_polling()
    assert not poll.done()
    first = tg.make_text_message(chat_id=CHAT, user_id=CHAT, text="hello")
    started = time.monotonic()
    tg.push_update(first)
    [update] = await poll
    assert update.update_id == first["update_id"] and update.message.text == "hello"
    assert time.monotonic() - started < 2  # woken by the push, not by the timeout

    second = tg.make_text_message(chat_id=CHAT, user_id=CHAT, text="again")
    tg.push_update(second)
    assert [u.update_id for u in await bot.get_updates(offset=first["update_id"] + 1)] == [
        second["update_id"]]
    assert tg.pending_updates == [second]  # the offset confirmed the first one

    started = time.monotonic()
    assert await bot.get_updates(offset=second["update_id"] + 1,
                                 timeout=dtm.timedelta(seconds=0.3)) == ()
    assert time.monotonic() - started >= 0.25


async def test_not_modified_is_bad_request(tg: FakeTelegram, bot: telegram.Bot) -> None:
    sent = await bot.send_message(CHAT, "Same", reply_markup=KEYBOARD)
    with pytest.raises(BadRequest, match="Message is not modified"):
        await bot.edit_message_text("Same", chat_id=CHAT, message_id=sent.message_id,
                                    reply_markup=KEYBOARD)
    with pytest.raises(BadRequest, match="Message is not modified"):
        await bot.edit_message_reply_markup(chat_id=CHAT, message_id=sent.message_id,
                                            reply_markup=KEYBOARD)
    assert tg.calls_of("editMessageText")[0].status == 400

    await bot.edit_message_reply_markup(chat_id=CHAT, message_id=sent.message_id)
    assert tg.message(CHAT, sent.message_id).reply_markup is None


async def test_delete_message(tg: FakeTelegram, bot: telegram.Bot) -> None:
    sent = await bot.send_message(CHAT, "Temporary")
    assert await bot.delete_message(CHAT, sent.message_id) is True
    assert tg.message(CHAT, sent.message_id).deleted
    with pytest.raises(BadRequest, match="Message to delete not found"):
        await bot.delete_message(CHAT, sent.message_id)
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("late", chat_id=CHAT, message_id=sent.message_id)


async def test_answer_callback_query_only_once(tg: FakeTelegram, bot: telegram.Bot) -> None:
    sent = await bot.send_message(CHAT, "Pick", reply_markup=KEYBOARD)
    update = Update.de_json(tg.make_callback(chat_id=CHAT, user_id=CHAT,
                                             message_id=sent.message_id, data="req:1:no"), bot)
    assert update.callback_query.message.reply_markup == KEYBOARD
    assert await update.callback_query.answer() is True
    with pytest.raises(BadRequest, match="Query is too old"):
        await update.callback_query.answer()


async def test_rate_limit_is_retry_after(tg: FakeTelegram, bot: telegram.Bot) -> None:
    tg.fail_next("sendMessage", status=429, retry_after=1)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(CHAT, "hi")
    assert retry_seconds(caught.value) == 1
    assert tg.calls_of("sendMessage")[0].response == {
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1}}
    assert tg.messages(CHAT) == []  # a failed call has no effect

    await bot.send_message(CHAT, "hi")  # the fault was for one call only
    assert [m.text for m in tg.messages(CHAT)] == ["hi"]


async def test_injected_server_and_client_errors(tg: FakeTelegram, bot: telegram.Bot) -> None:
    tg.fail_next("sendMessage", status=500, count=2)
    tg.fail_next("sendMessage", status=400, description="Bad Request: chat not found")
    for _ in range(2):
        with pytest.raises(NetworkError, match="Internal Server Error"):
            await bot.send_message(CHAT, "hi")
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.send_message(CHAT, "hi")
    await bot.send_message(CHAT, "hi")
    assert [c.status for c in tg.calls_of("sendMessage")] == [500, 500, 400, 200]


async def test_telegram_limits(tg: FakeTelegram, bot: telegram.Bot) -> None:
    await bot.send_message(CHAT, "x" * 4096)
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(CHAT, "x" * 4097)
    with pytest.raises(BadRequest, match="Message is too long"):  # UTF-16 code units
        await bot.send_message(CHAT, "\N{THUMBS UP SIGN}" * 2049)
    sent = await bot.send_message(CHAT, "short")
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.edit_message_text("y" * 4097, chat_id=CHAT, message_id=sent.message_id)

    too_long = InlineKeyboardMarkup([[InlineKeyboardButton("x", callback_data="d" * 65)]])
    with pytest.raises(BadRequest, match="Button_data_invalid"):
        await bot.send_message(CHAT, "pick", reply_markup=too_long)
    with pytest.raises(BadRequest, match="Message to be replied not found"):
        await bot.send_message(CHAT, "re", reply_to_message_id=999)


async def test_html_parse_mode(tg: FakeTelegram, bot: telegram.Bot) -> None:
    sent = await bot.send_message(CHAT, "<b>Deploy</b> a &lt; b?", parse_mode="HTML")
    assert sent.text == "Deploy a < b?"
    assert tg.message(CHAT, sent.message_id).raw_text == "<b>Deploy</b> a &lt; b?"
    with pytest.raises(BadRequest, match="Can't parse entities"):
        await bot.send_message(CHAT, "a < b", parse_mode="HTML")  # unescaped user text
    with pytest.raises(BadRequest, match='unsupported start tag "script"'):
        await bot.send_message(CHAT, "<script>x</script>", parse_mode="HTML")


async def test_webhook_delivery_with_secret(tg: FakeTelegram, bot: telegram.Bot) -> None:
    received: list[Update] = []

    async def webhook(request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), b"s3cret-token"):
            return web.Response(status=403)
        received.append(Update.de_json(await request.json(), bot))
        return web.Response()

    receiver = web.Application()
    receiver.router.add_post("/bots/telegram/webhook", webhook)
    runner = web.AppRunner(receiver, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/bots/telegram/webhook"
    try:
        assert await bot.set_webhook(url, secret_token="s3cret-token") is True
        assert (tg.webhook_url, tg.webhook_secret) == (url, "s3cret-token")
        with pytest.raises(Conflict, match="webhook is active"):
            await bot.get_updates()

        update = tg.make_text_message(chat_id=CHAT, user_id=CHAT, text="via webhook")
        assert await tg.deliver_webhook(update) == 200
        assert await tg.post_webhook(url, update, secret_token="wrong") == 403
        assert await tg.post_webhook(url, update) == 403
    finally:
        await runner.cleanup()

    assert [u.message.text for u in received] == ["via webhook"]
    assert (await bot.get_webhook_info()).url == url
    assert await bot.delete_webhook() is True and tg.webhook_url is None


async def test_json_bodies_and_unknown_methods(tg: FakeTelegram, bot: telegram.Bot) -> None:
    async with aiohttp.ClientSession() as session:
        markup = {"inline_keyboard": [[{"text": "Ok", "callback_data": "ok"}]]}
        async with session.post(f"{tg.base_url}{tg.token}/sendmessage",
                                json={"chat_id": CHAT, "text": "json", "reply_markup": markup}
                                ) as resp:
            body = await resp.json()
        async with session.post(f"{tg.base_url}{tg.token}/noSuchMethod",
                                data={"chat_id": "1"}) as resp:
            missing = resp.status, await resp.json()
    assert body["ok"] and body["result"]["reply_markup"] == markup
    assert tg.calls_of("sendMessage")[0].params["reply_markup"] == markup
    assert missing == (404, {"ok": False, "error_code": 404,
                             "description": "Not Found: method not found"})
    assert tg.calls_of("noSuchMethod")[0].params == {"chat_id": 1}

    # Uploads arrive multipart; the fake records them even for a method it does not model.
    with pytest.raises(InvalidToken, match="method not found"):
        await bot.send_document(CHAT, document=b"report body", filename="report.txt")
    upload = tg.calls_of("sendDocument")[0].params["document"]
    assert isinstance(upload, Upload)
    assert (upload.filename, upload.data) == ("report.txt", b"report body")


async def test_wrong_token_is_refused_and_not_recorded(tg: FakeTelegram) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{tg.base_url}not-a-token/getMe") as resp:
            assert (resp.status, (await resp.json())["description"]) == (404, "Not Found")
    with pytest.raises(InvalidToken, match="rejected by the server"):
        async with telegram.Bot("999:wrong-token", base_url=tg.base_url):
            pass  # initialize calls getMe
    assert tg.calls == []


async def test_wait_for_call_sees_past_and_future_calls(tg: FakeTelegram,
                                                        bot: telegram.Bot) -> None:
    await bot.send_message(CHAT, "first")
    assert (await tg.wait_for_call("sendMessage")).params["text"] == "first"

    waiter = asyncio.create_task(tg.wait_for_call(
        "sendMessage", predicate=lambda c: c.params["text"] == "second"))
    await bot.send_message(CHAT, "second")
    assert (await waiter).result["message_id"] == 2

    with pytest.raises(TimeoutError, match="no matching sendChatAction call"):
        await tg.wait_for_call("sendChatAction", timeout=0.05)
    await bot.send_chat_action(CHAT, "typing")
    assert (await tg.wait_for_call("sendChatAction")).params == {"chat_id": CHAT,
                                                                "action": "typing"}


async def test_a_bot_cannot_write_first_to_a_person(tg: FakeTelegram, bot: telegram.Bot) -> None:
    with pytest.raises(telegram.error.Forbidden):
        await bot.send_message(5555, "hello")
    tg.push_update(tg.make_text_message(chat_id=5555, user_id=5555, text="/start"))
    assert (await bot.send_message(5555, "hello")).text == "hello"

"""The Telegram connector end to end: the real app and HTTP API, the real python-telegram-bot client,
and the wire-level fake Bot API playing Telegram's servers and its users."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from conftest import Api, base_config, question, running_app, settings_from, sweeper_held, until

from handraise.bots.telegram import TelegramConnector
from handraise.bots.telegram.messages import CUT_NOTE, MAX_TEXT, SENSITIVE_TEXT, utf16_len
from handraise.core.appkeys import CONNECTORS, DELIVERIES, DISPATCHER, SERVICE
from handraise.core.config import Settings
from handraise.core.errors import AlreadyAnsweredError, ConfigError, GoneError
from tests.bots.contract import Posted
from tests.bots.contract_telegram import ALLOWED, CHAT, GLOBEX_USER, STRANGER, TelegramDriver
from tests.fakes.telegram import SECRET_HEADER, Call

WEBHOOK_SECRET = "whsec_0123456789abcdef"


@contextlib.asynccontextmanager
async def telegram(url: str, **overrides: Any) -> AsyncIterator[tuple[TelegramDriver, Api]]:
    driver = TelegramDriver(**overrides)
    async with driver.running(url) as api:
        yield driver, api


def ask(uid: str, **extra: Any) -> dict[str, Any]:
    return question(uid, channels=["telegram"], **extra)


async def get(api: Api, request_id: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"/v1/requests/{request_id}")
    assert status == 200, body
    return body


def sent_call(driver: TelegramDriver, posted: Posted) -> Call:
    return next(c for c in driver.tg.calls_of("sendMessage")
                if c.ok and c.result["message_id"] == posted.ref["message_id"]
                and c.params["chat_id"] == posted.ref["chat_id"])


async def form_token(driver: TelegramDriver, posted: Posted) -> str:
    """The allowed human's own form link, reached through "Open form" (a deep link in a group)."""
    url = await driver.open_form(posted)
    assert url is not None, driver.last_private.params
    return url.rsplit("/f/", 1)[1]


# -- answers by button, by reply, by form -------------------------------------------------


@pytest.mark.parametrize(("extra", "choice", "expected", "shown"), [
    ({"kind": "approval"}, "reject", {"decision": "reject"}, "❌ Rejected by Alice (@alice) via Telegram"),
    ({"kind": "choice", "schema": {"type": "boolean"}}, "no", False, "Answered by Alice (@alice) via Telegram"),
    ({"schema": {"type": "string", "enum": ["red", "green", "blue"]}}, "green", "green",
     "Answered by Alice (@alice) via Telegram"),
])
async def test_button_answers(sqlite_url: str, extra: dict[str, Any], choice: str, expected: Any, shown: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("b-1", **extra))
        posted = await driver.posted(api, request)
        data = [b for row in sent_call(driver, posted).params["reply_markup"]["inline_keyboard"]
                for b in row if "callback_data" in b]
        # Server-side tokens, never the request id; well within Telegram's 64 bytes.
        assert all(request["id"] not in b["callback_data"] and len(b["callback_data"].encode()) <= 64 for b in data)

        action = await driver.press(posted, choice)
        assert "recorded" in (await driver.callback_answer(action)).params["text"]
        done = await api.wait(request["id"])
        assert (done["response"], done["answered_by"], done["answered_via"]) == (expected, f"telegram:{ALLOWED}",
                                                                                 "telegram")
        await driver.assert_withdrawn(posted, shown)
        if choice != "reject":  # the answer, under its field's title
            assert f"Answer: {choice}" in (driver.message(posted).text or "")


@pytest.mark.parametrize(("extra", "text", "expected"), [
    ({}, "  Friday, after lunch ", "Friday, after lunch"),
    ({"schema": {"type": "integer", "minimum": 1, "maximum": 10}}, "7", 7),
    ({"schema": {"type": "object", "required": ["name"],
                 "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}},
     "name: Bob\nage: 30", {"name": "Bob", "age": 30}),
    ({"kind": "approval"}, "reject because too risky", {"decision": "reject", "reason": "too risky"}),
])
async def test_reply_answers(sqlite_url: str, extra: dict[str, Any], text: str, expected: Any) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("r-1", **extra))
        posted = await driver.posted(api, request)
        markup = sent_call(driver, posted).params.get("reply_markup") or {}
        if not extra:
            assert markup.get("force_reply") is True  # free text asks for a reply
        else:
            assert markup.get("inline_keyboard")

        action = await driver.reply(posted, text)
        assert (await driver.bot_reply(action)).params["text"] == "Thanks, your answer was recorded."
        done = await api.wait(request["id"])
        assert (done["status"], done["response"], done["answered_by"]) == ("answered", expected,
                                                                           f"telegram:{ALLOWED}")
        await driver.assert_withdrawn(posted, "by Alice (@alice) via Telegram")


async def test_form_answer_with_one_link_per_person_whichever_chat_they_tap_in(sqlite_url: str) -> None:
    second_chat = -1009999
    tenants = {"acme": {"chat_ids": [CHAT, second_chat], "allowed_user_ids": [ALLOWED]}}
    async with telegram(sqlite_url, tenants=tenants) as (driver, api):
        schema = {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
                  "required": ["host", "port"]}
        request = await api.create(ask("f-1", schema=schema))
        await api.app[DISPATCHER].idle()
        rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])
        posts = [Posted(request["id"], r.target, r.ref) for r in rows]
        tokens = {await form_token(driver, p) for p in posts}
        # "Open form" in either group: the same person holds one live link, minted once.
        assert len(tokens) == 1
        assert len([e for e in await api.journal(request["id"]) if e["event"] == "link_minted"]) == 1

        await api.app[SERVICE].submit_link(token=tokens.pop(), response={"host": "db1", "port": 5432})
        done = await api.wait(request["id"])
        # The link was this person's: the answer is theirs, through Telegram.
        assert (done["answered_via"], done["answered_by"]) == ("telegram", f"telegram:{ALLOWED}")
        for posted in posts:
            await driver.assert_withdrawn(posted, "Answered by Alice (@alice) via Telegram")
            text = driver.message(posted).text or ""
            assert "Host: db1\nPort: 5432" in text  # field titles, in schema order


async def test_one_person_holds_one_link_from_their_private_chat_and_a_groups_deep_link(storage_url: str) -> None:
    # The question reaches the group and Alice's private chat (whose id is her user id): the link on the
    # private message and the one "Open form" in the group sends her are one link, labelled by her.
    tenants = {"acme": {"chat_ids": [CHAT, ALLOWED], "allowed_user_ids": [ALLOWED]}}
    async with telegram(storage_url, tenants=tenants) as (driver, api):
        driver.tg.started.add(ALLOWED)  # she started the bot once: it may write to her
        request = await api.create(ask("one-1", schema={"type": "object", "properties": {"host": {"type": "string"}}}))
        await api.app[DISPATCHER].idle()
        rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])
        posts = {r.ref["chat_id"]: Posted(request["id"], r.target, r.ref) for r in rows}
        assert set(posts) == {CHAT, ALLOWED}
        in_private = driver.button(posts[ALLOWED], "open form")["url"]
        assert "/f/" in in_private  # her own link, on the message itself
        assert await driver.open_form(posts[CHAT]) == in_private
        minted = [e for e in await api.journal(request["id"]) if e["event"] == "link_minted"]
        assert [(e["data"]["for"], e["data"]["recipient"]) for e in minted] == [
            (f"telegram:{ALLOWED}", f"telegram user {ALLOWED}")]


async def test_a_link_minted_under_the_private_chats_old_label_is_handed_back(sqlite_url: str) -> None:
    # Releases before labelled a private chat's link "telegram chat <id>": a live one is still hers.
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("old-1", schema={"type": "object", "properties": {"host": {"type": "string"}}}))
        posted = await driver.posted(api, request)
        old = await api.app[SERVICE].mint_link(tenant_id="acme", request_id=request["id"], principal="telegram:bot",
                                               recipient=f"telegram chat {ALLOWED}",
                                               for_principal=f"telegram:{ALLOWED}")
        assert await driver.open_form(posted) == old.url
        assert len([e for e in await api.journal(request["id"]) if e["event"] == "link_minted"]) == 1


async def test_invalid_reply_is_explained_and_the_request_stays_pending(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("i-1", schema={"type": "integer", "minimum": 1, "maximum": 10}))
        posted = await driver.posted(api, request)

        explained = await driver.bot_reply(await driver.reply(posted, "42"), containing="not valid")
        assert "42" not in explained.params["text"]  # the value is not echoed
        assert (await get(api, request["id"]))["status"] == "pending"
        assert [e["event"] for e in await api.journal(request["id"])].count("invalid_attempt") == 1

        # A reply to the explanation still answers the same question.
        await driver.reply(posted, "5", to_message_id=explained.result["message_id"])
        assert (await api.wait(request["id"]))["response"] == 5


async def test_unknown_field_lines_are_explained_not_dropped(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "nick": {"type": "string"}}}
        request = await api.create(ask("i-2", schema=schema))
        posted = await driver.posted(api, request)

        explained = await driver.bot_reply(await driver.reply(posted, "name: Bob\ncolour: red"),
                                           containing="unknown field")
        assert "colour" in explained.params["text"]
        assert (await get(api, request["id"]))["status"] == "pending"


# -- who may answer, and when ------------------------------------------------------------------


async def test_strangers_and_other_tenants_users_are_refused(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("s-1", kind="approval"))
        posted = await driver.posted(api, request)

        for user in (STRANGER, GLOBEX_USER):
            press = await driver.press(posted, "approve", user_id=user)
            answer = await driver.callback_answer(press)
            assert answer.params["text"] == "You are not authorized to answer this."
            reply = await driver.reply(posted, "approve", user_id=user)
            assert "not authorized" in (await driver.bot_reply(reply)).params["text"]
        await api.app[DISPATCHER].idle()

        body = await get(api, request["id"])
        assert body["status"] == "pending"
        refused = [e for e in await api.journal(request["id"]) if e["event"] == "answer_refused"]
        assert {e["principal"] for e in refused} == {f"telegram:{STRANGER}", f"telegram:{GLOBEX_USER}"}
        assert driver.button(posted, "approve")  # the buttons are still there


async def test_tap_on_a_resolved_request(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        answered = await api.create(ask("t-1", kind="approval"))
        expiring = await api.create(ask("t-2", kind="approval", timeout_seconds=600))
        posts = [await driver.posted(api, r) for r in (answered, expiring)]
        data = [driver.button(p, "approve")["callback_data"] for p in posts]

        assert (await api.submit("t-1", {"decision": "reject"}))[0] == 200
        service = api.app[SERVICE]
        service.clock = lambda: time.time() + 3600  # past t-2's deadline once it was posted, without waiting
        await service.sweep()
        service.clock = time.time
        assert (await api.wait(expiring["id"], timeout=30))["status"] == "expired"
        await api.app[DISPATCHER].idle()
        for posted, token, text in zip(posts, data, ("This was already answered.", "This question expired.")):
            update = driver.tg.make_callback(chat_id=CHAT, user_id=ALLOWED, message_id=posted.ref["message_id"],
                                             data=token)
            driver.push(update)
            call = await driver.tg.wait_for_call(
                "answerCallbackQuery",
                predicate=lambda c, q=update["callback_query"]["id"]: str(c.params["callback_query_id"]) == q)
            assert call.params["text"] == text
        assert (await get(api, answered["id"]))["response"] == {"decision": "reject"}


async def test_taps_past_the_deadline_before_the_sweep_are_told_it_expired(storage_url: str) -> None:
    # The deadline has passed and the sweeper has not run: each way in applies it there and then, and the
    # person reads what they would after the sweep. Expired once, and no link minted for it.
    form = {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}
    async with telegram(storage_url) as (driver, api):
        button = await api.create(ask("late-1", kind="approval", timeout_seconds=600))
        typed = await api.create(ask("late-2", schema=form, timeout_seconds=600))
        linked = await api.create(ask("late-3", schema=form, timeout_seconds=600))
        # Ended by its policy: nobody answered it, so to a late person the time ran out too.
        rejected = await api.create(ask("late-4", kind="approval", timeout_seconds=600, on_timeout="reject"))
        posts = [await driver.posted(api, r) for r in (button, typed, linked, rejected)]
        again = driver.button(posts[0], "reject")["callback_data"]  # the buttons go once it has expired
        async with sweeper_held(api):
            api.app[SERVICE].clock = lambda: time.time() + 3600
            told = [(await driver.callback_answer(await driver.press(posts[0], "approve"))).params["text"],
                    (await driver.bot_reply(await driver.reply(posts[1], "host: db1"))).params["text"]]
            assert await driver.open_form(posts[2]) is None
            assert driver.last_private is not None
            told.append(driver.last_private.params["text"])
            told.append((await driver.callback_answer(await driver.press(posts[3], "approve"))).params["text"])
            # A tap on the buttons still shown finds it expired as it is now.
            update = driver.tg.make_callback(chat_id=CHAT, user_id=ALLOWED, message_id=posts[0].ref["message_id"],
                                             data=again)
            driver.push(update)
            told.append((await driver.tg.wait_for_call("answerCallbackQuery", predicate=lambda c: str(
                c.params["callback_query_id"]) == update["callback_query"]["id"])).params["text"])
        assert told == ["This question expired."] * 5
        for request in (button, typed, linked, rejected):
            events = [e["event"] for e in await api.journal(request["id"])]
            assert "link_minted" not in events
            ended = "answered" if request is rejected else "expired"
            assert (events.count("expired"), events.count("answered")) == ((0, 1) if ended == "answered" else (1, 0))
        assert (await get(api, button["id"]))["status"] == "expired"
        late = await get(api, rejected["id"])
        assert (late["status"], late["timed_out"], late["response"]["decision"]) == ("answered", True, "reject")


async def test_forged_or_misplaced_callback_data_is_refused(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        first = await driver.posted(api, await api.create(ask("x-1", kind="approval")))
        second_request = await api.create(ask("x-2", kind="approval"))
        second = await driver.posted(api, second_request)

        forged = driver.tg.make_callback(chat_id=CHAT, user_id=ALLOWED, message_id=second.ref["message_id"],
                                         data=f"{second_request['id']}:approve"[:64])
        # A real token of the first request, replayed on the second request's message.
        misplaced = driver.tg.make_callback(chat_id=CHAT, user_id=ALLOWED, message_id=second.ref["message_id"],
                                            data=driver.button(first, "approve")["callback_data"])
        for update in (forged, misplaced):
            driver.push(update)
            call = await driver.tg.wait_for_call(
                "answerCallbackQuery",
                predicate=lambda c, q=update["callback_query"]["id"]: str(c.params["callback_query_id"]) == q)
            assert call.params["text"] == "This button is no longer valid."
        assert (await get(api, second_request["id"]))["status"] == "pending"
        assert (await get(api, first.request_id))["status"] == "pending"


# -- sensitive requests ------------------------------------------------------------------------


async def test_sensitive_request_is_generic_and_chat_replies_are_deleted(sqlite_url: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "493817"
    async with telegram(sqlite_url) as (driver, api):
        question = "Enter the code we texted to +1 555 0100"
        request = await api.create(ask("p-1", message_for_user=question, sensitive=True,
                                       schema={"type": "string", "pattern": "^[0-9]{6}$"}))
        posted = await driver.posted(api, request)
        message = driver.message(posted)
        assert message.text is not None and message.text.startswith(SENSITIVE_TEXT)
        assert "555" not in message.text
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        assert [b["text"] for b in buttons] == ["Open form"] and "url" in buttons[0]

        await driver.assert_reply_removed(await driver.reply(posted, secret))
        stranger = await driver.reply(posted, "123456", stranger=True)
        await driver.tg.wait_for_call("deleteMessage",
                                      predicate=lambda c: c.params["message_id"] == stranger.handle["message_id"])
        await until(lambda: len([c for c in driver.tg.calls_of("sendMessage")
                                 if c.params["text"].startswith("Your reply")]) == 1)
        notices = [c for c in driver.tg.calls_of("sendMessage") if c.params["text"].startswith("Your reply")]
        # No notice carries a button that could outlive the request: the question's "Open form" is the way in.
        assert [bool(c.params.get("reply_markup")) for c in notices] == [False]
        # The stranger is told once that they may not answer (their reply is gone all the same).
        await driver.tg.wait_for_call("sendMessage", predicate=lambda c: "not authorized" in c.params["text"])
        assert (await get(api, request["id"]))["status"] == "pending"

        token = await form_token(driver, posted)
        await api.app[SERVICE].submit_link(token=token, response="271828")
        done = await api.wait(request["id"])
        assert done["response"] == "271828"
        await driver.assert_withdrawn(posted, "Answered by Alice (@alice) via Telegram")
        assert "271828" not in (driver.message(posted).text or "")

        entries = await api.journal(request["id"])
        assert "chat_reply_refused" in [e["event"] for e in entries]
        assert secret not in str(entries) and "271828" not in str(entries)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert secret not in logged and "271828" not in logged
    assert driver.tg.token not in logged


async def test_secret_shaped_reply_to_an_ordinary_question_is_refused(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("p-2"))
        posted = await driver.posted(api, request)
        action = await driver.reply(posted, "here: ghp_0123456789abcdefghijABCDEFGHIJ012345")
        await driver.tg.wait_for_call("deleteMessage",
                                      predicate=lambda c: c.params["message_id"] == action.handle["message_id"])
        await driver.tg.wait_for_call("sendMessage", predicate=lambda c: "looked like a secret" in c.params["text"])
        assert (await get(api, request["id"]))["status"] == "pending"


# -- one winner ------------------------------------------------------------------------------


async def test_racing_taps_and_a_form_submission_resolve_once(storage_url: str) -> None:
    second_human = 4343
    tenants = {"acme": {"chat_ids": [CHAT], "allowed_user_ids": [ALLOWED, second_human]}}
    async with telegram(storage_url, tenants=tenants) as (driver, api):
        request = await api.create(ask("race-1", kind="approval"))
        posted = await driver.posted(api, request)
        token = await form_token(driver, posted)

        async def by_form() -> bool:
            try:
                await api.app[SERVICE].submit_link(token=token, response={"decision": "approve", "reason": "form"})
                return True
            except (AlreadyAnsweredError, GoneError):
                return False

        taps = [await driver.press(posted, "approve"), await driver.press(posted, "reject", user_id=second_human)]
        form_won = await by_form()
        answers = [(await driver.callback_answer(t)).params["text"] for t in taps]
        await api.app[DISPATCHER].idle()

        winners = sum("recorded" in a for a in answers) + form_won
        assert winners == 1, (answers, form_won)
        assert all(a in ("Thanks, your answer was recorded.", "This was already answered.") for a in answers)
        done = await get(api, request["id"])
        assert done["status"] == "answered"
        assert [e["event"] for e in await api.journal(request["id"])].count("answered") == 1
        assert len(driver.tg.calls_of("editMessageText")) == 1


# -- withdraw, reminders, limits --------------------------------------------------------------


async def test_withdraw_on_cancel_and_on_expiry(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        cancelled = await api.create(ask("w-1", kind="approval"))
        expiring = await api.create(ask("w-2", schema={"type": "boolean"}, kind="choice", timeout_seconds=1))
        posts = [await driver.posted(api, r) for r in (cancelled, expiring)]

        assert (await api.call("POST", f"/v1/requests/{cancelled['id']}/cancel"))[0] == 200
        await driver.assert_withdrawn(posts[0], "🚫 Cancelled")
        await driver.assert_withdrawn(posts[1], "⌛ Expired")
        assert driver.message(posts[0]).text.startswith("Question w-1?")
        body = await get(api, cancelled["id"])
        assert [d["status"] for d in body["deliveries"]] == ["withdrawn"]


async def test_reminder_pings_once_and_is_withdrawn_too(sqlite_url: str) -> None:
    async with telegram(sqlite_url, remind_after_seconds=0.3) as (driver, api):
        request = await api.create(ask("rem-1"))
        posted = await driver.posted(api, request)

        reminder = await driver.tg.wait_for_call("sendMessage", predicate=lambda c: "Reminder" in c.params["text"])
        assert reminder.params["reply_parameters"]["message_id"] == posted.ref["message_id"]
        # The bot remembers the reminder right after Telegram accepts it; a human replies later than that.
        key = f"{CHAT}:{reminder.result['message_id']}"
        deadline = asyncio.get_running_loop().time() + 10
        while await api.app[CONNECTORS]["telegram"].chat_refs.lookup_message(channel="telegram", message_key=key) is None:
            assert asyncio.get_running_loop().time() < deadline, "the reminder was never remembered"
            await asyncio.sleep(0.01)
        # A reply to the reminder answers the question it reminds of.
        await driver.reply(posted, "done", to_message_id=reminder.result["message_id"])
        assert (await api.wait(request["id"]))["response"] == "done"
        await api.app[DISPATCHER].idle()
        assert len([c for c in driver.tg.calls_of("sendMessage") if "Reminder" in c.params["text"]]) == 1
        assert "Answered by Alice" in driver.tg.message(CHAT, reminder.result["message_id"]).text
        assert "reminded" in [e["event"] for e in await api.journal(request["id"])]


async def test_rate_limit_and_server_error_are_retried(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        tg = driver.tg
        tg.fail_next("sendMessage", status=429, retry_after=1)
        limited = await api.create(ask("l-1", kind="approval"))
        await tg.wait_for_call("sendMessage", predicate=lambda c: c.status == 429)
        tg.fail_next("sendMessage", status=502)
        failing = await api.create(ask("l-2", kind="approval"))
        await api.app[DISPATCHER].idle()

        sends = tg.calls_of("sendMessage")
        assert [c.status for c in sends].count(429) == 1 and [c.status for c in sends].count(502) == 1
        retried = [c for c in sends if c.ok and c.params["text"].startswith("Question l-1")][0]
        assert retried.at - sends[0].at >= 0.95  # Telegram's retry_after, honoured
        for request in (limited, failing):
            body = await get(api, request["id"])
            assert [(d["status"], d["attempts"], d["last_error"]) for d in body["deliveries"]] == [("sent", 2, None)]
        failures = [e["data"] for e in await api.journal(limited["id"]) if e["event"] == "delivery_failed"]
        assert failures[0]["retry_after"] == 1.0 and "rate limit" in failures[0]["error"]

        # Withdrawing honours a 429 the same way.
        posted = await driver.posted(api, limited)
        tg.fail_next("editMessageText", status=429, retry_after=1)
        assert (await api.submit("l-1", {"decision": "approve"}))[0] == 200
        await api.app[DISPATCHER].idle()
        assert "Approved by operator op-1" in driver.message(posted).text


async def test_long_question_is_cut_and_the_form_holds_all_of_it(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        question = "Please review: " + "😀 long line of context. " * 300  # ~7.5k UTF-16 units
        request = await api.create(ask("long-1", message_for_user=question))
        posted = await driver.posted(api, request)
        text = driver.message(posted).text or ""
        assert utf16_len(text) <= MAX_TEXT and CUT_NOTE in text
        assert text.startswith("Please review: 😀")

        token = await form_token(driver, posted)  # free text, but the cut question needs the form
        _link, view = await api.app[SERVICE].open_link(token)
        assert view.message_for_user == question
        await driver.reply(posted, "looks fine")  # replying still works
        assert (await api.wait(request["id"]))["response"] == "looks fine"
        await driver.assert_withdrawn(posted, "Answered by Alice")
        assert utf16_len(driver.message(posted).text or "") <= MAX_TEXT


# -- webhook mode -------------------------------------------------------------------------------


async def test_webhook_mode_verifies_the_secret_token(sqlite_url: str) -> None:
    async with telegram(sqlite_url, mode="webhook", webhook_secret=WEBHOOK_SECRET) as (driver, api):
        registered = await driver.tg.wait_for_call("setWebhook")
        assert registered.params["url"] == "http://127.0.0.1:8080/bots/telegram/webhook"
        assert registered.params["secret_token"] == WEBHOOK_SECRET
        request = await api.create(ask("wh-1", kind="approval"))
        posted = await driver.posted(api, request)
        url = api.url("/bots/telegram/webhook")

        def tap() -> dict[str, Any]:
            return driver.tg.make_callback(chat_id=CHAT, user_id=ALLOWED, message_id=posted.ref["message_id"],
                                           data=driver.button(posted, "approve")["callback_data"])

        assert await driver.tg.post_webhook(url, tap(), secret_token="wrong-secret-000000") == 403
        assert await driver.tg.post_webhook(url, tap()) == 403
        assert (await get(api, request["id"]))["status"] == "pending"

        # Telegram's own content type carries a charset; python-telegram-bot's server would refuse it.
        async with aiohttp.ClientSession() as session, session.post(
                url, json=tap(), headers={SECRET_HEADER: WEBHOOK_SECRET,
                                          "Content-Type": "application/json; charset=utf-8"}) as resp:
            assert resp.status == 200
        done = await api.wait(request["id"])
        assert (done["response"], done["answered_by"]) == ({"decision": "approve"}, f"telegram:{ALLOWED}")
        await driver.assert_withdrawn(posted, "Approved by Alice")
        assert driver.tg.calls_of("getUpdates") == []


# -- several instances on PostgreSQL ----------------------------------------------------------


def pollers(apis: list[Api]) -> list[Api]:
    return [a for a in apis if a.app[CONNECTORS]["telegram"].polling]


async def test_one_poller_among_instances_and_failover(pg_url: str) -> None:
    import asyncpg

    driver = TelegramDriver()
    await driver.start()
    try:
        settings = settings_from(base_config(pg_url, **driver.config()))
        stacks = [contextlib.AsyncExitStack(), contextlib.AsyncExitStack()]
        apis = [await s.enter_async_context(running_app(settings, connector_classes=[TelegramConnector]))
                for s in stacks]
        try:
            await until(lambda: len(pollers(apis)) == 1)
            await asyncio.sleep(0.5)  # a few lock checks later: still exactly one
            assert len(pollers(apis)) == 1

            # The poller's lock connection dies: it stops polling; exactly one instance polls again.
            restarts = driver.tg.calls_of("deleteWebhook")
            assert len(restarts) == 1  # each start of polling calls it once
            key = zlib.crc32(b"leader:telegram-poll") & 0x7FFFFFFF
            conn = await asyncpg.connect(pg_url)
            try:
                killed = await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND objid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    key)
            finally:
                await conn.close()
            assert killed == 1
            await driver.tg.wait_for_call("deleteWebhook", predicate=lambda c: c is not restarts[0])
            await until(lambda: len(pollers(apis)) == 1)
            await asyncio.sleep(0.5)
            assert len(pollers(apis)) == 1

            # The poller stops for good: the other instance takes over and answers.
            leader = pollers(apis)[0]
            other = next(a for a in apis if a is not leader)
            await stacks[apis.index(leader)].aclose()
            await until(lambda: other.app[CONNECTORS]["telegram"].polling)
            assert len(driver.tg.calls_of("deleteWebhook")) == 3
            request = await other.create(ask("po-1", kind="approval"))
            posted = await driver.posted(other, request)
            await driver.press(posted, "approve")
            assert (await other.wait(request["id"]))["answered_by"] == f"telegram:{ALLOWED}"
        finally:
            for stack in stacks:
                await stack.aclose()
    finally:
        await driver.stop()


# -- configuration -----------------------------------------------------------------------------


def load(section: dict[str, Any], *, tenants: list[dict[str, Any]] | None = None) -> Any:
    config = base_config("sqlite:///unused.db", telegram={"token": "1:x", **section})
    if tenants is not None:
        config["tenants"] = tenants
    return TelegramConnector.load_settings(Settings.model_validate(config))


@pytest.mark.parametrize(("section", "message"), [
    ({"tenants": {"nobody": {"chat_ids": [1], "allowed_user_ids": [2]}}}, "telegram.tenants.nobody: no tenant with this id"),
    ({"tenants": {"acme": {"chat_ids": [1], "allowed_user_ids": [2]},
                  "globex": {"chat_ids": [1], "allowed_user_ids": [3]}}}, "chat 1 is configured for tenants acme and globex"),
    ({"chat_ids": [1], "allowed_user_ids": [2]}, "telegram.tenant: name the tenant"),
    ({"mode": "webhook", "chat_ids": [1], "allowed_user_ids": [2], "tenant": "acme"}, "webhook_secret is required"),
    ({"tenants": {"acme": {"chat_ids": [1], "allowed_user_ids": []}}}, "allowed_user_ids"),
    ({"tenants": {"acme": {"chat_ids": [1], "allowed_user_ids": [2], "admins": [3]}}}, "unknown key"),
])
def test_config_errors_name_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(section)


def test_short_form_serves_the_only_tenant() -> None:
    settings = load({"chat_ids": [-100], "allowed_user_ids": [7]}, tenants=[{"id": "solo"}])
    assert settings.tenants["solo"].chat_ids == [-100]


async def test_start_command_tells_ids(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        driver.push(driver.tg.make_text_message(chat_id=STRANGER, user_id=STRANGER, text="/start"))
        call = await driver.tg.wait_for_call("sendMessage", predicate=lambda c: c.params["chat_id"] == STRANGER)
        assert f"user id is {STRANGER}" in call.params["text"]


async def test_a_refused_form_button_becomes_a_link_in_the_text(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        # What Telegram answers for a URL button to a host it deems invalid (a loopback public_url).
        driver.tg.fail_next("sendMessage", status=400, description="Bad Request: BUTTON_URL_INVALID")
        request = await api.create(ask("u-1", kind="approval"))
        posted = await driver.posted(api, request)
        message = driver.message(posted)
        # In a group the form is reached through a deep link to the bot (a personal link, in private).
        assert "Form: https://t.me/handraise_test_bot?start=" in (message.text or "")
        labels = [b["text"] for row in message.reply_markup["inline_keyboard"] for b in row]
        assert labels == ["✅ Approve", "❌ Reject"]  # the buttons that answer directly stay
        _, body = await api.call("GET", f"/v1/requests/{request['id']}")
        assert [(d["status"], d["attempts"]) for d in body["deliveries"]] == [("sent", 1)]
        await driver.press(posted, "approve")
        assert (await api.wait(request["id"]))["response"] == {"decision": "approve"}


# -- issue 10: personal links, casual remarks, stale buttons, strangers told once, early taps ----


async def test_open_form_in_a_group_gives_only_allowed_people_a_link_of_their_own(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("pl-1", kind="approval"))
        posted = await driver.posted(api, request)
        assert await driver.open_form(posted, stranger=True) is None
        assert "not authorized" in driver.last_private.params["text"]
        url = await driver.open_form(posted)
        assert url is not None and "/f/" in url
        private = driver.last_private
        deep_link = driver.button(posted, "open form")["url"]
        assert await driver.open_form(posted) == url  # asked again: the link this person holds
        await api.app[SERVICE].submit_link(token=url.rsplit("/f/", 1)[1], response={"decision": "reject",
                                                                                     "reason": "not today"})
        done = await api.wait(request["id"])
        assert (done["answered_by"], done["answered_via"]) == (f"telegram:{ALLOWED}", "telegram")
        await driver.assert_withdrawn(posted, "❌ Rejected by Alice (@alice) via Telegram")
        assert "Reason: not today" in (driver.message(posted).text or "")
        # The private message with the link loses its button with the request.
        await driver.tg.wait_for_call("editMessageReplyMarkup",
                                      predicate=lambda c: c.params.get("chat_id") == ALLOWED)
        stored = driver.tg.message(ALLOWED, private.result["message_id"])
        assert not (stored.reply_markup or {}).get("inline_keyboard")
        # A tap on the deep link once the link was used and the request answered: told so, no link.
        seen = len(driver.tg.calls_of("sendMessage"))
        driver.push(driver.tg.make_text_message(chat_id=ALLOWED, user_id=ALLOWED,
                                                text=f"/start {deep_link.rsplit('=', 1)[1]}"))
        late = await driver.tg.wait_for_call("sendMessage", predicate=lambda c: c.params.get("chat_id") == ALLOWED
                                             and driver.tg.calls_of("sendMessage").index(c) >= seen)
        assert "/f/" not in str(late.params) and "answered" in late.params["text"].lower(), late.params
        assert len([e for e in await api.journal(request["id"]) if e["event"] == "link_minted"]) == 1


async def test_a_stranger_is_told_once(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("st-1"))
        posted = await driver.posted(api, request)
        first = await driver.reply(posted, "hello", stranger=True)
        await driver.bot_reply(first, containing="not authorized")
        await driver.reply(posted, "hello again", stranger=True)
        await driver.reply(posted, "Friday")
        assert (await api.wait(request["id"]))["response"] == "Friday"
        told = [c for c in driver.tg.calls_of("sendMessage") if c.ok and "not authorized" in c.params["text"]]
        assert len(told) == 1


async def test_free_text_force_reply_is_selective(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("fr-1"))
        posted = await driver.posted(api, request)
        assert sent_call(driver, posted).params["reply_markup"]["selective"] is True


async def test_a_tap_before_the_bot_recorded_its_message_counts(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("et-1", kind="approval"))
        posted = await driver.posted(api, request)
        data = driver.button(posted, "approve")["callback_data"]
        # The same button on a message the bot has not recorded yet (its sendMessage still returning).
        unrecorded = posted.ref["message_id"] + 1000
        driver.push(driver.tg.make_callback(chat_id=CHAT, user_id=ALLOWED, message_id=unrecorded, data=data))
        assert (await api.wait(request["id"]))["response"] == {"decision": "approve"}


async def test_concurrent_open_form_taps_each_lose_their_button(sqlite_url: str) -> None:
    # Several "Open form" taps handled at once each send a private link; each of those messages must be
    # remembered (an atomic update of the list, not get-then-set) so each loses its button at the end.
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("pl-many", kind="approval"))
        posted = await driver.posted(api, request)
        token = driver.button(posted, "open form")["url"].rsplit("=", 1)[1]
        for _ in range(6):
            driver.push(driver.tg.make_text_message(chat_id=ALLOWED, user_id=ALLOWED, text=f"/start {token}"))

        def links() -> list[Call]:
            return [c for c in driver.tg.calls_of("sendMessage") if c.ok and c.params.get("chat_id") == ALLOWED
                    and "/f/" in str(c.params.get("reply_markup"))]

        await until(lambda: len(links()) == 6, timeout=30)
        # Each tap's message holds the one link this person has (minted once), not six.
        assert len({str(c.params["reply_markup"]) for c in links()}) == 1
        assert len([e for e in await api.journal(request["id"]) if e["event"] == "link_minted"]) == 1
        status, _ = await api.submit("pl-many", {"decision": "approve"})
        assert status == 200
        await driver.assert_withdrawn(posted, "Approved")
        for call in links():
            await driver.tg.wait_for_call("editMessageReplyMarkup", predicate=lambda c, m=call.result["message_id"]:
                                          c.params.get("chat_id") == ALLOWED and c.params.get("message_id") == m)
        await driver.assert_no_buttons_left()


async def test_polling_that_dies_releases_the_lock_and_polls_again(storage_url: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    # A 401 (a revoked token) ends python-telegram-bot's polling task while its updater still says
    # "running": the instance must notice, say so, let go of the polling lock and try again later,
    # not hold the lock without polling.
    caplog.set_level(logging.INFO, logger="handraise")
    async with telegram(storage_url, poll_timeout_seconds=1) as (driver, api):
        connector = api.app[CONNECTORS]["telegram"]
        await until(lambda: connector.polling, timeout=30)
        starts = len(driver.tg.calls_of("deleteWebhook"))
        driver.tg.fail_next("getUpdates", status=401)
        await driver.tg.wait_for_call("getUpdates", predicate=lambda c: c.status == 401, timeout=30)
        await driver.tg.wait_for_call("deleteWebhook", predicate=lambda c: driver.tg.calls_of("deleteWebhook")
                                      .index(c) >= starts, timeout=60)
        assert any("telegram polling stopped (InvalidToken); releasing the polling lock" in r.getMessage()
                   for r in caplog.records)
        await until(lambda: connector.polling, timeout=30)
        request = await api.create(ask("die-1", kind="approval"))
        posted = await driver.posted(api, request)
        await driver.press(posted, "approve")
        assert (await api.wait(request["id"], timeout=30))["answered_by"] == f"telegram:{ALLOWED}"

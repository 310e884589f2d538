"""Rating buttons on resolved requests (issue 4 item 9), end to end: the real app, python-telegram-bot
against the fake Bot API and slack-bolt against FakeSlack; taps become RFC 0056 annotations of the run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import READER_KEY, Api, base_config, question, running_app, settings_from

from handraise.bots.slack import SlackConnector
from handraise.core.appkeys import CONNECTORS, DELIVERIES, DISPATCHER, SERVICE
from tests.bots.contract import Posted
from tests.bots.contract_telegram import ALLOWED, GLOBEX_USER, STRANGER, TelegramDriver
from tests.bots.slack_helpers import (
    ACME_CHANNEL,
    ALICE,
    BOB,
    CAROL,
    MALLORY,
    buttons,
    post_signed,
    request_body,
    slack_section,
    tap,
)
from tests.bots.slack_helpers import fake  # noqa: F401  (the fixture)
from tests.fakes.slack import DEFAULT_TEAM_ID, FakeSlack
from tests.fakes.telegram import Call

pytestmark = pytest.mark.timeout(30)

RATING_LABELS = ["1", "2", "3", "4", "5"]


async def annotations(api: Api, run_id: str) -> list[dict[str, Any]]:
    status, body = await api.call("GET", f"/v1/runs/{run_id}/annotations", key=READER_KEY)
    assert status == 200, body
    return body["annotations"]


async def journal_events(api: Api, request_id: str) -> list[str]:
    return [e["event"] for e in await api.journal(request_id)]


# -- Telegram ------------------------------------------------------------------------------


class RatingDriver(TelegramDriver):
    """The Telegram driver with other top-level config sections beside ``[telegram]``."""

    def __init__(self, *, sections: dict[str, Any] | None = None, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.sections = sections or {}

    def config(self) -> dict[str, Any]:
        return {**super().config(), **self.sections}


@contextlib.asynccontextmanager
async def telegram(url: str, **kwargs: Any) -> AsyncIterator[tuple[RatingDriver, Api]]:
    driver = RatingDriver(**kwargs)
    async with driver.running(url) as api:
        yield driver, api


def ask(uid: str, **extra: Any) -> dict[str, Any]:
    return question(uid, message=f"Ship {uid}?", channels=["telegram"], kind="approval", **extra)


async def withdrawn(driver: TelegramDriver, posted: Posted) -> Call:
    return await driver.tg.wait_for_call(
        "editMessageText", predicate=lambda c: c.ok and c.params.get("message_id") == posted.ref["message_id"]
        and c.params.get("chat_id") == posted.ref["chat_id"])


def labels(driver: TelegramDriver, posted: Posted) -> list[str]:
    rows = (driver.message(posted).reply_markup or {}).get("inline_keyboard") or []
    return [b["text"] for row in rows for b in row]


async def tap_text(driver: TelegramDriver, posted: Posted, choice: str, *, user_id: int = ALLOWED) -> Call:
    return await driver.callback_answer(await driver.press(posted, choice, user_id=user_id))


async def test_telegram_rating_is_an_annotation_and_a_second_one_supersedes(sqlite_url: str) -> None:
    async with telegram(sqlite_url, rating_buttons=True) as (driver, api):
        request = await api.create(ask("tg-1", run_id="run-tg"))
        posted = await driver.posted(api, request)
        approve_token = driver.button(posted, "approve")["callback_data"]
        await driver.press(posted, "approve")
        await api.wait(request["id"])
        await withdrawn(driver, posted)
        message = driver.message(posted)
        assert "✅ Approved by Alice (@alice) via Telegram" in message.text
        assert "Rate this run" in message.text
        assert labels(driver, posted) == RATING_LABELS
        assert all(request["id"] not in data for data in message.button_data())

        answer = await tap_text(driver, posted, "4")
        assert answer.params["text"] == "Thanks, rated 4/5." and not answer.params.get("show_alert")
        [first] = await annotations(api, "run-tg")
        assert first["signal"] == {"kind": "rating", "rating": 4}
        assert first["actor"] == {"principalRef": f"telegram:{ALLOWED}"}
        assert first["target"] == {"runId": "run-tg"} and "supersedes" not in first

        answer = await tap_text(driver, posted, "2")
        assert answer.params["text"] == "Thanks, rated 2/5. It replaces your earlier rating."
        second = (await annotations(api, "run-tg"))[1]
        assert second["signal"]["rating"] == 2 and second["supersedes"] == first["annotationId"]
        status, summary = await api.call("GET", "/v1/feedback/summary", key=READER_KEY, params={"run_id": "run-tg"})
        assert status == 200, summary
        # Only the current rating counts.
        assert (summary["ratings"]["2"], summary["ratings"]["4"], summary["superseded"]) == (1, 0, 1)

        # The old answer button never records a rating, nor answers again; the buttons stay for others.
        driver.push(driver.tg.make_callback(chat_id=posted.ref["chat_id"], user_id=ALLOWED,
                                            message_id=posted.ref["message_id"], data=approve_token))
        await driver.tg.wait_for_call("answerCallbackQuery",
                                      predicate=lambda c: c.params.get("text") == "This was already answered.")
        assert len(await annotations(api, "run-tg")) == 2
        assert labels(driver, posted) == RATING_LABELS

        # A repeated withdraw (another instance, a retry) mints nothing new: Telegram says "not modified".
        view = await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])
        before = driver.message(posted).button_data()
        await api.app[CONNECTORS]["telegram"].withdraw(view, target=posted.target, ref=posted.ref)
        assert driver.tg.calls_of("editMessageText")[-1].status == 400
        assert driver.message(posted).button_data() == before


async def test_telegram_strangers_and_forged_buttons_record_nothing(sqlite_url: str) -> None:
    async with telegram(sqlite_url, rating_buttons=True) as (driver, api):
        request = await api.create(ask("tg-2", run_id="run-tg2"))
        other = await api.create(ask("tg-3", run_id="run-tg3"))
        posted, other_posted = await driver.posted(api, request), await driver.posted(api, other)
        await driver.press(posted, "approve")
        await driver.press(other_posted, "reject")
        await withdrawn(driver, posted)
        await withdrawn(driver, other_posted)

        for user in (STRANGER, GLOBEX_USER):
            answer = await tap_text(driver, posted, "5", user_id=user)
            assert answer.params["text"] == "You are not authorized to rate this run."
            assert answer.params["show_alert"] is True
        assert (await journal_events(api, request["id"])).count("rating_refused") == 2

        chat, message_id = posted.ref["chat_id"], posted.ref["message_id"]
        forged = driver.tg.make_callback(chat_id=chat, user_id=ALLOWED, message_id=message_id, data="forged-token")
        # A real rating token of another request, moved onto this message.
        moved = driver.tg.make_callback(chat_id=chat, user_id=ALLOWED, message_id=message_id,
                                        data=driver.button(other_posted, "1")["callback_data"])
        for update in (forged, moved):
            driver.push(update)
            query_id = update["callback_query"]["id"]
            answer = await driver.tg.wait_for_call(
                "answerCallbackQuery", predicate=lambda c, q=query_id: str(c.params.get("callback_query_id")) == q)
            assert answer.params["text"] == "This button is no longer valid."
        assert await annotations(api, "run-tg2") == []
        assert await annotations(api, "run-tg3") == []


async def test_telegram_no_rating_buttons_unless_enabled_answered_and_in_a_run(tmp_path: Path) -> None:
    async with telegram(f"sqlite:///{tmp_path / 'a.db'}", rating_buttons=True) as (driver, api):
        no_run = await api.create(ask("n-1"))
        cancelled = await api.create(ask("n-2", run_id="run-n2"))
        posts = [await driver.posted(api, r) for r in (no_run, cancelled)]
        await driver.press(posts[0], "approve")
        status, _ = await api.call("POST", f"/v1/requests/{cancelled['id']}/cancel")
        assert status == 200
        for posted, outcome in zip(posts, ("Approved by Alice", "Cancelled"), strict=True):
            await withdrawn(driver, posted)
            assert outcome in driver.message(posted).text
            assert labels(driver, posted) == [] and "Rate this run" not in driver.message(posted).text

    # A fresh database: a new fake Bot API numbers its messages from 1 again.
    async with telegram(f"sqlite:///{tmp_path / 'b.db'}") as (driver, api):  # rating_buttons defaults to false
        request = await api.create(ask("n-3", run_id="run-n3"))
        posted = await driver.posted(api, request)
        await driver.press(posted, "approve")
        await withdrawn(driver, posted)
        assert labels(driver, posted) == []


async def test_telegram_no_rating_buttons_when_feedback_is_disabled(sqlite_url: str) -> None:
    async with telegram(sqlite_url, rating_buttons=True, sections={"feedback": {"enabled": False}}) as (driver, api):
        request = await api.create(ask("d-1", run_id="run-d1"))
        posted = await driver.posted(api, request)
        await driver.press(posted, "approve")
        await withdrawn(driver, posted)
        assert "Approved by Alice" in driver.message(posted).text
        assert labels(driver, posted) == []
        status, body = await api.call("GET", "/v1/runs/run-d1/annotations", key=READER_KEY)
        assert (status, body["error"]) == (501, "capability_not_provided")


# -- Slack ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def slack(url: str, fake: FakeSlack, *, feedback: bool = True, **overrides: Any) -> AsyncIterator[Api]:
    config = base_config(url, slack=slack_section(fake, **overrides), feedback={"enabled": feedback})
    async with running_app(settings_from(config), connector_classes=[SlackConnector]) as api:
        yield api


async def slack_message(api: Api, fake: FakeSlack, request: dict[str, Any]) -> dict[str, Any]:
    """The request's own message as the fake holds it now (tests here share one fake between apps)."""
    await api.app[DISPATCHER].idle()
    [row] = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])
    return fake.message(row.ref["channel"], row.ref["ts"]) | {"channel": row.ref["channel"]}


async def answered(api: Api, fake: FakeSlack, uid: str, **extra: Any) -> dict[str, Any]:
    """Post a yes/no request, answer it with Alice's tap; the message once withdrawn."""
    request = await api.create(request_body(uid, schema={"type": "boolean"}, **extra))
    message = await slack_message(api, fake, request)
    assert (await post_signed(api, tap(fake, message, "Yes", user=ALICE)))[0] == 200
    assert (await api.wait(request["id"]))["status"] == "answered"
    await fake.wait_for_call("chat.update", lambda c: c.ok and c.get("ts") == message["ts"])
    return fake.message(message["channel"], message["ts"]) | {"channel": message["channel"],
                                                              "request_id": request["id"]}


async def ephemeral(fake: FakeSlack, user: str, count: int) -> str:
    """The text of the ``count``-th ephemeral message to ``user`` (from 1), once it is sent."""
    def nth(_: Any) -> bool:
        return len([c for c in fake.calls_of("chat.postEphemeral") if c.get("user") == user]) >= count

    await fake.wait_for_call("chat.postEphemeral", nth)
    return [c for c in fake.calls_of("chat.postEphemeral") if c.get("user") == user][count - 1]["text"]


async def test_slack_ratings_per_person_supersede_their_own(storage_url: str, fake: FakeSlack) -> None:
    async with slack(storage_url, fake, rating_buttons=True) as api:
        message = await answered(api, fake, "s-1", run_id="run-s1")
        assert message["text"] == f"✅ Answered by <@{ALICE}> via Slack"
        assert list(buttons(message)) == RATING_LABELS
        assert any("Rate this run" in e.get("text", "") for b in message["blocks"] for e in b.get("elements", []))

        assert (await post_signed(api, tap(fake, message, "4", user=ALICE)))[0] == 200
        assert await ephemeral(fake, ALICE, 1) == "Thanks, rated 4/5."
        assert (await post_signed(api, tap(fake, message, "5", user=BOB)))[0] == 200
        assert await ephemeral(fake, BOB, 1) == "Thanks, rated 5/5."
        assert (await post_signed(api, tap(fake, message, "1", user=ALICE)))[0] == 200
        assert await ephemeral(fake, ALICE, 2) == "Thanks, rated 1/5. It replaces your earlier rating."

        alice_4, bob_5, alice_1 = await annotations(api, "run-s1")
        assert [a["actor"]["principalRef"] for a in (alice_4, bob_5, alice_1)] == [
            f"slack:{DEFAULT_TEAM_ID}/{ALICE}", f"slack:{DEFAULT_TEAM_ID}/{BOB}", f"slack:{DEFAULT_TEAM_ID}/{ALICE}"]
        assert [a["signal"]["rating"] for a in (alice_4, bob_5, alice_1)] == [4, 5, 1]
        # Bob's rating stands beside Alice's; only her own earlier one is replaced.
        assert "supersedes" not in bob_5 and alice_1["supersedes"] == alice_4["annotationId"]
        # The buttons stay for the others.
        assert list(buttons(fake.message(ACME_CHANNEL, message["ts"]))) == RATING_LABELS


async def test_slack_strangers_and_forged_values_record_nothing(tmp_path: Path, fake: FakeSlack) -> None:
    async with slack(f"sqlite:///{tmp_path / 's.db'}", fake, rating_buttons=True) as api:
        message = await answered(api, fake, "s-2", run_id="run-s2")
        for user in (MALLORY, CAROL):  # CAROL answers for globex, not acme
            assert (await post_signed(api, tap(fake, message, "5", user=user)))[0] == 200
            assert await ephemeral(fake, user, 1) == "You are not authorized to rate this run."
        assert (await journal_events(api, message["request_id"])).count("rating_refused") == 2

        button = buttons(message)["3"]
        forged = fake.make_block_action(user_id=ALICE, action_id=button["action_id"], value="forged-token",
                                        channel=message["channel"], message_ts=message["ts"])
        assert (await post_signed(api, forged))[0] == 200
        assert await ephemeral(fake, ALICE, 1) == "This button is no longer valid."
        assert await annotations(api, "run-s2") == []


async def test_slack_no_rating_buttons_without_run_or_answer_or_setting(tmp_path: Path, fake: FakeSlack) -> None:
    async with slack(f"sqlite:///{tmp_path / 's.db'}", fake, rating_buttons=True) as api:
        no_run = await answered(api, fake, "s-3")
        assert buttons(no_run) == {}
        expiring = await api.create(request_body("s-4", schema={"type": "boolean"}, run_id="run-s4",
                                                 timeout_seconds=1))
        pending = await slack_message(api, fake, expiring)
        assert list(buttons(pending)) == ["Yes", "No", "Open form"]
        assert (await api.wait(expiring["id"]))["status"] == "expired"
        await fake.wait_for_call("chat.update", lambda c: c.ok and c.get("ts") == pending["ts"])
        gone = fake.message(ACME_CHANNEL, pending["ts"])
        assert gone["text"].startswith("⌛ Expired") and buttons(gone) == {}

    async with slack(f"sqlite:///{tmp_path / 's2.db'}", fake) as api:  # rating_buttons defaults to false
        assert buttons(await answered(api, fake, "s-5", run_id="run-s5")) == {}


async def test_slack_no_rating_buttons_when_feedback_is_disabled(tmp_path: Path, fake: FakeSlack) -> None:
    async with slack(f"sqlite:///{tmp_path / 's.db'}", fake, feedback=False, rating_buttons=True) as api:
        message = await answered(api, fake, "s-6", run_id="run-s6")
        assert message["text"] == f"✅ Answered by <@{ALICE}> via Slack"
        assert buttons(message) == {}

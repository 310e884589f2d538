"""A quorum request's tally edits keep the message's buttons: each vote costs one edit of every message
and no new button token, form link or journal entry, and a tap on the first rendering still counts.
Telegram through the real python-telegram-bot client and the wire-level fake (group and private
chats, and a form link Telegram took only as text); Slack through its fake, signed interactions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Api, base_config, running_app, settings_from

from sqlalchemy import text

from handraise.bots.slack import SlackConnector
from handraise.core.appkeys import DELIVERIES, DISPATCHER, SERVICE, STORE
from handraise.core.store.units import scalar
from tests.bots.contract import Posted
from tests.bots.contract_telegram import ALLOWED, CHAT, TelegramDriver
from tests.bots.slack_helpers import ACME_CHANNEL, ALICE, BOB, buttons, post_signed, slack_section, tap
from tests.bots.slack_helpers import fake  # noqa: F401  (the fixture)
from tests.bots.test_people_chat import BOB_TG, PeopleTelegramDriver
from tests.bots.test_telegram import ask, sent_call
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.timeout(90)

CAROL_TG, DAVE_TG = 8888, 9999
PEOPLE = [{"id": "alice", "name": "Alice", "telegram": ALLOWED, "slack": ALICE, "groups": ["oncall"]},
          {"id": "bob", "name": "Bob", "telegram": BOB_TG, "slack": BOB, "groups": ["oncall"]},
          {"id": "carol", "name": "Carol", "telegram": CAROL_TG, "groups": ["oncall"]},
          {"id": "dave", "name": "Dave", "telegram": DAVE_TG, "groups": ["oncall"]},
          {"id": "erin", "name": "Erin", "groups": ["oncall"]}]  # on no chat channel


class QuorumTelegramDriver(PeopleTelegramDriver):
    """Acme's allowlist is its on-call people (``PEOPLE``), and each of them started the bot (private chats work)."""

    async def start(self) -> None:
        await super().start()
        for user_id, name in ((CAROL_TG, "Carol"), (DAVE_TG, "Dave")):
            self.tg.add_user(user_id, first_name=name)
        self.tg.started.update({ALLOWED, BOB_TG, CAROL_TG, DAVE_TG})

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["tenants"][0]["people"] = PEOPLE
        return config


async def traces(api: Api, request_id: str) -> tuple[int, int, list[str]]:
    """(button tokens, form links, journal events) the request has so far."""
    await api.app[DISPATCHER].idle()
    async with api.app[STORE].reader() as conn:
        tokens = await conn.run(scalar, text("SELECT count(*) FROM chat_actions WHERE request_id = :r"),
                                {"r": request_id})
        links = await conn.run(scalar, text("SELECT count(*) FROM links WHERE request_id = :r"), {"r": request_id})
    return tokens, links, [e["event"] for e in await api.journal(request_id)]


async def posted_by_target(api: Api, request_id: str) -> dict[str, Posted]:
    await api.app[DISPATCHER].idle()
    rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)
    assert all(r.status == "sent" for r in rows), [(r.target, r.status, r.last_error) for r in rows]
    return {r.target: Posted(request_id=request_id, target=r.target, ref=r.ref) for r in rows}


async def vote(driver: TelegramDriver, api: Api, posted: Posted, user_id: int) -> None:
    told = await driver.told(await driver.press(posted, "approve", user_id=user_id))
    assert "vote was counted" in told, told
    await api.app[DISPATCHER].idle()


async def test_telegram_votes_edit_the_tally_in_with_the_same_buttons_and_links(sqlite_url: str) -> None:
    driver = QuorumTelegramDriver()
    async with driver.running(sqlite_url) as api:
        request = await api.create(ask("tally-tg", kind="approval", approvals_required=4,
                                       assign_to=["group:oncall"], timeout_seconds=600))
        posted = await posted_by_target(api, request["id"])
        assert set(posted) == {str(CHAT), *(str(u) for u in (ALLOWED, BOB_TG, CAROL_TG, DAVE_TG))}
        first = {target: sent_call(driver, p).params["reply_markup"] for target, p in posted.items()}
        # In a private chat "Open form" is the person's own link; in the group, a deep link to the bot.
        dave_link = driver.button(posted[str(DAVE_TG)], "open form")["url"]
        assert "/f/" in dave_link and "t.me/" in driver.button(posted[str(CHAT)], "open form")["url"]
        tokens, links, journal = await traces(api, request["id"])
        assert links == 4

        group = posted[str(CHAT)]
        for n, user_id in enumerate((ALLOWED, BOB_TG, CAROL_TG), start=1):
            await vote(driver, api, group, user_id)
            for target, message in posted.items():
                shown = driver.message(message)
                assert f"{n} of 4 approved" in (shown.text or ""), (target, shown.text)
                assert shown.reply_markup == first[target], target  # the same tokens, the same link

        # Three votes: three edits of each message, and nothing minted or journaled but the votes.
        for target, message in posted.items():
            edits = [c for c in driver.tg.calls_of("editMessageText")
                     if (c.params["chat_id"], c.params["message_id"]) == (message.ref["chat_id"],
                                                                         message.ref["message_id"])]
            assert len(edits) == 3, target
        assert await traces(api, request["id"]) == (tokens, links, [*journal, "voted", "voted", "voted"])

        # Dave's link from the first rendering is still his, and still opens.
        link, view = await api.app[SERVICE].open_link(dave_link.rsplit("/f/", 1)[1])
        assert (link.principal, len(view.votes)) == (f"telegram:{DAVE_TG}", 3)
        # And a tap on his private message as first posted counts: the deciding vote.
        approve = next(b for row in first[str(DAVE_TG)]["inline_keyboard"] for b in row if "Approve" in b["text"])
        dm = posted[str(DAVE_TG)]
        driver.push(driver.tg.make_callback(chat_id=DAVE_TG, user_id=DAVE_TG, message_id=dm.ref["message_id"],
                                            data=approve["callback_data"]))
        done = await api.wait(request["id"])
        assert (done["status"], done["response"]["decision"]) == ("answered", "approve")
        assert [v["person"] for v in done["response"]["votes"]] == ["alice", "bob", "carol", "dave"]


async def test_a_form_link_telegram_took_as_text_stays_the_same_text(sqlite_url: str) -> None:
    driver = QuorumTelegramDriver(assigned_delivery="direct")
    async with driver.running(sqlite_url) as api:
        # What Telegram answers for a URL button to a host it deems invalid (a loopback public_url).
        driver.tg.fail_next("sendMessage", status=400, description="Bad Request: BUTTON_URL_INVALID")
        request = await api.create(ask("tally-as-text", kind="approval", approvals_required=2,
                                       assign_to=["alice", "erin"], timeout_seconds=600))
        posted = await posted_by_target(api, request["id"])
        assert set(posted) == {str(ALLOWED)}  # Erin is on no chat channel
        dm = posted[str(ALLOWED)]
        before = driver.message(dm)
        assert "Form: " in (before.text or "")
        link = (before.text or "").rsplit("Form: ", 1)[1]
        tokens, links, journal = await traces(api, request["id"])

        await vote(driver, api, dm, ALLOWED)
        after = driver.message(dm)
        assert "1 of 2 approved" in (after.text or "") and (after.text or "").endswith(f"Form: {link}")
        # No URL button Telegram would refuse again: the edit went through, with the same answer buttons.
        assert after.reply_markup == before.reply_markup
        assert not any("url" in b for row in after.reply_markup["inline_keyboard"] for b in row)
        assert await traces(api, request["id"]) == (tokens, links, [*journal, "voted"])
        assert (await api.app[SERVICE].open_link(link.rsplit("/f/", 1)[1]))[0].principal == f"telegram:{ALLOWED}"


async def test_slack_votes_edit_the_tally_in_with_the_same_buttons(tmp_path: Path, fake: FakeSlack) -> None:
    config = base_config(f"sqlite:///{tmp_path / 'slack-tally.db'}", slack=slack_section(fake))
    config["slack"]["tenants"]["acme"]["allowed_user_ids"] = ["group:oncall"]
    config["tenants"][0]["people"] = PEOPLE
    async with running_app(settings_from(config), connector_classes=[SlackConnector]) as api:
        request = await api.create({"unique_id": "tally-slack", "message_for_user": "Deploy build 42?",
                                    "channels": ["slack"], "timeout_seconds": 600, "kind": "approval",
                                    "approvals_required": 3})
        posted = await posted_by_target(api, request["id"])
        assert set(posted) == {ACME_CHANNEL}
        ref = posted[ACME_CHANNEL].ref
        first = fake.message(ref["channel"], ref["ts"]) | {"channel": ref["channel"]}
        tokens, links, journal = await traces(api, request["id"])

        for n, user in enumerate((ALICE, BOB), start=1):
            # Each taps the message as first posted.
            assert (await post_signed(api, tap(fake, first, "Approve", user=user)))[0] == 200
            await fake.wait_for_call("chat.postEphemeral", lambda c, u=user: c.get("user") == u)
            await api.app[DISPATCHER].idle()
            shown = fake.message(ref["channel"], ref["ts"])
            assert f"{n} of 3 approved" in str(shown["blocks"])
            assert buttons(shown) == buttons(first)  # the same tokens behind the same buttons

        updates = [c for c in fake.calls_of("chat.update") if c.get("ts") == ref["ts"]]
        assert len(updates) == 2
        assert await traces(api, request["id"]) == (tokens, links, [*journal, "voted", "voted"])

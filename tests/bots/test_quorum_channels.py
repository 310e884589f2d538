"""Quorum across every way in at once: Telegram and Slack (wire-level fakes), Matrix (a real Synapse),
the hosted form and the inbox, on SQLite and PostgreSQL. Alice is one person on Telegram and Slack,
Bob is on Matrix, Carol answers through her form link, Dave in the inbox. Each message is read as a
person reads it: the tally edited in after each vote, the outcome naming every approver."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Api, base_config, running_app, settings_from

from handraise.core.appkeys import BUS, DISPATCHER, SERVICE
from handraise.core.events import REQUEST_VOTED
from handraise.webforms.connector import WebFormsChannel
from tests.bots.contract import Posted
from tests.bots.contract_matrix import MatrixDriver
from tests.bots.contract_slack import SlackDriver, shown
from tests.bots.contract_telegram import ALLOWED, TelegramDriver
from tests.bots.matrix_helpers import relates
from tests.bots.slack_helpers import ALICE as SLACK_ALICE
from tests.webforms.test_http import fetch, post
from tests.webforms.test_inbox_http import person_key, signed_in_as

CHANNELS = ["telegram", "slack", "matrix"]


class Everywhere:
    """One app serving Telegram, Slack, Matrix, the form and the inbox, with the drivers that play the people."""

    def __init__(self, api: Api, tg: TelegramDriver, slack: SlackDriver, mx: MatrixDriver) -> None:
        self.api, self.tg, self.slack, self.mx = api, tg, slack, mx

    async def ask(self, uid: str, n: int, **extra: Any) -> tuple[dict[str, Any], dict[str, Posted]]:
        request = await self.api.create({"unique_id": uid, "message_for_user": f"Deploy {uid} to production?",
                                         "kind": "approval", "timeout_seconds": 600, "channels": CHANNELS,
                                         "approvals_required": n, **extra})
        posted = {"telegram": await self.tg.posted(self.api, request),
                  "slack": await self.slack.posted(self.api, request),
                  "matrix": await self.mx.posted(self.api, request)}
        return request, posted

    async def texts(self, posted: dict[str, Posted], *, containing: str) -> dict[str, str]:
        """Each channel's message as people read it now (Matrix: the card's newest edit that says ``containing``)."""
        await self.api.app[DISPATCHER].idle()
        card = posted["matrix"].ref["event_id"]

        def saying(e: dict[str, Any]) -> bool:
            edits_card = relates(e).get("rel_type") == "m.replace" and relates(e).get("event_id") == card
            content = e.get("content") or {}
            body = (content.get("m.new_content") or content).get("body", "")
            return (e.get("event_id") == card or edits_card) and containing in body

        seen = await self.mx.human.expect(self.mx.room_id, saying, what=f"the card saying {containing!r}")
        content = seen["content"]
        return {"telegram": self.tg.message(posted["telegram"]).text or "",
                "slack": shown(self.slack.message(posted["slack"])),
                "matrix": str((content.get("m.new_content") or content)["body"])}

    async def form_vote(self, request_id: str, person: str, decision: str) -> int:
        """Carol's answer through the form link minted for her (as a chat connector mints it)."""
        minted = await self.api.app[SERVICE].mint_link(tenant_id="acme", request_id=request_id,
                                                       principal="telegram:bot", recipient=person,
                                                       for_principal=f"person:{person}")
        return (await post(self.api, "/f/" + minted.token, [("decision", decision)])).status

    async def inbox_vote(self, request_id: str, decision: str) -> int:
        async with signed_in_as(self.api, "dave") as dave:
            await dave.get(f"/inbox/r/{request_id}")
            return (await dave.post(f"/inbox/r/{request_id}", {"decision": decision}))[0]


@contextlib.asynccontextmanager
async def everywhere(storage_url: str, synapse: Any) -> AsyncIterator[Everywhere]:
    tg, slack, mx = TelegramDriver(), SlackDriver(), MatrixDriver(synapse)
    for driver in (tg, slack, mx):
        await driver.start()
    try:
        config = base_config(storage_url, **tg.config(), **slack.config(), **mx.config())
        config["tenants"][0]["people"] = [
            {"id": "alice", "name": "Alice", "telegram": ALLOWED, "slack": SLACK_ALICE},
            {"id": "bob", "name": "Bob", "matrix": mx.human.user_id},
            {"id": "carol", "name": "Carol"},
            {"id": "dave", "name": "Dave"},
        ]
        config["tenants"][0]["keys"].append(person_key("dave"))  # Dave signs in to the inbox with his own key
        classes = [*tg.connector_classes(), *slack.connector_classes(), *mx.connector_classes(), WebFormsChannel]
        async with running_app(settings_from(config), connector_classes=classes) as api:
            for driver in (tg, slack, mx):
                await driver.ready(api)
            yield Everywhere(api, tg, slack, mx)
    finally:
        for driver in (tg, slack, mx):
            await driver.stop()


async def counted(api: Api, request_id: str, votes: int) -> None:
    """Until the request shows ``votes`` votes (awaited on the bus, not polled)."""
    reached = asyncio.get_running_loop().create_future()

    def on(ev: Any) -> None:
        if ev.type == REQUEST_VOTED and ev.object_id == request_id and len(ev.data["votes"]) >= votes \
                and not reached.done():
            reached.set_result(None)

    api.app[BUS].add_listener(on)
    status, now = await api.call("GET", f"/v1/requests/{request_id}")
    if len(now["votes"]) < votes:
        await asyncio.wait_for(reached, timeout=30)


async def test_the_tally_is_edited_into_every_message_and_a_rejection_ends_it(storage_url: str,
                                                                              synapse: Any) -> None:
    async with everywhere(storage_url, synapse) as at:
        request, posted = await at.ask("tally", 3)
        before = await at.texts(posted, containing="0 of 3 approved")
        assert all("Still expected: Alice, Bob, Carol, Dave." in text for text in before.values()), before

        told = await at.tg.told(await at.tg.press(posted["telegram"], "approve"))
        assert "vote was counted" in told and "1 of 3 approved: Alice" in told
        await counted(at.api, request["id"], 1)
        after = await at.texts(posted, containing="1 of 3 approved: Alice")
        for channel, text in after.items():
            assert "1 of 3 approved: Alice. Still expected: Bob, Carol, Dave." in text, (channel, text)
        # The buttons stay: people still vote from the same message.
        at.tg.button(posted["telegram"], "approve")
        at.slack.button(posted["slack"], "approve")
        # The form and the inbox say the same.
        page = await fetch(at.api, "/f/" + (await at.api.app[SERVICE].mint_link(
            tenant_id="acme", request_id=request["id"], principal="telegram:bot", for_principal="person:carol")).token)
        assert "1 of 3 approved: Alice" in page.text
        async with signed_in_as(at.api, "dave") as dave:
            assert "1 of 3 approved: Alice" in (await dave.get(f"/inbox/r/{request['id']}"))[1]

        # Alice again, now on Slack: one person, one vote.
        told = await at.slack.told(await at.slack.press(posted["slack"], "approve"))
        assert "vote was counted" in told and "1 of 3 approved: Alice" in told
        assert len((await at.api.call("GET", f"/v1/requests/{request['id']}"))[1]["votes"]) == 1

        # Bob rejects on Matrix: one rejection rejects.
        await at.mx.press(posted["matrix"], "reject")
        done = await at.api.wait(request["id"])
        assert done["status"] == "answered" and done["response"]["decision"] == "reject"
        assert [(v["person"], v["channel"]) for v in done["response"]["votes"]] == [("alice", "telegram"),
                                                                                ("bob", "matrix")]
        await at.api.app[DISPATCHER].idle()  # the tally edits came first: the outcome is the last edit
        await at.tg.assert_withdrawn(posted["telegram"], "Rejected by Bob via Matrix (1 of 3)")
        await at.mx.assert_withdrawn(posted["matrix"], "Rejected by Bob via Matrix (1 of 3)")
        assert "Rejected by Bob via Matrix (1 of 3)" in shown(at.slack.message(posted["slack"]))
        assert not at.slack.message(posted["slack"]).get("blocks", [{}])[0].get("elements")


@pytest.mark.parametrize("n", [2, 3])
async def test_everyone_at_once_gives_exactly_one_outcome(storage_url: str, synapse: Any, n: int) -> None:
    """Alice on Telegram and Slack, Bob on Matrix, Carol on the form, Dave in the inbox, all at once:
    N distinct people approve it, Alice counts once, and every message ends naming them."""
    async with everywhere(storage_url, synapse) as at:
        request, posted = await at.ask(f"race-{n}", n)
        results = await asyncio.gather(
            at.tg.press(posted["telegram"], "approve"), at.slack.press(posted["slack"], "approve"),
            at.mx.press(posted["matrix"], "approve"), at.form_vote(request["id"], "carol", "approve"),
            at.inbox_vote(request["id"], "approve"))
        assert results[3] in (200, 410) and results[4] in (303, 409)  # the form and the inbox: counted or late
        done = await at.api.wait(request["id"])
        votes = done["response"]["votes"]
        assert done["status"] == "answered" and done["response"]["decision"] == "approve"
        assert len(votes) == n and len({v["person"] for v in votes}) == n, votes
        entries = await at.api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
        assert [e["event"] for e in entries].count("answered") == 1
        names = [v["name"] for v in votes]
        await at.api.app[DISPATCHER].idle()
        for channel in ("telegram", "matrix"):
            driver = at.tg if channel == "telegram" else at.mx
            await driver.assert_withdrawn(posted[channel], f"Approved by {names[0]} via")
        slack_text = shown(at.slack.message(posted["slack"]))
        assert f"({n} of {n})" in slack_text and all(name in slack_text for name in names), slack_text

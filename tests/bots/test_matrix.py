"""The Matrix bot against a real Synapse, a second matrix-nio client playing the human.

Every answer path runs in room version 10 and in the server's default (12, where the creator's power is implicit)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import OPERATOR_KEY, base_config, running_app, settings_from, sweeper_held, until
from nio import RoomCreateResponse, RoomGetEventResponse

from handraise.bots.matrix import MatrixConnector
from handraise.bots.matrix.cards import FORM_KEY, THUMBS_DOWN, THUMBS_UP
from handraise.bots.matrix.direct import LINKS_SENT
from handraise.core.appkeys import CONNECTORS, DISPATCHER, SERVICE, STORE
from handraise.core.store import Store
from harness.fixtures import synapse  # noqa: F401  (registers the session fixture)
from harness.synapse import SynapseServer, unique_localpart
from tests.bots.matrix_helpers import (
    PASSWORD,
    Human,
    TableRows,
    bot_creates_room,
    is_card,
    is_edit_of,
    is_notice_to,
    is_reaction_on,
    relates,
)

VERSIONS = pytest.mark.parametrize("room_version", ["10", None], ids=["v10", "v12-default"])
FORM_SCHEMA = {
    "type": "object",
    "properties": {
        "port": {"type": "integer", "title": "Port", "minimum": 1, "maximum": 65535},
        "env": {"type": "string", "enum": ["canary", "stable"], "title": "Environment"},
        "note": {"type": "string", "maxLength": 20, "description": "Why <now>?"},
    },
    "required": ["port", "env"],
    "additionalProperties": False,
}


# -- the world of one test --------------------------------------------------------------


@dataclass
class World:
    synapse: SynapseServer
    bot_id: str
    bot_token: str
    human: Human
    stranger: Human
    room_id: str
    tmp_path: Path

    def settings(self, *, storage_url: str | None = None, **matrix: Any) -> Any:
        section = {"homeserver": self.synapse.base_url, "user_id": self.bot_id, "access_token": self.bot_token,
                   "tenants": {"acme": {"room_ids": [self.room_id], "allowed_users": [self.human.user_id]}}}
        section.update(matrix)
        section = {key: value for key, value in section.items() if value is not None}
        url = storage_url or f"sqlite:///{self.tmp_path / 'handraise.db'}"
        return settings_from(base_config(url, matrix=section))


@pytest.fixture
async def world(synapse: SynapseServer, tmp_path: Path, request: pytest.FixtureRequest  # noqa: F811
                ) -> AsyncIterator[World]:
    """A bot, an allowed human and a stranger in a room the bot created (version from ``room_version``)."""
    room_version = request.node.callspec.params.get("room_version") if hasattr(request.node, "callspec") else None
    bot_id, bot_token, _ = synapse.register_user(unique_localpart("bot"), PASSWORD)
    human, stranger = Human(synapse, "human"), Human(synapse, "stranger")
    room_id = await bot_creates_room(synapse, bot_token, bot_id, room_version=room_version,
                                     invite=[human.user_id, stranger.user_id])
    await human.join(room_id)
    await stranger.join(room_id)
    try:
        yield World(synapse, bot_id, bot_token, human, stranger, room_id, tmp_path)
    finally:
        await human.client.close()
        await stranger.client.close()


async def started(api: Any) -> MatrixConnector:
    connector = api.app[CONNECTORS]["matrix"]
    await asyncio.wait_for(connector.synced.wait(), timeout=30)
    return connector


def request_body(question: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": f"u-{uuid.uuid4().hex[:10]}", "message_for_user": question, "channels": ["matrix"],
            "timeout_seconds": 120, **extra}


# -- the card and the form answer --------------------------------------------------------


@VERSIONS
async def test_form_card_shows_every_field_and_a_reply_answers_it(world: World, room_version: str | None) -> None:
    question = f"Deploy where? <img src=x onerror=alert(1)> & co {uuid.uuid4().hex[:6]}"
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        created = await api.create(request_body(question, schema=FORM_SCHEMA))
        card = await world.human.expect(world.room_id, is_card(world.bot_id, question), what="the card")
        content = card["content"]

        # The HTML card: the question escaped, then the table field by field.
        assert content["format"] == "org.matrix.custom.html"
        html_body = content["formatted_body"]
        assert "<img" not in html_body and "&lt;img src=x onerror=alert(1)&gt; &amp; co" in html_body
        table = TableRows()
        table.feed(html_body)
        assert table.header == ["Field", "What to enter", "Required"]
        # Core stores the schema as canonical JSON (sorted keys), so rows come in name order.
        # The words are core's describe_field, the same in every channel.
        assert sorted(table.rows) == sorted([
            ["Port (port)", "integer from 1 to 65535", "✱ required"],
            ["Environment (env)", "one of: canary, stable", "✱ required"],
            ["Note (note) Why <now>?", "text, at most 20 characters", "optional"],
        ])
        assert "&lt;now&gt;" in html_body
        # No form link in the room, where anyone could open it: 📝 asks for one's own, by direct message.
        assert "/f/" not in content["body"] and "/f/" not in html_body

        # The plain body carries the same content for clients without HTML.
        body = content["body"]
        assert question in body
        for line in ("✱ Port (port): integer from 1 to 65535",
                     "✱ Environment (env): one of: canary, stable",
                     "Note (note): text, at most 20 characters — Why <now>?",
                     'reply to this message with one "field: value" line per field',
                     f"Or, for the form, react {FORM_KEY} to this message"):
            assert line in body

        # The bot's own 📝 sits under the card, so asking is one click; a stranger's 📝 gets no link.
        room, bot, card_id = world.room_id, world.bot_id, card["event_id"]
        form_key = await world.human.expect(room, is_reaction_on(card_id, FORM_KEY, bot), what="the bot's 📝")
        await world.stranger.react(room, card_id, FORM_KEY)
        await world.human.react(room, card_id, FORM_KEY)
        sent = await world.human.direct_message(bot, lambda e: "/f/" in e["content"].get("body", ""),
                                                what="the personal link")
        assert question in sent["content"]["body"] and "<img" not in sent["content"]["formatted_body"]
        url = re.search(r"http://127\.0\.0\.1:8080/f/\S+", sent["content"]["body"])
        assert url is not None
        link, opened = await api.app[SERVICE].open_link(url.group(0).rsplit("/", 1)[1])
        assert opened.id == created["id"]
        assert link.answers_as == f"matrix:{world.human.user_id}"  # the link is this person's, not the room's
        told = await world.stranger.direct_message(bot, lambda e: "not authorized" in e["content"].get("body", ""),
                                                   what="the stranger told privately")
        assert "/f/" not in told["content"]["body"]
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=created["id"])
        assert [e["principal"] for e in entries if e["event"] == "answer_refused"] == [
            f"matrix:{world.stranger.user_id}"]

        reply_id = await world.human.reply(world.room_id, card, "PORT: 8080\nenvironment: Canary\nnote: now")
        done = await api.wait(created["id"], timeout=30)
        assert done["status"] == "answered"
        assert done["response"] == {"port": 8080, "env": "canary", "note": "now"}
        assert done["answered_by"] == f"matrix:{world.human.user_id}"
        assert done["answered_via"] == "matrix"

        await world.human.expect(world.room_id, is_reaction_on(reply_id, "✅", world.bot_id), what="✅")
        edit = await world.human.expect(
            world.room_id, is_edit_of(card["event_id"], world.bot_id, f"Answered by {world.human.user_id}"),
            what="the card edited to show the answer")
        new = edit["content"]["m.new_content"]
        assert question in new["body"] and "/f/" not in new["body"]
        # Everything that offered the form goes with the request: the personal link, the bot's 📝.
        dm_room = await world.human.direct_room_from(bot)
        await world.human.expect(dm_room, is_edit_of(sent["event_id"], bot, "Answered"), what="the link edited away")
        # The record of the link goes with the request's other spent rows, past the retention.
        service = api.app[SERVICE]
        assert await api.app[STORE].state.get(LINKS_SENT, created["id"]) is not None
        service.clock = lambda: time.time() + 8 * 86400
        await service.prune_spent(force=True)
        assert await api.app[STORE].state.get(LINKS_SENT, created["id"]) is None
        await world.human.expect(room, lambda e: e.get("type") == "m.room.redaction" and form_key["event_id"] in (
            e.get("redacts"), (e.get("content") or {}).get("redacts")), what="the bot's 📝 taken back")


async def test_asking_for_the_form_twice_gives_the_same_link(world: World) -> None:
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        question = f"Twice? {uuid.uuid4().hex[:6]}"
        created = await api.create(request_body(question, schema=FORM_SCHEMA))
        card = await world.human.expect(world.room_id, is_card(world.bot_id, question), what="the card")
        room, bot = world.room_id, world.bot_id

        def link_in(event: dict[str, Any]) -> str | None:
            found = re.search(r"http://127\.0\.0\.1:8080/f/\S+", event["content"].get("body", ""))
            return found.group(0) if found else None

        first = await world.human.react(room, card["event_id"], FORM_KEY)
        sent = await world.human.direct_message(bot, lambda e: link_in(e) is not None, what="the personal link")
        # A 📝 taken back and given again (a person's second ask): another message, the same live link.
        await world.human.client.room_redact(room, first)
        await world.human.react(room, card["event_id"], FORM_KEY)
        again = await world.human.direct_message(
            bot, lambda e: link_in(e) is not None and e["event_id"] != sent["event_id"], what="the link again")
        assert link_in(again) == link_in(sent)
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=created["id"])
        assert [e["data"]["for"] for e in entries if e["event"] == "link_minted"] == [
            f"matrix:{world.human.user_id}"]


async def test_a_reply_or_a_form_ask_past_the_deadline_before_the_sweep_is_told_it_expired(
        world: World, storage_url: str) -> None:
    # The deadline has passed and the sweeper has not run: a typed `field: value` reply and a 📝 each apply
    # it there and then, and the person reads what they would after the sweep. Expired once; no link minted.
    human, room, bot = world.human, world.room_id, world.bot_id
    async with running_app(world.settings(storage_url=storage_url), connector_classes=[MatrixConnector]) as api:
        await started(api)
        question = f"Late? {uuid.uuid4().hex[:6]}"
        created = await api.create(request_body(question, schema=FORM_SCHEMA, timeout_seconds=600))
        card = await human.expect(room, is_card(bot, question), what="the card")
        async with sweeper_held(api):
            api.app[SERVICE].clock = lambda: time.time() + 3600
            reply_id = await human.reply(room, card, "port: 5432\nenv: canary")
            notice = await human.expect(room, is_notice_to(reply_id, bot), what="the notice")
            assert "This question expired." in notice["content"]["body"]
            await human.react(room, card["event_id"], FORM_KEY)
            told = await human.direct_message(bot, lambda e: "expired" in e["content"].get("body", ""),
                                              what="the private notice")
            assert "This question expired." in told["content"]["body"]
        events = [e["event"] for e in await api.journal(created["id"])]
        assert events.count("expired") == 1 and "link_minted" not in events


@VERSIONS
async def test_single_value_requests_by_thread_bare_value_and_reactions(world: World, room_version: str | None) -> None:
    tag = uuid.uuid4().hex[:6]
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        free = await api.create(request_body(f"Free text? {tag}"))
        enum = await api.create(request_body(f"Which track? {tag}",
                                             schema={"type": "string", "enum": ["canary", "stable"]}))
        yes_no = await api.create(request_body(f"Proceed? {tag}", schema={"type": "boolean"}))
        approval = await api.create(request_body(f"Drop the table? {tag}", kind="approval"))
        approval2 = await api.create(request_body(f"Rotate keys? {tag}", kind="approval"))
        quoted = await api.create(request_body(f"Latency budget? {tag}"))
        human, room = world.human, world.room_id
        cards = {}
        for name, question in (("free", "Free text?"), ("enum", "Which track?"), ("yes_no", "Proceed?"),
                               ("approval", "Drop the table?"), ("approval2", "Rotate keys?"),
                               ("quoted", "Latency budget?")):
            cards[name] = await human.expect(room, is_card(world.bot_id, f"{question} {tag}"), what=name)

        assert "To answer, reply to this message with your answer." in cards["free"]["content"]["body"]
        assert "reply with one of: canary, stable" in cards["enum"]["content"]["body"]
        assert "reply yes or no" in cards["yes_no"]["content"]["body"]
        assert "reply approve or reject" in cards["approval"]["content"]["body"]
        assert "<table>" not in cards["enum"]["content"]["formatted_body"]

        await human.in_thread(room, cards["free"]["event_id"], "Ship it on Friday")
        await human.reply(room, cards["enum"], "Stable")
        await human.react(room, cards["yes_no"]["event_id"], THUMBS_UP + "\ufe0f")
        await human.react(room, cards["approval"]["event_id"], THUMBS_DOWN)
        await human.reply(room, cards["approval2"], "approve because the window is open")
        # A reply without a fallback (clients dropped them) whose own text starts with ">": kept whole.
        await human.send(room, {"msgtype": "m.text", "body": "> 5 ms is fine",
                                "m.relates_to": {"m.in_reply_to": {"event_id": cards["quoted"]["event_id"]}}})

        results = {name: await api.wait(req["id"], timeout=30) for name, req in
                   (("free", free), ("enum", enum), ("yes_no", yes_no), ("approval", approval),
                    ("approval2", approval2), ("quoted", quoted))}
        assert {k: v["status"] for k, v in results.items()} == dict.fromkeys(results, "answered")
        assert results["free"]["response"] == "Ship it on Friday"
        assert results["enum"]["response"] == "stable"
        assert results["yes_no"]["response"] is True
        assert results["approval"]["response"] == {"decision": "reject"}
        assert results["approval2"]["response"] == {"decision": "approve", "reason": "the window is open"}
        assert results["quoted"]["response"] == "> 5 ms is fine"
        assert {v["answered_by"] for v in results.values()} == {f"matrix:{human.user_id}"}
        # An outcome says the decision, and the reason.
        await human.expect(room, is_edit_of(cards["approval"]["event_id"], world.bot_id,
                                            f"❌ Rejected by {human.user_id} via Matrix"), what="rejected")
        approved = await human.expect(room, is_edit_of(cards["approval2"]["event_id"], world.bot_id,
                                                       f"✅ Approved by {human.user_id} via Matrix"), what="approved")
        assert "Reason: the window is open" in approved["content"]["m.new_content"]["body"]


# -- refusals -------------------------------------------------------------------------


@VERSIONS
async def test_invalid_answer_stranger_and_sensitive_reply_are_refused(
        world: World, room_version: str | None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    tag = uuid.uuid4().hex[:6]
    human, stranger, room, bot = world.human, world.stranger, world.room_id, world.bot_id
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        # The bot created the room: its power is 100 in v10 and implicit (creator) in v12.
        assert "lacks the power to redact" not in caplog.text
        form = await api.create(request_body(f"Deploy? {tag}", schema=FORM_SCHEMA))
        secret_question = f"Enter the OTP sent to you {tag}"
        secret = await api.create(request_body(secret_question, sensitive=True,
                                               schema={"type": "string", "pattern": "^[0-9]{6}$"}))
        card = await human.expect(room, is_card(bot, f"Deploy? {tag}"), what="the form card")
        secret_card = await human.expect(room, is_card(bot, "A sensitive request"), what="the sensitive card")
        # The sensitive card holds generic text and the link only.
        assert secret_question not in secret_card["content"]["body"]
        assert secret_question not in secret_card["content"]["formatted_body"]
        assert "/f/" not in secret_card["content"]["body"] and FORM_KEY in secret_card["content"]["body"]

        # An invalid answer: a threaded reply lists each error; nothing resumes.
        bad_id = await human.reply(room, card, "port: 99999\nenv: production\ncolour: red")
        notice = await human.expect(room, is_notice_to(bad_id, bot), what="the error list")
        assert relates(notice)["event_id"] == card["event_id"]
        errors = notice["content"]["body"]
        assert errors.startswith("That answer is not valid:")
        assert "- colour: unknown field" in errors
        assert "- port: Enter a whole number from 1 to 65535." in errors
        assert "- env: Choose one of: canary, stable." in errors
        assert "<li>port: Enter a whole number from 1 to 65535.</li>" in notice["content"]["formatted_body"]
        # Core's own validation (no unreadable lines) answers the same way.
        bad_again = await human.in_thread(room, card["event_id"], "port: 0\nenv: stable")
        notice = await human.expect(room, is_notice_to(bad_again, bot), what="the second error list")
        assert "- port: Enter a whole number from 1 to 65535." in notice["content"]["body"]

        # A stranger: told once, privately; the room hears nothing, nothing changes.
        stranger_ids = [await stranger.reply(room, card, "port: 443\nenv: stable"),
                        await stranger.in_thread(room, card["event_id"], "port: 80\nenv: stable")]
        await stranger.direct_message(bot, lambda e: "not authorized" in e["content"].get("body", ""),
                                      what="the stranger told privately")

        # A chat reply to the sensitive request: redacted, and pointed to the form.
        leaked_id = await human.reply(room, secret_card, "123456")
        pointer = await human.expect(room, is_notice_to(leaked_id, bot), what="the pointer to the form")
        assert "deleted" in pointer["content"]["body"]
        assert f"react {FORM_KEY} to the question" in pointer["content"]["body"]  # not to the notice itself
        # Handled in order: the stranger's messages were handled before this pointer.
        assert not [e for r, e in human.seen if r == room and e.get("sender") == bot and set(stranger_ids) & {
            relates(e).get("event_id"), (relates(e).get("m.in_reply_to") or {}).get("event_id")}]
        await stranger.sync()
        stranger_dm = await stranger.direct_room_from(bot)
        dms = [e for r, e in stranger.seen if r == stranger_dm and e.get("sender") == bot
               and e.get("type") == "m.room.message"]
        assert len(dms) == 1, dms
        fetched = await human.client.room_get_event(room, leaked_id)
        assert isinstance(fetched, RoomGetEventResponse), fetched
        assert fetched.event.source["content"] == {}
        assert fetched.event.source["unsigned"]["redacted_because"]["sender"] == bot

        # A secret-shaped reply to an ordinary request is not taken either, and leaves the room.
        token = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
        token_id = await human.in_thread(room, card["event_id"], f"port: 443\nenv: {token}")
        refusal = await human.expect(room, is_notice_to(token_id, bot), what="the secret refusal")
        assert "looked like a secret" in refusal["content"]["body"]
        fetched = await human.client.room_get_event(room, token_id)
        assert isinstance(fetched, RoomGetEventResponse) and fetched.event.source["content"] == {}

        status, body = await api.call("GET", f"/v1/requests/{form['id']}")
        assert body["status"] == "pending"
        status, body = await api.call("GET", f"/v1/requests/{secret['id']}")
        assert body["status"] == "pending"
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=secret["id"])
        assert [e["data"] for e in entries if e["event"] == "chat_reply_refused"] == [
            {"reason": "sensitive", "removed": True}]
        assert "123456" not in repr(entries)

        # The allowed human still can: editing the refused reply is a new attempt.
        good_id = await human.send(room, {
            "msgtype": "m.text", "body": "* port: 443\nenv: stable",
            "m.new_content": {"msgtype": "m.text", "body": "port: 443\nenv: stable"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": bad_id},
        })
        done = await api.wait(form["id"], timeout=30)
        assert done["response"] == {"port": 443, "env": "stable"}
        assert done["answered_by"] == f"matrix:{human.user_id}"
        await human.expect(room, is_reaction_on(good_id, "✅", bot), what="✅")


# -- notifications -----------------------------------------------------------------------


async def test_cards_and_reminders_notify_the_people_who_may_answer(world: World) -> None:
    """Measured as a client sees it: /sync's unread counts. An m.notice would raise nothing (the
    default push rules mute notices); the card and its reminder are m.text mentioning the allowed people."""
    human, stranger, room, bot = world.human, world.stranger, world.room_id, world.bot_id
    tag = uuid.uuid4().hex[:6]
    async with running_app(world.settings(remind_after_seconds=1), connector_classes=[MatrixConnector]) as api:
        await started(api)
        await human.sync()
        await stranger.sync()
        before, highlights_before = human.unread.get(room, (0, 0))
        await api.create(request_body(f"Who is on call? {tag}"))
        card = await human.expect(room, is_card(bot, f"Who is on call? {tag}"), what="the card")
        assert card["content"]["msgtype"] == "m.text"
        assert card["content"]["m.mentions"] == {"user_ids": [human.user_id]}
        assert f'href="https://matrix.to/#/{human.user_id}"' in card["content"]["formatted_body"]  # a pill
        after_card, highlights = await human.unread_in(room, above=before)
        assert highlights > highlights_before  # mentioned, not only counted

        reminder = await human.expect(room, lambda e: is_notice_to(card["event_id"], bot)(e)
                                      and "Reminder" in e["content"]["body"], what="the reminder")
        assert reminder["content"]["m.mentions"] == {"user_ids": [human.user_id]}
        _, highlights_after = await human.unread_in(room, above=after_card)
        assert highlights_after > highlights
        # The stranger reads the room, but is not who the question asks: never highlighted.
        await stranger.expect(room, lambda e: e.get("event_id") == reminder["event_id"], what="the reminder")
        assert stranger.unread.get(room, (0, 0))[1] == 0


# -- expiry and cancel ------------------------------------------------------------------


async def test_expiry_and_cancel_edit_the_card_and_late_replies_are_told(world: World) -> None:
    tag = uuid.uuid4().hex[:6]
    human, room, bot = world.human, world.room_id, world.bot_id
    async with running_app(world.settings(remind_after_seconds=1), connector_classes=[MatrixConnector]) as api:
        await started(api)
        short = await api.create(request_body(f"Quick one {tag}", timeout_seconds=1))
        await api.create(request_body(f"Take your time {tag}"))
        slow_card = await human.expect(room, is_card(bot, f"Take your time {tag}"), what="the slow card")
        reminder = await human.expect(room, lambda e: is_notice_to(slow_card["event_id"], bot)(e)
                                      and "Reminder" in e["content"]["body"], what="the reminder")
        assert relates(reminder)["event_id"] == slow_card["event_id"]  # in the card's thread
        doomed = await api.create(request_body(f"Never mind {tag}"))
        short_card = await human.expect(room, is_card(bot, f"Quick one {tag}"), what="the short card")
        doomed_card = await human.expect(room, is_card(bot, f"Never mind {tag}"), what="the doomed card")

        status, body = await api.call("POST", f"/v1/requests/{doomed['id']}/cancel")
        assert status == 200 and body["status"] == "cancelled"
        await human.expect(room, is_edit_of(doomed_card["event_id"], bot, "Cancelled"), what="the cancelled edit")
        assert (await api.wait(short["id"], timeout=10))["status"] == "expired"
        await human.expect(room, is_edit_of(short_card["event_id"], bot, "Expired"), what="the expired edit")

        late_id = await human.reply(room, doomed_card, "too late?")
        notice = await human.expect(room, is_notice_to(late_id, bot), what="the closed notice")
        assert "This question was cancelled." in notice["content"]["body"]
        status, body = await api.call("GET", f"/v1/requests/{doomed['id']}")
        assert body["status"] == "cancelled"


# -- restart ------------------------------------------------------------------------


class SmallTimelineConnector(MatrixConnector):
    """Two events per sync: a few messages while down make the gap that must be paged in."""

    timeline_limit = 2


async def test_restart_neither_replays_nor_loses_an_answer(world: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    tag = uuid.uuid4().hex[:6]
    human, room, bot = world.human, world.room_id, world.bot_id
    settings = world.settings()
    async with running_app(settings, connector_classes=[SmallTimelineConnector]) as api:
        await started(api)
        first = await api.create(request_body(f"Before the restart {tag}"))
        second = await api.create(request_body(f"Across the restart {tag}"))
        first_card = await human.expect(room, is_card(bot, f"Before the restart {tag}"), what="card 1")
        second_card = await human.expect(room, is_card(bot, f"Across the restart {tag}"), what="card 2")
        first_reply = await human.reply(room, first_card, "first answer")
        assert (await api.wait(first["id"], timeout=30))["response"] == "first answer"
        await human.expect(room, is_reaction_on(first_reply, "✅", bot), what="✅ on the first answer")
        await human.expect(room, is_edit_of(first_card["event_id"], bot, "Answered"), what="the first edit")

    # While the bot is down: the answer, then more chatter than one sync returns.
    second_reply = await human.reply(room, second_card, "second answer")
    for n in range(4):
        await human.send(room, {"msgtype": "m.text", "body": f"chatter {n}"})
    await human.sync()
    mark = len(human.seen)

    # Synapse answers a repeated /sync (same user, token, filter and timeout) from a
    # cache: the long-poll the first instance left behind would return just the
    # first event of the gap. Another timeout makes the restarted bot see the gap.
    restarted = world.settings(sync_timeout_ms=29000)
    # The first instance may have paged in events of its own (its cards and reactions in one sync).
    logged = len(caplog.records)
    async with running_app(restarted, connector_classes=[SmallTimelineConnector]) as api:
        await started(api)
        done = await api.wait(second["id"], timeout=30)
        assert done["status"] == "answered" and done["response"] == "second answer"
        await human.expect(room, is_reaction_on(second_reply, "✅", bot), what="✅ on the second answer")
        # Events are handled in order, so a replay of the first answer would show before this ✅.
        after = [e for r, e in human.seen[mark:] if r == room and e.get("sender") == bot]
        assert after, "the bot's reaction should be among the new events"
        replayed = [e for e in after if first_reply in (relates(e).get("event_id"),
                                                        (relates(e).get("m.in_reply_to") or {}).get("event_id"))]
        assert replayed == []
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=first["id"])
        assert [e["event"] for e in entries].count("answered") == 1
        paged = [r for r in caplog.records[logged:] if r.getMessage() == "matrix: paged in missed events"]
        assert paged and paged[0].count >= 3  # the gap was longer than one sync's timeline


async def test_a_batch_handled_again_after_a_crash_stays_quiet(world: World) -> None:
    """A crash between handling a batch and saving its position replays that batch."""
    tag = uuid.uuid4().hex[:6]
    human, room, bot = world.human, world.room_id, world.bot_id
    url = f"sqlite:///{world.tmp_path / 'handraise.db'}"
    state_key = f"next_batch:{bot}"
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        replayed = await api.create(request_body(f"Answered before the crash {tag}"))
        card = await human.expect(room, is_card(bot, f"Answered before the crash {tag}"), what="the card")
        position_before_answer = await api.app[STORE].state.get("matrix", state_key)
        reply_id = await human.reply(room, card, "once")
        assert (await api.wait(replayed["id"], timeout=30))["response"] == "once"
        await human.expect(room, is_reaction_on(reply_id, "✅", bot), what="✅")

    store = Store(url=url)  # the crash: the position saved after the answer is lost
    await store.open()
    try:
        await store.state.set("matrix", state_key, position_before_answer)
    finally:
        await store.close()
    mark = len(human.seen)

    async with running_app(world.settings(sync_timeout_ms=29000), connector_classes=[MatrixConnector]) as api:
        await started(api)
        later = await api.create(request_body(f"After the crash {tag}"))
        later_card = await human.expect(room, is_card(bot, f"After the crash {tag}"), what="the later card")
        later_reply = await human.reply(room, later_card, "twice?")
        assert (await api.wait(later["id"], timeout=30))["response"] == "twice?"
        # Handled in order: the replayed reply was handled before this ✅.
        await human.expect(room, is_reaction_on(later_reply, "✅", bot), what="✅ on the later reply")
        about_replay = [e for r, e in human.seen[mark:] if r == room and e.get("sender") == bot
                        and reply_id in (relates(e).get("event_id"),
                                         (relates(e).get("m.in_reply_to") or {}).get("event_id"))]
        assert about_replay == []  # no "already answered", no second ✅
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=replayed["id"])
        assert [e["event"] for e in entries].count("answered") == 1


class PoisonedConnector(MatrixConnector):
    """Fails on any message saying "boom", as a bug on one odd event would."""

    async def _handle_event(self, room_id: str, source: dict[str, Any]) -> None:
        if "boom" in str((source.get("content") or {}).get("body", "")):
            raise RuntimeError("a bug on one event")
        await super()._handle_event(room_id, source)


async def test_an_event_that_fails_does_not_stall_the_answers_behind_it(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    human, room, bot = world.human, world.room_id, world.bot_id
    async with running_app(world.settings(), connector_classes=[PoisonedConnector]) as api:
        await started(api)
        request = await api.create(request_body("Still standing?"))
        card = await human.expect(room, is_card(bot, "Still standing?"), what="the card")
        await human.reply(room, card, "boom")
        await human.reply(room, card, "still here")
        done = await api.wait(request["id"], timeout=30)
        assert done["response"] == "still here"
        assert "matrix: failed to handle an event" in caplog.text


# -- joining, power and encryption ---------------------------------------------------------


async def test_invite_to_a_configured_room_is_joined_and_missing_redact_power_is_said(
        synapse: SynapseServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    caplog.set_level(logging.INFO)
    bot_id, bot_token, _ = synapse.register_user(unique_localpart("bot"), PASSWORD)
    human = Human(synapse, "owner")
    try:
        created = await human.client.room_create(room_version="10")
        assert isinstance(created, RoomCreateResponse), created
        room = created.room_id
        world = World(synapse, bot_id, bot_token, human, human, room, tmp_path)
        async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
            await started(api)
            assert f"cannot use room {room}" in caplog.text  # not invited yet: said, not hidden
            invited = await human.client.room_invite(room, bot_id)
            assert invited.__class__.__name__ == "RoomInviteResponse", invited
            await human.expect(room, lambda e: e.get("type") == "m.room.member" and e.get("state_key") == bot_id
                               and (e.get("content") or {}).get("membership") == "join", what="the bot joining")
            secret = await api.create(request_body("Your PIN please", sensitive=True))
            card = await human.expect(room, is_card(bot_id, "A sensitive request"), what="the sensitive card")
            leaked = await human.reply(room, card, "4321")
            pointer = await human.expect(room, is_notice_to(leaked, bot_id), what="the pointer")
            assert "please delete your reply" in pointer["content"]["body"]
            assert f"lacks the power to redact in room {room}" in caplog.text
            status, body = await api.call("GET", f"/v1/requests/{secret['id']}")
            assert body["status"] == "pending"
    finally:
        await human.client.close()


async def test_encrypted_room_is_reported_at_start_and_gets_no_card(
        synapse: SynapseServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    caplog.set_level(logging.INFO)
    bot_id, bot_token, _ = synapse.register_user(unique_localpart("bot"), PASSWORD)
    human = Human(synapse, "owner")
    encryption = {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
    try:
        created = await human.client.room_create(invite=[bot_id], initial_state=[encryption])
        assert isinstance(created, RoomCreateResponse), created
        world = World(synapse, bot_id, bot_token, human, human, created.room_id, tmp_path)
        async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
            await started(api)
            assert "end-to-end encrypted rooms are not supported" in caplog.text
            assert f"room {created.room_id} is end-to-end encrypted" in caplog.text
            request = await api.create(request_body("Anyone there?"))
            await api.app[DISPATCHER].idle()
            status, body = await api.call("GET", f"/v1/requests/{request['id']}", key=OPERATOR_KEY)
            assert status == 200
            assert [(d["status"], "end-to-end encrypted" in (d["last_error"] or "")) for d in body["deliveries"]] \
                == [("failed", True)]
            # A message the bot cannot read is said, not silently dropped.
            await human.send(created.room_id, {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEn",
                                               "sender_key": "abc", "session_id": "def", "device_id": "GHI"},
                             "m.room.encrypted")
            await until(lambda: "received an encrypted message" in caplog.text, what="the unreadable report",
                        timeout=15)
    finally:
        await human.client.close()


# -- password login and the store ------------------------------------------------------


async def test_password_login_is_kept_in_store_path_and_renewed_when_revoked(world: World) -> None:
    store = world.tmp_path / "matrix-store"
    settings = world.settings(access_token=None, password=PASSWORD, device_id="HANDRAISETEST",
                              store_path=str(store))
    async with running_app(settings, connector_classes=[MatrixConnector]) as api:
        connector = await started(api)
        first_token = connector.client.access_token
        assert first_token and first_token != world.bot_token
        assert connector.client.device_id == "HANDRAISETEST"
    (saved,) = store.glob("session-*.json")
    assert saved.stat().st_mode & 0o777 == 0o600
    assert json.loads(saved.read_text())["access_token"] == first_token

    async with running_app(settings, connector_classes=[MatrixConnector]) as api:
        connector = await started(api)
        assert connector.client.access_token == first_token  # reused: no new login

        # Log that session out: the next start logs in again and keeps the new session.
        assert (await connector.client.logout()).__class__.__name__ == "LogoutResponse"
    async with running_app(settings, connector_classes=[MatrixConnector]) as api:
        connector = await started(api)
        renewed = connector.client.access_token
        assert renewed and renewed != first_token
        assert json.loads(saved.read_text())["access_token"] == renewed
        created = await api.create(request_body("Still listening?", schema={"type": "boolean"}))
        card = await world.human.expect(world.room_id, is_card(world.bot_id, "Still listening?"), what="card")
        await world.human.react(world.room_id, card["event_id"], THUMBS_UP)
        assert (await api.wait(created["id"], timeout=30))["response"] is True


# -- several instances on PostgreSQL --------------------------------------------------------


async def test_a_stop_ends_the_sync_loop_even_when_a_cancellation_is_lost(world: World) -> None:
    """Python 3.11's asyncio.wait_for (the leadership check) returns a result that arrived together with
    the cancellation. The loop then went on to the batch lock the stop held: neither ever ended, and the
    next instance never took over."""
    cm = running_app(world.settings(sync_timeout_ms=1000), connector_classes=[MatrixConnector])
    api = await cm.__aenter__()
    try:
        await started(api)
        leadership = api.app[CONNECTORS]["matrix"].leadership
        parked = asyncio.Event()
        lost = []

        async def alive_losing_one_cancellation(name: str) -> bool:
            if lost:
                return True
            parked.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                lost.append(name)  # the result came with the cancellation: it is returned, not raised
            return True

        leadership.alive = alive_losing_one_cancellation  # type: ignore[method-assign]
        await asyncio.wait_for(parked.wait(), timeout=30)
    finally:
        stopping = asyncio.ensure_future(cm.__aexit__(None, None, None))
        # Returns the moment the app is down; its stop grace is 10 s, a hang never ends.
        done, _ = await asyncio.wait({stopping}, timeout=45)
    assert stopping in done, "the stop never ended"
    stopping.result()
    assert lost == ["matrix-sync"]


class QuickFollower(MatrixConnector):
    follower_poll_seconds = 0.2


async def test_one_instance_runs_the_sync_loop_and_another_takes_over(world: World, pg_url: str) -> None:
    human, room, bot = world.human, world.room_id, world.bot_id
    settings = world.settings(storage_url=pg_url)
    first_cm = running_app(settings, connector_classes=[QuickFollower], instance_id="first")
    first = await first_cm.__aenter__()
    second_cm = running_app(settings, connector_classes=[QuickFollower], instance_id="second")
    try:
        leader = await started(first)
        second = await second_cm.__aenter__()
        follower = second.app[CONNECTORS]["matrix"]
        assert not await second.app[CONNECTORS]["matrix"].leadership.take("matrix-sync")

        one = await first.create(request_body("Answered while both run"))
        two = await first.create(request_body("Answered after the leader left"))
        card_one = await human.expect(room, is_card(bot, "Answered while both run"), what="card one")
        card_two = await human.expect(room, is_card(bot, "Answered after the leader left"), what="card two")
        reply_one = await human.reply(room, card_one, "one")
        assert (await second.wait(one["id"], timeout=30))["response"] == "one"
        await human.expect(room, is_reaction_on(reply_one, "✅", bot), what="✅ on one")
        assert leader.synced.is_set() and not follower.synced.is_set()

        await first_cm.__aexit__(None, None, None)
        first_cm = None
        await asyncio.wait_for(follower.synced.wait(), timeout=30)
        reply_two = await human.reply(room, card_two, "two")
        done = await second.wait(two["id"], timeout=30)
        assert done["response"] == "two" and done["answered_by"] == f"matrix:{human.user_id}"
        await human.expect(room, is_reaction_on(reply_two, "✅", bot), what="✅ on two")
        await human.expect(room, is_edit_of(card_two["event_id"], bot, "Answered"), what="card two edited")
        # Each answer was handled by exactly one instance: one ✅ each, no "already answered" notices.
        ticks = [e for r, e in human.seen if r == room and e.get("type") == "m.reaction" and e.get("sender") == bot
                 and relates(e).get("key") == "✅"]
        assert sorted(relates(e)["event_id"] for e in ticks) == sorted([reply_one, reply_two])
        assert not [e for r, e in human.seen if r == room and "already answered" in
                    (e.get("content") or {}).get("body", "")]
    finally:
        await second_cm.__aexit__(None, None, None)
        if first_cm is not None:
            await first_cm.__aexit__(None, None, None)


class SlowToRetry(QuickFollower):
    backoff_initial = 60.0  # a failed leader waits long before it tries again


async def test_a_leader_whose_sync_fails_lets_another_instance_lead_during_its_backoff(
        world: World, pg_url: str) -> None:
    human, room, bot = world.human, world.room_id, world.bot_id
    settings = world.settings(storage_url=pg_url, sync_timeout_ms=1000)
    async with running_app(settings, connector_classes=[SlowToRetry], instance_id="first") as first, \
            running_app(settings, connector_classes=[QuickFollower], instance_id="second") as second:
        leader = await started(first)
        follower = second.app[CONNECTORS]["matrix"]
        assert not follower.synced.is_set()

        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            raise aiohttp.ClientConnectionError("the leader lost its network")

        leader.client.sync = unreachable  # type: ignore[method-assign]
        # Its next sync fails and it backs off for a minute: the lock must not wait that long with it.
        await asyncio.wait_for(follower.synced.wait(), timeout=30)
        request = await second.create(request_body("Who leads now?"))
        card = await human.expect(room, is_card(bot, "Who leads now?"), what="the card")
        await human.reply(room, card, "the second")
        assert (await second.wait(request["id"], timeout=30))["response"] == "the second"


async def test_a_reaction_faster_than_the_cards_record_still_answers(world: World) -> None:
    """The homeserver has the card, the store not yet: a 👍 the sync loop reads in between is not lost."""
    human, room, bot = world.human, world.room_id, world.bot_id
    async with running_app(world.settings(sync_timeout_ms=1000), connector_classes=[MatrixConnector]) as api:
        await started(api)
        chat_refs = api.app[CONNECTORS]["matrix"].chat_refs
        recorded, missed = asyncio.Event(), asyncio.Event()
        remember, lookup = chat_refs.remember_message, chat_refs.lookup_message

        async def remember_late(**kwargs: Any) -> Any:
            await recorded.wait()
            return await remember(**kwargs)

        async def lookup_noting(**kwargs: Any) -> Any:
            found = await lookup(**kwargs)
            if found is None:
                missed.set()
            return found

        chat_refs.remember_message = remember_late  # type: ignore[method-assign]
        chat_refs.lookup_message = lookup_noting  # type: ignore[method-assign]
        request = await api.create(request_body("Ship it?", schema={"type": "boolean"}))
        card = await human.expect(room, is_card(bot, "Ship it?"), what="the card")
        await human.react(room, card["event_id"], THUMBS_UP)
        await asyncio.wait_for(missed.wait(), timeout=30)  # looked for before it was recorded
        recorded.set()
        done = await api.wait(request["id"], timeout=30)
        assert (done["status"], done["response"]) == ("answered", True)

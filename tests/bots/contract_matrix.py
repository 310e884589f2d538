"""The Matrix contract driver: a human on a real Synapse replies, reacts and reads the bot's notices.

Matrix has no buttons: "pressing" approve/reject is a 👍/👎 reaction on the card, any other choice a reply."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from conftest import Api
from nio import RoomGetEventResponse

from handraise.bots.matrix import MatrixConnector
from handraise.bots.matrix.cards import FORM_KEY, THUMBS_DOWN, THUMBS_UP
from handraise.core.appkeys import CONNECTORS
from handraise.core.connectors import Connector
from harness.synapse import SynapseServer, unique_localpart
from tests.bots.contract import Action, ConnectorDriver, Posted, register_driver
from tests.bots.matrix_helpers import PASSWORD, Human, bot_creates_room, is_notice_to, relates

_REACTIONS = {"approve": THUMBS_UP, "reject": THUMBS_DOWN, "yes": THUMBS_UP, "no": THUMBS_DOWN}



class MatrixDriver(ConnectorDriver):
    channel = "matrix"

    def __init__(self, server: SynapseServer) -> None:
        self.server = server
        self.bot_id = ""
        self.bot_token = ""
        self.room_id = ""
        self.people: dict[bool, Human] = {}  # stranger? -> the person

    async def start(self) -> None:
        self.bot_id, self.bot_token, _ = self.server.register_user(unique_localpart("bot"), PASSWORD)
        self.people = {False: Human(self.server, "human"), True: Human(self.server, "stranger")}
        self.room_id = await bot_creates_room(self.server, self.bot_token, self.bot_id, room_version=None,
                                              invite=[p.user_id for p in self.people.values()])
        for person in self.people.values():
            await person.join(self.room_id)

    async def stop(self) -> None:
        for person in self.people.values():
            await person.client.close()

    @property
    def human(self) -> Human:
        return self.people[False]

    def connector_classes(self) -> list[type[Connector]]:
        return [MatrixConnector]

    def config(self) -> dict[str, Any]:
        return {"matrix": {
            "homeserver": self.server.base_url, "user_id": self.bot_id, "access_token": self.bot_token,
            "tenants": {"acme": {"room_ids": [self.room_id], "allowed_users": [self.human.user_id]}},
        }}

    async def ready(self, api: Api) -> None:
        await asyncio.wait_for(api.app[CONNECTORS]["matrix"].synced.wait(), timeout=30)

    def principal(self) -> str:
        return f"matrix:{self.human.user_id}"

    def display_name(self) -> str:
        return self.human.user_id

    # -- the human's side ------------------------------------------------------

    async def card(self, posted: Posted) -> dict[str, Any]:
        card_id = posted.ref["event_id"]
        return await self.human.expect(self.room_id, lambda e: e.get("event_id") == card_id, what="the card")

    async def press(self, posted: Posted, choice: str, *, stranger: bool = False) -> Action:
        key = _REACTIONS.get(choice.lower())
        if key is None:
            return await self.reply(posted, choice, stranger=stranger)
        event_id = await self.people[stranger].react(self.room_id, posted.ref["event_id"], key)
        return Action(posted=posted, kind="press", stranger=stranger, handle={"event_id": event_id})

    async def reply(self, posted: Posted, text: str, *, stranger: bool = False) -> Action:
        event_id = await self.people[stranger].reply(self.room_id, await self.card(posted), text)
        return Action(posted=posted, kind="reply", stranger=stranger, handle={"event_id": event_id})

    async def notice(self, action: Action) -> dict[str, Any]:
        """The bot's threaded notice answering what the person did."""
        return await self.human.expect(self.room_id, is_notice_to(action.handle["event_id"], self.bot_id),
                                       what="the bot's notice")

    async def told(self, action: Action) -> str:
        if action.stranger:  # strangers are told privately, once per request
            return str((await self.private_refusal(self.people[True]))["content"]["body"])
        return str((await self.notice(action))["content"]["body"])

    async def private_refusal(self, person: Human) -> dict[str, Any]:
        return await person.direct_message(self.bot_id, lambda e: "not authorized" in
                                           (e.get("content") or {}).get("body", "").lower(), what="the refusal")

    async def assert_removed(self, action: Action) -> None:
        fetched = await self.human.client.room_get_event(self.room_id, action.handle["event_id"])
        assert isinstance(fetched, RoomGetEventResponse), fetched
        assert fetched.event.source["content"] == {}  # redacted: gone from the room's history

    async def question_text(self, posted: Posted) -> str:
        return str((await self.card(posted))["content"]["body"])

    async def outcome_text(self, posted: Posted) -> str:
        card_id = posted.ref["event_id"]
        edits = [e for room, e in self.human.seen if room == self.room_id and e.get("sender") == self.bot_id
                 and relates(e).get("rel_type") == "m.replace" and relates(e).get("event_id") == card_id]
        assert edits, "the card was never edited"
        return str(edits[-1]["content"]["m.new_content"]["body"])

    async def open_form(self, posted: Posted, *, stranger: bool = False) -> str | None:
        """A 📝 on the card, as the card says: the bot answers in a direct message."""
        person = self.people[stranger]
        before = {e.get("event_id") for _, e in person.seen}
        await person.react(self.room_id, posted.ref["event_id"], FORM_KEY)
        if stranger:
            assert "/f/" not in (await self.private_refusal(person))["content"]["body"]
            return None
        sent = await person.direct_message(
            self.bot_id, lambda e: e.get("event_id") not in before
            and "/f/" in (e.get("content") or {}).get("body", ""), what="the personal link")
        found = re.search(r"https?://\S+/f/[A-Za-z0-9_-]+", sent["content"]["body"])
        return found[0] if found else None

    async def assert_no_buttons_left(self) -> None:
        """Every direct message that carried a link is edited to the outcome, without it."""
        person = self.human
        dm = await person.direct_room_from(self.bot_id)
        links = [e for room, e in person.seen if room == dm and e.get("sender") == self.bot_id
                 and not relates(e) and "/f/" in (e.get("content") or {}).get("body", "")]
        assert links, "no personal link was sent"
        for sent in links:
            edit = await person.expect(dm, lambda e, sent=sent: relates(e).get("rel_type") == "m.replace"
                                       and relates(e).get("event_id") == sent["event_id"], what="the link edited away")
            assert "/f/" not in str(edit["content"]), edit

    async def reminder_text(self, posted: Posted) -> str:
        card_id = posted.ref["event_id"]
        reminder = await self.human.expect(
            self.room_id, lambda e: e.get("sender") == self.bot_id and relates(e).get("event_id") == card_id
            and "Reminder" in str((e.get("content") or {}).get("body", "")), what="a reminder")
        return str(reminder["content"]["body"])

    async def shared_view(self, posted: Posted) -> str:
        await self.card(posted)
        await self.human.sync()  # what the bot sent until now
        return "\n".join(str((e.get("content") or {}).get("body", "")) for room, e in self.human.seen
                         if room == self.room_id and e.get("sender") == self.bot_id)

    async def assert_refused(self, action: Action) -> None:
        """Told privately, once per request: a direct message from the bot, nothing in the room."""
        person = self.people[action.stranger]
        told = await self.private_refusal(person)
        assert "/f/" not in told["content"]["body"]
        public = [e for r, e in person.seen if r == self.room_id and e.get("sender") == self.bot_id
                  and "not authorized" in (e.get("content") or {}).get("body", "").lower()]
        assert public == []

    async def assert_reply_removed(self, action: Action) -> None:
        body = (await self.notice(action))["content"]["body"]
        assert "deleted" in body and "form" in body, body
        fetched = await self.human.client.room_get_event(self.room_id, action.handle["event_id"])
        assert isinstance(fetched, RoomGetEventResponse), fetched
        assert fetched.event.source["content"] == {}  # redacted: gone from the room's history

    async def assert_withdrawn(self, posted: Posted, outcome: str) -> None:
        card_id = posted.ref["event_id"]

        def edited(event: dict[str, Any]) -> bool:
            rel = relates(event)
            new = (event.get("content") or {}).get("m.new_content") or {}
            return (event.get("sender") == self.bot_id and rel.get("rel_type") == "m.replace"
                    and rel.get("event_id") == card_id and outcome.lower() in new.get("body", "").lower())

        edit = await self.human.expect(self.room_id, edited, what=f"the card edited to {outcome}")
        new = edit["content"]["m.new_content"]
        assert "/f/" not in new["body"] and "fill the form" not in new["formatted_body"]  # no way in left


@register_driver("matrix")
def matrix_driver(request: pytest.FixtureRequest) -> MatrixDriver:
    return MatrixDriver(request.getfixturevalue("synapse"))

"""A form link or sign-in sent to a person's own Matrix identity (``deliver: true``), against a real Synapse: it
lands in the direct room the bot keeps with them (the one assigned cards and 📝 links use), never in the tenant's
room, and only while that room is theirs alone: once they let someone in, a new direct room takes its place."""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import quote

import pytest

from conftest import running_app
from handraise.bots.matrix import MatrixConnector
from handraise.webforms.connector import WebFormsChannel
from harness.fixtures import synapse  # noqa: F401  (registers the session fixture)
from tests.bots.private_helpers import (
    Note,
    approval,
    deliver_link,
    deliver_signin,
    prove_delivered_privately,
    token_of,
)
from tests.bots.test_matrix_direct import World, client_api, started, world  # noqa: F401  (the fixture)

pytestmark = pytest.mark.timeout(90)


def matrix_app(world: World) -> Any:
    """The app with the web channel (forms, inbox) and Matrix; alice may answer in acme's room, and ghost is a
    Matrix user this Synapse never registered."""
    return running_app(world.settings(), connector_classes=[WebFormsChannel, MatrixConnector])


async def members(world: World, room_id: str) -> set[str]:
    """Who is in ``room_id`` or invited there, as its state says."""
    state = await client_api(world, world.bot_token, f"/rooms/{quote(room_id)}/state")
    return {e["state_key"] for e in state if e["type"] == "m.room.member"
            and e["content"].get("membership") in ("join", "invite")}


class DirectRoom:
    """The messages the bot sent Alice in her direct rooms with it (every room it invited her to)."""

    def __init__(self, world: World) -> None:
        self.world, self.seen = world, 0
        self.rooms: list[str] = []

    def _sent(self) -> list[tuple[str, dict[str, Any]]]:
        return [(room, e) for room, e in self.world.alice.seen
                if e.get("sender") == self.world.bot_id and e.get("type") == "m.room.message"]

    def mark(self) -> None:
        self.seen = len(self._sent())

    async def one_new(self) -> Note:
        alice, bot = self.world.alice, self.world.bot_id
        # Sync, joining each direct room the bot invites her to, until its message shows.
        deadline = time.monotonic() + 30
        while not self._sent()[self.seen:]:
            assert time.monotonic() < deadline, "no private note arrived"
            await alice.sync()
            for invited, sender in list(alice.invited_by.items()):
                if sender == bot and invited not in alice.joined:
                    await alice.join(invited)
        await alice.sync()
        new = self._sent()[self.seen:]
        assert len(new) == 1, new  # one message, in her direct room, none in the tenant's room
        room, event = new[0]
        assert room != self.world.room_id and await members(self.world, room) == {alice.user_id, bot}
        self.rooms.append(room)
        content = event["content"]
        assert content["msgtype"] == "m.text"  # it notifies her
        text, link_line = content["body"].rsplit("\n\n", 1)
        button, url = link_line.split(": ", 1)
        assert f'<a href="{url}">{button}</a>' in content["formatted_body"]
        return Note(text, button, url)


async def test_matrix_sends_a_person_their_own_link_in_their_direct_room(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    async with matrix_app(world) as api:
        await started(api)
        inbox = DirectRoom(world)
        await prove_delivered_privately(api, inbox, caplog, channel="matrix", person="alice", name="Alice Example")
        # Both notes in one direct room: the one the bot keeps with her.
        assert len(set(inbox.rooms)) == 1


async def test_a_direct_room_the_person_shared_gets_no_more_links(world: World) -> None:
    alice, stranger, bot = world.alice, world.stranger, world.bot_id
    async with matrix_app(world) as api:
        await started(api)
        inbox = DirectRoom(world)
        inbox.mark()
        assert (await deliver_signin(api, "alice"))[0] == 202
        await inbox.one_new()
        (shared,) = inbox.rooms
        # Alice lets someone into her direct room with the bot.
        invited = await alice.client.room_invite(shared, stranger.user_id)
        assert invited.__class__.__name__ == "RoomInviteResponse", invited
        await stranger.join(shared)
        await stranger.sync()
        request = await api.create(approval("shared-1"))
        inbox.mark()
        status, body = await deliver_link(api, request["id"], "alice")
        assert (status, body["delivered_to"]) == (202, "matrix")
        # The link went to a new direct room with her alone; the stranger saw nothing of it.
        note = await inbox.one_new()
        assert inbox.rooms[-1] != shared
        await stranger.sync()
        assert not any(token_of(note.url) in str(e) for _, e in stranger.seen)


async def test_a_matrix_user_nobody_knows_gets_nothing(world: World) -> None:
    async with matrix_app(world) as api:
        await started(api)
        request = await api.create(approval("ghost-1"))
        for status, body in (await deliver_link(api, request["id"], "ghost"), await deliver_signin(api, "ghost")):
            assert (status, body["error"]) == (502, "not_delivered"), body
            assert not re.search(r"https?://", body["message"])

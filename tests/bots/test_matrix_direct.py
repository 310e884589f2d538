"""Matrix reaches assigned people in a direct room with the bot, against a real Synapse.

As Slack and Telegram do (``assigned_delivery``): the card goes to each assigned person on the allowlist
in the direct room the bot keeps with them, is answered there through the same answer path, and is
edited when the request ends. A person whose direct room cannot be opened gets a failed delivery and
still the room's card; a person with no Matrix id is reached in the room only."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from nio import RoomInviteResponse
from nio.api import RoomPreset
from conftest import Api, base_config, running_app, settings_from

from handraise.bots.matrix import MatrixConnector
from handraise.bots.matrix.cards import THUMBS_UP
from handraise.bots.matrix.direct import DIRECT_ROOMS
from handraise.core.appkeys import CONNECTORS, DELIVERIES, DISPATCHER, SERVICE, STORE
from handraise.core.deliveries import DeliveryRecord
from harness.fixtures import synapse  # noqa: F401  (registers the session fixture)
from harness.synapse import SynapseServer, unique_localpart
from tests.bots.matrix_helpers import PASSWORD, Human, bot_creates_room, is_card, is_edit_of, is_reaction_on

# A server this Synapse may not federate with: opening a direct room with Carol fails for good.
CAROL = "@carol:unreachable.example"
# A user this Synapse never registered (its server name is "localhost").
GHOST = "@ghost-never-registered:localhost"


@dataclass
class World:
    synapse: SynapseServer
    bot_id: str
    bot_token: str
    alice: Human
    bob: Human
    stranger: Human
    room_id: str
    tmp_path: Path

    def settings(self, *, storage_url: str | None = None, **matrix: Any) -> Any:
        people = [
            {"id": "alice", "name": "Alice Example", "matrix": self.alice.user_id, "groups": ["oncall"]},
            {"id": "bob", "name": "Bob Builder", "matrix": self.bob.user_id, "groups": ["oncall"]},
            {"id": "carol", "name": "Carol", "matrix": CAROL, "groups": ["oncall"]},
            {"id": "dave", "name": "Dave", "email": "dave@example.org", "groups": ["oncall"]},
            {"id": "ghost", "name": "Ghost", "matrix": GHOST},
        ]
        config = base_config(storage_url or f"sqlite:///{self.tmp_path / 'handraise.db'}")
        config["tenants"][0]["people"] = people
        config["matrix"] = {"homeserver": self.synapse.base_url, "user_id": self.bot_id,
                            "access_token": self.bot_token,
                            "tenants": {"acme": {"room_ids": [self.room_id], "allowed_users": ["group:oncall"]}},
                            **matrix}
        return settings_from(config)


@pytest.fixture
async def world(synapse: SynapseServer, tmp_path: Path) -> AsyncIterator[World]:  # noqa: F811
    bot_id, bot_token, _ = synapse.register_user(unique_localpart("bot"), PASSWORD)
    alice, bob, stranger = Human(synapse, "alice"), Human(synapse, "bob"), Human(synapse, "stranger")
    room_id = await bot_creates_room(synapse, bot_token, bot_id, room_version=None,
                                     invite=[alice.user_id, bob.user_id])
    await alice.join(room_id)
    await bob.join(room_id)
    try:
        yield World(synapse, bot_id, bot_token, alice, bob, stranger, room_id, tmp_path)
    finally:
        for human in (alice, bob, stranger):
            await human.client.close()


async def started(api: Api) -> MatrixConnector:
    connector = api.app[CONNECTORS]["matrix"]
    await asyncio.wait_for(connector.synced.wait(), timeout=30)
    return connector


async def ask(api: Api, question: str, **extra: Any) -> dict[str, Any]:
    return await api.create({"unique_id": f"dm-{uuid.uuid4().hex[:10]}", "message_for_user": question,
                             "channels": ["matrix"], "timeout_seconds": 120, **extra})


async def deliveries(api: Api, request: dict[str, Any]) -> dict[str, DeliveryRecord]:
    """The request's deliveries by target, once the dispatcher has settled them."""
    await api.app[DISPATCHER].idle()
    rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])
    return {row.target: row for row in rows}


async def client_api(world: World, token: str, path: str) -> Any:
    """A client-server API GET with ``token`` (what matrix-nio does not offer)."""
    async with aiohttp.ClientSession() as http, http.get(
            f"{world.synapse.base_url}/_matrix/client/v3{path}",
            headers={"Authorization": f"Bearer {token}"}) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_assigned_people_get_the_card_in_a_direct_room_answer_there_and_see_the_outcome(world: World) -> None:
    alice, bob, bot, room = world.alice, world.bob, world.bot_id, world.room_id
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        request = await ask(api, "Which port for the canary?", assign_to=["group:oncall"])
        rows = await deliveries(api, request)
        # Dave has no Matrix id: the room's card is his. Carol's direct room cannot be opened: a failed
        # delivery, and the room's card still reaches her.
        assert set(rows) == {room, alice.user_id, bob.user_id, CAROL}
        assert {t: r.status for t, r in rows.items()} == {room: "sent", alice.user_id: "sent",
                                                              bob.user_id: "sent", CAROL: "failed"}
        assert "M_FORBIDDEN" in (rows[CAROL].last_error or "")
        dm = rows[alice.user_id].ref["room_id"]
        assert dm not in (room, rows[bob.user_id].ref["room_id"])

        assert await alice.direct_room_from(bot) == dm
        # A DM as clients know one: the invite says is_direct, and the bot's m.direct lists the room.
        history = await client_api(world, alice.access_token, f"/rooms/{quote(dm)}/messages?dir=b&limit=50")
        invite = next(e for e in history["chunk"] if e["type"] == "m.room.member"
                      and e["state_key"] == alice.user_id and e["content"]["membership"] == "invite")
        assert invite["content"]["is_direct"] is True
        direct = await api.app[CONNECTORS]["matrix"]._account_data("m.direct")
        assert direct[alice.user_id] == [dm]

        card = await alice.expect(dm, is_card(bot, "Which port for the canary?"), what="the card in the DM")
        assert card["event_id"] == rows[alice.user_id].ref["event_id"]
        # A DM notifies its person without mentions.
        assert not card["content"]["m.mentions"].get("user_ids") and "For:" not in card["content"]["body"]
        reply = await alice.reply(dm, card, "8443")
        done = await api.wait(request["id"], timeout=30)
        assert (done["response"], done["answered_by"]) == ("8443", f"matrix:{alice.user_id}")
        await alice.expect(dm, is_reaction_on(reply, "✅", bot), what="✅ on the answer")
        await alice.expect(dm, is_edit_of(card["event_id"], bot, "Answered by Alice Example"), what="the DM edit")
        await alice.expect(room, is_edit_of(rows[room].ref["event_id"], bot, "Answered by Alice Example"),
                           what="the room's card edited")
        bob_dm = await bob.direct_room_from(bot)
        assert bob_dm == rows[bob.user_id].ref["room_id"]
        await bob.expect(bob_dm, is_edit_of(rows[bob.user_id].ref["event_id"], bot, "Answered by Alice Example"),
                         what="Bob's copy edited")


async def test_the_direct_room_is_reused_and_only_its_assigned_person_answers_there(world: World) -> None:
    alice, bob, stranger, bot = world.alice, world.bob, world.stranger, world.bot_id
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        first = await ask(api, "First question?", assign_to=["alice"])
        dm = (await deliveries(api, first))[alice.user_id].ref["room_id"]
        second = await ask(api, "Second question?", assign_to=["alice"])
        assert (await deliveries(api, second))[alice.user_id].ref["room_id"] == dm
        assert await alice.direct_room_from(bot) == dm
        assert [r for r, sender in alice.invited_by.items() if sender == bot] == [dm]

        # Alice lets Bob (on the allowlist, not assigned) and a stranger into her DM: neither answers there.
        for other in (bob, stranger):
            invited = await alice.client.room_invite(dm, other.user_id)
            assert invited.__class__.__name__ == "RoomInviteResponse", invited
            await other.join(dm)
        card = await alice.expect(dm, is_card(bot, "Second question?"), what="the second card")
        await bob.reply(dm, card, "mine")
        await stranger.reply(dm, card, "mine too")
        for other in (bob, stranger):
            told = await other.direct_message(bot, lambda e: "not authorized" in e["content"].get("body", ""),
                                              what="the private refusal")
            assert told["content"]["body"]
        refused = {e["principal"]: e["data"]["reason"] for e in await api.journal(second["id"])
                   if e["event"] == "answer_refused"}
        assert refused == {f"matrix:{bob.user_id}": "not_assigned", f"matrix:{stranger.user_id}": "not_authorized"}
        assert (await api.call("GET", f"/v1/requests/{second['id']}"))[1]["status"] == "pending"

        await alice.in_thread(dm, card["event_id"], "mine, really")
        assert (await api.wait(second["id"], timeout=30))["answered_by"] == f"matrix:{alice.user_id}"
        first_card = await alice.expect(dm, is_card(bot, "First question?"), what="the first card")
        status, _ = await api.call("POST", f"/v1/requests/{first['id']}/cancel")
        assert status == 200
        await alice.expect(dm, is_edit_of(first_card["event_id"], bot, "Cancelled"), what="the cancelled edit")


async def test_a_direct_only_tenant_uses_the_room_only_when_nobody_assigned_is_reachable(world: World) -> None:
    alice, bot, room = world.alice, world.bot_id, world.room_id
    async with running_app(world.settings(assigned_delivery="direct"), connector_classes=[MatrixConnector]) as api:
        await started(api)
        direct = await ask(api, "Only yours?", assign_to=["alice", "dave"])
        assert set(await deliveries(api, direct)) == {alice.user_id}
        nobody = await ask(api, "Dave's?", assign_to=["dave"])  # no Matrix id: the room it is
        rows = await deliveries(api, nobody)
        assert set(rows) == {room} and rows[room].status == "sent"
        plain = await ask(api, "Anyone's?")  # not assigned: the room, as always
        assert set(await deliveries(api, plain)) == {room}

        dm = await alice.direct_room_from(bot)
        card = await alice.expect(dm, is_card(bot, "Only yours?"), what="the card in the DM")
        await alice.reply(dm, card, "done")
        assert (await api.wait(direct["id"], timeout=30))["response"] == "done"
        assert not [e for r, e in alice.seen if r == room and "Only yours?" in str(e.get("content"))]


async def test_instances_opening_a_direct_room_at_once_agree_on_one(world: World, pg_url: str) -> None:
    """Two instances deliver to Alice at the same moment: the store settles one room, the other is left."""
    alice = world.alice
    settings = world.settings(storage_url=pg_url, assigned_delivery="room")
    async with running_app(settings, connector_classes=[MatrixConnector], instance_id="one") as one, \
            running_app(settings, connector_classes=[MatrixConnector], instance_id="two") as two:
        first, second = one.app[CONNECTORS]["matrix"], two.app[CONNECTORS]["matrix"]
        await first._ensure_connected()
        await second._ensure_connected()
        rooms = await asyncio.gather(first._open_direct(alice.user_id), second._open_direct(alice.user_id))
        assert rooms[0] == rooms[1]
        assert await one.app[STORE].state.get(DIRECT_ROOMS, alice.user_id) == rooms[0]
        # The bot stays only in the room settled (a room that lost, if any, it left).
        joined = (await client_api(world, world.bot_token, "/joined_rooms"))["joined_rooms"]
        assert rooms[0] in joined
        await alice.sync()
        invites = [r for r, sender in alice.invited_by.items() if sender == world.bot_id]
        # Both opened one (neither had settled yet), and one room lost.
        assert len(invites) == 2 and rooms[0] in invites
        assert [r for r in invites if r in joined] == [rooms[0]]
        assert await first._open_direct(alice.user_id) == rooms[0]


async def test_a_direct_room_its_person_encrypted_gives_way_and_reminders_reach_the_direct_card(
        world: World) -> None:
    alice, bot = world.alice, world.bot_id
    settings = world.settings(assigned_delivery="direct", remind_after_seconds=1)
    async with running_app(settings, connector_classes=[MatrixConnector]) as api:
        await started(api)
        first = await ask(api, "Before the encryption?", assign_to=["alice"])
        dm = (await deliveries(api, first))[alice.user_id].ref["room_id"]
        assert await alice.direct_room_from(bot) == dm
        card = await alice.expect(dm, is_card(bot, "Before the encryption?"), what="the first card")
        reminder = await alice.expect(dm, lambda e: e.get("sender") == bot and "Reminder" in
                                      str((e.get("content") or {}).get("body")), what="the reminder in the DM")
        assert reminder["content"]["m.relates_to"]["event_id"] == card["event_id"]
        assert not reminder["content"].get("m.mentions", {}).get("user_ids")

        # Alice turns encryption on: the bot could not read her answers there any more.
        sent = await alice.client.room_put_state(dm, "m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"})
        assert sent.__class__.__name__ == "RoomPutStateResponse", sent
        second = await ask(api, "After the encryption?", assign_to=["alice"])
        rows = await deliveries(api, second)
        fresh = rows[alice.user_id].ref["room_id"]
        assert rows[alice.user_id].status == "sent" and fresh != dm
        await alice.sync()
        assert sorted(r for r, sender in alice.invited_by.items() if sender == bot) == sorted([dm, fresh])
        await alice.join(fresh)
        card = await alice.expect(fresh, is_card(bot, "After the encryption?"), what="the card in the new room")
        await alice.reply(fresh, card, "readable")
        assert (await api.wait(second["id"], timeout=30))["response"] == "readable"


async def test_an_escalation_step_reaches_its_people_in_their_direct_rooms(world: World) -> None:
    alice, bob, bot, room = world.alice, world.bob, world.bot_id, world.room_id
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        await started(api)
        request = await ask(api, "Escalate to Bob?", kind="approval", timeout_seconds=600, assign_to=["alice"],
                            escalation=[{"after_seconds": 60, "to": ["bob"]}])
        assert set(await deliveries(api, request)) == {room, alice.user_id}
        service = api.app[SERVICE]
        service.clock = lambda: time.time() + 61  # the step is due
        await service.sweep()
        rows = await deliveries(api, request)
        assert set(rows) == {room, alice.user_id, bob.user_id} and rows[bob.user_id].status == "sent"
        dm = await bob.direct_room_from(bot)
        assert dm == rows[bob.user_id].ref["room_id"]
        card = await bob.expect(dm, is_card(bot, "Escalate to Bob?"), what="the card in Bob's DM")
        await bob.react(dm, card["event_id"], THUMBS_UP)
        done = await api.wait(request["id"], timeout=30)
        assert (done["response"], done["answered_by"]) == ({"decision": "approve"}, f"matrix:{bob.user_id}")
        await bob.expect(dm, is_edit_of(card["event_id"], bot, "Approved by Bob Builder"), what="the DM edit")


async def joined_rooms(world: World) -> list[str]:
    return (await client_api(world, world.bot_token, "/joined_rooms"))["joined_rooms"]


async def test_a_person_who_cannot_be_invited_leaves_no_room_behind_and_the_request_falls_back(
        world: World) -> None:
    """Carol's server is out of reach and Ghost does not exist: neither gets a room the bot would sit in
    alone; both deliveries fail saying why, and the request falls back to the tenant's room."""
    room = world.room_id
    allowed = ["group:oncall", GHOST]
    settings = world.settings(assigned_delivery="direct",
                              tenants={"acme": {"room_ids": [room], "allowed_users": allowed}})
    async with running_app(settings, connector_classes=[MatrixConnector]) as api:
        await started(api)
        request = await ask(api, "Who can take it?", assign_to=["carol", "ghost"])
        rows = await deliveries(api, request)
        assert {t: r.status for t, r in rows.items()} == {CAROL: "failed", GHOST: "failed", room: "sent"}
        assert "M_FORBIDDEN" in (rows[CAROL].last_error or "") and "left and forgotten" in rows[CAROL].last_error
        assert "does not exist" in (rows[GHOST].last_error or "")
        assert await joined_rooms(world) == [room]  # no room made for either is left with the bot in it
        for person in (CAROL, GHOST):
            assert await api.app[STORE].state.get(DIRECT_ROOMS, person) is None
        events = [(e["event"], e["data"].get("target")) for e in await api.journal(request["id"])]
        assert ("delivery_fallback", room) in events and ("delivered", room) in events


async def test_a_refused_invite_is_left_and_forgotten_and_its_card_falls_back_to_the_room(world: World) -> None:
    bob, bot, room = world.bob, world.bot_id, world.room_id
    async with running_app(world.settings(assigned_delivery="direct"), connector_classes=[MatrixConnector]) as api:
        await started(api)
        bounced = asyncio.get_running_loop().create_future()
        api.app[DELIVERIES].on_bounce(lambda d: bounced.done() or bounced.set_result(d))
        request = await ask(api, "Bob, yours?", assign_to=["bob"])
        rows = await deliveries(api, request)
        assert set(rows) == {bob.user_id}
        dm = rows[bob.user_id].ref["room_id"]
        assert dm in await joined_rooms(world)

        left = await bob.client.room_leave(dm)  # refusing an invite is leaving the room one was invited to
        assert left.__class__.__name__ == "RoomLeaveResponse", left
        assert (await asyncio.wait_for(bounced, timeout=30)).target == bob.user_id
        rows = await deliveries(api, request)
        assert rows[bob.user_id].status == "bounced" and rows[bob.user_id].ref == {}  # nothing points at the room
        assert "refused the invite" in (rows[bob.user_id].last_error or "")
        assert rows[room].status == "sent"  # fallen back: the tenant's room has the card
        assert dm not in await joined_rooms(world)
        # Forgotten, not only left: the room is gone from the bot's view of it.
        async with aiohttp.ClientSession() as http, http.get(
                f"{world.synapse.base_url}/_matrix/client/v3/rooms/{quote(dm)}/state",
                headers={"Authorization": f"Bearer {world.bot_token}"}) as resp:
            assert resp.status == 403
        assert bob.user_id not in await api.app[CONNECTORS]["matrix"]._account_data("m.direct")
        events = [e["event"] for e in await api.journal(request["id"])]
        assert "delivery_bounced" in events and "delivery_fallback" in events

        # The room's card is answered as any; Bob's next request opens a new direct room.
        card = await bob.expect(room, is_card(bot, "Bob, yours?"), what="the card in the room")
        await bob.reply(room, card, "mine")
        assert (await api.wait(request["id"], timeout=30))["answered_by"] == f"matrix:{bob.user_id}"
        again = await ask(api, "Bob, this one?", assign_to=["bob"])
        fresh = (await deliveries(api, again))[bob.user_id]
        assert fresh.status == "sent" and fresh.ref["room_id"] != dm


@pytest.mark.parametrize("room_version", ["10", None])
async def test_the_person_gets_the_power_createrooms_invite_would_give(world: World, room_version: str | None) -> None:
    """Invited after the room is made, the person still has the creator's power: a level of their own up to
    room version 11, one of the room's creators from 12 on (the default here)."""
    alice = world.alice
    async with running_app(world.settings(), connector_classes=[MatrixConnector]) as api:
        connector = await started(api)
        if room_version is None:
            dm = await connector._open_direct(alice.user_id)
        else:  # what _new_direct_room does after createRoom, on a room of the old kind
            dm = await bot_creates_room(world.synapse, world.bot_token, world.bot_id, room_version=room_version,
                                        invite=[], preset=RoomPreset.trusted_private_chat)
            await connector._share_power(dm, alice.user_id)
            await connector._call(connector.client.room_invite(dm, alice.user_id), RoomInviteResponse, "invite")
        await alice.join(dm)
        # A state event only the room's most powerful may send.
        sent = await alice.client.room_put_state(dm, "m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"})
        assert sent.__class__.__name__ == "RoomPutStateResponse", sent
        create = await client_api(world, world.bot_token, f"/rooms/{quote(dm)}/state/m.room.create")
        assert (alice.user_id in create.get("additional_creators", [])) == (room_version is None)

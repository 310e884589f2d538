"""Smoke test of the Synapse harness: two matrix-nio clients talk and redact
in room versions 10 and 12.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nio import (
    AsyncClient,
    JoinResponse,
    LoginResponse,
    RoomCreateResponse,
    RoomGetEventResponse,
    RoomGetStateEventResponse,
    RoomRedactResponse,
    RoomSendResponse,
    SyncResponse,
)

from harness.fixtures import synapse  # noqa: F401  (registers the session fixture)
from harness.synapse import SynapseError, SynapseServer, unique_localpart

PASSWORD = "correct horse battery staple"


async def _logged_in(server: SynapseServer, prefix: str) -> AsyncClient:
    user_id, token, device_id = server.register_user(unique_localpart(prefix), PASSWORD)
    assert user_id.endswith(f":{server.server_name}")
    assert token and device_id
    client = AsyncClient(server.base_url, user_id)
    response = await client.login(PASSWORD, device_name="harness smoke test")
    assert isinstance(response, LoginResponse), response
    return client


async def _sync_until_event(client: AsyncClient, room_id: str, event_id: str) -> Any:
    """Long-poll /sync until ``event_id`` shows up in the room's timeline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while loop.time() < deadline:
        response = await client.sync(timeout=1000, since=client.next_batch)
        assert isinstance(response, SyncResponse), response
        room = response.rooms.join.get(room_id)
        for event in room.timeline.events if room else ():
            if event.event_id == event_id:
                return event
    raise AssertionError(f"{event_id} never reached {client.user_id}'s sync")


async def _send_text(client: AsyncClient, room_id: str, body: str) -> str:
    response = await client.room_send(
        room_id, "m.room.message", {"msgtype": "m.text", "body": body}
    )
    assert isinstance(response, RoomSendResponse), response
    return response.event_id


@pytest.mark.parametrize("room_version", ["10", None], ids=["v10", "default"])
async def test_message_and_creator_redaction(
    synapse: SynapseServer,  # noqa: F811
    room_version: str | None,
) -> None:
    alice = await _logged_in(synapse, "alice")
    bob = await _logged_in(synapse, "bob")
    try:
        created = await alice.room_create(room_version=room_version, invite=[bob.user_id])
        assert isinstance(created, RoomCreateResponse), created
        room_id = created.room_id
        create_event = await alice.room_get_state_event(room_id, "m.room.create")
        assert isinstance(create_event, RoomGetStateEventResponse), create_event
        assert create_event.content["room_version"] == (room_version or "12")

        joined = await bob.join(room_id)
        assert isinstance(joined, JoinResponse), joined

        hello_id = await _send_text(alice, room_id, "hello bob")
        received = await _sync_until_event(bob, room_id, hello_id)
        assert received.sender == alice.user_id
        assert received.body == "hello bob"

        # From v12 the creator's power is implicit, so nio's power-levels
        # helper cannot be trusted for creators; the server decides.
        levels = await alice.room_get_state_event(room_id, "m.room.power_levels")
        assert isinstance(levels, RoomGetStateEventResponse), levels
        if room_version == "10":
            assert levels.content["users"][alice.user_id] == 100
        else:
            assert alice.user_id not in levels.content.get("users", {})

        doomed_id = await _send_text(bob, room_id, "please redact me")
        redacted = await alice.room_redact(room_id, doomed_id, reason="smoke test")
        assert isinstance(redacted, RoomRedactResponse), redacted

        fetched = await alice.room_get_event(room_id, doomed_id)
        assert isinstance(fetched, RoomGetEventResponse), fetched
        assert fetched.event.source["content"] == {}
        assert fetched.event.source["unsigned"]["redacted_because"]["sender"] == alice.user_id
    finally:
        await alice.close()
        await bob.close()


def test_register_user_rejects_a_taken_localpart(synapse: SynapseServer) -> None:  # noqa: F811
    localpart = unique_localpart("taken")
    synapse.register_user(localpart, PASSWORD)
    with pytest.raises(SynapseError, match="M_USER_IN_USE"):
        synapse.register_user(localpart, PASSWORD)

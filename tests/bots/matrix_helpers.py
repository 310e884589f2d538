"""The human's side of the Matrix tests: a matrix-nio client that syncs, replies, reacts and waits for the bot.

Shared by ``test_matrix.py`` and the contract driver ``contract_matrix.py``."""

from __future__ import annotations

import time
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

from nio import AsyncClient, RoomCreateResponse, RoomSendResponse, SyncResponse

from harness.synapse import SynapseServer, unique_localpart

PASSWORD = "correct horse battery staple"


class Human:
    """A logged-in nio client that keeps every timeline event it has synced."""

    def __init__(self, server: SynapseServer, prefix: str) -> None:
        self.user_id, token, _ = server.register_user(unique_localpart(prefix), PASSWORD)
        self.client = AsyncClient(server.base_url, self.user_id)
        self.client.access_token = token
        self.client.user_id = self.user_id
        self.access_token = token
        self.seen: list[tuple[str, dict[str, Any]]] = []
        # Room -> who invited this person there (from /sync's invites).
        self.invited_by: dict[str, str] = {}
        # Room -> (notification_count, highlight_count), as the newest /sync that named the room said.
        self.unread: dict[str, tuple[int, int]] = {}
        self.joined: set[str] = set()

    async def sync(self, timeout_ms: int = 500) -> None:
        response = await self.client.sync(timeout=timeout_ms, since=self.client.next_batch)
        assert isinstance(response, SyncResponse), response
        for room_id, info in response.rooms.join.items():
            self.seen.extend((room_id, e.source) for e in info.timeline.events)
            counts = info.unread_notifications
            if counts is not None and counts.notification_count is not None:
                self.unread[room_id] = (counts.notification_count, counts.highlight_count or 0)
        for room_id, info in response.rooms.invite.items():
            for event in info.invite_state:
                if getattr(event, "state_key", None) == self.user_id and getattr(event, "membership", "") == "invite":
                    self.invited_by[room_id] = event.sender

    async def direct_room_from(self, inviter: str, *, timeout: float = 30) -> str:
        """The direct room ``inviter`` opened with this person, joined (waiting for the invite)."""
        deadline = time.monotonic() + timeout
        while True:
            for room_id, sender in self.invited_by.items():
                if sender == inviter:
                    if room_id not in self.joined:
                        await self.join(room_id)
                        await self.sync()
                    return room_id
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.user_id} was never invited to a direct room by {inviter}")
            await self.sync()

    async def direct_message(self, inviter: str, predicate: Callable[[dict[str, Any]], bool], *,
                             what: str, timeout: float = 30) -> dict[str, Any]:
        """A message from ``inviter`` in their direct room with this person."""
        room_id = await self.direct_room_from(inviter, timeout=timeout)
        return await self.expect(room_id, lambda e: e.get("sender") == inviter and predicate(e), what=what,
                                 timeout=timeout)

    async def unread_in(self, room_id: str, *, above: int, timeout: float = 30) -> tuple[int, int]:
        """(notifications, highlights) in ``room_id`` once the notification count is above ``above``."""
        deadline = time.monotonic() + timeout
        while self.unread.get(room_id, (0, 0))[0] <= above:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.user_id}'s unread count in {room_id} stayed at "
                                     f"{self.unread.get(room_id)}")
            await self.sync()
        return self.unread[room_id]

    async def expect(self, room_id: str, predicate: Callable[[dict[str, Any]], bool], *,
                     what: str, timeout: float = 30) -> dict[str, Any]:
        """The first event in ``room_id`` matching ``predicate``, syncing until it shows up."""
        deadline = time.monotonic() + timeout
        while True:
            for seen_room, event in self.seen:
                if seen_room == room_id and predicate(event):
                    return event
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.user_id} never saw {what}")
            await self.sync()

    async def send(self, room_id: str, content: dict[str, Any], event_type: str = "m.room.message") -> str:
        response = await self.client.room_send(room_id, event_type, content)
        assert isinstance(response, RoomSendResponse), response
        return response.event_id

    async def reply(self, room_id: str, card: dict[str, Any], text: str) -> str:
        """A reply with both fallbacks a classic client adds: the ``>`` quote and ``<mx-reply>``."""
        quoted = "\n".join(f"> {line}" for line in card["content"]["body"].splitlines())
        quoted = quoted.replace("> ", f"> <{card['sender']}> ", 1)
        html_lines = "<br>".join(text.splitlines())
        return await self.send(room_id, {
            "msgtype": "m.text",
            "body": f"{quoted}\n\n{text}",
            "format": "org.matrix.custom.html",
            "formatted_body": f"<mx-reply><blockquote>In reply to {card['sender']}<br>question</blockquote>"
                              f"</mx-reply>{html_lines}",
            "m.relates_to": {"m.in_reply_to": {"event_id": card["event_id"]}},
        })

    async def in_thread(self, room_id: str, card_id: str, text: str) -> str:
        return await self.send(room_id, {
            "msgtype": "m.text", "body": text,
            "m.relates_to": {"rel_type": "m.thread", "event_id": card_id, "is_falling_back": True,
                             "m.in_reply_to": {"event_id": card_id}},
        })

    async def react(self, room_id: str, event_id: str, key: str) -> str:
        return await self.send(room_id, {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id,
                                                          "key": key}}, "m.reaction")

    async def join(self, room_id: str) -> None:
        response = await self.client.join(room_id)
        assert response.__class__.__name__ == "JoinResponse", response
        self.joined.add(room_id)


def relates(event: dict[str, Any]) -> dict[str, Any]:
    relates = (event.get("content") or {}).get("m.relates_to")
    return relates if isinstance(relates, dict) else {}


def is_card(bot: str, marker: str) -> Callable[[dict[str, Any]], bool]:
    def check(event: dict[str, Any]) -> bool:
        content = event.get("content") or {}
        return (event.get("sender") == bot and event.get("type") == "m.room.message" and not relates(event)
                and marker in content.get("body", ""))
    return check


def is_reaction_on(event_id: str, key: str, sender: str) -> Callable[[dict[str, Any]], bool]:
    def check(event: dict[str, Any]) -> bool:
        rel = relates(event)
        return (event.get("type") == "m.reaction" and event.get("sender") == sender
                and rel.get("event_id") == event_id and rel.get("key") == key)
    return check


def is_notice_to(event_id: str, bot: str) -> Callable[[dict[str, Any]], bool]:
    """The bot's threaded answer to ``event_id``."""
    def check(event: dict[str, Any]) -> bool:
        rel = relates(event)
        return (event.get("sender") == bot and rel.get("rel_type") == "m.thread"
                and (rel.get("m.in_reply_to") or {}).get("event_id") == event_id)
    return check


def is_edit_of(card_id: str, bot: str, text: str) -> Callable[[dict[str, Any]], bool]:
    def check(event: dict[str, Any]) -> bool:
        rel = relates(event)
        new = (event.get("content") or {}).get("m.new_content") or {}
        return (event.get("sender") == bot and rel.get("rel_type") == "m.replace"
                and rel.get("event_id") == card_id and text in new.get("body", ""))
    return check


class TableRows(HTMLParser):
    """The text of every cell of every row of the card's table."""

    def __init__(self) -> None:
        super().__init__()
        self.header: list[str] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "thead":
            self._in_head = True
        elif tag == "tr" and not self._in_head:
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            (self.header if self._in_head else self.rows[-1]).append(text)
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


async def bot_creates_room(server: SynapseServer, bot_token: str, bot_id: str, *, room_version: str | None,
                           invite: list[str], **extra: Any) -> str:
    setup = AsyncClient(server.base_url, bot_id)
    setup.access_token = bot_token
    setup.user_id = bot_id
    try:
        created = await setup.room_create(room_version=room_version, invite=invite, **extra)
        assert isinstance(created, RoomCreateResponse), created
        return created.room_id
    finally:
        await setup.close()

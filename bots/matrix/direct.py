"""Direct messages from the bot: a person's own form link (asked for with 📝), a refusal told privately,
and the direct room the bot keeps with each person (its ``m.direct`` account data, so clients show a DM)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import urllib.parse
from typing import Any

from nio import (
    RoomForgetResponse,
    RoomGetStateEventResponse,
    RoomGetStateResponse,
    RoomKickResponse,
    RoomLeaveResponse,
    RoomPutStateResponse,
)

from handraise.bots.matrix.cards import link_closed_content, link_content, private_notice
from handraise.bots.matrix.homeserver import HomeserverCalls
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import Sender
from handraise.core.connectors import AnswerOutcome
from handraise.core.errors import ConnectorError, NotFoundError

# Durable state: person -> the direct room the bot opened with them (personal form links, assigned cards).
DIRECT_ROOMS = "matrix.direct"
# Durable state: direct room -> its person, so the sync loop reads answers to cards posted there.
DIRECT_ROOM_PEOPLE = "matrix.direct.rooms"
# Durable state: request id -> the [room, event] of each direct message that carried a form link.
LINKS_SENT = "matrix.links"
# Durable state: direct room -> the [tenant, request] of the newest cards posted there (what a person who
# refuses the room leaves unread), at most CARDS_KEPT of them.
DIRECT_CARDS = "matrix.direct.cards"
CARDS_KEPT = 200
# What the state keeps for a direct room given up (the store has no delete): no person, no room.
GONE = ""


class DirectMessages(HomeserverCalls):
    """What the bot says to one person alone, in the direct room it keeps with them."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._direct_locks: dict[str, asyncio.Lock] = {}
        # Direct rooms known here to be the bot's (recorded in the store once per process).
        self._direct_rooms: set[str] = set()
        self._account_data_lock = asyncio.Lock()

    async def _on_link_asked(self, sender: Sender, *, tenant_id: str, request_id: str) -> None:
        """A 📝 on a card: the person's own one-time form link, by direct message (allowlisted people only)."""
        outcome = await self.personal_link(tenant_id=tenant_id, request_id=request_id, sender=sender)
        if outcome.code == "not_authorized":
            await self._tell_stranger(outcome, sender)
            return
        if outcome.url is None:
            if outcome.code != "not_found":
                await self._send_direct(sender.user_id, private_notice(outcome.message), what="a closed notice")
            return
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        room, sent = await self._send_direct(sender.user_id, link_content(outcome.url, view,
                                                                          tz=self.timezone(tenant_id)),
                                             what="a personal form link")
        # Kept so that withdraw edits the link away when the request ends (atomic, as Telegram's: a link
        # sent by another instance stays on the list), and pruned with the request's other spent rows.
        entry = [room, sent]
        await self.state.update(LINKS_SENT, request_id, lambda kept: json.dumps([*json.loads(kept or "[]"), entry]),
                                request_id=request_id)
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        if view.terminal:  # ended while the link was on its way: withdraw has run already
            await self._close_links(view, await self.outcome_of(view))
        self.log.info("matrix: personal form link sent", extra={"request_id": request_id})

    async def _tell_stranger(self, outcome: AnswerOutcome, sender: Sender) -> None:
        """Someone not on the allowlist: told once per request, privately; the room hears nothing."""
        if outcome.view is None or not await self.first_time_told(outcome.view, sender):
            return
        try:
            await self._send_direct(sender.user_id, private_notice(outcome.message), what="a refusal")
        except ConnectorError as e:
            self.log.warning("matrix: could not tell a stranger privately (%s)", e.message)

    async def _send_direct(self, user_id: str, content: dict[str, Any], *, what: str) -> tuple[str, str]:
        """Send ``content`` to one person in a direct room with them: (room, event)."""
        room_id = await self._open_direct(user_id)
        return room_id, await self._send(room_id, "m.room.message", content, what=f"send {what} to {user_id}")

    async def _open_direct(self, user_id: str) -> str:
        """The direct room with ``user_id``, opened once however many messages to them are on their way."""
        async with self._direct_locks.setdefault(user_id, asyncio.Lock()):
            return await self._direct_room(user_id)

    async def _direct_room(self, user_id: str) -> str:
        """The bot's direct room with ``user_id``: one it made before (kept here and in the bot's
        ``m.direct``) where the person still is or is invited, else a new one, marked in ``m.direct``.

        Instances that open one for the same person at once agree through the store: the first room
        settled there (a compare-and-set) is everyone's, and a room that lost is left."""
        key = user_id[:200]
        direct = await self._account_data("m.direct")
        known = await self.state.get(DIRECT_ROOMS, key)
        candidates = [r for r in [known, *(direct.get(user_id) or [])] if isinstance(r, str) and r]
        room_id = None
        for candidate in dict.fromkeys(candidates):
            if await self._still_there(candidate, user_id):
                room_id = candidate
                break
        made = room_id is None
        if room_id is None:
            room_id = await self._new_direct_room(user_id)
            self.log.info("matrix: opened a direct room", extra={"room_id": room_id})
        if room_id != known:
            settled = await self.state.update(
                DIRECT_ROOMS, key, lambda current, mine=room_id: mine if current == known else current)
            if settled != room_id:
                # Another instance settled a room with this person meanwhile: theirs is the one.
                if made:
                    await self._abandon(room_id, user_id)
                room_id = settled
        if room_id not in self._direct_rooms:
            # The sync loop (on whichever instance leads it) reads answers in this room.
            await self.state.set(DIRECT_ROOM_PEOPLE, room_id[:200], user_id)
            self._direct_rooms.add(room_id)
        if room_id not in (direct.get(user_id) or []):
            await self._list_direct(user_id, room_id)
        return room_id

    async def _new_direct_room(self, user_id: str) -> str:
        """A new direct room with ``user_id`` invited, or ConnectorError: never a room left with the bot alone.

        The room is made first and the person invited after, so that a refused invite (their server out
        of reach, the homeserver refusing) names the room to leave and forget: createRoom's own ``invite``
        fails without naming the room it made, which stays. Nobody is invited whom the homeserver does not
        know: Synapse takes an invite to a local user who does not exist, and the room would wait for nobody.
        """
        status, body = await self._raw("GET", f"/_matrix/client/v3/profile/{urllib.parse.quote(user_id, safe='')}",
                                       what="profile lookup")
        if status == 404:
            raise ConnectorError(f"matrix: {user_id} does not exist (their homeserver knows no such user); "
                                 "no direct room opened", permanent=True)
        what = f"open a direct room with {user_id}"
        status, body = await self._raw("POST", "/_matrix/client/v3/createRoom", {
            "is_direct": True, "preset": "trusted_private_chat",
            # What createRoom's invite gives the person from room version 12 on: one of the room's creators.
            "creation_content": {"additional_creators": [user_id]}}, what="createRoom")
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("room_id"), str):
            raise self._raw_error(what, status, body)
        room_id: str = body["room_id"]
        try:
            await self._share_power(room_id, user_id)
            await self._call(self.client.room_put_state(room_id, "m.room.member", {"membership": "invite",
                                                                                    "is_direct": True},
                                                        state_key=user_id),
                             RoomPutStateResponse, f"invite {user_id} to a direct room")
        except ConnectorError as e:
            await self._leave_and_forget(room_id, why="the invite was refused")
            self.log.warning("matrix: %s could not be invited to a direct room (%s); the room was left and "
                             "forgotten", user_id, e.message, extra={"room_id": room_id})
            raise ConnectorError(f"{e.message} (the direct room made for them was left and forgotten)",
                                 retry_after=e.retry_after, permanent=e.permanent) from e
        return room_id

    async def _share_power(self, room_id: str, user_id: str) -> None:
        """Before room version 12 the creator's power is a level in the room: the person gets the same, as
        createRoom's trusted_private_chat gives the people it invites."""
        response = await self.client.room_get_state_event(room_id, "m.room.power_levels")
        levels = response.content if isinstance(response, RoomGetStateEventResponse) else None
        users = levels.get("users") if isinstance(levels, dict) else None
        if not isinstance(users, dict) or self.settings.user_id not in users:
            return  # room version 12 on: the person is one of its creators already
        content = {**levels, "users": {**users, user_id: users[self.settings.user_id]}}
        await self._call(self.client.room_put_state(room_id, "m.room.power_levels", content), RoomPutStateResponse,
                         f"share the power in {room_id}")

    async def _leave_and_forget(self, room_id: str, *, why: str) -> None:
        """Leave a room the bot has no use for and forget it (it drops out of the bot's room list)."""
        try:
            await self._call(self.client.room_leave(room_id), RoomLeaveResponse, f"leave {room_id}")
            await self._call(self.client.room_forget(room_id), RoomForgetResponse, f"forget {room_id}")
        except ConnectorError as e:
            self.log.warning("matrix: could not leave and forget a room (%s): %s", why, e.message,
                             extra={"room_id": room_id})

    async def _note_direct_card(self, room_id: str, tenant_id: str, request_id: str) -> None:
        """Remember a card posted in a direct room: if its person refuses the room, the card bounces."""
        entry = [tenant_id, request_id]
        await self.state.update(DIRECT_CARDS, room_id[:200],
                                lambda kept: json.dumps([*json.loads(kept or "[]"), entry][-CARDS_KEPT:]))

    async def _on_membership(self, room_id: str, source: dict[str, Any]) -> None:
        """A person refused the invite to their direct room, or left it: nobody reads the bot there any
        more. It is left and forgotten, and each pending request's card there bounces (the dispatcher
        then falls back as when the room could not be opened)."""
        user_id, content = source.get("state_key"), source.get("content") or {}
        if (not isinstance(user_id, str) or content.get("membership") not in ("leave", "ban")
                or room_id in self._room_tenant or await self.state.get(DIRECT_ROOM_PEOPLE, room_id[:200]) != user_id):
            return
        before = ((source.get("unsigned") or {}).get("prev_content") or {}).get("membership")
        why = f"{user_id} refused the invite to their direct room" if before == "invite" else \
            f"{user_id} left their direct room"
        self._direct_rooms.discard(room_id)
        await self.state.set(DIRECT_ROOM_PEOPLE, room_id[:200], GONE)
        await self.state.update(DIRECT_ROOMS, user_id[:200],
                                lambda current: GONE if current in (None, room_id) else current)
        await self._unlist_direct(user_id, room_id)
        await self._leave_and_forget(room_id, why=why)
        self.log.warning("matrix: %s; the bot left and forgot the room", why, extra={"room_id": room_id})
        for tenant_id, request_id in json.loads(await self.state.get(DIRECT_CARDS, room_id[:200]) or "[]"):
            try:
                view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
            except NotFoundError:
                continue
            if not view.terminal:
                await self.deliveries.bounced(tenant_id=tenant_id, request_id=request_id, channel=self.name,
                                              target=user_id, error=f"matrix: {why}; the room was left and forgotten",
                                              ref={"room_id": room_id})
        await self.state.set(DIRECT_CARDS, room_id[:200], "[]")

    async def _unlist_direct(self, user_id: str, room_id: str) -> None:
        """Take a room given up out of the bot's ``m.direct``."""
        async with self._account_data_lock:
            direct = await self._account_data("m.direct")
            listed = [r for r in direct.get(user_id) or [] if isinstance(r, str)]
            if room_id in listed:
                rest = [r for r in listed if r != room_id]
                if rest:
                    direct[user_id] = rest
                else:
                    del direct[user_id]
                await self._put_account_data("m.direct", direct)

    async def _list_direct(self, user_id: str, room_id: str) -> None:
        """Add the room to the bot's ``m.direct`` (clients show a room as a DM from it).

        Account data has no compare-and-set: writes here are one at a time, each on what is stored
        now; a write another instance lost is made again the next time the room is used."""
        async with self._account_data_lock:
            direct = await self._account_data("m.direct")
            listed = [r for r in direct.get(user_id) or [] if isinstance(r, str)]
            if room_id not in listed:
                direct[user_id] = [*listed, room_id]
                await self._put_account_data("m.direct", direct)

    async def _abandon(self, room_id: str, user_id: str) -> None:
        """Leave a direct room nobody will use, taking back its invite first where the bot may (from
        room version 12 the person invited to a private chat is one of its creators: the invite stays)."""
        try:
            await self._call(self.client.room_kick(room_id, user_id, reason="Opened twice"), RoomKickResponse,
                             f"take back an invite to {room_id}")
        except ConnectorError as e:
            self.log.info("matrix: a spare direct room keeps its invite (%s)", e.message, extra={"room_id": room_id})
        await self._leave_and_forget(room_id, why="a spare direct room")

    async def _is_direct_room(self, room_id: str) -> bool:
        """Whether ``room_id`` is a direct room the bot opened with someone (cards may be answered there)."""
        if room_id in self._direct_rooms:
            return True
        if not await self.state.get(DIRECT_ROOM_PEOPLE, room_id[:200]):
            return False  # never one, or given up (GONE)
        self._direct_rooms.add(room_id)
        return True

    async def _still_there(self, room_id: str, user_id: str) -> bool:
        """Whether the room is still the person's alone with the bot: they are in it (or invited), nobody else
        is, and it is not end-to-end encrypted. Anyone they let in would read every personal link sent there,
        and the bot could not read their answers in an encrypted room: either gives way to a new room."""
        response = await self.client.room_get_state(room_id)
        if not isinstance(response, RoomGetStateResponse):
            return False
        present = {event.get("state_key") for event in response.events
                   if event.get("type") == "m.room.member"
                   and (event.get("content") or {}).get("membership") in ("join", "invite")}
        encrypted = any(event.get("type") == "m.room.encryption" for event in response.events)
        return present == {user_id, self.settings.user_id} and not encrypted

    async def _account_data(self, event_type: str) -> dict[str, Any]:
        status, body = await self._raw("GET", self._account_data_path(event_type))
        if status == 404:
            return {}
        if status != 200 or not isinstance(body, dict):
            raise ConnectorError(f"matrix: could not read {event_type} ({status})")
        return body

    async def _put_account_data(self, event_type: str, content: dict[str, Any]) -> None:
        status, _ = await self._raw("PUT", self._account_data_path(event_type), content)
        if status != 200:
            raise ConnectorError(f"matrix: could not write {event_type} ({status})")

    def _account_data_path(self, event_type: str) -> str:
        return (f"/_matrix/client/v3/user/{urllib.parse.quote(self.settings.user_id, safe='')}/account_data/"
                f"{urllib.parse.quote(event_type, safe='')}")

    async def _close_links(self, view: RequestView, outcome: wording.Outcome) -> None:
        """The direct messages that carried a personal link lose it: the request is over."""
        kept = await self.state.get(LINKS_SENT, view.id)
        for room_id, event_id in json.loads(kept or "[]"):
            txn = f"handraise.linkend.{hashlib.sha256(event_id.encode()).hexdigest()[:24]}"
            try:
                await self._send(room_id, "m.room.message", link_closed_content(view, event_id=event_id,
                                                                                outcome=outcome),
                                 what="edit a personal link away", txn_id=txn)
            except ConnectorError as e:  # the person left the room: nothing to edit there
                self.log.info("matrix: a personal link message kept its text (%s)", e.message)

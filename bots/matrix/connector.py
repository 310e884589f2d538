"""The Matrix connector: posts cards to rooms, reads answers from /sync, edits cards when requests end.

One instance runs the sync loop; end-to-end encrypted rooms are not supported (reported at start, never posted to)."""

from __future__ import annotations

import asyncio
import hashlib
import time
import urllib.parse
from collections import OrderedDict
from typing import Any, ClassVar

import aiohttp
from nio import AsyncClient, AsyncClientConfig, JoinResponse, RoomGetEventResponse, RoomGetStateResponse

from handraise.bots.matrix.cards import (
    ACCEPTED,
    ASK_ON_THE_QUESTION,
    FORM_KEY,
    answer_text,
    card_content,
    note_content,
    notify,
    outcome_content,
    reaction_content,
    reaction_vote,
    reminder_text,
    takes_reactions,
    tally_content,
    thread_notice,
)
from handraise.bots.matrix.direct import DirectMessages
from handraise.bots.matrix.rooms import level_needed, level_text, message_key, power_of, room_problems
from handraise.bots.matrix.session import MatrixSession, saved_session
from handraise.bots.matrix.settings import MatrixSettings, is_user_id
from handraise.bots.matrix.sync import LEADER, SyncLoop
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import Sender
from handraise.core.config import PersonSettings, Settings
from handraise.core.connectors import AnswerOutcome
from handraise.core.errors import ConnectorError, NotFoundError
from handraise.core.personal import PrivateNote
from handraise.core.schema import coerce_text

# Refusals after which a person is told how to reach the form.
_POINT_TO_FORM = frozenset({"sensitive_removed", "sensitive_kept", "secret_removed", "secret_kept"})


class MatrixConnector(SyncLoop, DirectMessages, MatrixSession):
    """Cards in Matrix rooms; answers by reply, thread or reaction; one sync loop per deployment.

    The loop runs only while ``leadership("matrix-sync")`` holds; its position
    (``next_batch``) is kept in Handraise's store after each batch, so a restart or
    a new leader neither replays old answers nor misses new ones (a gap longer
    than one sync's timeline is paged in from /messages). matrix-nio runs without
    encryption: an encrypted configured room is reported and gets no cards.

    Its parts, one module each: calling the homeserver (``homeserver``), logging in (``session``),
    the sync loop (``sync``), direct messages (``direct``); here: the lifecycle, delivery and withdrawal,
    and the answer path.
    """

    name = "matrix"

    @classmethod
    async def check(cls, settings: MatrixSettings, *, app_settings: Settings,
                    http: aiohttp.ClientSession) -> list[str]:
        """whoami with the access token, then per room: joined, not encrypted, power to post and to redact."""
        token = settings.access_token.get_secret_value() if settings.access_token is not None else None
        if token is None:
            saved = saved_session(settings)
            if saved is None:
                return ["password login: no saved session to check yet (logging in here would replace the "
                        "server's); start handraise serve once, or give access_token"]
            token = saved
        base = f"{settings.homeserver}/_matrix/client/v3"
        headers = {"Authorization": f"Bearer {token}"}

        async def get(path: str) -> tuple[int, Any]:
            async with http.get(f"{base}{path}", headers=headers, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                return resp.status, await resp.json(content_type=None)

        try:
            status, me = await get("/account/whoami")
            if status != 200:
                return [f"whoami refused the access token ({me.get('errcode', status)}); check [matrix] "
                        "access_token"]
            if me.get("user_id") != settings.user_id:
                return [f"the access token belongs to {me.get('user_id')}, not matrix.user_id {settings.user_id}"]
            _status, joined = await get("/joined_rooms")
            problems = []
            for tenant_id, tenant in settings.tenants.items():
                for room_id in tenant.room_ids:
                    if room_id not in joined.get("joined_rooms", []):
                        problems.append(f"room {room_id} (tenant {tenant_id}): the bot is not in it; invite "
                                        f"{settings.user_id} (handraise serve accepts the invite)")
                        continue
                    status, state = await get(f"/rooms/{urllib.parse.quote(room_id)}/state")
                    if status != 200 or not isinstance(state, list):
                        problems.append(f"room {room_id}: cannot read its state ({status})")
                        continue
                    problems += room_problems(room_id, settings.user_id, state)
            return problems
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            return [f"cannot reach {settings.homeserver} ({type(e).__name__}); check [matrix] homeserver"]

    settings_model = MatrixSettings
    # How long an answer to a message the bot has just posted waits for it to be recorded as a card:
    # the delivering instance records it right after the homeserver accepts it, and a quick 👍 can
    # reach the sync loop in between.
    card_record_wait_seconds: ClassVar[float] = 5.0
    # The bot's own messages seen in the sync loop that may be cards still being recorded, at most.
    _RECENT_OWN_LIMIT = 1000

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings = self.settings
        self._room_tenant = settings.room_tenants()
        self._encrypted: set[str] = set()
        self._unreadable_reported: set[str] = set()
        self._client: AsyncClient | None = None
        self._connected = False
        self._connect_lock = asyncio.Lock()
        # (room, event) -> when the sync loop saw the bot post it: the messages a lookup may wait for.
        self._recent_own: OrderedDict[tuple[str, str], float] = OrderedDict()

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        settings = self.settings
        self._started_ms = int(time.time() * 1000)
        # Bounded retries inside nio: our own loops (delivery, sync backoff) do the rest.
        config = AsyncClientConfig(encryption_enabled=False, store_sync_tokens=False, max_limit_exceeded=1,
                                   max_timeouts=1, request_timeout=30)
        self._client = AsyncClient(settings.homeserver, settings.user_id, device_id=settings.device_id or "",
                                   config=config)
        self.log.info("matrix: end-to-end encrypted rooms are not supported; an encrypted room is reported "
                      "and gets no cards", extra={"homeserver": settings.homeserver})
        try:
            await self._ensure_connected()
        except ConnectorError as e:
            # A homeserver that is down now may be up in a minute: the sync loop retries.
            self.log.warning("matrix: cannot connect yet (%s); retrying in the background", e.message)
        self.spawn(self.run_forever(self._sync_step, what="matrix sync"), name="sync")

    async def stop(self) -> None:
        self._stopping = True
        # Let a batch being handled finish and its position be saved: cut short, its
        # answers would be handled again by the next leader.
        try:
            async with asyncio.timeout(self.stop_grace_seconds):
                await self._batch_lock.acquire()
        except TimeoutError:
            self.log.warning("matrix: stopping in the middle of a sync batch; it will be handled again")
        try:
            await self._end_tasks()
            await super().stop()
        finally:
            if self._batch_lock.locked():
                self._batch_lock.release()
        await self.leadership.release(LEADER)
        if self._client is not None:
            await self._client.close()

    async def _ensure_connected(self) -> None:
        """Log in (or check the token), then join and inspect every configured room; once."""
        async with self._connect_lock:
            if self._connected:
                return
            await self._log_in()
            for room_id in self._room_tenant:
                await self._join_and_inspect(room_id)
            self._connected = True

    async def _join_and_inspect(self, room_id: str) -> None:
        """Join a configured room (accepting an invite), then report what would stop the bot there."""
        try:
            await self._call(self.client.join(room_id), JoinResponse, f"join room {room_id}")
            response = await self._call(self.client.room_get_state(room_id), RoomGetStateResponse,
                                        f"read the state of room {room_id}")
        except ConnectorError as e:
            if not e.permanent:
                raise
            self.log.error("matrix: cannot use room %s (%s); invite the bot there", room_id, e.message)
            return
        state = [e for e in response.events if isinstance(e, dict)]
        if any(e.get("type") == "m.room.encryption" for e in state):
            self._report_encrypted(room_id)
        user_id = self.settings.user_id
        power = power_of(user_id, state)
        for event_type, what in (("m.room.message", "post cards"), ("m.reaction", "react")):
            needed = level_needed(state, event_type=event_type)
            if power < needed:
                self.log.error("matrix: the bot cannot %s in room %s: it has power level %s, needs %s",
                               what, room_id, level_text(power), level_text(needed))
        needed = level_needed(state, event_type="m.room.redaction", redact=True)
        if power < needed:
            self.log.warning(
                "matrix: the bot lacks the power to redact in room %s (it has %s, needs %s): chat replies to "
                "sensitive requests there cannot be removed; raise its power level", room_id, level_text(power),
                level_text(needed))
        self.log.info("matrix: room ready", extra={"room_id": room_id, "tenant_id": self._room_tenant[room_id]})

    def _report_encrypted(self, room_id: str) -> None:
        if room_id in self._encrypted:
            return
        self._encrypted.add(room_id)
        self.log.error("matrix: room %s is end-to-end encrypted; Handraise cannot read answers there (E2EE is "
                       "not supported), so no cards are posted to it; use an unencrypted room", room_id)

    # -- delivery -------------------------------------------------------------------

    def direct_target(self, user_id: str) -> str | None:
        # The person's Matrix id: deliver posts to the direct room the bot keeps with them.
        return user_id

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        if target in self._encrypted:
            raise ConnectorError(f"matrix: room {target} is end-to-end encrypted, which is not supported",
                                 permanent=True)
        await self._ensure_connected()
        person = target if is_user_id(target) else None
        room_id = await self._open_direct(person) if person is not None else target
        if room_id in self._encrypted:
            raise ConnectorError(f"matrix: the direct room with {person} is end-to-end encrypted, which is not "
                                 "supported", permanent=True)
        # A fixed transaction id per (request, target): a retry after a lost
        # response gets the same event back instead of a second card.
        txn = f"handraise.card.{request.id}.{hashlib.sha256(target.encode()).hexdigest()[:12]}"
        # In a direct room every message notifies its one person: nobody to mention.
        people = [] if person is not None else self._people(request.tenant_id)
        content = card_content(request, people=people, tz=self.timezone(request.tenant_id),
                               tally=self.tally_text(request))
        event_id = await self._send(room_id, "m.room.message", content,
                                    what=f"post a card to {target}", txn_id=txn)
        await self.chat_refs.remember_message(channel=self.name, message_key=message_key(room_id, event_id),
                                            tenant_id=request.tenant_id, request_id=request.id)
        ref = {"room_id": room_id, "event_id": event_id}
        if person is not None:
            ref["person"] = person
            await self._note_direct_card(room_id, request.tenant_id, request.id)
        try:
            # The bot's own 📝 under the card: asking for one's form link is one click.
            ref["form_key"] = await self._send(
                room_id, "m.reaction", reaction_content(event_id, FORM_KEY), what=f"react in {room_id}",
                txn_id=f"handraise.formkey.{hashlib.sha256(event_id.encode()).hexdigest()[:24]}")
        except ConnectorError as e:
            self.log.warning("matrix: could not put %s under the card (%s)", FORM_KEY, e.message)
        self.log.info("matrix: card posted", extra={"request_id": request.id, "room_id": room_id,
                                                    "direct": person is not None})
        return ref

    async def send_private(self, person: PersonSettings, *, tenant_id: str, note: PrivateNote) -> bool:
        """The note in the direct room the bot keeps with the person (the one assigned cards and 📝 links use,
        or a new one where that is gone, encrypted or shared with someone else). A user their homeserver does
        not know, or one it cannot reach, is a ConnectorError."""
        if person.matrix is None:
            return False
        await self._ensure_connected()
        await self._send_direct(person.matrix, note_content(note.text, url=note.url, button=note.button),
                                what="a private note")
        return True

    def _people(self, tenant_id: str, ref: dict[str, Any] | None = None) -> list[str]:
        """Who a card or reminder mentions: the people who may answer, nobody in a direct room."""
        route = self.settings.tenants.get(tenant_id)
        if route is None or (ref is not None and ref.get("person")):
            return []
        return route.resolved_people()

    async def show_votes(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        room_id, card_id = ref.get("room_id") or target, ref.get("event_id")
        if not card_id:
            return
        await self._ensure_connected()
        # One edit per tally: a retry after a lost response gets the same event back.
        txn = f"handraise.tally.{request.id}.{request.votes_version}.{hashlib.sha256(card_id.encode()).hexdigest()[:12]}"
        content = tally_content(request, card_event_id=card_id, tally=self.tally_text(request),
                                tz=self.timezone(request.tenant_id))
        await self._send(room_id, "m.room.message", content, what=f"edit the card in {room_id}", txn_id=txn)

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        room_id, card_id = ref.get("room_id") or target, ref.get("event_id")
        if not card_id:
            return
        await self._ensure_connected()
        txn = f"handraise.outcome.{request.id}.{hashlib.sha256(card_id.encode()).hexdigest()[:12]}"
        outcome = await self.outcome_of(request)  # a tenant's person by their configured name
        await self._send(room_id, "m.room.message", outcome_content(request, card_event_id=card_id, outcome=outcome),
                         what=f"edit the card in {room_id}", txn_id=txn)
        if ref.get("form_key"):
            # Nothing left to ask for: the 📝 goes with the request (a repeated redaction is harmless).
            await self._redact(room_id, ref["form_key"], reason="The question is closed")
        await self._close_links(request, outcome)

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        room_id, card_id = ref.get("room_id") or target, ref.get("event_id")
        if not card_id:
            await self.deliver(request, target=target)
            return
        await self._ensure_connected()
        text = reminder_text(request, now=self.service.clock(), tz=self.timezone(request.tenant_id))
        content = notify(thread_notice([text], card_event_id=card_id, reply_to=card_id, mention=None),
                         self._people(request.tenant_id, ref))
        await self._send(room_id, "m.room.message", content, what=f"remind in {room_id}")

    # -- answers --------------------------------------------------------------------

    async def _handle_event(self, room_id: str, source: dict[str, Any]) -> None:
        if source.get("sender") == self.settings.user_id:
            self._note_own(room_id, source)
            return
        event_type = source.get("type")
        if event_type == "m.room.encryption":
            self._report_encrypted(room_id)
            return
        if event_type == "m.room.encrypted":
            if room_id not in self._unreadable_reported:
                self._unreadable_reported.add(room_id)
                self.log.error("matrix: received an encrypted message in room %s that the bot cannot read "
                               "(E2EE is not supported)", room_id)
            return
        if event_type == "m.room.member":
            await self._on_membership(room_id, source)
            return
        if "redacted_because" in (source.get("unsigned") or {}):
            return
        content = source.get("content")
        if not isinstance(content, dict) or not isinstance(source.get("event_id"), str):
            return
        if event_type == "m.room.message":
            await self._on_message(room_id, source, content)
        elif event_type == "m.reaction":
            await self._on_reaction(room_id, source, content)

    async def _on_message(self, room_id: str, source: dict[str, Any], content: dict[str, Any]) -> None:
        if content.get("msgtype") != "m.text":
            return
        relates = content.get("m.relates_to")
        if not isinstance(relates, dict):
            return
        text_content = content
        if relates.get("rel_type") == "m.replace":
            # An edited answer is a new attempt; the card it answers is the original's.
            new_content = content.get("m.new_content")
            original = relates.get("event_id")
            if not isinstance(new_content, dict) or not isinstance(original, str):
                return
            fetched = await self._call(self.client.room_get_event(room_id, original), RoomGetEventResponse,
                                       "read an edited message")
            if fetched.event.source.get("sender") != source.get("sender"):
                return
            relates = (fetched.event.source.get("content") or {}).get("m.relates_to")
            if not isinstance(relates, dict):
                return
            text_content = new_content
        found = await self._card_for(room_id, relates)
        if found is None:
            return
        tenant_id, request_id, card_id = found
        await self._answer(room_id, source, tenant_id=tenant_id, request_id=request_id, card_id=card_id,
                           text=answer_text(text_content))

    async def _on_reaction(self, room_id: str, source: dict[str, Any], content: dict[str, Any]) -> None:
        relates = content.get("m.relates_to")
        if not isinstance(relates, dict) or relates.get("rel_type") != "m.annotation":
            return
        key, card_id = relates.get("key"), relates.get("event_id")
        vote = reaction_vote(key)
        if (vote is None and key != FORM_KEY) or not isinstance(card_id, str):
            return
        found = await self._lookup(room_id, card_id)
        if found is None:
            return
        if vote is None:
            await self._on_link_asked(sender_of(source), tenant_id=found[0], request_id=found[1])
            return
        await self._answer(room_id, source, tenant_id=found[0], request_id=found[1], card_id=card_id, vote=vote)

    def _note_own(self, room_id: str, source: dict[str, Any]) -> None:
        """Remember a message the bot posted that may be a card (one with no relation to another)."""
        content = source.get("content")
        if (source.get("type") == "m.room.message" and isinstance(content, dict) and "m.relates_to" not in content
                and isinstance(source.get("event_id"), str)):
            self._recent_own[(room_id, source["event_id"])] = time.monotonic()
            while len(self._recent_own) > self._RECENT_OWN_LIMIT:
                self._recent_own.popitem(last=False)

    async def _lookup(self, room_id: str, event_id: str) -> tuple[str, str] | None:
        """(tenant, request) of the card ``event_id`` in ``room_id``, or None.

        A message the bot posted a moment ago may not be recorded as a card yet: its lookup is tried
        again for a few seconds, once (a reply to one of the bot's notices waits once, then never)."""
        found = await self._find_card(room_id, event_id)
        seen = self._recent_own.pop((room_id, event_id), None)
        if found is not None or seen is None:
            return found
        deadline = seen + self.card_record_wait_seconds
        pause = 0.05
        while found is None and time.monotonic() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
            found = await self._find_card(room_id, event_id)
        return found

    async def _find_card(self, room_id: str, event_id: str) -> tuple[str, str] | None:
        found = await self.chat_refs.lookup_message(channel=self.name, message_key=message_key(room_id, event_id))
        if found is None:
            return None
        # A configured room serves one tenant; a direct room, every tenant that assigned its person.
        tenant = self._room_tenant.get(room_id)
        return found if tenant is None or found[0] == tenant else None

    async def _card_for(self, room_id: str, relates: dict[str, Any]) -> tuple[str, str, str] | None:
        """(tenant, request, card event) for a reply or thread message on a card."""
        candidates: list[str] = []
        if relates.get("rel_type") == "m.thread" and isinstance(relates.get("event_id"), str):
            candidates.append(relates["event_id"])
        reply = relates.get("m.in_reply_to")
        if isinstance(reply, dict) and isinstance(reply.get("event_id"), str):
            candidates.append(reply["event_id"])
        for event_id in candidates:
            found = await self._lookup(room_id, event_id)
            if found is not None:
                return found[0], found[1], event_id
        return None

    async def _answer(self, room_id: str, source: dict[str, Any], *, tenant_id: str, request_id: str, card_id: str,
                      text: str | None = None, vote: str | None = None) -> None:
        """A reply (``text``) or a 👍/👎 reaction (``vote``) on a card, through core's one chat-answer path."""
        sender, event_id = sender_of(source), str(source["event_id"])
        if vote is not None:
            try:
                view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
            except NotFoundError:
                return
            if not takes_reactions(view) or wording.form_only(view):
                return  # a 👍 on a form is applause, not an answer
            outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                                  value=coerce_text(view.schema, vote))
        else:
            outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                                  text=text, message=(room_id, event_id))
        view = outcome.view
        if outcome.accepted or (view is not None and await self._answered_by_this_event(outcome, view, source)):
            # A fixed transaction id: a batch handled again after a crash adds no second ✅.
            await self._send(room_id, "m.reaction", reaction_content(event_id, ACCEPTED), what=f"react in {room_id}",
                             txn_id=f"handraise.ack.{hashlib.sha256(event_id.encode()).hexdigest()[:24]}")
        elif outcome.code == "not_authorized":
            await self._tell_stranger(outcome, sender)
        elif outcome.code != "not_found":
            lines = _notice_lines(outcome.message)
            if outcome.code in _POINT_TO_FORM:
                lines.append(f"For the form, {ASK_ON_THE_QUESTION}")
            content = thread_notice(lines, card_event_id=card_id, reply_to=event_id, mention=sender.user_id)
            await self._send(room_id, "m.room.message", content, what=f"reply in {room_id}")

    async def remove_message(self, message: Any) -> bool:
        if message is None:
            return False
        room_id, event_id = message
        return await self._redact(room_id, event_id)

    async def _answered_by_this_event(self, outcome: AnswerOutcome, view: RequestView,
                                      source: dict[str, Any]) -> bool:
        """Whether the request was resolved by this very message (a batch handled again after a crash).

        The same person through Matrix, resolved after the message was sent: telling them
        "already answered" about their own accepted answer would only confuse.
        """
        if outcome.code != "already_answered":
            return False
        view = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
        if view.resolved_at is None:
            return False
        sent_ms = int(source.get("origin_server_ts") or 0)
        return (view.resolved_by == self.principal(str(source.get("sender"))) and view.resolved_channel == self.name
                and view.resolved_at * 1000 >= sent_ms)


def sender_of(source: dict[str, Any]) -> Sender:
    """A Matrix event's sender as core's Sender: ``matrix:@alice:example.org``."""
    user_id = str(source.get("sender"))
    return Sender(user_id, f"matrix:{user_id}", user_id)


def _notice_lines(message: str) -> list[str]:
    """Core's outcome text ("That answer is not valid:\n• field: message ...") as a lead line and a list."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return [lines[0], *(line.lstrip("•").strip() for line in lines[1:])] if lines else ["Not accepted."]

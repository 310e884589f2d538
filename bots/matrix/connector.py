"""The Matrix connector: posts cards to rooms, reads answers from /sync, edits cards when requests end.

One instance runs the sync loop; end-to-end encrypted rooms are not supported (reported at start, never posted to)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import time
import urllib.parse
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
from nio import (
    AsyncClient,
    AsyncClientConfig,
    JoinResponse,
    LoginResponse,
    RoomCreateResponse,
    RoomGetEventResponse,
    RoomGetStateEventResponse,
    RoomGetStateResponse,
    RoomMessagesResponse,
    RoomRedactResponse,
    RoomSendResponse,
    SyncResponse,
    WhoamiResponse,
)
from nio.api import MessageDirection, RoomPreset
from nio.exceptions import LocalProtocolError

from handraise.bots.matrix.cards import (
    ACCEPTED,
    ASK_ON_THE_QUESTION,
    FORM_KEY,
    answer_text,
    card_content,
    link_closed_content,
    link_content,
    notify,
    outcome_content,
    private_notice,
    reaction_content,
    reaction_vote,
    reminder_text,
    takes_reactions,
    thread_notice,
)
from handraise.bots.matrix.settings import MatrixSettings
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import ChatConnector, Sender
from handraise.core.config import Settings
from handraise.core.connectors import AnswerOutcome
from handraise.core.errors import ConfigError, ConnectorError, NotFoundError
from handraise.core.schema import coerce_text

log = logging.getLogger(__name__)

LEADER = "matrix-sync"
STATE_NAMESPACE = "matrix"
# Durable state: person -> the direct room the bot opened with them (for personal form links).
DIRECT_ROOMS = "matrix.direct"
# Durable state: request id -> the [room, event] of each direct message that carried a form link.
LINKS_SENT = "matrix.links"
# Refusals after which a person is told how to reach the form.
_POINT_TO_FORM = frozenset({"sensitive_removed", "sensitive_kept", "secret_removed", "secret_kept"})
# Errors that retrying cannot fix: a bad token, a room the bot may not post in.
_PERMANENT = frozenset({"M_FORBIDDEN", "M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_NOT_FOUND", "M_BAD_JSON",
                        "M_NOT_JSON", "M_TOO_LARGE", "M_UNRECOGNIZED", "M_INVALID_PARAM", "M_USER_DEACTIVATED"})
_AUTH_ERRORS = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_FORBIDDEN", "M_USER_DEACTIVATED"})
_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def message_key(room_id: str, event_id: str) -> str:
    """The correlation key of a card: its event id, bound to its room.

    ``m.in_reply_to`` is plain content any sender can fill in, so a reply in
    another room naming a card's event id must not find that card.
    """
    room = hashlib.sha256(room_id.encode()).hexdigest()[:16]
    return f"{event_id}@{room}"


def creators_have_infinite_power(room_version: str) -> bool:
    """Room version 12 (and its hydra predecessor) gives creators power above any level."""
    if room_version == "org.matrix.hydra.11":
        return True
    return room_version.isdigit() and int(room_version) >= 12


def power_of(user_id: str, state: list[dict[str, Any]]) -> float:
    """A user's power level from a room's state events (``math.inf`` for a v12+ creator)."""
    create = next((e for e in state if e.get("type") == "m.room.create" and e.get("state_key") == ""), None)
    levels = next((e for e in state if e.get("type") == "m.room.power_levels" and e.get("state_key") == ""), None)
    create_content = (create or {}).get("content") or {}
    creators = {(create or {}).get("sender")} | set(create_content.get("additional_creators") or [])
    if creators_have_infinite_power(str(create_content.get("room_version", "1"))) and user_id in creators:
        return math.inf
    if levels is None:
        return 100 if user_id == (create or {}).get("sender") else 0
    content = levels.get("content") or {}
    return float((content.get("users") or {}).get(user_id, content.get("users_default", 0)))


def level_needed(state: list[dict[str, Any]], *, event_type: str, redact: bool = False) -> float:
    """The power needed to send ``event_type`` (and, with ``redact``, to redact others' events)."""
    levels = next((e for e in state if e.get("type") == "m.room.power_levels" and e.get("state_key") == ""), None)
    content = (levels or {}).get("content") or {}
    events = content.get("events") or {}
    needed = float(events.get(event_type, content.get("events_default", 0)))
    if redact:
        needed = max(needed, float(content.get("redact", 50)))
    return needed


class MatrixConnector(ChatConnector):
    """Cards in Matrix rooms; answers by reply, thread or reaction; one sync loop per deployment.

    The loop runs only while ``leadership("matrix-sync")`` holds; its position
    (``next_batch``) is kept in Handraise's store after each batch, so a restart or
    a new leader neither replays old answers nor misses new ones (a gap longer
    than one sync's timeline is paged in from /messages). matrix-nio runs without
    encryption: an encrypted configured room is reported and gets no cards.
    """

    name = "matrix"

    @classmethod
    async def check(cls, settings: MatrixSettings, *, app_settings: Settings,
                    http: aiohttp.ClientSession) -> list[str]:
        """whoami with the access token, then per room: joined, not encrypted, power to post and to redact."""
        token = settings.access_token.get_secret_value() if settings.access_token is not None else None
        if token is None:
            saved = _saved_session(settings)
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
                    problems += _room_problems(room_id, settings.user_id, state)
            return problems
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            return [f"cannot reach {settings.homeserver} ({type(e).__name__}); check [matrix] homeserver"]
    settings_model = MatrixSettings
    # How many events one sync returns per room; a longer gap is paged in from /messages.
    timeline_limit: ClassVar[int] = 50
    # At most this many missed events are paged in per room after a long gap.
    backfill_limit: ClassVar[int] = 1000
    # How often an instance that does not lead the sync loop asks again.
    follower_poll_seconds: ClassVar[float] = 5.0
    # How long a stop waits for the batch being handled.
    stop_grace_seconds: ClassVar[float] = 10.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings: MatrixSettings = self.settings
        self._direct_locks: dict[str, asyncio.Lock] = {}
        self._stopping = False
        self._room_tenant = settings.room_tenants()
        self._encrypted: set[str] = set()
        self._unreadable_reported: set[str] = set()
        self._client: AsyncClient | None = None
        self._connected = False
        self._connect_lock = asyncio.Lock()
        # Held while a sync batch is handled and its position saved.
        self._batch_lock = asyncio.Lock()
        self._started_ms = 0
        # Set once this instance has synced (tests and health checks wait on it).
        self.synced = asyncio.Event()
        key = f"next_batch:{settings.user_id}"
        self._state_key = key if len(key) <= 200 else "next_batch:" + hashlib.sha256(key.encode()).hexdigest()

    # -- lifecycle ----------------------------------------------------------------

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise ConnectorError("matrix connector is not started")
        return self._client

    async def start(self) -> None:
        settings: MatrixSettings = self.settings
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
        await self.service.release_leadership(LEADER)
        if self._client is not None:
            await self._client.close()

    async def _end_tasks(self) -> None:
        """Cancel the sync loop until it has ended.

        One cancellation can be lost: in Python 3.11 ``asyncio.wait_for`` returns a result that
        arrived together with the cancellation (the leadership check uses it). A loop that lost
        it would go on to the next batch and wait for the batch lock this stop holds, and the
        stop would wait for the loop: so cancel again until it ends, for a bounded time.
        """
        pending = {task for task in self._tasks if not task.done()}
        deadline = time.monotonic() + self.stop_grace_seconds
        while pending and time.monotonic() < deadline:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.5)
        if pending:
            self.log.error("matrix: the sync loop did not end when stopped")

    async def _ensure_connected(self) -> None:
        """Log in (or check the token), then join and inspect every configured room; once."""
        async with self._connect_lock:
            if self._connected:
                return
            await self._log_in()
            for room_id in self._room_tenant:
                await self._join_and_inspect(room_id)
            self._connected = True

    async def _log_in(self) -> None:
        settings: MatrixSettings = self.settings
        client = self.client
        if settings.access_token is not None:
            client.access_token = settings.access_token.get_secret_value()
            client.user_id = settings.user_id
            await self._check_identity()
            return
        saved = self._load_session()
        if saved is not None:
            client.access_token, client.device_id = saved["access_token"], saved["device_id"]
            client.user_id = settings.user_id
            try:
                await self._check_identity()
                return
            except ConfigError:
                self.log.info("matrix: the saved session is no longer valid; logging in again")
                client.access_token = ""
        assert settings.password is not None
        response = await self._call(
            client.login(password=settings.password.get_secret_value(), device_name="Handraise"),
            LoginResponse, "log in", auth=True)
        self._save_session(response)
        await self._check_identity()

    async def _check_identity(self) -> None:
        response = await self._call(self.client.whoami(), WhoamiResponse, "check the access token", auth=True)
        if response.user_id != self.settings.user_id:
            raise ConfigError(f"matrix.user_id is {self.settings.user_id} but the access token belongs to "
                              f"{response.user_id}")
        if response.device_id:
            self.client.device_id = response.device_id

    # A password login mints a new access token; keeping it lets a restart reuse the session.

    def _session_file(self) -> Path | None:
        settings: MatrixSettings = self.settings
        if settings.store_path is None:
            return None
        name = hashlib.sha256(f"{settings.homeserver} {settings.user_id}".encode()).hexdigest()[:16]
        return Path(settings.store_path) / f"session-{name}.json"

    def _load_session(self) -> dict[str, str] | None:
        path = self._session_file()
        if path is None or not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            log.warning("matrix: ignoring an unreadable session file in store_path")
            return None
        if (data.get("user_id") != self.settings.user_id or data.get("homeserver") != self.settings.homeserver
                or not data.get("access_token") or not data.get("device_id")):
            return None
        return data

    def _save_session(self, response: LoginResponse) -> None:
        path = self._session_file()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = {"homeserver": self.settings.homeserver, "user_id": response.user_id,
                "device_id": response.device_id, "access_token": response.access_token}
        partial = path.with_suffix(".tmp")
        # The file holds an access token: readable by this user only, from its first byte.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(partial, path)

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
                               what, room_id, _level(power), _level(needed))
        needed = level_needed(state, event_type="m.room.redaction", redact=True)
        if power < needed:
            self.log.warning(
                "matrix: the bot lacks the power to redact in room %s (it has %s, needs %s): chat replies to "
                "sensitive requests there cannot be removed; raise its power level", room_id, _level(power),
                _level(needed))
        self.log.info("matrix: room ready", extra={"room_id": room_id, "tenant_id": self._room_tenant[room_id]})

    def _report_encrypted(self, room_id: str) -> None:
        if room_id in self._encrypted:
            return
        self._encrypted.add(room_id)
        self.log.error("matrix: room %s is end-to-end encrypted; Handraise cannot read answers there (E2EE is "
                       "not supported), so no cards are posted to it; use an unencrypted room", room_id)

    # -- calling the homeserver -----------------------------------------------------

    async def _call(self, awaitable: Any, ok: type, what: str, *, auth: bool = False) -> Any:
        """Await a nio call; its error response (nio does not raise) becomes one ConnectorError."""
        try:
            response = await awaitable
        except _NETWORK_ERRORS as e:
            raise ConnectorError(f"matrix: could not {what}: {type(e).__name__}") from e
        except LocalProtocolError as e:
            raise ConnectorError(f"matrix: could not {what}: {e}", permanent=True) from e
        if isinstance(response, ok):
            return response
        code = getattr(response, "status_code", None)
        message = str(getattr(response, "message", "") or "")[:200]
        if auth and code in _AUTH_ERRORS:
            raise ConfigError(f"matrix: the homeserver refused the bot's credentials ({code}: {message})")
        retry_ms = getattr(response, "retry_after_ms", None)
        raise ConnectorError(f"matrix: could not {what}: {code or 'error'} {message}".strip(),
                             retry_after=retry_ms / 1000 if retry_ms else None, permanent=code in _PERMANENT)

    async def _send(self, room_id: str, event_type: str, content: dict[str, Any], *, what: str,
                    txn_id: str | None = None) -> str:
        response = await self._call(self.client.room_send(room_id, event_type, content, tx_id=txn_id),
                                    RoomSendResponse, what)
        return response.event_id

    # -- delivery -------------------------------------------------------------------

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        if target in self._encrypted:
            raise ConnectorError(f"matrix: room {target} is end-to-end encrypted, which is not supported",
                                 permanent=True)
        await self._ensure_connected()
        # A fixed transaction id per (request, room): a retry after a lost
        # response gets the same event back instead of a second card.
        txn = f"handraise.card.{request.id}.{hashlib.sha256(target.encode()).hexdigest()[:12]}"
        content = card_content(request, people=self._people(request.tenant_id), tz=self.timezone(request.tenant_id))
        event_id = await self._send(target, "m.room.message", content,
                                    what=f"post a card to {target}", txn_id=txn)
        await self.service.remember_message(channel=self.name, message_key=message_key(target, event_id),
                                            tenant_id=request.tenant_id, request_id=request.id)
        ref = {"room_id": target, "event_id": event_id}
        try:
            # The bot's own 📝 under the card: asking for one's form link is one click.
            ref["form_key"] = await self._send(
                target, "m.reaction", reaction_content(event_id, FORM_KEY), what=f"react in {target}",
                txn_id=f"handraise.formkey.{hashlib.sha256(event_id.encode()).hexdigest()[:24]}")
        except ConnectorError as e:
            self.log.warning("matrix: could not put %s under the card (%s)", FORM_KEY, e.message)
        self.log.info("matrix: card posted", extra={"request_id": request.id, "room_id": target})
        return ref

    def _people(self, tenant_id: str) -> list[str]:
        route = self.settings.tenants.get(tenant_id)
        return route.resolved_people() if route is not None else []

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
                         self._people(request.tenant_id))
        await self._send(room_id, "m.room.message", content, what=f"remind in {room_id}")

    # -- the sync loop --------------------------------------------------------------

    def _sync_filter(self) -> dict[str, Any]:
        return {
            "presence": {"types": []},
            "account_data": {"types": []},
            "room": {"timeline": {"limit": self.timeline_limit}, "state": {"lazy_load_members": True},
                     "ephemeral": {"types": []}, "account_data": {"types": []}},
        }

    async def _sync_step(self) -> None:
        """Lead the sync loop while this instance holds the lock; return when it is lost."""
        await self._ensure_connected()
        if not await self.service.leadership(LEADER):
            await asyncio.sleep(self.follower_poll_seconds)
            return
        since = await self.service.get_state(STATE_NAMESPACE, self._state_key)
        if since is None:
            since = await self._first_sync()
        self.log.info("matrix: leading the sync loop")
        self.synced.set()
        while not self._stopping:
            if not await self.service.leadership_alive(LEADER):
                self.log.warning("matrix: lost the sync leadership; another instance may take over")
                return
            response = await self._call(
                self.client.sync(timeout=self.settings.sync_timeout_ms, since=since, sync_filter=self._sync_filter(),
                                 full_state=False),
                SyncResponse, "sync")
            async with self._batch_lock:
                await self._handle_sync(response, since=since)
                await self.service.set_state(STATE_NAMESPACE, self._state_key, response.next_batch)
            since = response.next_batch

    async def _first_sync(self) -> str:
        """No position kept yet: take the current one without replaying the rooms' history."""
        response = await self._call(self.client.sync(timeout=1, sync_filter=self._sync_filter(), full_state=False),
                                    SyncResponse, "sync")
        async with self._batch_lock:
            # Only what arrived since this start counts (an answer typed while we were starting).
            await self._handle_sync(response, since=None, newer_than_ms=self._started_ms)
            await self.service.set_state(STATE_NAMESPACE, self._state_key, response.next_batch)
        return response.next_batch

    async def _handle_sync(self, response: SyncResponse, *, since: str | None,
                           newer_than_ms: int | None = None) -> None:
        for room_id in response.rooms.invite:
            if room_id in self._room_tenant:
                self.log.info("matrix: invited to a configured room; joining", extra={"room_id": room_id})
                await self._join_and_inspect(room_id)
            else:
                self.log.info("matrix: ignoring an invite to a room that is not configured",
                              extra={"room_id": room_id})
        for room_id, info in response.rooms.join.items():
            if room_id not in self._room_tenant:
                continue
            if any(getattr(e, "source", {}).get("type") == "m.room.encryption" for e in info.state):
                self._report_encrypted(room_id)
            events = [e.source for e in info.timeline.events if isinstance(getattr(e, "source", None), dict)]
            if info.timeline.limited and since is not None and info.timeline.prev_batch:
                events = await self._backfill(room_id, start=info.timeline.prev_batch, until=since) + events
            for source in events:
                if newer_than_ms is not None and int(source.get("origin_server_ts") or 0) < newer_than_ms:
                    continue
                try:
                    await self._handle_event(room_id, source)
                except ConnectorError as e:
                    # What was submitted is stored; only a reply to the human failed.
                    self.log.warning("matrix: could not respond to an event (%s)", e.message,
                                     extra={"room_id": room_id})
                except Exception:
                    if not await self._store_answers():
                        raise  # the store is down: the whole batch is handled again once it is back
                    # One event that cannot be handled must not stall every room's answers
                    # behind it; the human sees no ✅ and can answer again.
                    self.log.exception("matrix: failed to handle an event", extra={"room_id": room_id})

    async def _store_answers(self) -> bool:
        try:
            await self.service.get_state(STATE_NAMESPACE, self._state_key)
        except Exception:
            return False
        return True

    async def _backfill(self, room_id: str, *, start: str, until: str) -> list[dict[str, Any]]:
        """Events between our last position and a limited timeline, oldest first."""
        collected: list[dict[str, Any]] = []
        token = start
        while len(collected) < self.backfill_limit:
            page = await self._call(
                self.client.room_messages(room_id, start=token, end=until, direction=MessageDirection.back,
                                          limit=min(100, self.backfill_limit - len(collected))),
                RoomMessagesResponse, f"read missed events of {room_id}")
            collected.extend(e.source for e in page.chunk if isinstance(getattr(e, "source", None), dict))
            if not page.chunk or not page.end or page.end == token:
                break
            token = page.end
        else:
            self.log.warning("matrix: more than %d events were missed in room %s; older ones are skipped",
                             self.backfill_limit, room_id)
        collected.reverse()
        self.log.info("matrix: paged in missed events", extra={"room_id": room_id, "count": len(collected)})
        return collected

    # -- answers --------------------------------------------------------------------

    async def _handle_event(self, room_id: str, source: dict[str, Any]) -> None:
        if source.get("sender") == self.settings.user_id:
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
            await self._on_link_asked(room_id, source, tenant_id=found[0], request_id=found[1])
            return
        await self._answer(room_id, source, tenant_id=found[0], request_id=found[1], card_id=card_id, vote=vote)

    async def _lookup(self, room_id: str, event_id: str) -> tuple[str, str] | None:
        found = await self.service.lookup_message(channel=self.name, message_key=message_key(room_id, event_id))
        if found is None or found[0] != self._room_tenant.get(room_id):
            return None
        return found

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

    async def _on_link_asked(self, room_id: str, source: dict[str, Any], *, tenant_id: str, request_id: str) -> None:
        """A 📝 on a card: the person's own one-time form link, by direct message (allowlisted people only)."""
        sender = sender_of(source)
        outcome = await self.personal_link(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                           recipient=sender.principal)
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
        # Kept so that withdraw edits the link away when the request ends.
        kept = json.loads(await self.service.get_state(LINKS_SENT, request_id) or "[]")
        kept.append([room, sent])
        await self.service.set_state(LINKS_SENT, request_id, json.dumps(kept))
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
        return (view.resolved_by == self.principal(str(source.get("sender"))) and view.resolved_via == self.name
                and view.resolved_at * 1000 >= sent_ms)

    async def _redact(self, room_id: str, event_id: str, *, reason: str = "Answers like this go through the form"
                      ) -> bool:
        try:
            await self._call(self.client.room_redact(room_id, event_id, reason=reason), RoomRedactResponse,
                             f"redact in {room_id}")
        except ConnectorError as e:
            self.log.warning("matrix: could not redact an event (%s)", e.message, extra={"room_id": room_id})
            return False
        return True

    # -- direct messages ----------------------------------------------------------

    async def _send_direct(self, user_id: str, content: dict[str, Any], *, what: str) -> tuple[str, str]:
        """Send ``content`` to one person in a direct room with them: (room, event)."""
        async with self._direct_locks.setdefault(user_id, asyncio.Lock()):
            room_id = await self._direct_room(user_id)
        return room_id, await self._send(room_id, "m.room.message", content, what=f"send {what} to {user_id}")

    async def _direct_room(self, user_id: str) -> str:
        """The bot's direct room with ``user_id``: one it made before (kept here and in the bot's
        ``m.direct``) where the person still is or is invited, else a new one, marked in ``m.direct``."""
        direct = await self._account_data("m.direct")
        known = await self.service.get_state(DIRECT_ROOMS, user_id[:200])
        candidates = [r for r in [known, *(direct.get(user_id) or [])] if isinstance(r, str)]
        for room_id in dict.fromkeys(candidates):
            if await self._still_there(room_id, user_id):
                if known != room_id:
                    await self.service.set_state(DIRECT_ROOMS, user_id[:200], room_id)
                return room_id
        created = await self._call(self.client.room_create(is_direct=True, invite=[user_id],
                                                           preset=RoomPreset.trusted_private_chat),
                                   RoomCreateResponse, f"open a direct room with {user_id}")
        direct[user_id] = [*[r for r in direct.get(user_id) or [] if isinstance(r, str)], created.room_id]
        await self._put_account_data("m.direct", direct)
        await self.service.set_state(DIRECT_ROOMS, user_id[:200], created.room_id)
        self.log.info("matrix: opened a direct room", extra={"room_id": created.room_id})
        return created.room_id

    async def _still_there(self, room_id: str, user_id: str) -> bool:
        response = await self.client.room_get_state_event(room_id, "m.room.member", user_id)
        return isinstance(response, RoomGetStateEventResponse) and \
            (response.content or {}).get("membership") in ("join", "invite")

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

    async def _raw(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A client-server API call that matrix-nio does not offer (account data)."""
        try:
            async with self.http.request(method, f"{self.settings.homeserver}{path}", json=body,
                                         headers={"Authorization": f"Bearer {self.client.access_token}"},
                                         timeout=aiohttp.ClientTimeout(total=30)) as resp:
                return resp.status, await resp.json(content_type=None)
        except (*_NETWORK_ERRORS, ValueError) as e:
            raise ConnectorError(f"matrix: {method} account data failed: {type(e).__name__}") from e

    async def _close_links(self, view: RequestView, outcome: wording.Outcome) -> None:
        """The direct messages that carried a personal link lose it: the request is over."""
        kept = await self.service.get_state(LINKS_SENT, view.id)
        for room_id, event_id in json.loads(kept or "[]"):
            txn = f"handraise.linkend.{hashlib.sha256(event_id.encode()).hexdigest()[:24]}"
            try:
                await self._send(room_id, "m.room.message", link_closed_content(view, event_id=event_id,
                                                                                outcome=outcome),
                                 what="edit a personal link away", txn_id=txn)
            except ConnectorError as e:  # the person left the room: nothing to edit there
                self.log.info("matrix: a personal link message kept its text (%s)", e.message)


def sender_of(source: dict[str, Any]) -> Sender:
    """A Matrix event's sender as core's Sender: ``matrix:@alice:example.org``."""
    user_id = str(source.get("sender"))
    return Sender(user_id, f"matrix:{user_id}", user_id)


def _notice_lines(message: str) -> list[str]:
    """Core's outcome text ("That answer is not valid:\n• field: message ...") as a lead line and a list."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return [lines[0], *(line.lstrip("•").strip() for line in lines[1:])] if lines else ["Not accepted."]


def _level(value: float) -> str:
    return "creator (unlimited)" if math.isinf(value) else str(int(value))


def _saved_session(settings: MatrixSettings) -> str | None:
    """The access token a password login saved under store_path (as ``_session_file`` names it), if any."""
    if settings.store_path is None:
        return None
    name = hashlib.sha256(f"{settings.homeserver} {settings.user_id}".encode()).hexdigest()[:16]
    try:
        data = json.loads((Path(settings.store_path) / f"session-{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("access_token") if data.get("user_id") == settings.user_id else None


def _room_problems(room_id: str, user_id: str, state: list[dict[str, Any]]) -> list[str]:
    """What would stop the bot in a room, from its state (doctor's words for what start() logs)."""
    problems = []
    if any(e.get("type") == "m.room.encryption" for e in state):
        problems.append(f"room {room_id} is end-to-end encrypted, which Handraise cannot read; use an "
                        "unencrypted room")
    power = power_of(user_id, state)
    for event_type, what in (("m.room.message", "post cards"), ("m.reaction", "react")):
        needed = level_needed(state, event_type=event_type)
        if power < needed:
            problems.append(f"room {room_id}: the bot cannot {what} (power {_level(power)}, needs {_level(needed)}); "
                            "raise its power level")
    needed = level_needed(state, event_type="m.room.redaction", redact=True)
    if power < needed:
        problems.append(f"room {room_id}: the bot cannot redact chat replies to sensitive requests (power "
                        f"{_level(power)}, needs {_level(needed)}); give it power level {_level(needed)}")
    return problems

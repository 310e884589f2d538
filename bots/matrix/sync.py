"""The Matrix sync loop: one instance reads /sync while it holds the leadership, and keeps its position.

Its position (``next_batch``) is kept in Handraise's store after each batch, so a restart or a new
leader neither replays old answers nor misses new ones (a gap longer than one sync's timeline is
paged in from /messages)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any, ClassVar

from nio import RoomMessagesResponse, SyncResponse
from nio.api import MessageDirection

from handraise.bots.matrix.homeserver import HomeserverCalls
from handraise.core.errors import ConnectorError

LEADER = "matrix-sync"
STATE_NAMESPACE = "matrix"


class SyncLoop(HomeserverCalls):
    """Reads /sync and hands each event of a configured room or of a direct room the bot opened
    (``_is_direct_room``, from :class:`DirectMessages`) to ``_handle_event``."""

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
        self._stopping = False
        # Held while a sync batch is handled and its position saved.
        self._batch_lock = asyncio.Lock()
        self._started_ms = 0
        # Set once this instance has synced (tests and health checks wait on it).
        self.synced = asyncio.Event()
        key = f"next_batch:{self.settings.user_id}"
        self._state_key = key if len(key) <= 200 else "next_batch:" + hashlib.sha256(key.encode()).hexdigest()

    # -- what the connector supplies ---------------------------------------------------

    _room_tenant: dict[str, str]

    async def _ensure_connected(self) -> None:
        raise NotImplementedError

    async def _join_and_inspect(self, room_id: str) -> None:
        raise NotImplementedError

    def _report_encrypted(self, room_id: str) -> None:
        raise NotImplementedError

    async def _handle_event(self, room_id: str, source: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- the loop ------------------------------------------------------------------------

    def _sync_filter(self) -> dict[str, Any]:
        return {
            "presence": {"types": []},
            "account_data": {"types": []},
            "room": {"timeline": {"limit": self.timeline_limit}, "state": {"lazy_load_members": True},
                     "ephemeral": {"types": []}, "account_data": {"types": []}},
        }

    async def _sync_step(self) -> None:
        """Lead the sync loop while this instance holds the lock; return when it is lost.

        A failure gives the lock up before the backoff that follows: an instance that cannot sync
        (its network, its store connection) must not keep every other from leading meanwhile."""
        await self._ensure_connected()
        if not await self.leadership.take(LEADER):
            await asyncio.sleep(self.follower_poll_seconds)
            return
        try:
            await self._lead()
        except Exception:
            await self._give_up_leadership()
            raise

    async def _give_up_leadership(self) -> None:
        try:
            await self.leadership.release(LEADER)
        except Exception as e:  # the lock's connection is gone: the lock went with it
            self.log.warning("matrix: could not release the sync leadership (%s)", type(e).__name__)
        else:
            self.log.info("matrix: gave up the sync leadership after a failure")

    async def _lead(self) -> None:
        since = await self.state.get(STATE_NAMESPACE, self._state_key)
        if since is None:
            since = await self._first_sync()
        self.log.info("matrix: leading the sync loop")
        self.synced.set()
        while not self._stopping:
            if not await self.leadership.alive(LEADER):
                self.log.warning("matrix: lost the sync leadership; another instance may take over")
                return
            response = await self._call(
                self.client.sync(timeout=self.settings.sync_timeout_ms, since=since, sync_filter=self._sync_filter(),
                                 full_state=False),
                SyncResponse, "sync")
            async with self._batch_lock:
                await self._handle_sync(response, since=since)
                await self.state.set(STATE_NAMESPACE, self._state_key, response.next_batch)
            since = response.next_batch

    async def _first_sync(self) -> str:
        """No position kept yet: take the current one without replaying the rooms' history."""
        response = await self._call(self.client.sync(timeout=1, sync_filter=self._sync_filter(), full_state=False),
                                    SyncResponse, "sync")
        async with self._batch_lock:
            # Only what arrived since this start counts (an answer typed while we were starting).
            await self._handle_sync(response, since=None, newer_than_ms=self._started_ms)
            await self.state.set(STATE_NAMESPACE, self._state_key, response.next_batch)
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
            if room_id not in self._room_tenant and not await self._is_direct_room(room_id):
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
            await self.state.get(STATE_NAMESPACE, self._state_key)
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

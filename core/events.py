"""In-process event bus, fed across instances by PostgreSQL LISTEN/NOTIFY.

An event names what happened (``request.created``, ``request.resolved``,
``run.annotated``) and carries a JSON-ready ``data`` that is already safe to
show a ``read`` key of its tenant: no sensitive response ever enters one.
Subscribers get their own bounded queue; a slow subscriber loses its oldest
events (and is told so) rather than slowing the service.

An event's ``seq`` is the seq of the journal entry that records it (``created``,
``answered``/``expired``/``cancelled``, ``annotation_recorded``), so a stream that
dropped can be resumed from the journal after the last id it saw: :func:`events_after`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

REQUEST_CREATED = "request.created"
REQUEST_RESOLVED = "request.resolved"
RUN_ANNOTATED = "run.annotated"
# Internal, not on ``GET /v1/events``: a person opened a request's form or first tried to answer
# (``opened_at``/``interacted_at``); the HITL-protocol event stream turns it into review.opened/in_progress.
REQUEST_PROGRESS = "request.progress"
# Internal, not on ``GET /v1/events``: the clock reached a request's escalation step(s) or a reminder
# (core/escalation.py); the dispatcher of the instance that reached it reaches the people and pings the
# places, and the inbox shows the request to the people a step added.
REQUEST_SCHEDULED = "request.scheduled"
# A person voted on a quorum request (core/quorum.py): the request with its votes so far.
REQUEST_VOTED = "request.voted"

# Rebuilds an event's data from the store when it arrives from another instance:
# (tenant_id, object id) -> data, or None when the object is gone.
Loader = Callable[[str, str], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class Event:
    type: str
    tenant_id: str
    object_id: str
    data: dict[str, Any]
    run_id: str | None = None
    # True on the instance where it happened: only there do connectors act on it.
    local: bool = True
    seq: int = 0


@dataclass(eq=False)
class Subscription:
    tenant_id: str | None
    types: frozenset[str] | None
    run_id: str | None
    queue: asyncio.Queue[Event] = field(default_factory=lambda: asyncio.Queue(maxsize=1000))
    dropped: int = 0
    # Set at shutdown: a consumer that wakes finds it set and ends its stream (see EventBus.close).
    closed: bool = False

    def matches(self, ev: Event) -> bool:
        if self.tenant_id is not None and ev.tenant_id != self.tenant_id:
            return False
        if self.types is not None and ev.type not in self.types:
            return False
        return self.run_id is None or ev.run_id == self.run_id

    def offer(self, ev: Event) -> None:
        if self.queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(ev)

    def close(self) -> None:
        self.closed = True
        self.offer(_CLOSING)  # wakes a consumer parked on the queue; it reads ``closed``, never this event


# What a closed subscription's consumer wakes to; never published.
_CLOSING = Event("bus.closing", "", "", {})


class EventBus:
    def __init__(self, *, instance_id: str) -> None:
        self.instance_id = instance_id
        self._subs: set[Subscription] = set()
        self._loaders: dict[str, Loader] = {}
        self._seq = itertools.count(1)
        self._listeners: list[Callable[[Event], Awaitable[None] | None]] = []
        # Listeners that read the data of other instances' events (the others act on them by id alone).
        self._remote_data_listeners = 0
        self._closed = False

    def register_loader(self, event_type: str, loader: Loader) -> None:
        self._loaders[event_type] = loader

    def add_listener(self, fn: Callable[[Event], Awaitable[None] | None], *, remote_data: bool = True) -> None:
        """A callback for every event (internal consumers such as waiters and the dispatcher). With
        ``remote_data=False`` it reads no data of other instances' events (``local`` False), which then
        are not read from the store for it (their ``data`` is empty unless a subscription needed it)."""
        self._listeners.append(fn)
        self._remote_data_listeners += remote_data

    def publish(self, ev: Event) -> None:
        # Events carry their journal seq; one without (a test's own) gets a local number.
        if not ev.seq:
            ev = Event(ev.type, ev.tenant_id, ev.object_id, ev.data, ev.run_id, ev.local, next(self._seq))
        if self._subs:
            for sub in list(self._subs):
                if sub.matches(ev):
                    sub.offer(ev)
        for fn in self._listeners:
            try:
                result = fn(ev)
                # Most listeners are plain functions (None): no isinstance check through the ABCs for them.
                if result is not None and asyncio.iscoroutine(result):
                    task = asyncio.get_running_loop().create_task(result)
                    task.add_done_callback(_log_failure)
            except Exception:
                log.exception("event listener failed", extra={"event": ev.type})

    @contextlib.contextmanager
    def subscribe(self, *, tenant_id: str | None, types: set[str] | None = None,
                  run_id: str | None = None) -> Any:
        sub = Subscription(tenant_id, frozenset(types) if types else None, run_id)
        if self._closed:
            sub.close()
        self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)

    async def stream(self, **filters: Any) -> AsyncIterator[Event]:
        with self.subscribe(**filters) as sub:
            while True:
                ev = await sub.queue.get()
                if sub.closed:
                    return
                yield ev

    def close(self) -> None:
        """At shutdown: every subscription ends, and any made later is ended at once. An event stream
        answers its end and closes cleanly; its client resumes with ``Last-Event-ID`` (here once back, or
        on another instance) and misses nothing."""
        self._closed = True
        for sub in self._subs:
            sub.close()

    async def load(self, event_type: str, tenant_id: str, object_id: str) -> dict[str, Any] | None:
        """An event's data rebuilt from the store (None: no loader, or the object is gone)."""
        loader = self._loaders.get(event_type)
        return None if loader is None else await loader(tenant_id, object_id)

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def notify_payload(self, ev: Event) -> dict[str, Any]:
        """What crosses instances: ids only (NOTIFY payloads are small and logged by PostgreSQL)."""
        return {"type": ev.type, "tenant_id": ev.tenant_id, "id": ev.object_id, "run_id": ev.run_id,
                "origin": self.instance_id}

    async def on_notify(self, payload: str) -> None:
        """Another instance's event. Its data is rebuilt from the store only when a subscription here would
        get it or a listener reads it: the service's waiters, the dispatcher and the metrics act on other
        instances' events by their ids alone, so with no stream open here an event costs no store read."""
        try:
            msg = json.loads(payload)
            if msg.get("origin") == self.instance_id:
                return
            loader = self._loaders.get(msg["type"])
            if loader is None:
                return
            seq = msg.get("seq")
            ev = Event(msg["type"], msg["tenant_id"], msg["id"], {}, msg.get("run_id"), local=False,
                       seq=seq if isinstance(seq, int) and seq > 0 else 0)
            if self._remote_data_listeners or any(sub.matches(ev) for sub in self._subs):
                data = await loader(ev.tenant_id, ev.object_id)
                if data is None:  # gone since
                    return
                ev = dataclasses.replace(ev, data=data)
        except Exception:
            log.exception("bad notification")
            return
        self.publish(ev)


# Journal entries that are events: the entry's event name -> the event type.
JOURNAL_EVENTS = {"created": REQUEST_CREATED, "voted": REQUEST_VOTED, "escalated": REQUEST_SCHEDULED,
                  "answered": REQUEST_RESOLVED,
                  "expired": REQUEST_RESOLVED,
                  "cancelled": REQUEST_RESOLVED, "annotation_recorded": RUN_ANNOTATED}


async def events_after(bus: EventBus, entries: Callable[[int], Awaitable[list[Any]]], *, tenant_id: str,
                       after: int) -> AsyncIterator[Event]:
    """The tenant's events recorded after journal seq ``after``, oldest first, rebuilt from the store.

    ``entries(after_seq)`` reads the next page of the tenant's journal (``JournalEntry`` objects).
    The data is the object as it stands now (a request created and since answered replays its
    ``request.created`` with its current status); ``seq`` is the entry's, as it was live.
    """
    while True:
        page = await entries(after)
        if not page:
            return
        for entry in page:
            after = entry.seq
            kind = JOURNAL_EVENTS.get(entry.event)
            if kind is None:
                continue
            object_id = entry.data.get("annotation_id") if kind == RUN_ANNOTATED else entry.request_id
            if not object_id:
                continue
            data = await bus.load(kind, tenant_id, str(object_id))
            if data is not None:
                yield Event(kind, tenant_id, str(object_id), data, entry.run_id, local=False, seq=entry.seq)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("event listener failed", exc_info=task.exception())


class PostgresListener:
    """Holds one asyncpg connection LISTENing on the events channel; reconnects with backoff."""

    def __init__(self, *, dsn: str, channel: str, bus: EventBus,
                 on_reconnect: Callable[[], Awaitable[None]] | None = None, connect_timeout: float = 5.0) -> None:
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._channel = channel
        self._bus = bus
        self._on_reconnect = on_reconnect
        self.connected = asyncio.Event()
        # How this instance's own payloads name it (json.dumps' spelling; a key, never inside a JSON string,
        # whose quotes would be escaped): they were published here already, and come back on every write.
        self._own = f'"origin": {json.dumps(bus.instance_id)}'

    async def run(self) -> None:
        import asyncpg

        delay = 0.1
        first = True
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=self._connect_timeout)
                closed = asyncio.Event()
                conn.add_termination_listener(lambda _c: closed.set())
                await conn.add_listener(self._channel, self._handle)
                self.connected.set()
                if not first and self._on_reconnect is not None:
                    # Anything resolved while we were deaf is re-read from the store.
                    await self._on_reconnect()
                first = False
                delay = 0.1
                await closed.wait()
                log.warning("event listener connection lost; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("event listener cannot connect: %s", type(e).__name__)
            finally:
                self.connected.clear()
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _handle(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if self._own in payload:  # no task for this instance's own events (on_notify would drop them)
            return
        task = asyncio.get_running_loop().create_task(self._bus.on_notify(payload))
        task.add_done_callback(_log_failure)

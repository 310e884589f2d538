"""``GET /v1/events``: Server-Sent Events of this tenant (request.created, request.resolved, run.annotated).

Each event's ``id`` is its journal seq. A client that lost the stream reconnects with
``Last-Event-ID`` (browsers do so by themselves) and first gets every event recorded after
that id, read back from the journal, then the live ones: nothing is missed across the gap.
The subscription starts before the journal is read, so an event that commits meanwhile is
in one of the two (sent once).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from handraise.core.appkeys import BUS, KEYRING, STORE
from handraise.core.errors import BadRequestError
from handraise.core.events import REQUEST_CREATED, REQUEST_RESOLVED, REQUEST_VOTED, RUN_ANNOTATED, Event, events_after

routes = web.RouteTableDef()

EVENT_TYPES = frozenset({REQUEST_CREATED, REQUEST_VOTED, REQUEST_RESOLVED, RUN_ANNOTATED})
KEEPALIVE_SECONDS = 15.0
_REPLAY_PAGE = 500


def resume_point(request: web.Request) -> int | None:
    """The journal seq to resume after: ``Last-Event-ID`` (a reconnect), else ``?after=`` (a first connect)."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None or not raw.strip():
        raw = request.query.get("after")
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequestError("Last-Event-ID (or after) must be an event id from this stream")
    return int(raw)


def _frame(ev: Event) -> bytes:
    data = json.dumps(ev.data, separators=(",", ":"), ensure_ascii=False)
    return f"id: {ev.seq}\nevent: {ev.type}\ndata: {data}\n\n".encode()


async def serve_stream(request: web.Request, *, tenant_id: str, types: set[str] | None = None,
                       run_id: str | None = None, after: int | None = None,
                       headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Stream the tenant's events to this request until the client goes or the server stops; the operator
    inbox uses it too."""
    bus, store = request.app[BUS], request.app[STORE]
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
        **(headers or {}),
    })
    with bus.subscribe(tenant_id=tenant_id, types=types, run_id=run_id) as sub:
        await response.prepare(request)
        # A first comment tells the client the subscription is live (nothing is missed after it).
        await response.write(b": subscribed\n\n")
        replayed: set[int] = set()
        if after is not None:
            async def page(after_seq: int) -> list:
                return await store.journal_entries(tenant_id=tenant_id, after_seq=after_seq, limit=_REPLAY_PAGE)

            async for ev in events_after(bus, page, tenant_id=tenant_id, after=after):
                replayed.add(ev.seq)
                if sub.matches(ev):
                    await response.write(_frame(ev))
        while True:
            try:
                ev = await asyncio.wait_for(sub.queue.get(), timeout=KEEPALIVE_SECONDS)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if sub.closed:  # the server is stopping: end the stream (the client resumes with Last-Event-ID)
                return response
            if ev.seq in replayed:
                continue  # committed while the journal was read: sent from there already
            await response.write(_frame(ev))


@routes.get("/v1/events")
async def stream_events(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authenticate(request)
    principal.require("read")
    # Only the public events: internal ones (request.progress) stay on the bus.
    types: set[str] = set(EVENT_TYPES)
    if "types" in request.query:
        types = {t.strip() for t in request.query["types"].split(",") if t.strip()}
        unknown = types - EVENT_TYPES
        if unknown or not types:
            raise BadRequestError(f"types must be among: {', '.join(sorted(EVENT_TYPES))}")
    run_id = request.query.get("run_id") or None
    return await serve_stream(request, tenant_id=principal.tenant_id, types=types, run_id=run_id,
                              after=resume_point(request))

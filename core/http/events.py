"""``GET /v1/events``: Server-Sent Events of this tenant (request.created, request.resolved, run.annotated)."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from handraise.core.appkeys import BUS, KEYRING
from handraise.core.errors import BadRequestError
from handraise.core.events import REQUEST_CREATED, REQUEST_RESOLVED, RUN_ANNOTATED

routes = web.RouteTableDef()

EVENT_TYPES = frozenset({REQUEST_CREATED, REQUEST_RESOLVED, RUN_ANNOTATED})
KEEPALIVE_SECONDS = 15.0


@routes.get("/v1/events")
async def stream_events(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authenticate(request)
    principal.require("read")
    types: set[str] | None = None
    if "types" in request.query:
        types = {t.strip() for t in request.query["types"].split(",") if t.strip()}
        unknown = types - EVENT_TYPES
        if unknown or not types:
            raise BadRequestError(f"types must be among: {', '.join(sorted(EVENT_TYPES))}")
    run_id = request.query.get("run_id") or None
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
    })
    with request.app[BUS].subscribe(tenant_id=principal.tenant_id, types=types, run_id=run_id) as sub:
        await response.prepare(request)
        # A first comment tells the client the subscription is live (nothing is missed after it).
        await response.write(b": subscribed\n\n")
        while True:
            try:
                ev = await asyncio.wait_for(sub.queue.get(), timeout=KEEPALIVE_SECONDS)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            data = json.dumps(ev.data, separators=(",", ":"), ensure_ascii=False)
            await response.write(f"id: {ev.seq}\nevent: {ev.type}\ndata: {data}\n\n".encode())

"""HITL-protocol endpoints (core/hitl.py): discovery, a case created with 202, its poll and its events.

The events of one case come from the tenant's event bus (the stream ``GET /v1/events`` serves):
each frame is the case's poll response as it stands after a change, named ``review.<status>``,
with the rank of that status as its ``id``. A client that reconnects with ``Last-Event-ID``
gets only what is newer; the stream ends after the terminal event.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from handraise.core.api import parse_body
from handraise.core.appkeys import BUS, KEYRING, SERVICE, SETTINGS
from handraise.core.errors import BadRequestError, HandraiseError
from handraise.core.events import REQUEST_PROGRESS, REQUEST_RESOLVED
from handraise.core.hitl import (
    POLL_INTERVAL_SECONDS,
    PROGRESS_RANK,
    CreateReviewBody,
    ReviewCases,
    accepted_body,
    case_status,
    discovery,
    poll_response,
    protocol_error,
)
from handraise.core.http.events import KEEPALIVE_SECONDS
from handraise.core.http.input import read_json
from handraise.core.http.requests import send_view

routes = web.RouteTableDef()

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _protocol_errors(handler: Handler) -> Handler:
    """Errors under the protocol's codes where it names them (``invalid_token``, ``case_expired`` …)."""
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except HandraiseError as e:
            raise protocol_error(e) from None
    return wrapped


@routes.get("/.well-known/hitl.json")
async def well_known(request: web.Request) -> web.Response:
    return web.json_response(discovery(request.app[SETTINGS]))


@routes.post("/v1/hitl/reviews")
@_protocol_errors
async def create_review(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "ask")
    body = parse_body(CreateReviewBody, await read_json(request), what="review")
    cases = ReviewCases(service=request.app[SERVICE])
    view, review_url = await cases.create(tenant_id=principal.tenant_id, principal=principal.name,
                                          forward="forward" in principal.scopes, body=body)
    return web.json_response(accepted_body(view, body, urls=cases.urls, review_url=review_url), status=202)


@routes.get("/v1/hitl/reviews/{case_id}/status")
@_protocol_errors
async def poll_review(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "ask", "read")
    view, case = await ReviewCases(service=request.app[SERVICE]).get(tenant_id=principal.tenant_id,
                                                                     case_id=request.match_info["case_id"])
    # An open case suggests when to come back; unchanged since the client's ETag, it is a 304.
    retry = {} if view.terminal else {"Retry-After": str(POLL_INTERVAL_SECONDS)}
    return await send_view(request, principal, view, headers=retry, etag=True,
                           render=lambda include: poll_response(view, case, include_answer=include,
                                                                settings=request.app[SETTINGS]))


def _last_rank(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return 0
    if raw not in {str(rank) for rank in PROGRESS_RANK.values()}:
        raise BadRequestError("Last-Event-ID must be an event id from this stream")
    return int(raw)


@routes.get("/v1/hitl/reviews/{case_id}/events")
@_protocol_errors
async def review_events(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "ask", "read")
    tenant_id, case_id = principal.tenant_id, request.match_info["case_id"]
    service = request.app[SERVICE]
    cases = ReviewCases(service=service)
    sent = _last_rank(request)
    view, case = await cases.get(tenant_id=tenant_id, case_id=case_id)  # 404 before the stream starts
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
    with request.app[BUS].subscribe(tenant_id=tenant_id, types={REQUEST_PROGRESS, REQUEST_RESOLVED}) as sub:
        await response.prepare(request)
        await response.write(b": subscribed\n\n")
        # Read again once subscribed: a change that lands meanwhile is in the read or on the queue.
        view, _ = await cases.get(tenant_id=tenant_id, case_id=case_id)
        while True:
            status = case_status(view)
            rank = PROGRESS_RANK[status]
            if rank > sent:
                # A stream never carries a sensitive answer; the agent collects it from poll_url.
                data = poll_response(view, case, include_answer=not view.sensitive, settings=service.settings)
                frame = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
                await response.write(f"id: {rank}\nevent: review.{status}\ndata: {frame}\n\n".encode())
                sent = rank
            if view.terminal:
                return response
            # Wake for this case's events, and at its deadline (reading it then expires it).
            loop = asyncio.get_running_loop()
            wake_at = loop.time() + min(KEEPALIVE_SECONDS, max(view.expires_at - service.clock(), 0.0) + 0.05)
            try:
                while (await asyncio.wait_for(sub.queue.get(), timeout=max(wake_at - loop.time(), 0.0))
                       ).object_id != view.id and not sub.closed:
                    pass
            except TimeoutError:
                await response.write(b": keepalive\n\n")
            if sub.closed:  # the server is stopping: end the stream (the client polls or reconnects)
                return response
            view, _ = await cases.get(tenant_id=tenant_id, case_id=case_id)

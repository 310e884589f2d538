"""Handlers for requests: create, read, wait, cancel, the blocking human-feedback call, submit, links."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from handraise.core import wording
from handraise.core.api import CreateRequestBody, Id, LinkBody, RequestView, Status, SubmitBody, iso, parse_body
from handraise.core.appkeys import ADMISSION, KEYRING, PRIVATE, SERVICE, SETTINGS
from handraise.core.canonical import canonical_json
from handraise.core.cursors import MAX_CURSOR_CHARS
from handraise.core.errors import NotDeliveredError
from handraise.core.http.auth import Principal
from handraise.core.http.input import parse_query, read_json
from handraise.core.http.output import json_response, naming, resource_path
from handraise.core.people import naming_refusal, require_person
from handraise.core.personal import PrivateNote

log = logging.getLogger(__name__)
routes = web.RouteTableDef()



class ListRequestsQuery(BaseModel):
    """``GET /v1/requests``: oldest first, filtered by status and run, a page after ``cursor``."""

    model_config = ConfigDict(title="ListRequestsQuery")

    status: Status | None = None
    run_id: Id | None = None
    limit: int = Field(default=100, ge=1, le=500)
    cursor: str | None = Field(default=None, min_length=1, max_length=MAX_CURSOR_CHARS,
                               pattern=r"^[A-Za-z0-9_.-]+$",
                               description="next_cursor of the previous page, as given, with the same "
                                           "status and run_id")


class WaitQuery(BaseModel):
    """``GET /v1/requests/{id}/wait``: seconds to wait at most (capped at ``limits.max_wait_seconds``)."""

    model_config = ConfigDict(title="WaitQuery")

    timeout: float | None = Field(default=None, ge=0, allow_inf_nan=False)



def _may_see_response(principal: Principal, view: RequestView) -> bool:
    # The asking side sees every answer; others only non-sensitive ones.
    return "ask" in principal.scopes or not view.sensitive


async def send_view(request: web.Request, principal: Principal, view: RequestView, *, status: int = 200,
                    render: Callable[[bool], dict[str, Any]] | None = None,
                    headers: dict[str, str] | None = None, etag: bool = False) -> web.StreamResponse:
    """Write the request (``render(include_response)`` shapes it otherwise, as the HITL protocol's
    poll response does); once a sensitive answer has reached the agent, delete it.

    ``etag``: tag the body, and answer 304 to a poll whose ``If-None-Match`` names it (nothing changed).
    """
    include = _may_see_response(principal, view)
    body = view.to_json(include_response=include) if render is None else render(include)
    headers = dict(headers or {})
    if etag:
        headers["ETag"] = f'"{hashlib.sha256(canonical_json(body).encode()).hexdigest()[:32]}"'
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return web.Response(status=304, headers=headers)
    response = json_response(body, status=status, headers=headers)
    if include and view.sensitive and view.has_response:
        await response.prepare(request)
        await response.write_eof()
        purge = request.app[SERVICE].response_delivered(view)
        if purge is not None:
            # A shutdown cancelling this handler cannot stop the hand-over's bookkeeping.
            await asyncio.shield(purge)
    return response


@routes.post("/v1/requests")
async def create_request(request: web.Request) -> web.StreamResponse:
    app = request.app
    principal = await app[KEYRING].authorize(request, "ask")
    body = parse_body(CreateRequestBody, await read_json(request), what="request body")
    view, created = await app[SERVICE].create(tenant_id=principal.tenant_id, principal=principal.name, body=body)
    return await send_view(request, principal, view, status=201 if created else 200,
                           headers=naming(resource_path("v1", "requests", view.id), created=created))


@routes.get("/v1/requests")
async def list_requests(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "read", "ask")
    query = parse_query(request, ListRequestsQuery)
    views, next_cursor = await request.app[SERVICE].page(tenant_id=principal.tenant_id, status=query.status,
                                                         run_id=query.run_id, cursor=query.cursor,
                                                         limit=query.limit)
    # A list never carries a sensitive response, whoever asks: it is not how an agent collects its answer.
    return json_response({"requests": [v.event_json() for v in views], "next_cursor": next_cursor})


@routes.get("/v1/requests/{id}")
async def get_request(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "ask", "read")
    view = await request.app[SERVICE].get(tenant_id=principal.tenant_id, request_id=request.match_info["id"])
    return await send_view(request, principal, view)


@routes.get("/v1/requests/{id}/wait")
async def wait_request(request: web.Request) -> web.StreamResponse:
    app = request.app
    principal = await app[KEYRING].authorize(request, "ask")
    cap = float(app[SETTINGS].limits.max_wait_seconds)
    timeout = parse_query(request, WaitQuery).timeout
    view = await app[SERVICE].wait(tenant_id=principal.tenant_id, request_id=request.match_info["id"],
                                   timeout=cap if timeout is None else min(timeout, cap))
    return await send_view(request, principal, view)


@routes.post("/v1/requests/{id}/cancel")
async def cancel_request(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "ask")
    view = await request.app[SERVICE].cancel(tenant_id=principal.tenant_id, request_id=request.match_info["id"],
                                             principal=principal.name)
    return await send_view(request, principal, view)


@routes.post("/v1/requests/{id}/ack")
async def acknowledge_request(request: web.Request) -> web.StreamResponse:
    """The agent has a sensitive answer: shred it now instead of at the end of its grace."""
    principal = await request.app[KEYRING].authorize(request, "ask")
    view = await request.app[SERVICE].acknowledge(tenant_id=principal.tenant_id,
                                                  request_id=request.match_info["id"])
    return await send_view(request, principal, view)


@routes.post("/v1/human-feedback")
async def human_feedback(request: web.Request) -> web.StreamResponse:
    """The blocking tool in one call: create (idempotently), then wait until terminal."""
    principal = await request.app[KEYRING].authorize(request, "ask")
    service = request.app[SERVICE]
    body = parse_body(CreateRequestBody, await read_json(request), what="request body")
    # Only the create counts against the bound on writes in flight, not the wait after it.
    with request.app[ADMISSION].admit():
        view, _ = await service.create(tenant_id=principal.tenant_id, principal=principal.name, body=body)
    view = await service.until_terminal(tenant_id=principal.tenant_id, view=view)
    return await send_view(request, principal, view)


@routes.post("/api/human-feedback/submit")
async def submit_answer(request: web.Request) -> web.StreamResponse:
    app = request.app
    principal = await app[KEYRING].authorize(request, "answer")
    body = parse_body(SubmitBody, await read_json(request), what="submission")
    view = await app[SERVICE].submit(tenant_id=principal.tenant_id, unique_id=body.unique_id,
                                     response=body.response, principal=principal.name, channel="api")
    return json_response({"accepted": True, "request": view.to_json(include_response=False)})


@routes.post("/v1/requests/{id}/links")
async def mint_link(request: web.Request) -> web.StreamResponse:
    # answer: any request of the tenant. forward (never implied by ask): only the key's own requests.
    principal = await request.app[KEYRING].authorize(request, "answer", "forward")
    body = parse_body(LinkBody, await read_json(request) if request.can_read_body else {}, what="link request")
    service, request_id = request.app[SERVICE], request.match_info["id"]
    forward = "answer" not in principal.scopes
    if body.person is not None:
        require_person(request.app[SETTINGS], principal.tenant_id, body.person)  # 422 first: nothing journaled
        # A link that answers as a person goes to that person's own key, or to their own channel; an
        # agent's forward key never names anyone (DESIGN invariant 10).
        refusal = naming_refusal(None if forward else principal.person, body.person)
        if refusal is not None and (forward or not body.deliver):
            await service.journal(tenant_id=principal.tenant_id, event="access_refused", request_id=request_id,
                                  principal=principal.name, channel="api",
                                  data={"reason": refusal.code, "route": "request_link", "for": f"person:{body.person}"})
            raise refusal
        if body.deliver:
            return json_response(await deliver_link(request, principal, request_id, body.person), status=202)
    link = await service.mint_link(tenant_id=principal.tenant_id, request_id=request_id, principal=principal.name,
                                   recipient=body.recipient, person=body.person, forward=forward)
    return json_response(link.to_json(), status=201)


async def deliver_link(request: web.Request, principal: Principal, request_id: str, person: str) -> dict[str, Any]:
    """Mint a link that answers as ``person`` and send it to their own channel; it is never returned."""
    service, private = request.app[SERVICE], request.app[PRIVATE]
    channels = private.check(principal.tenant_id, person)
    link = await service.mint_link(tenant_id=principal.tenant_id, request_id=request_id, principal=principal.name,
                                   person=person, recipient=f"private:{person}")
    view = await service.get(tenant_id=principal.tenant_id, request_id=request_id, with_deliveries=False)
    question = wording.text("sensitive_question") if view.sensitive else view.message_for_user[:500]
    note = PrivateNote(text=f"{question}\n\n{wording.text('link')}", url=link.url, button=wording.text("link_button"),
                       title=wording.text("link_title"))
    sent = await private.send(tenant_id=principal.tenant_id, person_id=person, note=note, channels=channels,
                              principal=principal.name, about={"link_id": link.link_id}, request_id=request_id)
    if sent is None:
        raise NotDeliveredError(f"the link could not be sent to {person}: none of their channels "
                                f"({', '.join(channels)}) took it; nothing usable was handed out")
    return {"delivered_to": sent, "person": person, "expires_at": iso(link.expires_at)}

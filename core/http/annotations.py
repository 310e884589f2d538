"""RFC 0056 over HTTP: capabilities, OpenWOP discovery, run annotations, the feedback summary, the run bundle.

The annotation endpoints are capability-gated: with ``[feedback] enabled = false`` they answer
501 ``capability_not_provided`` to every caller, before authentication, as the RFC asks of a host
that does not advertise ``host.feedback``; nothing about a tenant is revealed by that answer.
"""

from __future__ import annotations

import logging

from typing import Annotated

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from handraise.core.annotations import DEFAULT_PAGE, MAX_PAGE, AnnotationService, parse_time
from handraise.core.api import Id
from handraise.core.appkeys import ANNOTATIONS, KEYRING, RUNS, SETTINGS
from handraise.core.http.input import parse_query, read_json

log = logging.getLogger(__name__)
routes = web.RouteTableDef()

# An ISO 8601 date-time; a blank value is refused rather than read as "no bound".
DateTime = Annotated[str, Field(min_length=1, max_length=64, json_schema_extra={"format": "date-time"})]


class ListAnnotationsQuery(BaseModel):
    """``GET /v1/runs/{runId}/annotations``: a page, oldest first, after ``cursor``."""

    model_config = ConfigDict(title="ListAnnotationsQuery")

    cursor: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                               description="next_cursor of the previous page, as given")
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)


class SummaryQuery(BaseModel):
    """``GET /v1/feedback/summary``: one run, or the window since..until (since before until, else 400)."""

    model_config = ConfigDict(title="SummaryQuery")

    run_id: Id | None = None
    since: DateTime | None = None
    until: DateTime | None = None

# OpenWOP protocol version whose discovery document layout (RFC 0073) this host serves.
OPENWOP_PROTOCOL_VERSION = "1.0"



def _service(request: web.Request) -> AnnotationService:
    return request.app[ANNOTATIONS]


def _gated(request: web.Request) -> AnnotationService:
    service = _service(request)
    service.require_enabled()
    return service


@routes.get("/v1/capabilities")
async def capabilities(request: web.Request) -> web.Response:
    return web.json_response({"host": {"feedback": _service(request).capability()}})


@routes.get("/.well-known/openwop")
async def openwop_discovery(request: web.Request) -> web.Response:
    """OpenWOP discovery: capability families at the document root (RFC 0073), plus ``host.feedback`` (RFC 0056 §A)."""
    feedback = _service(request).capability()
    # RFC 0003: the conformance fixtures this host runs ([openwop] conformance_fixtures; none by default).
    fixtures = request.app[RUNS].fixtures()
    return web.json_response({
        "protocolVersion": OPENWOP_PROTOCOL_VERSION,
        # Handraise runs no workflows: it speaks no envelopes and sets no envelope limits.
        "supportedEnvelopes": [],
        "schemaVersions": {},
        "limits": {"clarificationRounds": 0, "schemaRounds": 0, "envelopesPerTurn": 0,
                   "maxRequestBodyBytes": request.app[SETTINGS].server.max_body_bytes},
        "feedback": feedback,
        "host": {"feedback": feedback},
        **({"fixtures": fixtures} if fixtures else {}),
    })


@routes.post("/v1/runs/{runId}/annotations")
async def record_annotation(request: web.Request) -> web.Response:
    service = _gated(request)
    principal = await request.app[KEYRING].authorize(request, "annotate")
    body = service.parse(await read_json(request))
    annotation = await service.record(tenant_id=principal.tenant_id, run_id=request.match_info["runId"],
                                      principal=principal.name, body=body, channel="api")
    return web.json_response(annotation, status=201)


@routes.get("/v1/runs/{runId}/annotations")
async def list_annotations(request: web.Request) -> web.Response:
    service = _gated(request)
    principal = await request.app[KEYRING].authorize(request, "read", "annotate")
    query = parse_query(request, ListAnnotationsQuery)
    page = await service.list(tenant_id=principal.tenant_id, run_id=request.match_info["runId"],
                              cursor=query.cursor, limit=query.limit)
    return web.json_response(page.to_json())


@routes.get("/v1/feedback/summary")
async def feedback_summary(request: web.Request) -> web.Response:
    service = _gated(request)
    principal = await request.app[KEYRING].authorize(request, "read", "annotate")
    query = parse_query(request, SummaryQuery)
    since = parse_time(query.since, name="since") if query.since is not None else None
    until = parse_time(query.until, name="until") if query.until is not None else None
    summary = await service.summary(tenant_id=principal.tenant_id, run_id=query.run_id, since=since, until=until)
    return web.json_response(summary)


@routes.get("/v1/runs/{runId}/bundle")
async def run_bundle(request: web.Request) -> web.Response:
    # Not gated: a run's requests and journal export whether or not feedback is on.
    principal = await request.app[KEYRING].authorize(request, "read")
    bundle = await _service(request).bundle(tenant_id=principal.tenant_id, run_id=request.match_info["runId"])
    return web.json_response(bundle)

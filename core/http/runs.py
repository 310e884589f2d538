"""Runs over HTTP: register (ask), finish (ask), read and list (read)."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from handraise.core.appkeys import KEYRING, RUNS
from handraise.core.http.input import parse_query, read_json
from handraise.core.http.output import naming, resource_path
from handraise.core.api import parse_body
from handraise.core.runs import DEFAULT_PAGE, MAX_PAGE, CompleteRunBody, RunStatus

routes = web.RouteTableDef()


class ListRunsQuery(BaseModel):
    """``GET /v1/runs``: newest first, a page after ``cursor``, optionally one status."""

    model_config = ConfigDict(title="ListRunsQuery")

    status: RunStatus | None = None
    cursor: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                               description="next_cursor of the previous page, as given")
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)



@routes.post("/v1/runs")
async def register_run(request: web.Request) -> web.Response:
    principal = await request.app[KEYRING].authorize(request, "ask")
    service = request.app[RUNS]
    body = service.parse_register(await read_json(request))
    run, created = await service.register(tenant_id=principal.tenant_id, principal=principal.name, body=body)
    return web.json_response(run, status=201 if created else 200,
                             headers=naming(resource_path("v1", "runs", run["runId"]), created=created))


@routes.get("/v1/runs")
async def list_runs(request: web.Request) -> web.Response:
    principal = await request.app[KEYRING].authorize(request, "read", "ask")
    query = parse_query(request, ListRunsQuery)
    page = await request.app[RUNS].list(tenant_id=principal.tenant_id, status=query.status, cursor=query.cursor,
                                        limit=query.limit)
    return web.json_response(page)


@routes.get("/v1/runs/{runId}")
async def get_run(request: web.Request) -> web.Response:
    principal = await request.app[KEYRING].authorize(request, "read", "ask")
    run = await request.app[RUNS].get(tenant_id=principal.tenant_id, run_id=request.match_info["runId"])
    return web.json_response(run)


@routes.post("/v1/runs/{runId}/complete")
async def complete_run(request: web.Request) -> web.Response:
    principal = await request.app[KEYRING].authorize(request, "ask")
    body = parse_body(CompleteRunBody, await read_json(request), what="completion")
    run = await request.app[RUNS].complete(tenant_id=principal.tenant_id, run_id=request.match_info["runId"],
                                           principal=principal.name, body=body)
    return web.json_response(run)

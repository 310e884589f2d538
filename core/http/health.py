"""``GET /healthz``: 200 when the server can serve and its store answers."""

from __future__ import annotations

from aiohttp import web

from handraise.core.appkeys import STORE
from handraise.core.errors import error_body

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    if await request.app[STORE].ping():
        return web.json_response({"status": "ok"})
    return web.json_response({"status": "unavailable", **error_body("unavailable", "the store does not answer")},
                             status=503)

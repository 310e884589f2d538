"""``GET /metrics``: this instance's Prometheus metrics, for a key with the ``metrics`` scope."""

from __future__ import annotations

from aiohttp import web

from handraise.core.appkeys import KEYRING, METRICS
from handraise.core.metrics import CONTENT_TYPE

routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    principal = await request.app[KEYRING].authenticate(request)
    principal.require("metrics")
    response = web.Response(body=request.app[METRICS].render())
    response.headers["Content-Type"] = CONTENT_TYPE
    return response

"""``GET /healthz``: 200 when the server can serve and its store answers; else the API's 503 ``unavailable``."""

from __future__ import annotations

from aiohttp import web

from handraise.core.appkeys import STORE
from handraise.core.errors import UnavailableError
from handraise.core.http.middleware import error_response

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    store = request.app[STORE]
    if await store.ping():
        return web.json_response({"status": "ok"})
    # The envelope and Retry-After every call meets while the store is away (probes read the status code,
    # deploy/entrypoint.sh's among them), the retry when the store is tried next. Written, not raised: a
    # probe every few seconds during an outage is no failure of this server to log each time.
    return error_response(UnavailableError("the store does not answer", retry_after=store.breaker.retry_after))

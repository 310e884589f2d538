"""MCP over streamable HTTP at ``/mcp``, served inside aiohttp (bearer key, ``ask`` scope).

The SDK's streamable HTTP transport is an ASGI application (its session manager). Rather than a
second server, one aiohttp handler authenticates the key, then hands the request to it through a
small ASGI bridge: the HTTP subset of ASGI (a request body in chunks, a response start and body
chunks, a disconnect), nothing more. aiohttp-asgi would do the same through aiohttp's private
routing machinery and without our authentication in front.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from handraise.core.appkeys import KEYRING, SERVICE, SETTINGS
from handraise.core.http.auth import Principal
from handraise.core.mcp.backends import Backend, ServiceBackend
from handraise.core.mcp.server import build_server

log = logging.getLogger(__name__)

PATH = "/mcp"
MANAGER = web.AppKey("mcp_manager", StreamableHTTPSessionManager)
_PRINCIPAL = "handraise.principal"
# ASGI runs outliving a cancelled aiohttp handler, held so they are not collected mid-flight; each
# ends with its request (the session manager's shutdown ends any still running).
_DETACHED: set[asyncio.Future[None]] = set()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def setup(app: web.Application) -> None:
    """Mount ``/mcp`` and the session manager's cleanup context (when ``[mcp] enabled``)."""
    if not app[SETTINGS].mcp.enabled:
        return
    for method in ("POST", "GET", "DELETE"):  # messages, the server's event stream, closing a session
        app.router.add_route(method, PATH, handle)
    app.cleanup_ctx.append(_manager_ctx)


async def handle(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authenticate(request)
    principal.require("ask")
    # The SDK binds each MCP session to the credential that opened it: another key gets 404.
    user = AuthenticatedUser(AccessToken(token=principal.key_id, client_id=f"{principal.tenant_id}/{principal.key_id}",
                                         scopes=sorted(principal.scopes)))
    return await serve_asgi(request, request.app[MANAGER].handle_request, {_PRINCIPAL: principal, "user": user})


def _backend_for(app: web.Application) -> Callable[[ServerRequestContext[Any, Any]], Backend]:
    def backend(ctx: ServerRequestContext[Any, Any]) -> Backend:
        scope = getattr(ctx.request, "scope", None) or {}
        principal = scope.get(_PRINCIPAL)
        if not isinstance(principal, Principal):  # pragma: no cover  (every /mcp request is authenticated)
            raise RuntimeError("an MCP call reached a tool without an authenticated key")
        return ServiceBackend(service=app[SERVICE], principal=principal)

    return backend


async def _manager_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    server = build_server(backend_for=_backend_for(app), interval=settings.mcp.progress_interval_seconds)
    manager = StreamableHTTPSessionManager(app=server, max_request_body_size=settings.server.max_body_bytes)
    app[MANAGER] = manager
    # The manager's task group must be entered and left in one task: it gets its own.
    started, stop = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with manager.run():
            started.set()
            await stop.wait()

    task = asyncio.get_running_loop().create_task(hold(), name="mcp-sessions")
    await asyncio.wait({task, asyncio.ensure_future(started.wait())}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # it failed to start: raise why
    yield
    stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def serve_asgi(request: web.Request, app: ASGIApp, extra_scope: dict[str, Any]) -> web.StreamResponse:
    """Run an ASGI HTTP application for one aiohttp request."""
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}", "method": request.method,
        "scheme": request.scheme, "path": request.path, "raw_path": request.raw_path.split("?")[0].encode(),
        "query_string": request.query_string.encode(), "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if peer else None, "server": tuple(sock[:2]) if sock else None,
        **extra_scope,
    }
    response: web.StreamResponse | None = None
    body_done = False
    disconnected = False

    async def receive() -> Message:
        nonlocal body_done
        if not body_done:
            chunk = await request.content.readany()
            body_done = request.content.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not body_done}
        # After the body, the only thing left to hear is the client going away.
        while request.transport is not None and not request.transport.is_closing():
            await asyncio.sleep(1.0)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response, disconnected
        if disconnected:
            return
        try:
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=message["status"])
                for name, value in message.get("headers", []):
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            elif message["type"] == "http.response.body" and response is not None:
                if not response.prepared:
                    await response.prepare(request)
                if message.get("body"):
                    await response.write(message["body"])
                if not message.get("more_body", False):
                    await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            disconnected = True  # as ASGI servers do: later sends go nowhere

    # As ASGI servers do, the application is never cancelled when the client goes away (aiohttp cancels
    # a handler whose connection is lost): it hears of it through receive() and finishes on its own, so
    # the MCP transport keeps its session consistent.
    running = asyncio.ensure_future(app(scope, receive, send))
    _DETACHED.add(running)
    running.add_done_callback(_DETACHED.discard)
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        disconnected = True
        raise
    if response is None:
        return web.json_response({"error": "internal", "message": "the MCP transport sent no response"}, status=500)
    if not response.prepared:
        await response.prepare(request)
        await response.write_eof()
    return response

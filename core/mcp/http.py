"""MCP over streamable HTTP at ``/mcp``, served inside aiohttp (bearer key, ``ask`` scope).

The SDK's streamable HTTP transport is an ASGI application (its session manager). Rather than a
second server, one aiohttp handler authenticates the key, then hands the request to it through a
small ASGI bridge: the HTTP subset of ASGI (a request body in chunks, a response start and body
chunks, a disconnect), nothing more. aiohttp-asgi would do the same through aiohttp's private
routing machinery and without our authentication in front.

The SDK (about 30 MB of modules: starlette, uvicorn, anyio, its types) is imported and its session
manager started on the first ``/mcp`` call, not at start: an instance that never serves MCP never
holds it (``core/mcp/sessions.py`` is the part that needs it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

from handraise.core.appkeys import KEYRING, SETTINGS
from handraise.core.errors import ShuttingDownError


PATH = "/mcp"
# ASGI runs outliving a cancelled aiohttp handler, held so they are not collected mid-flight; each
# ends with its request (the session manager's shutdown ends any still running).
_DETACHED: set[asyncio.Future[None]] = set()
# At shutdown, how long the tool calls under way may take to send their results before the sessions stop.
_CALLS_ENDING_SECONDS = 1.0

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


class McpMount:
    """``/mcp`` of one app: the SDK's sessions, started by the first call and stopped with the app."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._sessions: Any = None  # core.mcp.sessions.McpSessions once started
        self._starting = asyncio.Lock()
        self._closed = False
        # Messages being answered (POST): a tool call ended by the shutdown still sends its result.
        self._posts: set[asyncio.Task[Any]] = set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        principal = await request.app[KEYRING].authenticate(request)
        principal.require("ask")
        sessions = await self._started()
        task = asyncio.current_task()
        if request.method != "POST" or task is None:
            return await sessions.handle(request, principal)
        self._posts.add(task)
        try:
            return await sessions.handle(request, principal)
        finally:
            self._posts.discard(task)

    async def _started(self) -> Any:
        async with self._starting:
            if self._sessions is None:
                if self._closed:
                    raise ShuttingDownError("the server is shutting down")
                from handraise.core.mcp.sessions import McpSessions

                sessions = McpSessions(self.app)
                await sessions.start()
                self._sessions = sessions
            return self._sessions

    async def close(self, app: web.Application) -> None:
        """Stop the sessions, which ends their streams (``GET /mcp``): at shutdown (``on_shutdown``), before
        aiohttp waits for handlers, and at the latest with the app. The tool calls under way go first (the
        app's shutdown has ended their waits): each sends its result, which stopping would cut off."""
        if self._posts:
            await asyncio.wait(set(self._posts), timeout=_CALLS_ENDING_SECONDS)
        async with self._starting:
            self._closed = True
            if self._sessions is not None:
                await self._sessions.stop()

    async def ctx(self, app: web.Application) -> AsyncIterator[None]:
        yield
        await self.close(app)


def setup(app: web.Application) -> None:
    """Mount ``/mcp`` and stop its sessions with the app (when ``[mcp] enabled``)."""
    if not app[SETTINGS].mcp.enabled:
        return
    mount = McpMount(app)
    for method in ("POST", "GET", "DELETE"):  # messages, the server's event stream, closing a session
        app.router.add_route(method, PATH, mount.handle)
    app.on_shutdown.append(mount.close)
    app.cleanup_ctx.append(mount.ctx)


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

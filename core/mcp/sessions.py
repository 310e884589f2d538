"""The MCP SDK's session manager for ``/mcp``, bound to one app: imported on the first ``/mcp`` call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from aiohttp import web
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from handraise.core.appkeys import SERVICE, SETTINGS
from handraise.core.http.auth import Principal
from handraise.core.mcp.backends import Backend, ServiceBackend
from handraise.core.mcp.http import serve_asgi
from handraise.core.mcp.server import build_server

_PRINCIPAL = "handraise.principal"


class McpSessions:
    """The session manager and the task that holds its task group open."""

    def __init__(self, app: web.Application) -> None:
        settings = app[SETTINGS]
        server = build_server(backend_for=_backend_for(app), interval=settings.mcp.progress_interval_seconds)
        self.manager = StreamableHTTPSessionManager(app=server, max_request_body_size=settings.server.max_body_bytes)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # The manager's task group must be entered and left in one task: it gets its own.
        started = asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._task = task = asyncio.get_running_loop().create_task(hold(), name="mcp-sessions")
        waiter = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            task.result()  # it failed to start: raise why

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def handle(self, request: web.Request, principal: Principal) -> web.StreamResponse:
        # The SDK binds each MCP session to the credential that opened it: another key gets 404.
        user = AuthenticatedUser(AccessToken(token=principal.key_id,
                                             client_id=f"{principal.tenant_id}/{principal.key_id}",
                                             scopes=sorted(principal.scopes)))
        return await serve_asgi(request, self.manager.handle_request, {_PRINCIPAL: principal, "user": user})


def _backend_for(app: web.Application) -> Callable[[ServerRequestContext[Any, Any]], Backend]:
    def backend(ctx: ServerRequestContext[Any, Any]) -> Backend:
        scope = getattr(ctx.request, "scope", None) or {}
        principal = scope.get(_PRINCIPAL)
        if not isinstance(principal, Principal):  # pragma: no cover  (every /mcp request is authenticated)
            raise RuntimeError("an MCP call reached a tool without an authenticated key")
        return ServiceBackend(service=app[SERVICE], principal=principal)

    return backend

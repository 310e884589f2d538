"""``handraise mcp``: the MCP tools over standard input and output, reaching a Handraise server over HTTP."""

from __future__ import annotations

from handraise.client import AsyncHandraise
from handraise.core.mcp.backends import ClientBackend
from handraise.core.mcp.server import build_server


async def serve_stdio(*, url: str | None, key: str | None, interval: float) -> None:
    """Serve until the client closes standard input. ``url``/``key`` default to HANDRAISE_URL/HANDRAISE_KEY."""
    from mcp.server.stdio import stdio_server

    async with AsyncHandraise(url, key) as client:
        backend = ClientBackend(client=client)
        server = build_server(backend_for=lambda _ctx: backend, interval=interval)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

"""The MCP server (the SDK's low-level ``Server``): lists the tools and runs calls against a backend."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from handraise import __version__
from handraise.core.api import RequestRecord
from handraise.core.mcp import tools
from handraise.core.mcp.backends import Backend, ToolError

INSTRUCTIONS = (
    "Handraise asks a human and waits for a validated answer. Use ask_human for a question only a human "
    "can answer, request_approval before an irreversible action, human_feedback for the blocking "
    "one-call form. Calls block until the human answers or the timeout passes; progress is reported "
    "meanwhile. An expired or cancelled request is an error result, never an answer or an approval."
)

BackendFor = Callable[[ServerRequestContext[Any, Any]], Backend]


def build_server(*, backend_for: BackendFor, interval: float) -> Server[Any]:
    """``backend_for`` gives the backend of the caller of one request (on HTTP: the key that called)."""

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(tools.TOOLS.values()))

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in tools.TOOLS:
            raise MCPError(code=types.INVALID_PARAMS,
                           message=f"unknown tool {params.name!r}; tools: {', '.join(tools.TOOLS)}")

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(done, total, message)

        return await tools.run(params.name, params.arguments, backend=backend_for(ctx), progress=progress,
                               interval=interval, offer_link=_url_elicitation(ctx))

    return Server("handraise", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _url_elicitation(ctx: ServerRequestContext[Any, Any]) -> tools.OfferLink | None:
    """MCP's rule for secrets: the client's user gets a link (URL-mode elicitation), never a chat prompt."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or getattr(elicitation, "url", None) is None or not ctx.session.can_send_request:
        return None

    async def offer(record: RequestRecord, backend: Backend) -> Callable[[], Awaitable[None]] | None:
        try:
            link = await backend.forward_link(record)
        except ToolError:
            return None  # no forward scope: the request still reaches the tenant's channels
        # Not awaited: the user's reply (accept, decline, cancel) says nothing about the answer, which
        # arrives through the form; the tool keeps waiting for it either way.
        session, request_id = ctx.session, ctx.request_id
        message = ("A human must answer this privately in a one-time form; the value is never shown in chat: "
                   f"{record.message_for_user}")
        elicitation = asyncio.ensure_future(session.elicit_url(message, link.url, record.id,
                                                               related_request_id=request_id))
        elicitation.add_done_callback(_ignore_outcome)

        async def complete() -> None:
            elicitation.cancel()
            await session.send_elicit_complete(record.id, related_request_id=request_id)

        return complete

    return offer



def _ignore_outcome(task: asyncio.Future[Any]) -> None:
    # Declined, unsupported or closed: the form link still works and the request still reaches its channels.
    if not task.cancelled():
        task.exception()

"""One create path for the MCP tools: every tool, called with every argument of its input schema over
``/mcp`` (streamable HTTP) and over ``handraise mcp`` (stdio) against one served Handraise, stores the
same request, and an argument the server refuses is refused in the same words on both."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any

import httpx
import httpx2
import pytest
from harness.live import LiveServer
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from handraise.client import AsyncHandraise, Event
from handraise.core.mcp.tools import TOOLS

AGENT_KEY = "crew-agent-key-0123456789abcdef"
READER_KEY = "crew-reader-key-0123456789abcdef"
PEOPLE = ("alice", "bob", "carol")

# A tenant of its own with three people, so a quorum of 2 is possible and one of 4 is not.
CREW = "\n".join([
    "[[tenants]]", 'id = "crew"',
    "  [[tenants.keys]]", '  id = "crew-agent"', f'  key = "{AGENT_KEY}"', '  scopes = ["ask"]',
    "  [[tenants.keys]]", '  id = "crew-reader"', f'  key = "{READER_KEY}"', '  scopes = ["read"]',
    *(line for person in PEOPLE for line in ("  [[tenants.people]]", f'  id = "{person}"')),
    "",
])

Check = Callable[[dict[str, Any]], bool]
SCHEMA = {"type": "object", "required": ["code"],
          "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$"}, "remember": {"type": "boolean"}}}


def timeout_of(stored: dict[str, Any]) -> int:
    span = datetime.fromisoformat(stored["expires_at"]) - datetime.fromisoformat(stored["created_at"])
    return round(span.total_seconds())


# Every argument of every tool: a value that exercises it (none is its default), and how the stored
# request shows it took effect. A new argument in a tool's input schema fails the test until it is here.
ARGUMENTS: dict[str, dict[str, tuple[Any, Check]]] = {
    "ask_human": {
        "question": ("Which code did the bank send?",
                     lambda r: r["message_for_user"] == "Which code did the bank send?"),
        "schema": (SCHEMA, lambda r: r["schema"] == SCHEMA),
        "timeout_seconds": (421, lambda r: timeout_of(r) == 421),
        "sensitive": (True, lambda r: r["sensitive"] is True),
        "unique_id": ("parity-ask", lambda r: r["unique_id"].startswith("parity-ask-")),
        "run_id": ("run-parity", lambda r: r["run_id"] == "run-parity"),
    },
    "request_approval": {
        "action": ("Wire 50k", lambda r: r["message_for_user"].startswith("Wire 50k\n\n")),
        "details": ({"to": "ACME Ltd", "amount": 50000, "tags": ["q3"]},
                    lambda r: r["message_for_user"].endswith('\n\nto: ACME Ltd\namount: 50000\ntags: ["q3"]')),
        "timeout_seconds": (422, lambda r: timeout_of(r) == 422),
        "unique_id": ("parity-approve", lambda r: r["unique_id"].startswith("parity-approve-")),
        "run_id": ("run-parity", lambda r: r["run_id"] == "run-parity"),
        "approvals_required": (2, lambda r: r["kind"] == "approval" and r["approvals_required"] == 2),
        "reject_policy": ("quorum", lambda r: r["reject_policy"] == "quorum"),
    },
    "human_feedback": {
        "message_for_user": ("Enter the six-digit code sent to your phone.",
                             lambda r: r["message_for_user"] == "Enter the six-digit code sent to your phone."),
        "unique_id": ("parity-feedback", lambda r: r["unique_id"].startswith("parity-feedback-")),
        "timeout_seconds": (423, lambda r: timeout_of(r) == 423),
    },
}
# The other shapes an argument takes, compared between the transports as well.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("request_approval", {"action": "Restart the worker", "details": "It has been stuck since 04:00.",
                          "approvals_required": 3, "reject_policy": "any"}),
    ("ask_human", {"question": "Which colour?", "schema": {"type": "string", "enum": ["red", "blue"]},
                   "sensitive": False}),
]
# Arguments the server (or the tool's schema) refuses, and the field the refusal names: each must read
# the same through both transports.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("request_approval", {"action": "Wire 50k", "approvals_required": 4}, "approvals_required: is 4"),
    ("request_approval", {"action": "Wire 50k", "approvals_required": 99}, "approvals_required: 99"),
    ("request_approval", {"action": "Wire 50k", "reject_policy": "quorum"}, "reject_policy"),
    ("ask_human", {"question": "Code?", "run_id": "two\nlines"}, "run_id"),
    ("ask_human", {"question": "Code?", "schema": {"type": "object", "properties": {"n": {"type": "object"}}}},
     "schema.properties.n"),
    ("human_feedback", {"message_for_user": "   ", "unique_id": "blank", "timeout_seconds": 60}, "message_for_user"),
]
# What differs between two requests made alike: who they are, and when.
UNCOMPARED = ("id", "unique_id", "created_at", "expires_at", "created_by")


@pytest.fixture(scope="module")
def crew_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("mcp-parity"), extra_config=CREW)
    server.start()
    yield server
    server.stop()


@contextlib.asynccontextmanager
async def http_session(server: LiveServer) -> AsyncIterator[ClientSession]:
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {AGENT_KEY}"},
                                    timeout=httpx2.Timeout(30.0, read=30.0))
    async with client, streamable_http_client(server.url + "/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def stdio_session(server: LiveServer) -> AsyncIterator[ClientSession]:
    env = {**os.environ, "HANDRAISE_URL": server.url, "HANDRAISE_KEY": AGENT_KEY}
    params = StdioServerParameters(command=sys.executable, env=env, args=["-m", "handraise", "mcp"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def both_transports(server: LiveServer) -> AsyncIterator[dict[str, ClientSession]]:
    async with http_session(server) as http, stdio_session(server) as stdio:
        yield {"http": http, "stdio": stdio}


async def stored_request(server: LiveServer, session: ClientSession, name: str,
                         arguments: dict[str, Any]) -> dict[str, Any]:
    """Call the tool; once its request exists, read it as stored, then cancel it so the call returns."""
    async with AsyncHandraise(server.url, READER_KEY) as reader, AsyncHandraise(server.url, AGENT_KEY) as agent, \
            httpx.AsyncClient(headers={"Authorization": f"Bearer {READER_KEY}"}) as http, \
            reader.events(types=["request.created"]) as events:
        call = asyncio.ensure_future(session.call_tool(name, arguments))
        try:
            request_id = await asyncio.wait_for(created(events, arguments["unique_id"]), 30)
            response = await http.get(f"{server.url}/v1/requests/{request_id}")
            assert response.status_code == 200, response.text
            await agent.cancel(request_id)
            result = await asyncio.wait_for(call, 30)
        finally:
            call.cancel()
    assert result.is_error and "cancelled by agent:crew-agent" in result.content[0].text, result
    return dict(response.json())


async def created(events: AsyncIterator[Event], unique_id: str) -> str:
    async for event in events:
        if event.type == "request.created" and event.request is not None and event.request.unique_id == unique_id:
            return event.request.id
    raise AssertionError("the event stream ended")


def comparable(stored: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v for k, v in stored.items() if k not in UNCOMPARED}, "timeout_seconds": timeout_of(stored)}


async def test_every_tool_with_every_argument_stores_the_same_request_over_http_and_stdio(
        crew_server: LiveServer) -> None:
    assert set(ARGUMENTS) == set(TOOLS)
    for name, tool in TOOLS.items():  # the schemas as listed to clients: a new argument needs a value here
        assert set(ARGUMENTS[name]) == set(tool.input_schema["properties"]), name
    calls = [(name, {arg: value for arg, (value, _) in arguments.items()}) for name, arguments in ARGUMENTS.items()]
    calls += [(name, {**arguments, "unique_id": f"parity-variant-{n}"}) for n, (name, arguments) in enumerate(VARIANTS)]
    run = uuid.uuid4().hex[:8]
    stored: dict[str, list[dict[str, Any]]] = {}
    async with both_transports(crew_server) as sessions:
        for transport, session in sessions.items():
            stored[transport] = [
                await stored_request(crew_server, session, name,
                                     {**arguments, "unique_id": f"{arguments['unique_id']}-{transport}-{run}"})
                for name, arguments in calls]
    for (name, arguments), over_http, over_stdio in zip(calls, stored["http"], stored["stdio"], strict=True):
        # Field by field: whatever one path drops or adds shows here.
        assert comparable(over_stdio) == comparable(over_http), (name, arguments)
    for n, (name, arguments) in enumerate(ARGUMENTS.items()):
        for transport, requests in stored.items():
            for arg, (_, shows) in arguments.items():
                assert shows(requests[n]), (transport, name, arg, requests[n])


async def test_a_refused_argument_reads_the_same_over_http_and_stdio(crew_server: LiveServer) -> None:
    said: dict[str, list[str]] = {}
    async with both_transports(crew_server) as sessions:  # one of each for every case: a stdio start is slow
        for transport, session in sessions.items():
            said[transport] = []
            for name, arguments, _ in REFUSED:
                # Refused at create, so at once; a request made in spite of it would wait for a human instead.
                result = await asyncio.wait_for(session.call_tool(name, arguments), 30)
                assert result.is_error and result.structured_content is None, (transport, name, arguments, result)
                said[transport].append(result.content[0].text)
    for (name, arguments, field), over_http, over_stdio in zip(REFUSED, said["http"], said["stdio"], strict=True):
        assert over_stdio == over_http, (name, arguments)
        assert field in over_http, (name, arguments, over_http)

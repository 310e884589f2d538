"""How event streams and long-polls end (issue 29): a client that leaves is a debug line, not an ERROR with
a traceback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from yarl import URL

from conftest import AGENT_KEY, OPERATOR_KEY, READER_KEY
from handraise.webforms.connector import WebFormsChannel
from tests.core.test_hostile_input import assert_only_records
from tests.core.test_observability import _scrape, _value, logged_app

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


async def mcp_session(http: aiohttp.ClientSession, base: str, key: str) -> dict[str, str]:
    """An initialized MCP session: the headers that carry it."""
    headers = {"Authorization": f"Bearer {key}", **MCP_HEADERS}
    async with http.post(f"{base}/mcp", json=INIT, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        headers["mcp-session-id"] = resp.headers["mcp-session-id"]
        await resp.read()
    async with http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers=headers) as resp:
        assert resp.status == 202
    return headers


async def mcp_stream_open(http: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> asyncio.Task[bytes]:
    """``GET /mcp`` (the session's event stream, which sends nothing until it has something to say) on a
    connection of its own, read to the end; returned once the server holds it: the SDK refuses a second
    stream with 409."""
    url = URL(base)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    writer.write(f"GET /mcp HTTP/1.1\r\nHost: {url.host}\r\n{lines}\r\n".encode())
    await writer.drain()

    async def read() -> bytes:
        try:
            return await reader.read()
        finally:
            writer.close()

    task = asyncio.create_task(read())
    for _ in range(500):
        async with http.get(f"{base}/mcp", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status == 409:
                return task
        await asyncio.sleep(0.01)
    raise AssertionError("GET /mcp never opened")


async def sign_in(http: aiohttp.ClientSession, base: str, key: str) -> None:
    async with http.post(f"{base}/v1/inbox/links", json={"name": "Alice"},
                         headers={"Authorization": f"Bearer {key}"}) as resp:
        url = (await resp.json())["url"]
    async with http.post(f"{base}{url[url.index('/inbox/'):]}", allow_redirects=False) as resp:
        assert resp.status == 303


# -- a client that leaves -------------------------------------------------------------------------


async def test_a_client_leaving_a_stream_or_a_body_is_a_debug_line(tmp_path: Path) -> None:
    async with logged_app(tmp_path, level="DEBUG", connector_classes=[WebFormsChannel]) as (api, buffer), \
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await sign_in(http, api.base, OPERATOR_KEY)
        mcp = await mcp_session(http, api.base, AGENT_KEY)
        streams = []
        for path, headers in (("/v1/events", {"Authorization": f"Bearer {READER_KEY}"}), ("/inbox/events", {})):
            response = await http.get(api.url(path), headers=headers)
            assert (await response.content.readline()).startswith(b": subscribed")
            streams.append(response)
        mcp_stream = await mcp_stream_open(http, api.base, mcp)
        for response in streams:
            response.close()  # the connection goes with it
        mcp_stream.cancel()
        # A body cut short: the client closes its side before sending all it announced.
        reader, writer = await asyncio.open_connection(api.server.host, api.server.port)
        writer.write(b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + AGENT_KEY.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"id\":")
        writer.write_eof()
        await reader.read()
        writer.close()
        # An event stream learns the client left when it next writes: make events until each has.
        for i in range(300):
            await api.create({"unique_id": f"leave-{i}", "message_for_user": "Code?", "timeout_seconds": 60})
            records = assert_only_records(buffer.getvalue(), "json")
            ended = {(r.get("method"), r.get("path"), r["status"]) for r in records
                     if r.get("logger") == "handraise.access"}
            if {("GET", "/v1/events", 200), ("GET", "/inbox/events", 200), ("GET", "/mcp", 200),
                    ("POST", "/v1/requests", 499)} <= ended:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"not every stream ended: {sorted(ended)}")
        _status, _kind, metrics = await _scrape(api)
    assert not [r for r in records if r["level"] in ("warning", "error", "critical") or "exception" in r]
    assert len([r for r in records if r["event"] == "client went away"]) >= 3
    assert _value(metrics, "handraise_http_requests_total", method="GET", status="200") >= 3
    assert _value(metrics, "handraise_http_requests_total", method="POST", status="499") == 1


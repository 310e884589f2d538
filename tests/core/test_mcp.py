"""MCP driven by the SDK's own client: over streamable HTTP at /mcp (in-process app) and over stdio (``handraise mcp``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from conftest import AGENT_KEY, OPERATOR_KEY, Api, base_config, running_app, settings_from
from harness.live import AGENT_KEY as LIVE_AGENT_KEY
from harness.live import FORWARD_KEY as LIVE_FORWARD_KEY
from harness.live import OPERATOR_KEY as LIVE_OPERATOR_KEY
from harness.live import LiveServer
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from handraise.client import AsyncHandraise
from handraise.core.appkeys import BUS, SERVICE
from handraise.core.config import PersonSettings

INTERVAL = 0.3


FORWARD_KEY = "forward-agent-key-0123456789abcdef"


@contextlib.asynccontextmanager
async def mcp_app(tmp_path: Path, **options: Any) -> AsyncIterator[Api]:
    config = base_config(f"sqlite:///{tmp_path / 'mcp.db'}", mcp={"progress_interval_seconds": INTERVAL})
    config["tenants"][0]["keys"].append({"id": "agent-fwd", "key": FORWARD_KEY, "scopes": ["ask", "forward"]})
    async with running_app(settings_from(config), **options) as api:
        yield api


@contextlib.asynccontextmanager
async def http_session(api: Api, *, key: str = AGENT_KEY, read_timeout: float = 30.0,
                       **session_options: Any) -> AsyncIterator[ClientSession]:
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"},
                                    timeout=httpx2.Timeout(30.0, read=read_timeout))
    async with client, streamable_http_client(api.url("/mcp"), http_client=client) as (read, write), \
            ClientSession(read, write, **session_options) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def stdio_session(server: LiveServer, *, key: str = LIVE_AGENT_KEY,
                        **session_options: Any) -> AsyncIterator[ClientSession]:
    env = {**os.environ, "HANDRAISE_URL": server.url, "HANDRAISE_KEY": key}
    params = StdioServerParameters(command=sys.executable, env=env,
                                   args=["-m", "handraise", "mcp", "--progress-interval", str(INTERVAL)])
    async with stdio_client(params) as (read, write), ClientSession(read, write, **session_options) as session:
        await session.initialize()
        yield session


class InProcessHuman:
    """Answers (or acts on) requests of the in-process app as soon as they are created."""

    def __init__(self, api: Api) -> None:
        self.api = api

    @contextlib.asynccontextmanager
    async def on_created(self, act: Callable[[dict[str, Any]], Any]) -> AsyncIterator[asyncio.Task[Any]]:
        sub_cm = self.api.app[BUS].subscribe(tenant_id="acme", types={"request.created"})
        sub = sub_cm.__enter__()

        async def run() -> Any:
            try:
                event = await sub.queue.get()
                return await act(event.data)
            finally:
                sub_cm.__exit__(None, None, None)

        task = asyncio.ensure_future(run())
        try:
            yield task
        finally:
            if not task.done():
                task.cancel()

    def answer(self, response: Any) -> Any:
        async def act(request: dict[str, Any]) -> Any:
            status, body = await self.api.submit(request["unique_id"], response)
            assert status == 200, body
            return request

        return self.on_created(act)


async def next_event(sub: Any, kind: str, object_id: str | None = None) -> Any:
    """The next event of ``kind`` (about ``object_id``), skipping late events of earlier requests."""
    while True:
        event = await asyncio.wait_for(sub.queue.get(), 30)
        if event.type == kind and object_id in (None, event.object_id):
            return event


# -- over HTTP ---------------------------------------------------------------------------------


async def test_http_results_name_the_person_who_decided(tmp_path: Path) -> None:
    people = [{"id": "alice", "name": "Alice Aldridge", "telegram": 101}]
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        service = api.app[SERVICE]  # Alice is listed, and taps Approve in Telegram
        service.settings.tenants[0].people = [PersonSettings(**p) for p in people]
        human = InProcessHuman(api)

        async def alice_taps(request: dict[str, Any]) -> Any:
            return await service.submit(tenant_id="acme", request_id=request["id"], channel="telegram",
                                        response={"decision": "approve"}, principal="telegram:101")

        async with human.on_created(alice_taps):
            result = await session.call_tool("request_approval", {"action": "Wire 50k"})
        assert not result.is_error, result
        assert result.structured_content["answered_by"] == "telegram:101"
        assert result.structured_content["answered_by_person"] == {"id": "alice", "name": "Alice Aldridge"}
        assert result.content[0].text == "Approved (by Alice Aldridge, telegram:101)"
        async with human.answer("blue"):
            result = await session.call_tool("ask_human", {"question": "Colour?", "timeout_seconds": 60})
        assert result.structured_content["answered_by_person"] is None  # op-1 is bound to nobody


async def test_http_lists_the_three_tools_with_precise_schemas(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        listed = await session.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {"ask_human", "request_approval", "human_feedback"}
    assert tools["ask_human"].input_schema["required"] == ["question"]
    assert tools["human_feedback"].input_schema["required"] == ["message_for_user", "unique_id", "timeout_seconds"]
    assert tools["request_approval"].output_schema["properties"]["approved"] == {"type": "boolean"}
    for tool in tools.values():
        assert tool.input_schema["additionalProperties"] is False
        assert "expir" in tool.description and len(tool.description) > 200


async def test_http_answered_ask_and_approval_and_human_feedback(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        human = InProcessHuman(api)
        async with human.answer({"code": 4}) as answered:
            result = await session.call_tool("ask_human", {
                "question": "Which code?", "timeout_seconds": 60,
                "schema": {"type": "object", "properties": {"code": {"type": "integer"}}, "required": ["code"]}})
        assert not result.is_error, result
        assert result.structured_content["answer"] == {"code": 4}
        assert result.structured_content["answered_by"] == "operator:op-1"
        assert (await answered)["message_for_user"] == "Which code?"

        async with human.answer({"decision": "reject", "reason": "not today"}) as answered:
            result = await session.call_tool("request_approval", {"action": "Deploy to prod",
                                                                  "details": {"version": "1.2"}})
        assert not result.is_error
        assert result.structured_content["approved"] is False and result.structured_content["reason"] == "not today"
        assert result.content[0].text.startswith("Rejected: not today")
        assert (await answered)["message_for_user"] == "Deploy to prod\n\nversion: 1.2"

        async with human.answer({"decision": "approve"}) as answered:
            result = await session.call_tool("request_approval", {"action": "Deploy", "approvals_required": 1,
                                                                  "reject_policy": "quorum"})
        assert result.structured_content["approved"] is True
        assert [v["person"] for v in result.structured_content["votes"]] == ["operator:op-1"]
        assert (await answered)["approvals_required"] == 1
        refused = await session.call_tool("request_approval", {"action": "x", "approvals_required": 0})
        assert refused.is_error and "approvals_required" in refused.content[0].text

        async with human.answer("123456"):
            result = await session.call_tool("human_feedback", {
                "message_for_user": "Enter the six-digit code sent to your phone.",
                "unique_id": "login-otp-1", "timeout_seconds": 60})
        assert result.structured_content["answer"] == "123456"
        assert result.structured_content["unique_id"] == "login-otp-1"
        # The same unique_id again re-attaches to the same (answered) request: no second question.
        again = await session.call_tool("human_feedback", {
            "message_for_user": "Enter the six-digit code sent to your phone.",
            "unique_id": "login-otp-1", "timeout_seconds": 60})
        assert again.structured_content["request_id"] == result.structured_content["request_id"]


async def test_http_expiry_is_a_plain_tool_error(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        result = await session.call_tool("request_approval", {"action": "Wire money", "timeout_seconds": 1})
    assert result.is_error and result.structured_content is None
    text = result.content[0].text
    assert "expired" in text and "not consent" in text


async def test_http_cancelled_request_is_a_tool_error(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        async def cancel(request: dict[str, Any]) -> None:
            status, _ = await api.call("POST", f"/v1/requests/{request['id']}/cancel")
            assert status == 200

        async with InProcessHuman(api).on_created(cancel):
            result = await session.call_tool("ask_human", {"question": "Still there?", "timeout_seconds": 60})
    assert result.is_error and "cancelled by agent:agent-1" in result.content[0].text


async def test_http_client_cancellation_cancels_the_request_journaled(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        with api.app[BUS].subscribe(tenant_id="acme", types={"request.created", "request.resolved"}) as sub:
            call = asyncio.ensure_future(session.call_tool("ask_human", {"question": "Cancel me",
                                                                         "timeout_seconds": 60}))
            created = await next_event(sub, "request.created")
            call.cancel()  # the SDK sends notifications/cancelled for the abandoned call
            resolved = await next_event(sub, "request.resolved", created.object_id)
        with pytest.raises(asyncio.CancelledError):
            await call
        assert resolved.object_id == created.object_id and resolved.data["status"] == "cancelled"
        assert resolved.data["cancelled_by"] == "agent:agent-1"
        entries = await api.journal(created.object_id)
        assert "cancelled" in [e["event"] for e in entries]


async def test_http_progress_keeps_a_client_with_a_short_read_timeout_waiting(tmp_path: Path) -> None:
    read_timeout = 1.0
    async with mcp_app(tmp_path) as api, http_session(api, read_timeout=read_timeout) as session:
        seen: list[float] = []
        enough = asyncio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)
            if progress > 3 * read_timeout:
                enough.set()

        async def answer_late(request: dict[str, Any]) -> None:
            await asyncio.wait_for(enough.wait(), 60)  # well past the client's read timeout
            status, _ = await api.submit(request["unique_id"], "finally")
            assert status == 200

        async with InProcessHuman(api).on_created(answer_late):
            result = await session.call_tool("ask_human", {"question": "Slow human?", "timeout_seconds": 60},
                                             progress_callback=on_progress)
    assert not result.is_error and result.structured_content["answer"] == "finally"
    assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] > 3 * read_timeout


async def test_http_bad_arguments_are_clear_tool_errors(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api, http_session(api) as session:
        missing = await session.call_tool("ask_human", {"timeout_seconds": 5})
        assert missing.is_error and "'question' is a required property" in missing.content[0].text
        wrong = await session.call_tool("human_feedback", {"message_for_user": "x", "unique_id": "u",
                                                           "timeout_seconds": "soon"})
        assert wrong.is_error and "timeout_seconds: 'soon' is not of type 'integer'" in wrong.content[0].text
        extra = await session.call_tool("request_approval", {"action": "x", "force": True})
        assert extra.is_error and "'force' was unexpected" in extra.content[0].text
        schema = await session.call_tool("ask_human", {"question": "x", "schema": {"type": "object", "properties": {
            "nested": {"type": "object"}, "code": {"type": "string", "pattern": "(?=a)", "$ref": "#/x"}}}})
        said = schema.content[0].text
        assert schema.is_error and said.startswith("invalid_schema: schema.properties.nested: nested objects")
        # Every problem, each once, where it is: a model fixes its schema in one round trip.
        for where in ("schema.properties.nested:", "schema.properties.code.$ref:", "schema.properties.code.pattern:"):
            assert said.count(where) == 1, said
        with pytest.raises(MCPError, match="unknown tool"):
            await session.call_tool("delete_everything", {})


async def test_http_mcp_can_be_switched_off(tmp_path: Path) -> None:
    config = base_config(f"sqlite:///{tmp_path / 'off.db'}", mcp={"enabled": False})
    async with running_app(settings_from(config)) as api:
        status, body = await api.call("POST", "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert status == 404 and body["error"] == "not_found"


async def test_http_wrong_key_and_wrong_scope_are_refused(tmp_path: Path) -> None:
    async with mcp_app(tmp_path) as api:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream"}
        status, body = await api.call("POST", "/mcp", key="nope-not-a-key-at-all", json=init, headers=headers)
        assert status == 401 and body["error"] == "unauthorized"
        status, body = await api.call("POST", "/mcp", key=OPERATOR_KEY, json=init, headers=headers)
        assert status == 403 and body["error"] == "forbidden"
        status, _ = await api.call("POST", "/mcp", key=None, json=init, headers=headers)
        assert status == 401
        with pytest.raises(BaseException):  # noqa: B017  (the SDK client gives up on a 401)
            async with http_session(api, key="nope-not-a-key-at-all"):
                pass


class FormFillingUser:
    """The MCP client's user: opens the one-time link a URL-mode elicitation shows and answers in the form."""

    def __init__(self, api: Api | None, answer: str) -> None:
        self.api, self.answer = api, answer
        self.offered: list[types.ElicitRequestURLParams] = []

    async def call(self, method: str, url: str, data: Any = None) -> tuple[int, str]:
        if self.api is not None:  # the configured public_url is not this in-process test server's
            status, body = await self.api.call(method, httpx2.URL(url).path, key=None, data=data)
            return status, body
        async with httpx2.AsyncClient() as http:
            response = await http.request(method, url, data=data)
            return response.status_code, response.text

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        from handraise.webforms.render import CSRF_FIELD, ROOT_NAME

        assert isinstance(params, types.ElicitRequestURLParams), params
        self.offered.append(params)
        status, page = await self.call("GET", params.url)
        assert status == 200 and 'type="password"' in page
        csrf = re.search(rf'name="{re.escape(CSRF_FIELD)}" value="([^"]+)"', page).group(1)
        status, _ = await self.call("POST", params.url, data={CSRF_FIELD: csrf, ROOT_NAME: self.answer})
        assert status == 200
        return types.ElicitResult(action="accept")


async def test_http_responses_are_never_stored(tmp_path: Path) -> None:
    """A tool's result carries the human's answer: the SDK's stream says only no-cache (revalidate), so
    no-store is added beside its own directives, as on every /v1 response."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = "application/json, text/event-stream"
    async with mcp_app(tmp_path) as api, aiohttp.ClientSession() as http:
        async with http.post(api.url("/mcp"), json=init,
                             headers={"Authorization": f"Bearer {AGENT_KEY}", "Accept": accept}) as resp:
            assert resp.status == 200 and resp.content_type == "text/event-stream"
            directives = [d.strip() for d in resp.headers["Cache-Control"].split(",")]
            assert directives[0] == "no-store" and "no-transform" in directives
            assert '"serverInfo"' in await resp.text()
        async with http.post(api.url("/mcp"), json=init,
                             headers={"Authorization": "Bearer not-a-key", "Accept": accept}) as resp:
            assert resp.status == 401 and resp.headers["Cache-Control"] == "no-store"


async def test_http_sensitive_question_goes_to_the_user_by_url_elicitation_with_a_forward_key(
        tmp_path: Path) -> None:
    from handraise.webforms.connector import WebFormsChannel

    async with mcp_app(tmp_path, connector_classes=[WebFormsChannel]) as api:
        user = FormFillingUser(api, "246810")
        async with http_session(api, key=FORWARD_KEY, elicitation_callback=user) as session:
            result = await session.call_tool("ask_human", {
                "question": "Enter the code sent to your phone", "sensitive": True, "timeout_seconds": 60,
                "schema": {"type": "string", "pattern": "^[0-9]{6}$"}})
        assert not result.is_error, result
        assert result.structured_content["answer"] == "246810"
        assert result.structured_content["answered_by"].startswith("link:")
        [offer] = user.offered
        assert offer.elicitation_id == result.structured_content["request_id"]
        assert "/f/" in offer.url and offer.url not in str(result.model_dump())  # the model never sees the link
        entries = await api.journal(offer.elicitation_id)
        minted = [e for e in entries if e["event"] == "link_minted"]
        assert len(minted) == 1 and minted[0]["principal"] == "agent:agent-fwd"
        assert minted[0]["data"]["scope"] == "forward"


async def test_http_sensitive_question_without_forward_offers_no_link(tmp_path: Path) -> None:
    from handraise.webforms.connector import WebFormsChannel

    async with mcp_app(tmp_path, connector_classes=[WebFormsChannel]) as api:
        user = FormFillingUser(api, "unused")
        async with http_session(api, elicitation_callback=user) as session, \
                InProcessHuman(api).answer("135790"):
            result = await session.call_tool("ask_human", {"question": "Code?", "sensitive": True,
                                                           "timeout_seconds": 60})
        assert result.structured_content["answer"] == "135790" and user.offered == []
        entries = await api.journal(result.structured_content["request_id"])
        assert "link_minted" not in [e["event"] for e in entries]


async def test_http_with_the_2026_protocol_client(tmp_path: Path) -> None:
    """The SDK's unified Client negotiates the 2026-07-28 protocol (the SDK's other HTTP entry)."""
    from mcp import Client

    async with mcp_app(tmp_path) as api:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {AGENT_KEY}"})
        async with http, Client(streamable_http_client(api.url("/mcp"), http_client=http)) as client:
            assert client.protocol_version == "2026-07-28"
            assert len((await client.list_tools()).tools) == 3
            progressed = asyncio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                progressed.set()

            async def answer_after_progress(request: dict[str, Any]) -> None:
                await asyncio.wait_for(progressed.wait(), 30)
                status, _ = await api.submit(request["unique_id"], "modern")
                assert status == 200

            async with InProcessHuman(api).on_created(answer_after_progress):
                result = await client.call_tool("ask_human", {"question": "Which era?", "timeout_seconds": 60},
                                                progress_callback=on_progress)
            assert result.structured_content["answer"] == "modern"
            expired = await client.call_tool("ask_human", {"question": "Anyone?", "timeout_seconds": 1})
            assert expired.is_error and "expired" in expired.content[0].text
            with api.app[BUS].subscribe(tenant_id="acme", types={"request.created", "request.resolved"}) as sub:
                call = asyncio.ensure_future(client.call_tool("ask_human", {"question": "Cancel?",
                                                                            "timeout_seconds": 60}))
                created = await next_event(sub, "request.created")
                call.cancel()
                resolved = await next_event(sub, "request.resolved", created.object_id)
            assert resolved.object_id == created.object_id and resolved.data["status"] == "cancelled"


# -- over stdio, against a real server ---------------------------------------------------------


async def _answer_live(server: LiveServer, response: Any, ready: asyncio.Event) -> str:
    async with AsyncHandraise(server.url, LIVE_OPERATOR_KEY) as op, op.events(types=["request.created"]) as events:
        ready.set()
        async for event in events:
            await op.submit(event.request.unique_id, response)
            return event.request.unique_id
    raise AssertionError("the event stream ended")


async def test_stdio_lists_tools_answers_and_reports_progress(live_server: LiveServer) -> None:
    async with stdio_session(live_server) as session:
        listed = await session.list_tools()
        assert {t.name for t in listed.tools} == {"ask_human", "request_approval", "human_feedback"}

        ready = asyncio.Event()
        progressed = asyncio.Event()
        human = asyncio.ensure_future(_answer_after(live_server, progressed, 42, ready))
        await asyncio.wait_for(ready.wait(), 30)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            progressed.set()

        result = await session.call_tool("ask_human", {"question": "Answer?", "timeout_seconds": 60,
                                                       "schema": {"type": "integer"}},
                                         progress_callback=on_progress)
        await human
        assert not result.is_error, result
        assert result.structured_content["answer"] == 42 and progressed.is_set()

        ready = asyncio.Event()
        human = asyncio.ensure_future(_answer_live(live_server, {"decision": "approve"}, ready))
        await asyncio.wait_for(ready.wait(), 30)
        result = await session.call_tool("request_approval", {"action": "Restart the worker"})
        assert result.structured_content["approved"] is True
        await human

        expired = await session.call_tool("ask_human", {"question": "Nobody?", "timeout_seconds": 1})
        assert expired.is_error and "expired" in expired.content[0].text

        bad = await session.call_tool("human_feedback", {"message_for_user": "x"})
        assert bad.is_error and "'unique_id' is a required property" in bad.content[0].text


async def _answer_after(server: LiveServer, progressed: asyncio.Event, response: Any, ready: asyncio.Event) -> None:
    """Answer the first request created, once the tool has reported progress at least once."""
    async with AsyncHandraise(server.url, LIVE_OPERATOR_KEY) as op, op.events(types=["request.created"]) as events:
        ready.set()
        async for event in events:
            await asyncio.wait_for(progressed.wait(), 30)
            await op.submit(event.request.unique_id, response)
            return


async def test_stdio_client_cancellation_cancels_the_request(live_server: LiveServer) -> None:
    async with stdio_session(live_server) as session, \
            AsyncHandraise(live_server.url, LIVE_OPERATOR_KEY) as op, \
            op.events(types=["request.created", "request.resolved"]) as events:
        call = asyncio.ensure_future(session.call_tool("ask_human", {"question": "Cancel me too",
                                                                     "timeout_seconds": 60}))
        stream = aiter(events)

        async def next_about(kind: str, match: Callable[[Any], bool]) -> Any:
            # The live server is shared: skip late events of other tests' requests.
            while True:
                event = await asyncio.wait_for(anext(stream), 30)
                if event.type == kind and match(event.request):
                    return event.request

        created = await next_about("request.created", lambda r: r.message_for_user == "Cancel me too")
        call.cancel()
        resolved = await next_about("request.resolved", lambda r: r.id == created.id)
    assert resolved.status == "cancelled"
    assert resolved.cancelled_by == "agent:agent-1"


async def test_stdio_with_a_wrong_key_says_so_in_the_tool_result(live_server: LiveServer) -> None:
    async with stdio_session(live_server, key="wrong-key-for-stdio") as session:
        result = await session.call_tool("ask_human", {"question": "Hello?"})
    assert result.is_error and "unauthorized" in result.content[0].text


async def test_stdio_sensitive_question_goes_to_the_user_by_url_elicitation(live_server: LiveServer) -> None:
    user = FormFillingUser(None, "112233")
    async with stdio_session(live_server, key=LIVE_FORWARD_KEY, elicitation_callback=user) as session:
        result = await session.call_tool("ask_human", {"question": "Your PIN?", "sensitive": True,
                                                       "timeout_seconds": 60})
    assert not result.is_error, result
    assert result.structured_content["answer"] == "112233"
    [offer] = user.offered
    assert offer.url.startswith(live_server.url + "/f/") and offer.url not in str(result.model_dump())


def test_handraise_mcp_without_a_key_says_how_to_give_one(tmp_path: Path) -> None:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("HANDRAISE_KEY", "HANDRAISE_URL")}
    done = subprocess.run([sys.executable, "-m", "handraise", "mcp"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 64 and "HANDRAISE_KEY" in done.stderr


_LAZY_SDK_SCRIPT = r'''
import asyncio, json, sys
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from handraise.core.app import create_app
from handraise.core.config import Settings

SDK = ("mcp", "mcp.server.streamable_http_manager", "starlette", "uvicorn")

def loaded():
    return sorted(m for m in SDK if m in sys.modules)

async def main():
    config, key = json.loads(sys.argv[1]), sys.argv[2]
    server = TestServer(await create_app(Settings.model_validate(config), connector_classes=[]), port=0)
    await server.start_server()
    out = {"at_start": loaded()}
    auth = {"Authorization": f"Bearer {key}"}
    async with ClientSession() as http:
        async with http.post(server.make_url("/v1/requests"), headers=auth, json={
                "unique_id": "lazy-1", "message_for_user": "Code?", "timeout_seconds": 60}) as r:
            out["create"] = r.status
        async with http.post(server.make_url("/mcp"), json={}) as r:
            out["no_key"] = r.status
        out["after_api_calls"] = loaded()
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        async with http.post(server.make_url("/mcp"), json=init, headers={
                **auth, "Accept": "application/json, text/event-stream"}) as r:
            out["initialize"] = r.status
            await r.read()
        out["after_mcp_call"] = loaded()
    await server.close()
    print(json.dumps(out))

asyncio.run(main())
'''


async def test_the_sdk_is_imported_by_the_first_mcp_call_not_at_start(tmp_path: Path) -> None:
    """An instance that never serves /mcp never holds the SDK's modules (about 30 MB of them)."""
    import json

    config = base_config(f"sqlite:///{tmp_path / 'lazy.db'}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _LAZY_SDK_SCRIPT, json.dumps(config), AGENT_KEY,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 100)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    seen = json.loads(stdout.decode().strip().splitlines()[-1])
    assert seen["at_start"] == [] and seen["after_api_calls"] == []
    assert seen["create"] == 201 and seen["no_key"] == 401
    assert seen["initialize"] == 200
    assert "mcp.server.streamable_http_manager" in seen["after_mcp_call"]

"""Each example in examples/ against a live server, driven as its framework would drive it (no model calls)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from harness.live import AGENT_KEY, OPERATOR_KEY, LiveServer

from client.helpers import count_requests
from handraise.client import AsyncHandraise, Handraise

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def agent_env(live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> LiveServer:
    monkeypatch.setenv("HANDRAISE_URL", live_server.url)
    monkeypatch.setenv("HANDRAISE_KEY", AGENT_KEY)
    return live_server


class Humans:
    """Answers each request as it is created, from a script keyed by what the request asks."""

    def __init__(self, server: LiveServer, answers: dict[str, Any]) -> None:
        self.server, self.answers = server, answers
        self.seen: list[str] = []
        self.ready = asyncio.Event()

    async def run(self) -> None:
        async with AsyncHandraise(self.server.url, OPERATOR_KEY) as op, \
                op.events(types=["request.created"]) as events:
            self.ready.set()
            async for event in events:
                request = event.request
                self.seen.append(request.unique_id)
                answer = next(v for k, v in self.answers.items() if k in request.message_for_user)
                await op.submit(request.unique_id, answer)
                if len(self.seen) == len(self.answers):
                    return

    async def __aenter__(self) -> Humans:
        self.task = asyncio.ensure_future(self.run())
        await asyncio.wait_for(self.ready.wait(), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.wait_for(self.task, 30)


async def test_asyncio_agent_asks_then_acts_on_the_approval(agent_env: LiveServer) -> None:
    example = load("asyncio_agent")
    async with Humans(agent_env, {"Which directory": "/srv/old", "Delete 2 files": {"decision": "approve"}}) as h:
        async with AsyncHandraise() as hr:
            outcome = await example.run_agent(hr, run_id="cleanup-test-1")
    assert outcome["deleted"] == ["/srv/old/build.log", "/srv/old/cache.tmp"]
    assert outcome["why"] == "approved by operator:op-1"
    assert h.seen == ["cleanup-test-1-directory", "cleanup-test-1-approve"]


async def test_asyncio_agent_deletes_nothing_when_rejected(agent_env: LiveServer) -> None:
    example = load("asyncio_agent")
    async with Humans(agent_env, {"Which directory": "/tmp/x",
                                  "Delete": {"decision": "reject", "reason": "keep them"}}):
        async with AsyncHandraise() as hr:
            outcome = await example.run_agent(hr, run_id="cleanup-test-2")
    assert outcome == {"directory": "/tmp/x", "deleted": [], "why": "rejected: keep them"}


async def test_openai_agents_function_tools(agent_env: LiveServer) -> None:
    from agents.tool_context import ToolContext

    example = load("openai_agents_tool")
    tool = example.request_approval
    assert tool.name == "request_approval" and set(tool.params_json_schema["properties"]) == {
        "action", "details", "timeout_seconds"}

    def context(name: str, call_id: str, args: dict[str, Any]) -> ToolContext[Any]:
        return ToolContext(context=None, tool_name=name, tool_call_id=call_id, tool_arguments=json.dumps(args))

    args = {"action": "Restart the database", "details": "primary, 2 min downtime"}
    async with Humans(agent_env, {"Restart the database": {"decision": "approve", "reason": "go"}}) as h:
        out = await tool.on_invoke_tool(context("request_approval", "call_abc", args), json.dumps(args))
    assert out == "APPROVED: go" and h.seen == ["oai-approve-call_abc"]

    args = {"question": "Which region?"}
    async with Humans(agent_env, {"Which region?": "eu-west"}):
        out = await example.ask_human.on_invoke_tool(context("ask_human", "call_def", args), json.dumps(args))
    assert out == "eu-west"

    args = {"action": "Drop the table", "timeout_seconds": 1}
    out = await tool.on_invoke_tool(context("request_approval", "call_ghi", args), json.dumps(args))
    assert out.startswith("NOT APPROVED") and "expired" in out


def test_langgraph_graph_resumes_after_the_process_is_killed_mid_wait(live_server: LiveServer,
                                                                       tmp_path: Path) -> None:
    thread = f"deploy-{os.getpid()}-{tmp_path.name}"[:60]
    unique_id = f"lg-{thread}-call-{thread}-1"
    env = {**os.environ, "HANDRAISE_URL": live_server.url, "HANDRAISE_KEY": AGENT_KEY}
    command = [sys.executable, str(EXAMPLES / "langgraph_agent.py"), "--thread", thread,
               "--db", str(tmp_path / "graph.sqlite")]

    with Handraise(live_server.url, OPERATOR_KEY) as op:
        with op.events(types=["request.created"]) as events:
            first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            created = next(e.request for e in events if e.request.unique_id == unique_id)
        assert created.kind == "approval" and created.message_for_user == "Deploy: release 1.4 to production"
        first.send_signal(signal.SIGKILL)  # the process dies while its tool node waits for the human
        first.communicate(timeout=30)

        second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The answer may come before or after the new process re-attaches: it gets it either way.
        op.submit(unique_id, {"decision": "approve"})
        out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"result": "deployed (APPROVED)"}
    assert count_requests(live_server.url, unique_id) == 1

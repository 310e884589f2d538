"""The HTTP contract as the wire carries it: one scripted scenario over every public endpoint, compared with a golden
transcript (tests/payloads/http_contract.txt) on SQLite and on PostgreSQL.

Each exchange is kept with its status and reason, every response header in order (but Date and Server)
and its body with members in the server's order; ids, tokens, ETags and times are numbered placeholders
(tests/core/http_transcript.py). So a renamed field, another status or error code, a header that comes or
goes (Content-Type, Cache-Control, Retry-After, Allow, ETag) or members in another order all fail it, with
a unified diff. Both stores compare with the one file, so they answer alike.

After a deliberate change of the API, write the file again (from the SQLite run; the PostgreSQL run
after it is compared with what was written) and read its diff before committing it:

    HANDRAISE_UPDATE_GOLDEN=1 python -m pytest tests/core/test_http_contract.py -p no:cacheprovider
    git diff tests/payloads/http_contract.txt
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from conftest import (
    AGENT_KEY,
    ANNOTATOR_KEY,
    OPERATOR_KEY,
    OTHER_AGENT_KEY,
    READER_KEY,
    base_config,
    running_app,
    settings_from,
)
from .http_transcript import Transcript
from handraise.core.appkeys import ADMISSION, BUS, SERVICE
from handraise.core.attempts import AttemptLimiter
from handraise.core.events import REQUEST_CREATED
from handraise.webforms.connector import WebFormsChannel

GOLDEN = Path(__file__).resolve().parent.parent / "payloads" / "http_contract.txt"
UPDATE = os.environ.get("HANDRAISE_UPDATE_GOLDEN", "") == "1"

FORWARDER_KEY = "forwarder-key-0123456789abcdef"
METRICS_KEY = "metrics-key-0123456789abcdef"
# An operator of its own, so the refused answers that reach its limit count nobody else's.
CLUMSY_KEY = "clumsy-operator-key-0123456789abcdef"
KEYS = {"agent": AGENT_KEY, "operator": OPERATOR_KEY, "reader": READER_KEY, "annotator": ANNOTATOR_KEY,
        "forwarder": FORWARDER_KEY, "metrics": METRICS_KEY, "clumsy operator": CLUMSY_KEY,
        "other tenant's agent": OTHER_AGENT_KEY, "unknown": "no-such-key-0123456789abcdef"}

CODE_FORM = {"type": "object", "properties": {
    "code": {"type": "string", "pattern": "^[0-9]{6}$"}, "note": {"type": "string", "maxLength": 20}},
    "required": ["code"]}


class Clock:
    """The service's clock, moved by the script to expire a request without waiting for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
async def script(storage_url: str) -> AsyncIterator[tuple[Transcript, Any]]:
    config = base_config(storage_url)
    config["tenants"][0]["keys"] += [
        {"id": "forwarder-1", "key": FORWARDER_KEY, "scopes": ["ask", "forward"]},
        {"id": "metrics-1", "key": METRICS_KEY, "scopes": ["metrics"]},
        {"id": "clumsy-1", "key": CLUMSY_KEY, "scopes": ["answer"]},
    ]
    async with running_app(settings_from(config), connector_classes=[WebFormsChannel]) as api:
        async with ClientSession() as session:
            yield Transcript(session=session, base=api.base, keys=KEYS), api.app


def _openapi(raw: bytes) -> str:
    # The document has its own conformance test; here, which operations it names.
    doc = json.loads(raw)
    ops = [f"  {m.upper()} {p}" for p, item in doc["paths"].items() for m in item if m != "parameters"]
    return "\n".join([f"openapi {doc['openapi']}, {len(ops)} operations:", *ops])


def _page(raw: bytes) -> str:
    text = raw.decode()
    assert text.lstrip().lower().startswith("<!doctype html>"), text[:200]
    return "<an HTML page>"


def _metrics(raw: bytes) -> str:
    # Counts and durations move; the families and their types are the contract.
    return "\n".join(line for line in raw.decode().splitlines() if line.startswith("# TYPE"))


async def run_script(t: Transcript, app: Any) -> None:
    """The scenario, one call after another (but the blocking call, answered while it waits)."""
    call = t.call
    clock = Clock()
    app[SERVICE].clock = clock

    # -- discovery, no key ---------------------------------------------------------------------
    await call("health", "GET", "/healthz")
    await call("capabilities", "GET", "/v1/capabilities")
    await call("OpenWOP discovery", "GET", "/.well-known/openwop")
    await call("HITL discovery", "GET", "/.well-known/hitl.json")
    await call("OpenAPI document", "GET", "/openapi.json", show=_openapi)
    await call("home page", "GET", "/", show=_page)
    await call("API reference", "GET", "/docs", show=_page)

    # -- a request, answered -------------------------------------------------------------------
    body = {"unique_id": "c-answered", "message_for_user": "Enter the code.", "timeout_seconds": 600,
            "schema": CODE_FORM, "run_id": "run-contract"}
    created = (await call("create", "POST", "/v1/requests", role="agent", json_body=body)).body
    rid = created["id"]
    await call("the same create again: the same request", "POST", "/v1/requests", role="agent", json_body=body)
    await call("the same unique_id, another body, pending", "POST", "/v1/requests", role="agent",
               json_body={**body, "message_for_user": "Something else."})
    await call("read by its agent", "GET", f"/v1/requests/{rid}", role="agent")
    await call("read by a reader", "GET", f"/v1/requests/{rid}", role="reader")
    await call("wait, nothing yet", "GET", f"/v1/requests/{rid}/wait?timeout=0", role="agent")
    await call("an invalid answer", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-answered", "response": {"code": "12ab", "note": "x" * 30}})
    await call("the answer", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-answered", "response": {"code": "123456", "note": "from the app"}})
    await call("a second answer", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-answered", "response": {"code": "654321"}})
    await call("wait, answered", "GET", f"/v1/requests/{rid}/wait?timeout=5", role="agent")
    await call("the same unique_id, another body, terminal", "POST", "/v1/requests", role="agent",
               json_body={**body, "message_for_user": "Something else."})
    await call("cancel an answered request", "POST", f"/v1/requests/{rid}/cancel", role="agent")

    # -- listing -------------------------------------------------------------------------------
    await call("create a second", "POST", "/v1/requests", role="agent",
               json_body={"unique_id": "c-listed", "message_for_user": "Approve?", "kind": "approval",
                          "timeout_seconds": 600})
    first = (await call("list, a page of one", "GET", "/v1/requests?limit=1", role="reader")).body
    await call("list, the next page", "GET", f"/v1/requests?limit=1&cursor={first['next_cursor']}", role="agent")
    await call("list, pending only", "GET", "/v1/requests?status=pending", role="reader")

    # -- cancelled, expired --------------------------------------------------------------------
    cancelled = (await call("create to cancel", "POST", "/v1/requests", role="agent",
                            json_body={"unique_id": "c-cancelled", "message_for_user": "Which colour?",
                                       "schema": {"type": "string", "enum": ["red", "blue"]}})).body
    await call("cancel", "POST", f"/v1/requests/{cancelled['id']}/cancel", role="agent")
    await call("answer a cancelled request", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-cancelled", "response": "red"})
    expiring = (await call("create to expire", "POST", "/v1/requests", role="agent",
                           json_body={"unique_id": "c-expired", "message_for_user": "Still there?",
                                      "timeout_seconds": 5})).body
    clock.offset = 10  # every other pending request has 600 s
    await call("read once expired", "GET", f"/v1/requests/{expiring['id']}", role="agent")
    await call("answer an expired request", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-expired", "response": "yes"})

    # -- a sensitive answer reaches its agent once ---------------------------------------------
    secret = (await call("create sensitive", "POST", "/v1/requests", role="agent",
                         json_body={"unique_id": "c-sensitive", "message_for_user": "Your PIN?",
                                    "sensitive": True, "schema": {"type": "string", "pattern": "^[0-9]{4}$"}})).body
    await call("answer sensitive", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-sensitive", "response": "1234"})
    await call("a reader never sees a sensitive answer", "GET", f"/v1/requests/{secret['id']}", role="reader")
    await call("its agent does", "GET", f"/v1/requests/{secret['id']}", role="agent")
    await call("the agent has it: shred now", "POST", f"/v1/requests/{secret['id']}/ack", role="agent")
    await call("after the acknowledgement", "GET", f"/v1/requests/{secret['id']}", role="agent")

    # -- one-time links ------------------------------------------------------------------------
    await call("create to link", "POST", "/v1/requests", role="forwarder",
               json_body={"unique_id": "c-linked", "message_for_user": "Pick a date.",
                          "schema": {"type": "string", "format": "date"}})
    linked = (await call("read it", "GET", "/v1/requests?status=pending&limit=10", role="reader")).body
    link_rid = next(r["id"] for r in linked["requests"] if r["unique_id"] == "c-linked")
    minted = (await call("mint a link (answer)", "POST", f"/v1/requests/{link_rid}/links", role="operator",
                         json_body={"recipient": "ops-desk"})).body
    await call("mint a link (forward, own request)", "POST", f"/v1/requests/{link_rid}/links", role="forwarder")
    await call("an ask key never sees a link", "POST", f"/v1/requests/{link_rid}/links", role="agent")
    form = "/f/" + minted["url"].rsplit("/f/", 1)[1]
    await call("the hosted form", "GET", form, show=_page)
    await call("answer the linked request", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-linked", "response": "2026-12-24"})
    await call("the form of an answered request", "GET", form, show=_page)
    await call("a link never made", "GET", "/f/" + "A" * 43, show=_page)

    # -- the blocking call ---------------------------------------------------------------------
    heard: asyncio.Queue[str] = asyncio.Queue()
    app[BUS].add_listener(lambda ev: heard.put_nowait(ev.object_id) if ev.type == REQUEST_CREATED else None)
    blocking = asyncio.create_task(call(
        "human-feedback, answered while it waits", "POST", "/v1/human-feedback", role="agent",
        json_body={"unique_id": "c-blocking", "message_for_user": "Go ahead?", "timeout_seconds": 600}))
    await asyncio.wait_for(heard.get(), 10)
    await call("answer the blocking call", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-blocking", "response": "yes"})
    await asyncio.wait_for(blocking, 10)

    # -- runs and annotations ------------------------------------------------------------------
    run = {"run_id": "run-registered", "name": "Nightly import", "workflowId": "import"}
    await call("register a run", "POST", "/v1/runs", role="agent", json_body=run)
    await call("register it again", "POST", "/v1/runs", role="agent", json_body=run)
    await call("list runs", "GET", "/v1/runs", role="reader")
    await call("read a run", "GET", "/v1/runs/run-contract", role="agent")
    await call("finish a run", "POST", "/v1/runs/run-registered/complete", role="agent",
               json_body={"status": "completed", "reason": "all rows in"})
    await call("finish it again", "POST", "/v1/runs/run-registered/complete", role="agent",
               json_body={"status": "failed"})
    await call("an unknown run", "GET", "/v1/runs/run-nowhere", role="reader")
    await call("annotate", "POST", "/v1/runs/run-contract/annotations", role="annotator",
               json_body={"signal": {"kind": "rating", "rating": 4}, "note": "good, a bit long"})
    await call("annotate with an unknown signal", "POST", "/v1/runs/run-contract/annotations", role="annotator",
               json_body={"signal": {"kind": "applause"}})
    await call("list annotations", "GET", "/v1/runs/run-contract/annotations", role="reader")
    await call("feedback summary", "GET", "/v1/feedback/summary?run_id=run-contract", role="reader")
    await call("run bundle", "GET", "/v1/runs/run-contract/bundle", role="reader")

    # -- events --------------------------------------------------------------------------------
    await call("the run's events from the start", "GET", "/v1/events?run_id=run-contract&after=0", role="reader",
               frames=4)
    subscribed = asyncio.Event()
    live = asyncio.create_task(call("a live event", "GET", "/v1/events?run_id=run-live&types=request.created",
                                    role="reader", frames=2, first_frame=subscribed))
    await asyncio.wait_for(subscribed.wait(), 10)
    await call("create while it streams", "POST", "/v1/requests", role="agent",
               json_body={"unique_id": "c-live", "message_for_user": "Now?", "run_id": "run-live"})
    await asyncio.wait_for(live, 10)
    await call("events need read", "GET", "/v1/events", role="agent")
    await call("events with an unknown type", "GET", "/v1/events?types=request.lost", role="reader")

    # -- HITL protocol, inbox, metrics ---------------------------------------------------------
    case = (await call("HITL review", "POST", "/v1/hitl/reviews", role="forwarder",
                       json_body={"type": "approval", "prompt": "Deploy?"})).body
    polled = await call("HITL poll", "GET", f"/v1/hitl/reviews/{case['hitl']['case_id']}/status", role="forwarder")
    await call("HITL poll, unchanged", "GET", f"/v1/hitl/reviews/{case['hitl']['case_id']}/status",
               role="forwarder", headers={"If-None-Match": polled.header("ETag")})
    await call("HITL events, the head", "GET", f"/v1/hitl/reviews/{case['hitl']['case_id']}/events",
               role="forwarder", frames=1)
    await call("HITL review without a key", "POST", "/v1/hitl/reviews", json_body={"type": "approval",
                                                                                     "prompt": "Deploy?"})
    await call("inbox sign-in link", "POST", "/v1/inbox/links", role="operator", json_body={"name": "Olive"})
    await call("metrics", "GET", "/metrics", role="metrics", show=_metrics)
    await call("metrics need their scope", "GET", "/metrics", role="agent")
    # MCP's own messages are the SDK's to shape; its door (the key and scope) is Handraise's.
    await call("MCP without a key", "POST", "/mcp", json_body={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    await call("MCP needs ask", "POST", "/mcp", role="reader", json_body={"jsonrpc": "2.0", "id": 1,
                                                                          "method": "ping"})

    # -- refusals ------------------------------------------------------------------------------
    plain = {"unique_id": "c-refused", "message_for_user": "Never stored."}
    await call("malformed JSON", "POST", "/v1/requests", role="agent", data=b'{"unique_id": ',
               headers={"Content-Type": "application/json"})
    await call("an empty body", "POST", "/v1/requests", role="agent", headers={"Content-Type": "application/json"})
    await call("a query that is not a number", "GET", f"/v1/requests/{rid}/wait?timeout=soon", role="agent")
    await call("no key", "POST", "/v1/requests", json_body=plain)
    await call("an unknown key", "GET", f"/v1/requests/{rid}", role="unknown")
    await call("a reader cannot ask", "POST", "/v1/requests", role="reader", json_body=plain)
    await call("an ask key never answers", "POST", "/api/human-feedback/submit", role="agent",
               json_body={"unique_id": "c-listed", "response": {"decision": "approve"}})
    await call("an unknown request", "GET", "/v1/requests/req_0000000000000000000000", role="agent")
    await call("another tenant's request", "GET", f"/v1/requests/{rid}", role="other tenant's agent")
    await call("answer a request of no one", "POST", "/api/human-feedback/submit", role="operator",
               json_body={"unique_id": "c-nowhere", "response": "yes"})
    await call("no such route", "GET", "/v1/nothing", role="agent")
    await call("a method the route has not", "PUT", "/v1/requests", role="agent", json_body=plain)
    await call("a body over the limit", "POST", "/v1/requests", role="agent",
               data=json.dumps({**plain, "message_for_user": "x" * 70_000}),
               headers={"Content-Type": "application/json"})
    await call("JSON sent as text/plain", "POST", "/v1/requests", role="agent",
               data=json.dumps({**plain, "unique_id": "c-text-plain"}), headers={"Content-Type": "text/plain"})
    await call("JSON sent as a form", "POST", "/v1/requests", role="agent",
               data=json.dumps({**plain, "unique_id": "c-form"}),
               headers={"Content-Type": "application/x-www-form-urlencoded"})
    await call("a schema outside the subset", "POST", "/v1/requests", role="agent",
               json_body={**plain, "schema": {"type": "object", "properties": {"address": {"type": "object"}}}})
    await call("a field missing", "POST", "/v1/requests", role="agent", json_body={"unique_id": "c-refused"})
    await call("an unknown field", "POST", "/v1/requests", role="agent", json_body={**plain, "colour": "red"})
    # The limiter on its own stopped clock: Retry-After is the whole window however slow the machine.
    app[SERVICE].attempts = AttemptLimiter(max_failures=2, window=300, clock=lambda: 0.0)
    for n in (1, 2, 3):
        await call(f"refused answer {n} of a clumsy operator (limit 2)", "POST", "/api/human-feedback/submit",
                   role="clumsy operator", json_body={"unique_id": "c-listed", "response": {"decision": "maybe"}})
    # A sequential script never has a write in flight of its own: hold the one place the bound allows.
    admission = app[ADMISSION]
    limit, admission.limit = admission.limit, 1
    held = admission.enter()
    try:
        await call("a write past the bound on writes in flight", "POST", "/v1/requests", role="agent",
                   json_body=plain)
    finally:
        admission.leave(held)
        admission.limit = limit


async def test_the_http_contract_is_the_golden_transcript(script: tuple[Transcript, Any],
                                                          storage_url: str) -> None:
    transcript, app = script
    await run_script(transcript, app)
    got = transcript.render()
    if UPDATE and storage_url.startswith("sqlite"):
        # Written from the SQLite run; the PostgreSQL run, after it, is compared with what it wrote.
        GOLDEN.write_text(got)
    want = GOLDEN.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True),
                                            fromfile="tests/payloads/http_contract.txt", tofile="this run"))
        pytest.fail(f"the HTTP contract changed (after a deliberate change: HANDRAISE_UPDATE_GOLDEN=1, then "
                    f"read the file's diff):\n{diff}", pytrace=False)

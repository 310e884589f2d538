"""OpenWOP's published feedback scenarios (``feedback-*.test.ts``), their intent run the way the suite runs them.

The suite reads ``/.well-known/openwop`` at the document root, seeds runs with ``POST /v1/runs
{"workflowId": "conformance-noop", "tenantId": …, "inputs": {}}`` only when discovery lists that
fixture, polls ``GET /v1/runs/{runId}`` for a terminal status, and sends every call with one key
(``OPENWOP_API_KEY``). Here that key has ask, read and annotate, on a host with
``[openwop] conformance_fixtures = true``; the README says how to run the published suite itself.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
from sqlalchemy import text

from sse import streams

from conftest import OTHER_READER_KEY, Api, base_config, running_app, settings_from
from handraise.core.appkeys import STORE

SUITE_KEY = "openwop-suite-key-0123456789"
CANARY = "sk-canary-rfc0056-do-not-leak-abc123"
TERMINAL = {"completed", "failed", "cancelled"}
# capabilities.schema.json's host.feedback block (RFC 0056 §A).
FEEDBACK_CAPABILITY = {
    "type": "object", "required": ["supported"], "additionalProperties": False,
    "properties": {
        "supported": {"type": "boolean"},
        "targets": {"type": "array", "items": {"enum": ["run", "event", "node"]}},
        "signals": {"type": "array", "items": {"enum": ["rating", "correction", "label", "flag"]}},
    },
}


@contextlib.asynccontextmanager
async def host(storage_url: str, *, fixtures: bool = True, feedback: bool = True) -> AsyncIterator[Api]:
    config = base_config(storage_url, openwop={"conformance_fixtures": fixtures}, feedback={"enabled": feedback})
    config["tenants"][0]["keys"].append({"id": "openwop-suite", "key": SUITE_KEY,
                                         "scopes": ["ask", "read", "annotate"]})
    async with running_app(settings_from(config)) as api:
        yield api


async def discovery(api: Api) -> dict[str, Any]:
    status, doc = await api.call("GET", "/.well-known/openwop", key=None)
    assert status == 200, doc
    return doc


async def read_feedback_cap(api: Api) -> dict[str, Any] | None:
    # lib/feedback.ts: the family at the document root (RFC 0073), no wrapper.
    cap = (await discovery(api)).get("feedback")
    return cap if isinstance(cap, dict) else None


async def seed_run(api: Api, tenant_label: str) -> str | None:
    # lib/feedback.ts seedRun: only when discovery advertises the fixture; 200 or 201 with a runId.
    if "conformance-noop" not in (await discovery(api)).get("fixtures", []):
        return None
    status, body = await api.call("POST", "/v1/runs", key=SUITE_KEY,
                                  json={"workflowId": "conformance-noop", "tenantId": tenant_label, "inputs": {}})
    if status not in (200, 201):
        return None
    return body.get("runId")


async def poll_until_terminal(api: Api, run_id: str) -> dict[str, Any]:
    # lib/polling.ts: GET /v1/runs/{runId} until status is completed, failed or cancelled.
    status, run = await api.call("GET", f"/v1/runs/{run_id}", key=SUITE_KEY)
    assert status == 200, run
    assert run["runId"] == run_id and run["status"] in TERMINAL, run
    return run


async def test_capability_shape_and_fixtures_in_discovery(storage_url: str) -> None:
    async with host(storage_url) as api:
        doc = await discovery(api)
        jsonschema.validate(doc["feedback"], FEEDBACK_CAPABILITY)
        assert doc["feedback"]["supported"] is True
        assert doc["fixtures"] == ["conformance-noop"]
    async with host(storage_url, fixtures=False) as api:
        assert "fixtures" not in await discovery(api)


async def test_record_and_list_with_the_stream(storage_url: str) -> None:
    async with host(storage_url) as api, streams() as start:
        run_id = await seed_run(api, "feedback-rl")
        assert run_id is not None
        stream = await start(api, SUITE_KEY, run_id=run_id, types="run.annotated")
        status, created = await api.call("POST", f"/v1/runs/{run_id}/annotations", key=SUITE_KEY,
                                          json={"signal": {"kind": "rating", "rating": 5}})
        assert status == 201, created
        assert isinstance(created["annotationId"], str)
        event, data = await stream.next()
        assert event == "run.annotated" and data["annotationId"] == created["annotationId"]
        status, listed = await api.call("GET", f"/v1/runs/{run_id}/annotations", key=SUITE_KEY)
        assert status == 200
        assert [a["annotationId"] for a in listed["annotations"]] == [created["annotationId"]]


async def test_a_seeded_run_is_terminal_and_takes_post_hoc_feedback(storage_url: str) -> None:
    async with host(storage_url) as api:
        run_id = await seed_run(api, "feedback-terminal")
        assert run_id is not None
        run = await poll_until_terminal(api, run_id)
        assert run["status"] == "completed" and run["workflowId"] == "conformance-noop"
        assert run["completedAt"] == run["createdAt"]
        status, body = await api.call("POST", f"/v1/runs/{run_id}/annotations", key=SUITE_KEY,
                                      json={"signal": {"kind": "flag"}, "note": "post-hoc review"})
        assert status == 201, body
        # Terminal stays terminal: completing the seeded run otherwise is refused.
        status, body = await api.call("POST", f"/v1/runs/{run_id}/complete", key=SUITE_KEY,
                                      json={"status": "failed"})
        assert status == 409 and body["error"] == "conflict", body


async def test_cross_tenant_isolation(storage_url: str) -> None:
    async with host(storage_url) as api:
        run_id = await seed_run(api, "feedback-cti")
        other = await seed_run(api, "feedback-cti")
        assert run_id and other and run_id != other
        for rid in (run_id, other):
            status, body = await api.call("POST", f"/v1/runs/{rid}/annotations", key=SUITE_KEY,
                                          json={"signal": {"kind": "label", "label": "cti-probe"}})
            assert status == 201, body
        status, listed = await api.call("GET", f"/v1/runs/{run_id}/annotations", key=SUITE_KEY)
        assert [a["target"]["runId"] for a in listed["annotations"]] == [run_id]
        # The half the suite cannot run without a second tenant's key: the other tenant sees no run.
        for path in (f"/v1/runs/{run_id}/annotations", f"/v1/runs/{run_id}"):
            status, body = await api.call("GET", path, key=OTHER_READER_KEY)
            assert status == 404 and body["error"] == "not_found", body
        # The body's tenantId ("feedback-cti") named no tenant: the run is the key's tenant's.
        rows = await _rows(api, "SELECT tenant_id FROM runs WHERE run_id = :r", r=run_id)
        assert rows == [("acme",)]


async def test_the_canary_is_never_stored_listed_or_exported(storage_url: str) -> None:
    async with host(storage_url) as api:
        run_id = await seed_run(api, "feedback-redact")
        assert run_id is not None
        status, created = await api.call("POST", f"/v1/runs/{run_id}/annotations", key=SUITE_KEY, json={
            "signal": {"kind": "correction", "correction": f"please use {CANARY}"}, "note": CANARY})
        assert status == 201, created
        assert CANARY not in json.dumps(created)
        assert created["signal"]["correction"] == "please use [REDACTED]" and created["note"] == "[REDACTED]"
        for path in (f"/v1/runs/{run_id}/annotations", f"/v1/runs/{run_id}/bundle", f"/v1/runs/{run_id}"):
            status, body = await api.call("GET", path, key=SUITE_KEY)
            assert status == 200 and CANARY not in json.dumps(body), path
        stored = await _rows(api, "SELECT correction, note FROM annotations WHERE run_id = :r", r=run_id)
        assert stored == [("please use [REDACTED]", "[REDACTED]")]
        journal = await _rows(api, "SELECT data_json FROM journal WHERE run_id = :r", r=run_id)
        assert journal and all(CANARY not in row[0] for row in journal)


async def test_unsupported_is_501_with_the_flat_envelope(storage_url: str) -> None:
    async with host(storage_url, feedback=False) as api:
        cap = await read_feedback_cap(api)
        assert cap is not None and cap["supported"] is False
        status, body = await api.call("POST", "/v1/runs/probe-run-rfc0056/annotations", key=SUITE_KEY,
                                      json={"signal": {"kind": "flag"}})
        assert status == 501
        assert body["error"] == "capability_not_provided" and isinstance(body["message"], str)
        assert set(body) <= {"error", "message", "details"}
        # Runs still register and read without feedback; their annotation summary is null.
        run_id = await seed_run(api, "feedback-off")
        run = await poll_until_terminal(api, run_id)
        assert run["annotations"] is None


async def test_without_fixtures_noop_is_an_ordinary_run(storage_url: str) -> None:
    async with host(storage_url, fixtures=False) as api:
        assert await seed_run(api, "feedback-rl") is None
        status, run = await api.call("POST", "/v1/runs", key=SUITE_KEY,
                                     json={"workflowId": "conformance-noop", "inputs": {}})
        assert status == 201 and run["status"] == "running" and run["completedAt"] is None


async def _rows(api: Api, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    store = api.app[STORE]
    async with store.reader() as conn:
        return await conn.run(lambda c: [tuple(r) for r in c.execute(text(sql), params)])

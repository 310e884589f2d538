"""Runs as a resource: register, finish, read and list; runs made by use; tenants apart; bad input refused."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import (
    AGENT_KEY,
    ANNOTATOR_KEY,
    OPERATOR_KEY,
    OTHER_AGENT_KEY,
    OTHER_READER_KEY,
    READER_KEY,
    Api,
)
from handraise.core.appkeys import STORE


async def register(api: Api, body: dict[str, Any], *, key: str = AGENT_KEY, expect: int = 201) -> dict[str, Any]:
    status, data = await api.call("POST", "/v1/runs", json=body, key=key)
    assert status == expect, (status, data)
    return data


async def get_run(api: Api, run_id: str, *, key: str = READER_KEY) -> tuple[int, Any]:
    return await api.call("GET", f"/v1/runs/{run_id}", key=key)


async def complete(api: Api, run_id: str, status: str, *, key: str = AGENT_KEY, **extra: Any) -> tuple[int, Any]:
    return await api.call("POST", f"/v1/runs/{run_id}/complete", json={"status": status, **extra}, key=key)


async def test_register_read_and_finish_a_run(api: Api) -> None:
    run = await register(api, {"run_id": "run-42", "name": "Nightly import", "workflowId": "import",
                               "inputs": {"day": "2026-12-01", "note": "key sk-canary-rfc0056-do-not-leak-abc123"}})
    assert run["runId"] == "run-42" and run["status"] == "running" and run["registered"] is True
    assert run["name"] == "Nightly import" and run["workflowId"] == "import"
    # Inputs are kept, secret-shaped text in them is not.
    assert run["inputs"] == {"day": "2026-12-01", "note": "key [REDACTED]"}
    assert run["completedAt"] is None

    status, got = await get_run(api, "run-42")
    assert status == 200, got
    assert got["requests"] == {"total": 0, "pending": 0, "answered": 0, "expired": 0, "cancelled": 0}
    assert got["annotations"] == {"total": 0, "superseded": 0,
                                  "counts": {"rating": 0, "correction": 0, "label": 0, "flag": 0},
                                  "meanRating": None}

    status, done = await complete(api, "run-42", "failed", reason="upstream down; token=abc123")
    assert status == 200, done
    assert done["status"] == "failed" and done["completedBy"] == "agent:agent-1" and done["completedAt"]
    assert done["reason"] == "upstream down; token=[REDACTED]"

    # The journal has both run events, with who acted.
    entries = await api.app[STORE].journal_rows_for_run(tenant_id="acme", run_id="run-42")
    assert [(e.event, e.principal) for e in entries] == [("run_registered", "agent:agent-1"),
                                                        ("run_finished", "agent:agent-1")]
    assert entries[1].public_data()["status"] == "failed"


async def test_a_finished_run_stays_as_it_ended(api: Api) -> None:
    await register(api, {"run_id": "r-final"})
    status, first = await complete(api, "r-final", "completed")
    assert status == 200 and first["status"] == "completed"
    # The same completion again (a lost response, retried): the run as it is, unchanged.
    status, again = await complete(api, "r-final", "completed")
    assert status == 200 and again["completedAt"] == first["completedAt"]
    # Late and different: 409 with the status it ended in.
    for late in ("failed", "cancelled"):
        status, body = await complete(api, "r-final", late)
        assert status == 409, body
        assert body["error"] == "conflict" and body["details"] == {"status": "completed"}
    status, got = await get_run(api, "r-final")
    assert got["status"] == "completed"
    # Annotations are still accepted on the finished run (RFC 0056: post-hoc).
    status, ann = await api.call("POST", "/v1/runs/r-final/annotations", json={"signal": {"kind": "flag"}},
                                 key=ANNOTATOR_KEY)
    assert status == 201, ann


@pytest.mark.parametrize("run_id", ["r-plain", "nightly/2026 12 02", "Zürich?#%"])
async def test_registration_names_the_run_location_then_a_replay_content_location(api: Api, run_id: str) -> None:
    auth = {"Authorization": f"Bearer {AGENT_KEY}"}
    async with api.session.post(api.url("/v1/runs"), json={"run_id": run_id}, headers=auth) as resp:
        assert resp.status == 201, await resp.text()
        location = resp.headers["Location"]
    # Percent-encoded as one path segment: the run's own GET route reads it back as the same run.
    assert location.startswith("/v1/runs/") and location.isascii() and location.count("/") == 3
    async with api.session.get(api.url(location), headers=auth) as resp:
        assert resp.status == 200 and (await resp.json())["runId"] == run_id
    async with api.session.post(api.url("/v1/runs"), json={"run_id": run_id}, headers=auth) as resp:
        assert resp.status == 200 and "Location" not in resp.headers
        assert resp.headers["Content-Location"] == location


async def test_registration_is_idempotent_on_run_id_and_refuses_other_content(api: Api) -> None:
    body = {"run_id": "r-idem", "name": "first", "inputs": {"a": 1}}
    created = await register(api, body)
    again = await register(api, {"inputs": {"a": 1}, "name": "first", "run_id": "r-idem"}, expect=200)
    assert again == created
    for other in ({"run_id": "r-idem", "name": "second", "inputs": {"a": 1}},
                  {"run_id": "r-idem", "name": "first", "inputs": {"a": 2}},
                  {"run_id": "r-idem", "name": "first", "inputs": {"a": 1}, "workflowId": "w"}):
        status, data = await api.call("POST", "/v1/runs", json=other)
        assert status == 409 and data["error"] == "conflict", data
    # Without run_id the server names a fresh run each time.
    one, two = await register(api, {}), await register(api, {})
    assert one["runId"] != two["runId"] and one["runId"].startswith("run_")


async def test_requests_and_annotations_make_their_run_implicitly(api: Api) -> None:
    await api.create({"unique_id": "q-implicit", "message_for_user": "Go?", "run_id": "r-implicit"})
    await api.create({"unique_id": "q-implicit-2", "message_for_user": "Go on?", "run_id": "r-implicit"})
    await api.submit("q-implicit", "yes")
    status, run = await get_run(api, "r-implicit")
    assert status == 200, run
    assert run["registered"] is False and run["status"] == "running" and run["name"] is None
    assert run["requests"] == {"total": 2, "pending": 1, "answered": 1, "expired": 0, "cancelled": 0}

    status, ann = await api.call("POST", "/v1/runs/r-by-annotation/annotations",
                                 json={"signal": {"kind": "rating", "rating": 4}}, key=ANNOTATOR_KEY)
    assert status == 201, ann
    await api.call("POST", "/v1/runs/r-by-annotation/annotations",
                   json={"signal": {"kind": "rating", "rating": 2}}, key=ANNOTATOR_KEY)
    status, run = await get_run(api, "r-by-annotation")
    assert status == 200 and run["registered"] is False
    assert run["annotations"]["total"] == 2 and run["annotations"]["meanRating"] == 3

    # Registering a run that use made fills it in (201: its first registration) and keeps its requests.
    claimed = await register(api, {"run_id": "r-implicit", "name": "claimed later"})
    assert claimed["registered"] is True and claimed["name"] == "claimed later"
    status, run = await get_run(api, "r-implicit")
    assert run["requests"]["total"] == 2
    await register(api, {"run_id": "r-implicit", "name": "claimed later"}, expect=200)


async def test_another_tenants_run_is_404_everywhere(api: Api) -> None:
    await register(api, {"run_id": "r-acme", "name": "acme's"})
    await api.call("POST", "/v1/runs/r-acme/annotations", json={"signal": {"kind": "flag"}}, key=ANNOTATOR_KEY)
    status, body = await get_run(api, "r-acme", key=OTHER_READER_KEY)
    assert status == 404 and body["error"] == "not_found", body
    status, body = await api.call("GET", "/v1/runs/r-acme/annotations", key=OTHER_READER_KEY)
    assert status == 404 and body["error"] == "not_found", body
    status, body = await complete(api, "r-acme", "cancelled", key=OTHER_AGENT_KEY)
    assert status == 404, body
    status, listed = await api.call("GET", "/v1/runs", key=OTHER_READER_KEY)
    assert status == 200 and listed == {"runs": [], "next_cursor": None}
    status, got = await get_run(api, "r-acme")
    assert got["status"] == "running"
    # The same run id in another tenant is another run; a body's tenantId chooses nothing.
    theirs = await register(api, {"run_id": "r-acme", "tenantId": "acme"}, key=OTHER_AGENT_KEY)
    assert theirs["registered"] is True and theirs["name"] is None
    status, ours = await get_run(api, "r-acme")
    assert ours["name"] == "acme's"
    # A run nobody in this tenant named: 404 as well, not an empty list.
    status, body = await api.call("GET", "/v1/runs/never-named/annotations", key=READER_KEY)
    assert status == 404, body


async def test_list_is_newest_first_paginated_and_filtered(api: Api) -> None:
    for n in range(5):
        await register(api, {"run_id": f"page-{n}"})
    await complete(api, "page-1", "completed")
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page = await api.call("GET", "/v1/runs", params=params, key=READER_KEY)
        assert status == 200, page
        assert len(page["runs"]) <= 2
        seen += [r["runId"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"page-{n}" for n in reversed(range(5))]
    status, done = await api.call("GET", "/v1/runs", params={"status": "completed"}, key=AGENT_KEY)
    assert [r["runId"] for r in done["runs"]] == ["page-1"]
    # Lists carry no counts: those are GET /v1/runs/{runId}'s.
    assert "requests" not in done["runs"][0]


@pytest.mark.parametrize("body, field", [
    ({"run_id": ""}, "run_id"),
    ({"run_id": "x" * 201}, "run_id"),
    ({"run_id": "bad\nid"}, "run_id"),
    ({"run_id": 42}, "run_id"),
    ({"run_id": None}, "run_id"),
    ({"name": "n" * 201}, "name"),
    ({"workflowId": ["conformance-noop"]}, "workflowId"),
    ({"inputs": "not an object"}, "inputs"),
    ({"inputs": {"blob": "x" * 17_000}}, "inputs"),
    ({"inputs": {"big": 2**64}}, "inputs"),
    ({"status": "completed"}, "status"),
    ({"runId": "camel"}, "runId"),
])
async def test_malformed_registrations_are_422_per_field(api: Api, body: dict[str, Any], field: str) -> None:
    status, data = await api.call("POST", "/v1/runs", json=body)
    assert status == 422, data
    assert data["error"] == "validation_error"
    assert field in [f["field"] for f in data["details"]["fields"]]


async def test_bad_completions_and_reads(api: Api) -> None:
    await register(api, {"run_id": "r-bad"})
    for body in ({"status": "running"}, {"status": "done"}, {}, {"status": "completed", "extra": 1},
                 {"status": "completed", "reason": "r" * 2001}):
        status, data = await api.call("POST", "/v1/runs/r-bad/complete", json=body)
        assert status == 422, (body, data)
    status, data = await api.call("POST", "/v1/runs/r-bad/complete", data=b"{not json",
                                  headers={"Content-Type": "application/json"})
    assert status == 400, data
    status, data = await api.call("POST", "/v1/runs", data=b"[1, 2",
                                  headers={"Content-Type": "application/json"})
    assert status == 400, data
    status, data = await complete(api, "no-such-run", "completed")
    assert status == 404, data
    status, data = await api.call("GET", "/v1/runs/" + "x" * 201, key=READER_KEY)
    assert status == 422, data
    for params in ({"limit": "0"}, {"limit": "501"}, {"cursor": "bm90LW91cnM"}, {"status": "paused"}):
        status, data = await api.call("GET", "/v1/runs", params=params, key=READER_KEY)
        assert status in (400, 422), (params, data)
    # An annotation list's cursor is not a run list's cursor.
    status, data = await api.call("GET", "/v1/runs", params={"cursor": "YToz"}, key=READER_KEY)
    assert status == 400, data


async def test_scopes(api: Api) -> None:
    status, data = await api.call("POST", "/v1/runs", json={}, key=READER_KEY)
    assert status == 403, data
    status, data = await api.call("POST", "/v1/runs", json={}, key=OPERATOR_KEY)
    assert status == 403, data
    await register(api, {"run_id": "r-scope"})
    status, data = await complete(api, "r-scope", "completed", key=READER_KEY)
    assert status == 403, data
    status, data = await api.call("GET", "/v1/runs/r-scope", key=None)
    assert status == 401, data
    status, data = await api.call("GET", "/v1/runs/r-scope", key="forged-key-0123456789abcdef")
    assert status == 401, data

"""The agent HTTP API over real HTTP, on SQLite and on the real PostgreSQL server: every row of DESIGN.md's table."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from conftest import (
    AGENT_KEY,
    ANNOTATOR_KEY,
    OPERATOR_KEY,
    OTHER_AGENT_KEY,
    OTHER_OPERATOR_KEY,
    READER_KEY,
    Api,
    base_config,
    question,
    running_app,
    settings_from,
)


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return question(uid, message="Enter the code", **extra)


# -- health and discovery --------------------------------------------------------


async def test_healthz(api: Api) -> None:
    status, data = await api.call("GET", "/healthz", key=None)
    assert status == 200 and data == {"status": "ok"}


async def test_openapi_documents_every_api_route(api: Api) -> None:
    status, doc = await api.call("GET", "/openapi.json", key=None)
    assert status == 200 and doc["openapi"].startswith("3.1")
    served: set[tuple[str, str]] = set()
    for route in api.app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        if not path or route.method in ("HEAD", "OPTIONS") or path.startswith(("/f/", "/bots/")):
            continue
        served.add((route.method.lower(), path))
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert served == documented


# -- create -----------------------------------------------------------------------


async def test_create_returns_201_with_the_request(api: Api) -> None:
    status, data = await api.call("POST", "/v1/requests", json=body("c1", run_id="run-1"))
    assert status == 201
    assert data["status"] == "pending" and data["unique_id"] == "c1" and data["run_id"] == "run-1"
    assert data["id"].startswith("req_") and len(data["id"]) >= 20
    assert data["kind"] == "input" and data["sensitive"] is False and data["schema"] is None
    assert data["expires_at"] > data["created_at"]
    assert "response" not in data


async def test_same_unique_id_same_body_returns_the_existing_request(api: Api) -> None:
    first = await api.create(body("same"))
    status, again = await api.call("POST", "/v1/requests", json=body("same"))
    assert status == 200 and again["id"] == first["id"]
    await api.submit("same", "1234")
    status, after = await api.call("POST", "/v1/requests", json=body("same"))
    assert status == 200 and after["status"] == "answered" and after["response"] == "1234"


async def test_a_create_names_the_request_location_then_a_replay_content_location(api: Api) -> None:
    auth = {"Authorization": f"Bearer {AGENT_KEY}"}
    async with api.session.post(api.url("/v1/requests"), json=body("named"), headers=auth) as resp:
        assert resp.status == 201 and "Content-Location" not in resp.headers
        location, created = resp.headers["Location"], await resp.json()
    assert location == f"/v1/requests/{created['id']}"
    async with api.session.get(api.url(location), headers=auth) as resp:
        assert resp.status == 200 and (await resp.json())["id"] == created["id"]
    # The replay creates nothing: its body is the existing request, named as such.
    async with api.session.post(api.url("/v1/requests"), json=body("named"), headers=auth) as resp:
        assert resp.status == 200 and "Location" not in resp.headers
        assert resp.headers["Content-Location"] == location
    async with api.session.post(api.url("/v1/requests"), json=body("named", message_for_user="other"),
                                headers=auth) as resp:
        assert resp.status == 409 and "Location" not in resp.headers and "Content-Location" not in resp.headers


async def test_same_unique_id_other_body_conflicts_while_pending_then_reuse_refused(api: Api) -> None:
    await api.create(body("dup"))
    status, data = await api.call("POST", "/v1/requests", json=body("dup", message_for_user="other"))
    assert status == 409 and data["error"] == "conflict"
    await api.submit("dup", "x")
    status, data = await api.call("POST", "/v1/requests", json=body("dup", message_for_user="other"))
    assert status == 409 and data["error"] == "unique_id_reused"


async def test_unique_ids_are_per_tenant(api: Api) -> None:
    a = await api.create(body("shared-id"))
    b = await api.create(body("shared-id", message_for_user="other tenant"), key=OTHER_AGENT_KEY)
    assert a["id"] != b["id"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"message_for_user": "x", "timeout_seconds": 5}, "unique_id"),
        ({"unique_id": "u"}, "message_for_user"),
        ({"unique_id": "u", "message_for_user": "   "}, "message_for_user"),
        ({"unique_id": "u", "message_for_user": "x", "timeout_seconds": 0}, "timeout_seconds"),
        ({"unique_id": "u", "message_for_user": "x", "timeout_seconds": 86401}, "timeout_seconds"),
        ({"unique_id": "u", "message_for_user": "x", "colour": "red"}, "colour"),
        ({"unique_id": "u", "message_for_user": "x", "kind": "poll"}, "kind"),
        ({"unique_id": "u", "message_for_user": "x", "channels": ["carrier-pigeon"]}, "channels"),
        ({"unique_id": "u", "message_for_user": "x", "sensitive": "very"}, "sensitive"),
    ],
)
async def test_invalid_create_bodies_are_422_naming_the_field(sqlite_api: Api, payload: dict, field: str) -> None:
    status, data = await sqlite_api.call("POST", "/v1/requests", json=payload)
    assert status == 422, data
    assert data["error"] == "validation_error"
    assert any(field in d["field"] for d in data["details"]["fields"]), data


async def test_unsupported_schema_is_422_invalid_schema(sqlite_api: Api) -> None:
    status, data = await sqlite_api.call("POST", "/v1/requests", json=body("s", schema={"type": "string", "oneOf": [{"type": "string"}]}))
    assert status == 422 and data["error"] == "invalid_schema"
    assert "oneOf" in data["message"]


async def test_malformed_json_is_400(sqlite_api: Api) -> None:
    status, data = await sqlite_api.call("POST", "/v1/requests", data=b'{"unique_id": ',
                                         headers={"Content-Type": "application/json"})
    assert status == 400 and data["error"] == "bad_request"
    status, data = await sqlite_api.call("POST", "/v1/requests", json=["not", "an", "object"])
    assert status == 422


async def test_body_over_the_limit_is_413(sqlite_api: Api) -> None:
    status, data = await sqlite_api.call("POST", "/v1/requests", json=body("big", message_for_user="x" * 70000))
    assert status == 413 and data["error"] == "payload_too_large"


async def test_a_401_says_how_to_authenticate(sqlite_api: Api, web: Api) -> None:
    # RFC 9110 §15.5.2: a 401 names its scheme; a key that is not one hears invalid_token (RFC 6750 §3).
    for headers, challenge in (({}, "Bearer"), ({"Authorization": "Basic eHg6eXk="}, "Bearer"),
                               ({"Authorization": "Bearer not-a-key-at-all-000000"}, 'Bearer error="invalid_token"')):
        async with sqlite_api.session.get(sqlite_api.url("/v1/requests"), headers=headers) as resp:
            assert resp.status == 401 and resp.headers.getall("WWW-Authenticate") == [challenge]
            assert (await resp.json())["error"] == "unauthorized"
    # A known key without the scope: another key would not help it, so no challenge.
    async with sqlite_api.session.get(sqlite_api.url("/metrics"),
                                      headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
        assert resp.status == 403 and "WWW-Authenticate" not in resp.headers
    # The inbox signs in with a session cookie, which no bearer key replaces.
    async with web.session.get(web.url("/inbox/api/pending")) as resp:
        assert resp.status == 401 and "WWW-Authenticate" not in resp.headers


async def test_keys_and_scopes(sqlite_api: Api) -> None:
    status, data = await sqlite_api.call("POST", "/v1/requests", json=body("k"), key=None)
    assert status == 401 and data["error"] == "unauthorized"
    status, _ = await sqlite_api.call("POST", "/v1/requests", json=body("k"), key="not-a-key-at-all-000000")
    assert status == 401
    status, _ = await sqlite_api.call("POST", "/v1/requests", json=body("k"), headers={"Authorization": "Basic eHg6eXk="}, key=None)
    assert status == 401
    for key in (READER_KEY, OPERATOR_KEY, ANNOTATOR_KEY):
        status, data = await sqlite_api.call("POST", "/v1/requests", json=body("k"), key=key)
        assert status == 403 and data["error"] == "forbidden"


async def test_an_ask_key_can_never_answer(api: Api) -> None:
    await api.create(body("self"))
    status, data = await api.submit("self", "1234", key=AGENT_KEY)
    assert status == 403
    status, _ = await api.call("POST", "/v1/requests/x/links", key=AGENT_KEY, json={})
    assert status == 403


# -- read and tenants -----------------------------------------------------------


async def test_another_tenants_request_is_404_everywhere(api: Api) -> None:
    req = await api.create(body("mine"))
    rid = req["id"]
    for method, path in (("GET", f"/v1/requests/{rid}"), ("GET", f"/v1/requests/{rid}/wait?timeout=0"),
                         ("POST", f"/v1/requests/{rid}/cancel")):
        status, data = await api.call(method, path, key=OTHER_AGENT_KEY)
        assert status == 404 and data["error"] == "not_found", (method, path)
    status, _ = await api.call("POST", f"/v1/requests/{rid}/links", key=OTHER_OPERATOR_KEY, json={})
    assert status == 404
    status, data = await api.submit("mine", "x", key=OTHER_OPERATOR_KEY)
    assert status == 404 and data["error"] == "not_found"
    status, data = await api.call("GET", f"/v1/requests/{rid}")
    assert status == 200 and data["status"] == "pending"


async def test_read_key_sees_the_request(api: Api) -> None:
    req = await api.create(body("r"))
    status, data = await api.call("GET", f"/v1/requests/{req['id']}", key=READER_KEY)
    assert status == 200 and data["id"] == req["id"]
    status, listing = await api.call("GET", "/v1/requests", key=READER_KEY, params={"status": "pending"})
    assert status == 200 and [r["id"] for r in listing["requests"]] == [req["id"]]
    status, listing = await api.call("GET", "/v1/requests", key=READER_KEY, params={"status": "bogus"})
    assert status == 400


# -- submit -----------------------------------------------------------------------


async def test_submit_validates_against_the_schema_and_keeps_the_request_pending(api: Api) -> None:
    schema = {"type": "object", "properties": {
        "channel": {"type": "string", "enum": ["canary", "stable"]},
        "version": {"type": "string", "minLength": 5},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["channel", "version"]}
    req = await api.create(body("form", schema=schema))
    status, data = await api.submit("form", {"channel": "beta", "version": "1", "replicas": 50})
    assert status == 422 and data["error"] == "invalid_answer"
    fields = {d["field"] for d in data["details"]["fields"]}
    assert fields == {"channel", "version", "replicas"}
    status, current = await api.call("GET", f"/v1/requests/{req['id']}")
    assert current["status"] == "pending"
    answer = {"channel": "stable", "version": "1.2.3", "replicas": 3}
    status, data = await api.submit("form", answer)
    assert status == 200 and data["accepted"] is True
    done = await api.wait(req["id"])
    assert done["response"] == answer and done["answered_by"] == "operator:op-1" and done["answered_via"] == "api"


async def test_submit_bad_bodies(sqlite_api: Api) -> None:
    status, _ = await sqlite_api.call("POST", "/api/human-feedback/submit", key=OPERATOR_KEY, json={"response": "x"})
    assert status == 422
    status, _ = await sqlite_api.call("POST", "/api/human-feedback/submit", key=OPERATOR_KEY, json={"unique_id": "nope"})
    assert status == 422
    status, data = await sqlite_api.submit("never-created", "x")
    assert status == 404
    status, _ = await sqlite_api.call("POST", "/api/human-feedback/submit", key=OPERATOR_KEY, data=b"{oops",
                                      headers={"Content-Type": "application/json"})
    assert status == 400


async def test_second_answer_is_409_already_answered(api: Api) -> None:
    await api.create(body("twice"))
    assert (await api.submit("twice", "first"))[0] == 200
    status, data = await api.submit("twice", "second")
    assert status == 409 and data["error"] == "already_answered"
    current = await api.call("GET", "/v1/requests?status=answered", key=READER_KEY)
    assert current[1]["requests"][0]["response"] == "first"


async def test_fifty_concurrent_answers_one_winner(api: Api) -> None:
    req = await api.create(body("race"))
    results = await asyncio.gather(*(api.submit("race", f"answer-{i}") for i in range(50)))
    statuses = [s for s, _ in results]
    assert statuses.count(200) == 1, statuses
    assert all(s == 409 for s in statuses if s != 200)
    winner = next(i for i, (s, _) in enumerate(results) if s == 200)
    done = await api.wait(req["id"])
    assert done["response"] == f"answer-{winner}"
    entries = await api.app[__import__("handraise.core.appkeys", fromlist=["SERVICE"]).SERVICE].journal_entries(
        tenant_id="acme", request_id=req["id"])
    assert [e["event"] for e in entries].count("answered") == 1


async def test_approval_kind_has_its_built_in_schema(api: Api) -> None:
    req = await api.create(body("approve-1", kind="approval"))
    assert req["schema"]["properties"]["decision"]["enum"] == ["approve", "reject"]
    status, _ = await api.submit("approve-1", "yes")
    assert status == 422
    status, _ = await api.submit("approve-1", {"decision": "approve", "reason": "looks fine"})
    assert status == 200
    done = await api.wait(req["id"])
    assert done["response"] == {"decision": "approve", "reason": "looks fine"}


# -- wait, expiry, cancel ---------------------------------------------------------


async def test_wait_wakes_on_answer(api: Api) -> None:
    req = await api.create(body("w"))
    waiter = asyncio.create_task(api.wait(req["id"], 30))
    await asyncio.sleep(0)
    status, _ = await api.submit("w", "42")
    assert status == 200
    done = await asyncio.wait_for(waiter, 5)
    assert done["status"] == "answered" and done["response"] == "42"


async def test_wait_times_out_with_the_request_still_pending(api: Api) -> None:
    req = await api.create(body("slow"))
    started = time.monotonic()
    data = await api.wait(req["id"], 0.3)
    assert data["status"] == "pending" and 0.25 <= time.monotonic() - started < 3


async def test_wait_rejects_bad_timeouts(sqlite_api: Api) -> None:
    req = await sqlite_api.create(body("bad-timeout"))
    for value in ("soon", "-1", "nan", "inf"):
        status, data = await sqlite_api.call("GET", f"/v1/requests/{req['id']}/wait", params={"timeout": value})
        assert status == 400, value


async def test_expiry_is_explicit_and_prompt(api: Api) -> None:
    req = await api.create(body("exp", timeout_seconds=1, kind="approval"))
    data = await api.wait(req["id"], 10)
    assert data["status"] == "expired" and "response" not in data
    from datetime import datetime

    expired_at = datetime.fromisoformat(data["expired_at"])
    expires_at = datetime.fromisoformat(data["expires_at"])
    assert 0 <= (expired_at - expires_at).total_seconds() < 0.25
    status, err = await api.submit("exp", {"decision": "approve"})
    assert status == 410 and err["error"] == "expired"


async def test_sweeper_expires_requests_nobody_waits_for(api: Api) -> None:
    req = await api.create(body("sweep", timeout_seconds=1))
    with api.app[__import__("handraise.core.appkeys", fromlist=["BUS"]).BUS].subscribe(tenant_id="acme") as sub:
        ev = await asyncio.wait_for(sub.queue.get(), 5)
    assert ev.type == "request.resolved" and ev.data["status"] == "expired" and ev.object_id == req["id"]


async def test_cancel(api: Api) -> None:
    req = await api.create(body("cancel-me"))
    waiter = asyncio.create_task(api.wait(req["id"], 30))
    status, data = await api.call("POST", f"/v1/requests/{req['id']}/cancel")
    assert status == 200 and data["status"] == "cancelled" and data["cancelled_by"] == "agent:agent-1"
    assert (await asyncio.wait_for(waiter, 5))["status"] == "cancelled"
    status, data = await api.call("POST", f"/v1/requests/{req['id']}/cancel")
    assert status == 409
    status, data = await api.submit("cancel-me", "late")
    assert status == 410 and data["error"] == "cancelled"


async def test_blocking_human_feedback_returns_the_answer(api: Api) -> None:
    call = asyncio.create_task(api.call("POST", "/v1/human-feedback", json=body("hf", timeout_seconds=30)))
    service = api.app[__import__("handraise.core.appkeys", fromlist=["SERVICE"]).SERVICE]
    with service.bus.subscribe(tenant_id="acme", types={"request.created"}) as sub:
        if not (await service.list(tenant_id="acme", status="pending")):
            await asyncio.wait_for(sub.queue.get(), 5)
    status, _ = await api.submit("hf", "654321")
    assert status == 200
    status, data = await asyncio.wait_for(call, 5)
    assert status == 200 and data["status"] == "answered" and data["response"] == "654321"


async def test_blocking_human_feedback_reports_expiry_explicitly(sqlite_api: Api) -> None:
    status, data = await sqlite_api.call("POST", "/v1/human-feedback", json=body("hf-exp", timeout_seconds=1))
    assert status == 200 and data["status"] == "expired" and "response" not in data


# -- links ------------------------------------------------------------------------


async def test_links_minted_by_answer_keys_only(api: Api) -> None:
    req = await api.create(body("link"))
    status, data = await api.call("POST", f"/v1/requests/{req['id']}/links", key=OPERATOR_KEY,
                                  json={"recipient": "alice by sms"})
    assert status == 201 and data["url"].startswith("http://127.0.0.1:8080/f/") and data["expires_at"] == req["expires_at"]
    token = data["url"].rsplit("/", 1)[1]
    assert len(token) >= 22  # >= 128 bits
    status, data = await api.call("POST", f"/v1/requests/{req['id']}/links", key=OPERATOR_KEY,
                                  json={"recipient": "x", "extra": 1})
    assert status == 422
    await api.submit("link", "done")
    status, data = await api.call("POST", f"/v1/requests/{req['id']}/links", key=OPERATOR_KEY, json={})
    assert status == 409


async def test_restart_loses_nothing(tmp_path: Any) -> None:
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'restart.db'}"))
    async with running_app(settings) as first:
        req = await first.create(body("survivor", timeout_seconds=120))
    async with running_app(settings) as second:
        waiter = asyncio.create_task(second.wait(req["id"], 30))
        status, _ = await second.submit("survivor", "still here")
        assert status == 200
        assert (await asyncio.wait_for(waiter, 5))["response"] == "still here"


async def test_unknown_routes_and_methods_answer_json(sqlite_api: Api) -> None:
    status, data = await sqlite_api.call("GET", "/v1/nothing-here")
    assert status == 404 and data == {"error": "not_found", "message": "no such path"}
    status, data = await sqlite_api.call("DELETE", "/v1/requests")
    assert status == 405 and data == {"error": "method_not_allowed",
                                      "message": "this path takes GET, HEAD, POST, not DELETE"}
    # The envelope in the API's words, and still the Allow header RFC 9110 asks of a 405.
    async with sqlite_api.session.put(sqlite_api.url("/v1/requests/req_x/cancel")) as resp:
        assert resp.status == 405 and resp.headers["Allow"] == "POST"
        assert (await resp.json())["message"] == "this path takes POST, not PUT"

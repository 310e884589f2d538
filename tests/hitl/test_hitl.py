"""The HITL-protocol endpoints over real HTTP, checked against the protocol's own JSON schemas.

The schemas are vendored from the protocol's repository (tests/hitl/schemas/README.md).
Every state a case can be in (pending, opened, in_progress, completed, expired, cancelled)
is reached for real (a link opened, an answer refused, given, a deadline passed, a cancel)
and its live poll response, 202 and events validated.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from conftest import (
    AGENT_KEY,
    OPERATOR_KEY,
    OTHER_AGENT_KEY,
    OTHER_READER_KEY,
    READER_KEY,
    Api,
    base_config,
    settings_from,
    web_app,
)
from harness.receiver import Receiver, receiver  # noqa: F401  (the fixture)

from handraise.core.appkeys import SERVICE
from handraise.core.errors import AlreadyAnsweredError, ExpiredError, NotFoundError, ValidationFailedError
from handraise.core.hitl import parse_timeout, protocol_error
from handraise.core.schema import FORMAT_CHECKER
from handraise.core.signedpost import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify_signature
from handraise.webforms.render import CSRF_FIELD, ROOT_NAME

from ..webforms.html_tools import csrf_of

FORWARD_KEY = "hitl-forward-key-0123456789abcdef"
SCHEMAS = Path(__file__).parent / "schemas"


def _validators() -> dict[str, Draft202012Validator]:
    loaded = {p.name.removesuffix(".schema.json"): json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in loaded.values())
    return {name: Draft202012Validator(schema, registry=registry, format_checker=FORMAT_CHECKER)
            for name, schema in loaded.items()}


VALIDATORS = _validators()


def valid(kind: str, instance: Any) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATORS[kind].iter_errors(instance)]
    assert not errors, (kind, errors, instance)


CALLBACK_SECRET = "hitl-callback-secret-0123456789"


def _app(storage_url: str, *, people: list[dict[str, Any]] | None = None, operator_is: str | None = None,
         **kwargs: Any) -> Any:
    config = base_config(storage_url)
    if people:
        config["tenants"][0]["people"] = people
    if operator_is is not None:  # the operator's key (op-1) is bound to that person
        config["tenants"][0]["keys"][1]["person"] = operator_is
    config["tenants"][0]["callbacks"] = {"secret": CALLBACK_SECRET, "allow_hosts": ["127.0.0.1"]}
    config["tenants"][0]["keys"].append({"id": "agent-fwd", "key": FORWARD_KEY, "scopes": ["ask", "forward"]})
    return web_app(settings_from(config), **kwargs)


@pytest.fixture
async def hitl_api(tmp_path: Path) -> AsyncIterator[Api]:
    async with _app(f"sqlite:///{tmp_path / 'hitl.db'}") as api:
        yield api


@pytest.fixture
async def both_stores_api(storage_url: str) -> AsyncIterator[Api]:
    """On SQLite and on the real PostgreSQL server: the marks are compare-and-sets in each dialect."""
    async with _app(storage_url) as api:
        yield api


async def create(api: Api, body: dict[str, Any], *, key: str = FORWARD_KEY) -> dict[str, Any]:
    status, data = await api.call("POST", "/v1/hitl/reviews", json=body, key=key)
    assert status == 202, (status, data)
    assert data["status"] == "human_input_required" and data["message"]
    return data["hitl"]


async def poll(api: Api, case_id: str, *, key: str = FORWARD_KEY) -> dict[str, Any]:
    status, data = await api.call("GET", f"/v1/hitl/reviews/{case_id}/status", key=key)
    assert status == 200, (status, data)
    valid("poll-response", data)
    return data


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


async def answer(api: Api, case_id: str, response: Any) -> tuple[int, Any]:
    view = await api.app[SERVICE].get(tenant_id="acme", request_id=case_id)
    return await api.submit(view.unique_id, response)


# -- discovery ------------------------------------------------------------------------------------


async def test_discovery_describes_the_endpoint_family(hitl_api: Api) -> None:
    status, doc = await hitl_api.call("GET", "/.well-known/hitl.json", key=None)
    assert status == 200
    valid("discovery-response", doc)
    hitl = doc["hitl_protocol"]
    assert hitl["spec_version"] == "0.8"
    assert hitl["capabilities"]["review_types"] == ["approval", "selection", "input", "confirmation"]
    assert hitl["capabilities"]["transports"] == ["polling", "sse", "callback"] and hitl["capabilities"]["supports_inline_submit"] is False
    assert hitl["endpoints"]["reviews_base"] == "http://127.0.0.1:8080/v1/hitl/reviews"
    assert hitl["authentication"]["scopes"] == ["ask", "forward"]


# -- every state, validated live ------------------------------------------------------------------


async def test_a_case_moves_through_every_live_state_each_valid(both_stores_api: Api) -> None:
    hitl_api = both_stores_api
    hitl = await create(hitl_api, {"type": "input", "prompt": "Which port should the service use?",
                                   "timeout": "PT10M", "context": {"service": "billing", "form": {"fields": [
                                       {"key": "port", "label": "Port", "type": "number", "required": True,
                                        "validation": {"min": 1, "max": 65535}},
                                       {"key": "note", "label": "Note", "type": "textarea"}]}}})
    valid("hitl-object", hitl)
    assert hitl["case_id"].startswith("req_") and hitl["type"] == "input" and hitl["timeout"] == "PT600S"
    assert hitl["poll_url"] == f"http://127.0.0.1:8080/v1/hitl/reviews/{hitl['case_id']}/status"
    case_id = hitl["case_id"]
    # The case is a Handraise request, whose question carries the context's plain values.
    status, request = await hitl_api.call("GET", f"/v1/requests/{case_id}", key=FORWARD_KEY)
    assert status == 200 and request["message_for_user"] == "Which port should the service use?\nservice: billing"
    assert request["schema"]["required"] == ["port"] and "opened_at" not in request

    pending = await poll(hitl_api, case_id)
    assert pending["status"] == "pending" and "opened_at" not in pending

    # Opening the review_url's form, twice: opened once, journaled once, shown on the request.
    for _ in range(2):
        status, page = await hitl_api.call("GET", path_of(hitl["review_url"]), key=None)
        assert status == 200 and "Which port" in page
    opened = await poll(hitl_api, case_id)
    assert opened["status"] == "opened" and opened["opened_at"]
    _, request = await hitl_api.call("GET", f"/v1/requests/{case_id}", key=FORWARD_KEY)
    assert request["opened_at"] == opened["opened_at"]
    entries = await hitl_api.app[SERVICE].journal_entries(tenant_id="acme", request_id=case_id)
    [entry] = [e for e in entries if e["event"] == "opened"]
    assert entry["principal"].startswith("link:") and entry["channel"] == "web"

    # A refused answer: someone is working on it.
    status, _ = await answer(hitl_api, case_id, {"port": 70000})
    assert status == 422
    in_progress = await poll(hitl_api, case_id)
    assert in_progress["status"] == "in_progress" and in_progress["opened_at"] == opened["opened_at"]

    status, _ = await answer(hitl_api, case_id, {"port": 8443, "note": "behind the proxy"})
    assert status == 200
    completed = await poll(hitl_api, case_id)
    assert completed["status"] == "completed" and completed["completed_at"]
    assert completed["result"] == {"action": "submit", "data": {"port": 8443, "note": "behind the proxy"}}
    assert completed["responded_by"] == {"name": "operator:op-1"}


async def test_the_person_with_the_review_url_moves_the_case_through_the_form(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "confirmation", "prompt": "Send the three emails?"})
    path = path_of(hitl["review_url"])
    async with hitl_api.session.get(hitl_api.url(path)) as resp:
        csrf = csrf_of(await resp.text())
    assert (await poll(hitl_api, hitl["case_id"]))["status"] == "opened"

    async def post(value: str) -> int:
        async with hitl_api.session.post(hitl_api.url(path), data={CSRF_FIELD: csrf, ROOT_NAME: value}) as resp:
            return resp.status

    assert await post("maybe") == 422
    assert (await poll(hitl_api, hitl["case_id"]))["status"] == "in_progress"
    assert await post("confirm") == 200
    done = await poll(hitl_api, hitl["case_id"])
    assert done["result"] == {"action": "confirm", "data": {}} and done["responded_by"]["name"].startswith("link:")


async def test_an_expired_case_says_so_with_the_declared_default_action(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "approval", "prompt": "Deploy v2?", "timeout": "1s",
                                   "default_action": "reject"})
    valid("hitl-object", hitl)
    await hitl_api.wait(hitl["case_id"], key=FORWARD_KEY)
    expired = await poll(hitl_api, hitl["case_id"])
    assert expired["status"] == "expired" and expired["default_action"] == "reject" and expired["expired_at"]
    assert "result" not in expired


async def test_a_cancelled_case_says_who_cancelled_it(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "confirmation", "prompt": "Send the three emails?"})
    status, _ = await hitl_api.call("POST", f"/v1/requests/{hitl['case_id']}/cancel", key=FORWARD_KEY)
    assert status == 200
    cancelled = await poll(hitl_api, hitl["case_id"])
    assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"]
    assert cancelled["reason"] == "cancelled by agent:agent-fwd"


# -- review types and their results ---------------------------------------------------------------


@pytest.mark.parametrize(("body", "response", "result"), [
    ({"type": "approval", "prompt": "Deploy v2 to production?"},
     {"decision": "approve", "reason": "tests are green"},
     {"action": "approve", "data": {"feedback": "tests are green"}}),
    ({"type": "approval", "prompt": "Deploy v2 to production?"}, {"decision": "reject"},
     {"action": "reject", "data": {}}),
    ({"type": "confirmation", "prompt": "Send the three emails?"}, "cancel", {"action": "cancel", "data": {}}),
    ({"type": "selection", "prompt": "Which jobs?", "context": {"options": [
        {"value": "job-1", "label": "Frontend, Berlin"}, {"value": "job-2", "label": "Backend, remote"}]}},
     {"selected": ["job-2"]}, {"action": "select", "data": {"selected": ["job-2"]}}),
    ({"type": "selection", "prompt": "Which city?", "context": {"multiple": False, "options": [
        {"value": "ber", "label": "Berlin"}, {"value": "muc", "label": "Munich"}]}},
     "muc", {"action": "select", "data": {"selected": ["muc"]}}),
    ({"type": "input", "prompt": "Anything to add?"}, "no", {"action": "submit", "data": {"value": "no"}}),
    ({"type": "input", "prompt": "Your details", "context": {"form": {"fields": [
        {"key": "email", "label": "Email", "type": "email", "required": True},
        {"key": "start", "label": "Start", "type": "date"},
        {"key": "relocate", "label": "Relocate?", "type": "boolean"},
        {"key": "auth", "label": "Work permit", "type": "select",
         "options": [{"value": "eu", "label": "EU citizen"}, {"value": "visa", "label": "Needs a visa"}]},
        {"key": "langs", "label": "Languages", "type": "multiselect",
         "options": [{"value": "de", "label": "German"}, {"value": "en", "label": "English"}]},
        {"key": "level", "label": "Level", "type": "range", "validation": {"min": 1, "max": 5}},
        {"key": "site", "label": "Website", "type": "url"},
        {"key": "color", "label": "Colour", "type": "x-color"}]}}},
     {"email": "ada@example.org", "start": "2027-01-04", "relocate": False, "auth": "eu", "langs": ["de", "en"],
      "level": 4, "site": "https://ada.example.org", "color": "teal"},
     {"action": "submit", "data": {"email": "ada@example.org", "start": "2027-01-04", "relocate": False,
                                   "auth": "eu", "langs": ["de", "en"], "level": 4,
                                   "site": "https://ada.example.org", "color": "teal"}}),
])
async def test_each_review_type_maps_its_answer_to_the_protocols_result(
        hitl_api: Api, body: dict[str, Any], response: Any, result: dict[str, Any]) -> None:
    hitl = await create(hitl_api, body)
    valid("hitl-object", hitl)
    assert hitl["type"] == body["type"] and hitl.get("context", {}) == body.get("context", {})
    status, data = await answer(hitl_api, hitl["case_id"], response)
    assert status == 200, data
    completed = await poll(hitl_api, hitl["case_id"])
    assert completed["result"] == result


async def test_a_selection_answer_outside_its_options_is_refused(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "selection", "prompt": "Which?", "context": {"options": [
        {"value": "a", "label": "A"}]}})
    status, data = await answer(hitl_api, hitl["case_id"], {"selected": ["b"]})
    assert status == 422 and data["error"] == "invalid_answer"
    assert (await poll(hitl_api, hitl["case_id"]))["status"] == "in_progress"


async def test_a_sensitive_field_is_handed_to_the_agent_once_and_never_to_a_reader(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "input", "prompt": "The one-time code", "context": {"form": {"fields": [
        {"key": "code", "label": "Code", "type": "text", "sensitive": True,
         "validation": {"pattern": "^[0-9]{6}$"}}]}}})
    _, request = await hitl_api.call("GET", f"/v1/requests/{hitl['case_id']}", key=FORWARD_KEY)
    assert request["sensitive"] is True and request["schema"]["properties"]["code"]["writeOnly"] is True
    assert (await answer(hitl_api, hitl["case_id"], {"code": "482913"}))[0] == 200
    by_reader = await poll(hitl_api, hitl["case_id"], key=READER_KEY)
    assert by_reader["result"] == {"action": "submit"}
    first = await poll(hitl_api, hitl["case_id"])
    assert first["result"] == {"action": "submit", "data": {"code": "482913"}}
    again = await poll(hitl_api, hitl["case_id"])  # the second hand-over deletes it
    assert again["status"] == "completed" and "482913" not in json.dumps(await poll(hitl_api, hitl["case_id"]))


async def test_polling_is_conditional_and_suggests_an_interval(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "confirmation", "prompt": "Go?"})
    url = hitl_api.url(f"/v1/hitl/reviews/{hitl['case_id']}/status")
    auth = {"Authorization": f"Bearer {FORWARD_KEY}"}
    async with hitl_api.session.get(url, headers=auth) as resp:
        assert resp.status == 200 and resp.headers["Retry-After"] == "30"
        tag = resp.headers["ETag"]
    async with hitl_api.session.get(url, headers={**auth, "If-None-Match": tag}) as resp:
        assert resp.status == 304 and await resp.read() == b""
    assert (await answer(hitl_api, hitl["case_id"], "confirm"))[0] == 200
    async with hitl_api.session.get(url, headers={**auth, "If-None-Match": tag}) as resp:
        assert resp.status == 200 and resp.headers["ETag"] != tag and "Retry-After" not in resp.headers
        assert (await resp.json())["status"] == "completed"


async def test_the_respondent_is_named_as_the_tenants_people_list_names_them(tmp_path: Path) -> None:
    people = [{"id": "ada", "name": "Ada Lovelace", "email": "ada@example.org"}]
    async with _app(f"sqlite:///{tmp_path / 'p.db'}", people=people, operator_is="ada") as api:
        hitl = await create(api, {"type": "approval", "prompt": "Deploy?"})
        assert (await answer(api, hitl["case_id"], {"decision": "approve"}))[0] == 200
        done = await poll(api, hitl["case_id"])
        assert done["responded_by"] == {"name": "Ada Lovelace", "email": "ada@example.org"}


async def test_a_retry_with_the_same_unique_id_gets_the_same_case(hitl_api: Api) -> None:
    body = {"type": "approval", "prompt": "Rotate the keys?", "unique_id": "rotate-1"}
    first, second = await create(hitl_api, body), await create(hitl_api, body)
    assert first["case_id"] == second["case_id"]
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", key=FORWARD_KEY,
                                       json={**body, "prompt": "Rotate all the keys?"})
    assert status == 409 and data["error"] == "conflict"


async def test_a_plain_request_reads_as_a_case_of_its_kind(hitl_api: Api) -> None:
    request = await hitl_api.create({"unique_id": "plain", "message_for_user": "Approve?", "kind": "approval"})
    assert (await poll(hitl_api, request["id"], key=AGENT_KEY))["status"] == "pending"
    await hitl_api.submit("plain", {"decision": "approve"})
    assert (await poll(hitl_api, request["id"], key=AGENT_KEY))["result"] == {"action": "approve", "data": {}}


# -- review_url only for forward keys -------------------------------------------------------------


async def test_review_url_only_for_a_forward_key(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "approval", "prompt": "Deploy?"}, key=AGENT_KEY)
    assert "review_url" not in hitl
    # The published schema requires review_url; its absence is Handraise's one departure.
    problems = [e for e in VALIDATORS["hitl-object"].iter_errors(hitl)]
    assert [(e.validator, e.message) for e in problems] == [("required", "'review_url' is a required property")]
    entries = await hitl_api.app[SERVICE].journal_entries(tenant_id="acme", request_id=hitl["case_id"])
    assert not [e for e in entries if e["event"] == "link_minted"]

    forwarded = await create(hitl_api, {"type": "approval", "prompt": "Deploy?"})
    assert forwarded["review_url"].startswith("http://127.0.0.1:8080/f/")
    entries = await hitl_api.app[SERVICE].journal_entries(tenant_id="acme", request_id=forwarded["case_id"])
    [minted] = [e for e in entries if e["event"] == "link_minted"]
    assert minted["principal"] == "agent:agent-fwd" and minted["data"]["scope"] == "forward"


# -- auth, tenants, bad input ---------------------------------------------------------------------


async def test_keys_scopes_and_tenants(hitl_api: Api) -> None:
    body = {"type": "approval", "prompt": "Deploy?"}
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", json=body, key=None)
    assert status == 401 and data["error"] == "invalid_token" and data["message"]
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", json=body, key="not-a-key")
    assert status == 401 and data["error"] == "invalid_token"
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", json=body, key=OPERATOR_KEY)
    assert status == 403 and data["error"] == "forbidden"
    hitl = await create(hitl_api, body)
    for suffix in ("status", "events"):
        status, data = await hitl_api.call("GET", f"/v1/hitl/reviews/{hitl['case_id']}/{suffix}",
                                           key=OTHER_AGENT_KEY)
        assert status == 404 and data["error"] == "not_found", suffix
        status, data = await hitl_api.call("GET", f"/v1/hitl/reviews/{hitl['case_id']}/{suffix}",
                                           key=OTHER_READER_KEY)
        assert status == 404, suffix
        status, data = await hitl_api.call("GET", f"/v1/hitl/reviews/{hitl['case_id']}/{suffix}", key=None)
        assert status == 401 and data["error"] == "invalid_token", suffix
    status, data = await hitl_api.call("GET", "/v1/hitl/reviews/req_nope/status", key=FORWARD_KEY)
    assert status == 404 and data["error"] == "not_found"


@pytest.mark.parametrize(("body", "field"), [
    ({"type": "escalation", "prompt": "Retry?"}, "type"),
    ({"type": "approval", "prompt": " "}, "prompt"),
    ({"type": "approval", "prompt": "x" * 501}, "prompt"),
    ({"type": "approval", "prompt": "Deploy?", "default_action": "approve"}, "default_action"),
    ({"type": "approval", "prompt": "Deploy?", "timeout": "soon"}, "timeout"),
    ({"type": "approval", "prompt": "Deploy?", "timeout": "PT"}, "timeout"),
    ({"type": "approval", "prompt": "Deploy?", "timeout": "P400D"}, "timeout_seconds"),
    ({"type": "approval", "prompt": "Deploy?", "review_url": "https://evil.example"}, "review_url"),
    ({"type": "selection", "prompt": "Which?"}, "context.options"),
    ({"type": "input", "prompt": "Form", "context": {"form": {"fields": [
        {"key": "a", "label": "A", "type": "select"}]}}}, "context.form.fields.a.options"),
    ({"type": "input", "prompt": "Form", "context": {"form": {"fields": [
        {"key": "a", "label": "A", "type": "text"}, {"key": "a", "label": "B", "type": "text"}]}}},
     "context.form.fields"),
    ({"type": "input", "prompt": "Form", "context": {"form": {"steps": []}}}, "context.form.steps"),
    ({"type": "input", "prompt": "Form", "context": {"form": {"fields": [
        {"key": "p", "label": "P", "type": "text", "sensitive": True, "default": "hunter2"}]}}},
     "context.form.fields.p.default"),
    ({"type": "input", "prompt": "Form", "context": {"form": {"fields": [
        {"key": "p", "label": "P", "type": "text", "validation": {"pattern": "(a)\\1"}}]}}},
     "context.form.fields.p.validation.pattern"),
    ({"type": "input", "prompt": "Form", "context": {"form": {"fields": [
        {"key": "n", "label": "N", "type": "number", "validation": {"min": 5, "max": 1}}]}}},
     "context.form.fields.n.validation.min"),
    ({"type": "selection", "prompt": "Pick", "context": {"options": [
        {"value": "a", "label": "A"}, {"value": " ", "label": "Blank"}]}}, "context.options.1"),
    ({"type": "approval", "prompt": "Deploy?", "timeout": 60}, "timeout"),
    ({"type": "approval", "prompt": "Deploy?", "context": {"note": "a\u0000b"}}, "message_for_user"),
    ({"type": "approval", "prompt": "Deploy?", "context": {"note": "x" * 9000}}, "context"),
    ({"type": "approval", "prompt": "Deploy?", "unique_id": " padded "}, "unique_id"),
])
async def test_invalid_bodies_are_422_naming_the_field(hitl_api: Api, body: dict[str, Any], field: str) -> None:
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", json=body, key=FORWARD_KEY)
    assert status == 422, data
    assert data["error"] in ("validation_error", "invalid_schema")
    fields = [f["field"] for f in data.get("details", {}).get("fields", [])]
    assert any(f.startswith(field) for f in fields), (fields, data)


async def test_malformed_and_oversized_bodies_are_4xx(hitl_api: Api) -> None:
    for raw, expected in ((b"{not json", 400), (b"", 400), (b"[1, 2]", 422), (b'"text"', 422),
                          (b'{"type": "approval", "prompt": NaN}', 400), (b"[" * 100 + b"]" * 100, 400)):
        status, data = await hitl_api.call("POST", "/v1/hitl/reviews", data=raw, key=FORWARD_KEY,
                                           headers={"Content-Type": "application/json"})
        assert status == expected, (raw[:20], status, data)
        assert data["error"] and data["message"]
    huge = json.dumps({"type": "approval", "prompt": "Deploy?", "context": {"blob": "x" * 2_000_000}})
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", data=huge, key=FORWARD_KEY,
                                       headers={"Content-Type": "application/json"})
    assert status == 413 and data["error"] == "payload_too_large"


async def test_a_bad_last_event_id_is_400(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "approval", "prompt": "Deploy?"})
    status, data = await hitl_api.call("GET", f"/v1/hitl/reviews/{hitl['case_id']}/events", key=FORWARD_KEY,
                                       headers={"Last-Event-ID": "999"})
    assert status == 400 and data["error"] == "bad_request"


# -- events ---------------------------------------------------------------------------------------


async def read_events(api: Api, case_id: str, frames: asyncio.Queue[tuple[str, str, dict[str, Any]]],
                      ready: asyncio.Event, *, last: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {FORWARD_KEY}", **({"Last-Event-ID": last} if last else {})}
    async with ClientSession() as session, session.get(api.url(f"/v1/hitl/reviews/{case_id}/events"),
                                                       headers=headers) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        ident = event = None
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith(": subscribed"):
                ready.set()
            elif line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                await frames.put((ident or "", event or "", json.loads(line[6:])))
    await frames.put(("", "end", {}))  # the server closed the stream


async def test_the_events_url_streams_each_state_and_ends_at_the_terminal_one(both_stores_api: Api) -> None:
    hitl_api = both_stores_api
    hitl = await create(hitl_api, {"type": "selection", "prompt": "Which?", "context": {"options": [
        {"value": "a", "label": "A"}, {"value": "b", "label": "B"}]}})
    assert hitl["events_url"] == f"http://127.0.0.1:8080/v1/hitl/reviews/{hitl['case_id']}/events"
    frames: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
    ready = asyncio.Event()
    reader = asyncio.create_task(read_events(hitl_api, hitl["case_id"], frames, ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)

        async def expect(event: str) -> dict[str, Any]:
            ident, name, data = await asyncio.wait_for(frames.get(), 10)
            assert name == event, (name, data)
            valid("poll-response", data)
            assert data["case_id"] == hitl["case_id"] and ident
            return data

        await hitl_api.call("GET", path_of(hitl["review_url"]), key=None)
        assert (await expect("review.opened"))["opened_at"]
        assert (await answer(hitl_api, hitl["case_id"], {"selected": []}))[0] == 422
        await expect("review.in_progress")
        assert (await answer(hitl_api, hitl["case_id"], {"selected": ["a", "b"]}))[0] == 200
        done = await expect("review.completed")
        assert done["result"] == {"action": "select", "data": {"selected": ["a", "b"]}}
        assert (await asyncio.wait_for(frames.get(), 10))[1] == "end"
    finally:
        reader.cancel()

    # Reconnecting after the last id sent: nothing newer, the stream ends at once.
    again: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
    await asyncio.wait_for(read_events(hitl_api, hitl["case_id"], again, asyncio.Event(), last="3"), 10)
    assert again.get_nowait()[1] == "end"


async def test_events_of_a_case_cross_instances(pg_url: str) -> None:
    """The stream is on one instance; the form is opened and answered through another (LISTEN/NOTIFY)."""
    async with _app(pg_url, instance_id="a") as a, _app(pg_url, instance_id="b") as b:
        hitl = await create(a, {"type": "confirmation", "prompt": "Ship it?"})
        frames: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
        ready = asyncio.Event()
        reader = asyncio.create_task(read_events(a, hitl["case_id"], frames, ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            assert (await b.call("GET", path_of(hitl["review_url"]), key=None))[0] == 200
            assert (await asyncio.wait_for(frames.get(), 10))[1] == "review.opened"
            assert (await answer(b, hitl["case_id"], "confirm"))[0] == 200
            ident, name, data = await asyncio.wait_for(frames.get(), 10)
            assert (ident, name, data["result"]) == ("3", "review.completed", {"action": "confirm", "data": {}})
        finally:
            reader.cancel()


async def test_the_events_url_reports_expiry(hitl_api: Api) -> None:
    hitl = await create(hitl_api, {"type": "confirmation", "prompt": "Go?", "timeout": "2s"})
    frames: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
    await asyncio.wait_for(read_events(hitl_api, hitl["case_id"], frames, asyncio.Event()), 20)
    _, name, data = frames.get_nowait()
    assert name == "review.expired" and data["default_action"] == "skip"
    valid("poll-response", data)


# -- signed callbacks ------------------------------------------------------------------------------


async def test_a_case_calls_back_in_the_protocols_shape_signed_both_ways(hitl_api: Api, receiver: Receiver) -> None:
    url = receiver.url("/hitl?token=in-path")
    hitl = await create(hitl_api, {"type": "selection", "prompt": "Which?", "callback_url": url,
                                   "context": {"options": [{"value": "a", "label": "A"}]}})
    valid("hitl-object", hitl)
    assert hitl["callback_url"] == url
    assert (await answer(hitl_api, hitl["case_id"], {"selected": ["a"]}))[0] == 200
    [hit] = await receiver.wait_for("review.completed", timeout=15)
    assert hit.path == "/hitl?token=in-path"
    expected = "sha256=" + hmac.new(CALLBACK_SECRET.encode(), hit.body, hashlib.sha256).hexdigest()
    assert hit.headers["X-HITL-Signature"] == expected
    assert verify_signature(CALLBACK_SECRET, timestamp=hit.headers[TIMESTAMP_HEADER], body=hit.body,
                            signature=hit.headers[SIGNATURE_HEADER])
    body = hit.json
    assert body.pop("event") == "review.completed" and body.pop("delivery_id") == f"{hitl['case_id']}:callback"
    valid("poll-response", body)
    assert body["result"] == {"action": "select", "data": {"selected": ["a"]}}


async def test_an_expired_case_calls_back_and_a_sensitive_answer_never_rides_one(hitl_api: Api,
                                                                                 receiver: Receiver) -> None:
    expiring = await create(hitl_api, {"type": "approval", "prompt": "Go?", "timeout": "1s",
                                       "default_action": "abort", "callback_url": receiver.url("/a")})
    [hit] = await receiver.wait_for("review.expired", timeout=15)
    assert hit.json["case_id"] == expiring["case_id"] and hit.json["default_action"] == "abort"
    secret = await create(hitl_api, {"type": "input", "prompt": "Code?", "callback_url": receiver.url("/b"),
                                     "context": {"form": {"fields": [
                                         {"key": "code", "label": "Code", "type": "text", "sensitive": True}]}}})
    assert (await answer(hitl_api, secret["case_id"], {"code": "551177"}))[0] == 200
    [hit] = await receiver.wait_for("review.completed", timeout=15)
    assert hit.json["result"] == {"action": "submit"} and b"551177" not in hit.body
    assert (await poll(hitl_api, secret["case_id"]))["result"]["data"] == {"code": "551177"}


async def test_a_callback_url_the_tenant_may_not_call_is_422(hitl_api: Api) -> None:
    status, data = await hitl_api.call("POST", "/v1/hitl/reviews", key=FORWARD_KEY, json={
        "type": "approval", "prompt": "Go?", "callback_url": "http://10.0.0.1/hook"})
    assert status == 422 and [f["field"] for f in data["details"]["fields"]] == ["callback_url"]


# -- the mapping itself ---------------------------------------------------------------------------


def test_durations() -> None:
    assert [parse_timeout(t) for t in ("24h", "30m", "7d", "90s", "PT24H", "P7D", "PT1H30M", "P1W", "P1DT2H")] == [
        86400, 1800, 604800, 90, 86400, 604800, 5400, 604800, 93600]
    for bad in ("", "P", "PT", "P1DT", "24", "h", "-1h", "1.5h", "PT1.5H"):
        with pytest.raises(ValidationFailedError):
            parse_timeout(bad)


def test_error_codes_map_to_the_protocols() -> None:
    assert protocol_error(ExpiredError("gone")).to_json()["error"] == "case_expired"
    assert protocol_error(AlreadyAnsweredError("dup")).code == "duplicate_submission"
    kept = protocol_error(NotFoundError("no"))
    assert kept.code == "not_found" and kept.status == 404

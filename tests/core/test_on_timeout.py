"""``on_timeout``: what the deadline does when nobody answered, on SQLite and on PostgreSQL.

``expire`` (the default), ``reject`` (approvals only) or ``{"default": value}`` (never for
approvals: expiry is never consent). The deadline is reached by moving the service's clock
forward, so nothing sleeps through a timeout; the race test uses the real clock.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from conftest import Api

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.appkeys import SERVICE

SCHEMA = {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 9},
                                           "note": {"type": "string"}}, "required": ["size"]}


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Decide", "timeout_seconds": 60, **extra}


async def past_the_deadline(api: Api, request: dict[str, Any]) -> dict[str, Any]:
    """Move the service's clock past the request's deadline and let the sweeper apply the policy."""
    service = api.app[SERVICE]
    service.clock = lambda: time.time() + 3600
    await service.sweep()
    return await api.wait(request["id"], timeout=10)


async def terminal_entries(api: Api, request_id: str) -> list[dict[str, Any]]:
    entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request_id)
    return [e for e in entries if e["event"] in ("answered", "expired", "cancelled")]


# -- the three policies ---------------------------------------------------------------


async def test_without_a_policy_the_request_expires(api: Api) -> None:
    request = await api.create(body("t-expire"))
    assert request["on_timeout"] == "expire"
    done = await past_the_deadline(api, request)
    assert done["status"] == "expired" and done["timed_out"] is True and "response" not in done
    [entry] = await terminal_entries(api, request["id"])
    assert entry["event"] == "expired"


async def test_reject_policy_rejects_an_approval_at_the_deadline(api: Api) -> None:
    request = await api.create(body("t-reject", kind="approval", on_timeout="reject"))
    assert request["on_timeout"] == "reject"
    done = await past_the_deadline(api, request)
    assert done["status"] == "answered" and done["timed_out"] is True
    assert done["response"] == {"decision": "reject", "reason": "no answer in time"}
    assert done["answered_via"] == "timeout" and done["answered_by"] is None
    [entry] = await terminal_entries(api, request["id"])
    assert (entry["event"], entry["channel"], entry["principal"]) == ("answered", "timeout", None)
    assert entry["data"]["on_timeout"] == "reject"
    assert entry["data"]["response"] == {"decision": "reject", "reason": "no answer in time"}
    # The journal still tells the same story as the requests table.
    assert await api.app[SERVICE].store.verify_journal() == []


async def test_default_policy_answers_with_the_default(api: Api) -> None:
    default = {"size": 3, "note": "the usual"}
    request = await api.create(body("t-default", schema=SCHEMA, on_timeout={"default": default}))
    assert request["on_timeout"] == {"default": default}
    done = await past_the_deadline(api, request)
    assert done["status"] == "answered" and done["timed_out"] is True and done["response"] == default
    assert done["answered_via"] == "timeout"
    [entry] = await terminal_entries(api, request["id"])
    assert entry["data"]["on_timeout"] == "default" and entry["data"]["response"] == default
    created = (await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"]))[0]
    assert created["event"] == "created" and created["data"]["on_timeout"] == {"default": default}


async def test_an_answer_in_time_wins_and_is_not_timed_out(api: Api) -> None:
    request = await api.create(body("t-in-time", kind="approval", on_timeout="reject"))
    status, _ = await api.submit("t-in-time", {"decision": "approve"})
    assert status == 200
    done = await past_the_deadline(api, request)
    assert done["response"] == {"decision": "approve"} and done["timed_out"] is False
    assert len(await terminal_entries(api, request["id"])) == 1


async def test_a_late_answer_is_refused_as_expired(api: Api) -> None:
    request = await api.create(body("t-late", schema=SCHEMA, on_timeout={"default": {"size": 1}}))
    await past_the_deadline(api, request)
    status, data = await api.submit("t-late", {"size": 2})
    assert status == 410 and data["error"] == "expired"
    _, now = await api.call("GET", f"/v1/requests/{request['id']}")
    assert now["response"] == {"size": 1}


async def test_a_late_human_answer_racing_the_timeout_has_exactly_one_outcome(api: Api) -> None:
    """Around the real deadline, a human's answer and the sweeper's policy race: one wins, the
    other is refused, and the journal holds one outcome."""
    service = api.app[SERVICE]
    outcomes = set()
    for i, offset in enumerate((0.05, 0.02, 0.0, -0.02, 0.01, -0.05)):
        uid = f"t-race-{i}"
        request = await api.create(body(uid, kind="approval", on_timeout="reject", timeout_seconds=1))
        deadline = datetime.fromisoformat(request["expires_at"]).timestamp()
        await asyncio.sleep(max(0.0, deadline - offset - time.time()))
        (status, _), applied = await asyncio.gather(
            api.submit(uid, {"decision": "approve"}),
            service.expire(tenant_id="acme", request_id=request["id"]))
        done = await api.wait(request["id"], timeout=10)
        [entry] = await terminal_entries(api, request["id"])
        if status == 200:
            assert done["response"] == {"decision": "approve"} and not done["timed_out"]
            assert entry["channel"] == "api" and not applied
            outcomes.add("human")
        else:
            assert status == 410
            assert done["response"]["decision"] == "reject" and done["timed_out"]
            assert entry["channel"] == "timeout"
            outcomes.add("timeout")
    assert outcomes  # which side wins depends on the machine; that exactly one does is the point


# -- refused at create ------------------------------------------------------------------


async def test_policies_a_request_cannot_have_are_refused_with_422(api: Api) -> None:
    cases = [
        (body("r1", on_timeout="reject"), "on_timeout", "approvals only"),
        (body("r2", kind="approval", on_timeout={"default": {"decision": "approve"}}), "on_timeout",
         "never a default"),
        (body("r3", sensitive=True, on_timeout={"default": "123456"}), "on_timeout", "sensitive"),
        (body("r4", schema=SCHEMA, on_timeout={"default": {"size": 99}}), "on_timeout.default.size", ""),
        (body("r5", schema=SCHEMA, on_timeout={"default": {}}), "on_timeout.default.size", ""),
        (body("r6", on_timeout={"default": 5}), "on_timeout.default", ""),
        (body("r7", on_timeout="later"), "on_timeout", '"expire", "reject"'),
        (body("r8", on_timeout={"value": 1}), "on_timeout", '"expire", "reject"'),
        (body("r9", on_timeout={"default": "x", "extra": 1}), "on_timeout", '"expire", "reject"'),
    ]
    for request, field, words in cases:
        status, data = await api.call("POST", "/v1/requests", json=request)
        assert status == 422, (request, data)
        fields = {f["field"]: f["message"] for f in data["details"]["fields"]}
        assert field in fields, (request, data)
        assert words in fields[field], (request, data)
    # Nothing was stored: each unique_id is still free.
    status, _ = await api.call("POST", "/v1/requests", json=body("r1"))
    assert status == 201


async def test_the_policy_is_part_of_the_idempotent_body(api: Api) -> None:
    first = await api.create(body("t-idem", kind="approval", on_timeout="reject"))
    status, again = await api.call("POST", "/v1/requests", json=body("t-idem", kind="approval", on_timeout="reject"))
    assert status == 200 and again["id"] == first["id"]
    status, data = await api.call("POST", "/v1/requests", json=body("t-idem", kind="approval"))
    assert status == 409 and data["error"] == "conflict"
    # "expire" said out loud is the same body as saying nothing.
    await api.create(body("t-idem-2"))
    status, _ = await api.call("POST", "/v1/requests", json=body("t-idem-2", on_timeout="expire"))
    assert status == 200


# -- the words people read -------------------------------------------------------------


def _view(status: str, **extra: Any) -> RequestView:
    return RequestView(id="req_1", tenant_id="acme", unique_id="u", status=status, message_for_user="m",
                       schema=None, kind=extra.pop("kind", "input"), sensitive=False, run_id=None, channels=[],
                       created_at=0.0, expires_at=1.0, created_by="agent:a", resolved_at=1.0, **extra)


def test_the_outcome_says_the_deadline_decided() -> None:
    rejected = _view("answered", kind="approval", response={"decision": "reject", "reason": "no answer in time"},
                     resolved_channel="timeout", on_timeout="reject")
    out = wording.outcome(rejected)
    assert out.code == "rejected" and out.headline == "Rejected automatically: no answer came in time"
    defaulted = _view("answered", response="blue", resolved_channel="timeout", on_timeout={"default": "blue"})
    out = wording.outcome(defaulted)
    assert out.headline == "No answer came in time: the default answer applies"
    assert out.lines == (("Answer", "blue"),)
    # A person's answer still reads as theirs.
    human = _view("answered", response="blue", resolved_channel="web", resolved_by="link:l1")
    assert wording.outcome(human).headline == "Answered via the web form"

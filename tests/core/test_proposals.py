"""Approve with edits over the API, on SQLite and on PostgreSQL: a proposal checked at create, edits
validated against its schema on every submit, and the result's ``proposal`` and ``edited``."""

from __future__ import annotations

from typing import Any

from conftest import Api

from handraise.core import wording
from handraise.core.appkeys import SERVICE

PROPOSAL_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "maxLength": 200, "title": "Command"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "title": "Replicas"},
        "region": {"type": "string", "enum": ["eu", "us"], "title": "Region"},
    },
    "required": ["command", "replicas"],
}
PROPOSAL = {"command": "kubectl scale deploy/web", "replicas": 4, "region": "eu"}


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Scale the web tier?", "timeout_seconds": 60, "kind": "approval",
            "proposal": PROPOSAL, "proposal_schema": PROPOSAL_SCHEMA, **extra}


async def test_the_proposal_is_on_the_request(api: Api) -> None:
    request = await api.create(body("p-show"))
    assert request["proposal"] == PROPOSAL and request["proposal_schema"] == PROPOSAL_SCHEMA
    assert request["schema"]["properties"]["decision"]["enum"] == ["approve", "reject"]


async def test_approved_as_it_stands(api: Api) -> None:
    request = await api.create(body("p-plain"))
    status, _ = await api.submit("p-plain", {"decision": "approve"})
    assert status == 200
    done = await api.wait(request["id"])
    assert done["response"] == {"decision": "approve", "proposal": PROPOSAL, "edited": False}


async def test_approved_with_edits(api: Api) -> None:
    request = await api.create(body("p-edit"))
    edited = {**PROPOSAL, "replicas": 2}
    status, _ = await api.submit("p-edit", {"decision": "approve", "reason": "two is enough", "proposal": edited})
    assert status == 200
    done = await api.wait(request["id"])
    assert done["response"] == {"decision": "approve", "reason": "two is enough", "proposal": edited,
                                "edited": True}
    entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
    assert [e["data"]["response"] for e in entries if e["event"] == "answered"] == [done["response"]]
    # Sent back unchanged, it is not an edit.
    same = await api.create(body("p-same"))
    status, _ = await api.submit("p-same", {"decision": "approve", "proposal": dict(PROPOSAL)})
    assert status == 200
    assert (await api.wait(same["id"]))["response"]["edited"] is False


async def test_a_rejection_carries_no_proposal(api: Api) -> None:
    request = await api.create(body("p-reject"))
    status, data = await api.submit("p-reject", {"decision": "reject", "proposal": {**PROPOSAL, "replicas": 1}})
    assert status == 422 and data["details"]["fields"] == [
        {"field": "proposal", "message": "Only an approval carries an edited proposal."}]
    status, _ = await api.submit("p-reject", {"decision": "reject", "reason": "not now"})
    assert status == 200
    done = await api.wait(request["id"])
    assert done["response"] == {"decision": "reject", "reason": "not now"}


async def test_an_invalid_edit_is_refused_with_details_and_changes_nothing(api: Api) -> None:
    request = await api.create(body("p-bad"))
    cases = [
        ({**PROPOSAL, "replicas": 50}, "proposal.replicas"),
        ({**PROPOSAL, "region": "mars"}, "proposal.region"),
        ({"replicas": 2}, "proposal.command"),
        ({**PROPOSAL, "extra": 1}, "proposal.extra"),
        ("rm -rf /", "proposal"),
    ]
    for edited, field in cases:
        status, data = await api.submit("p-bad", {"decision": "approve", "proposal": edited})
        assert status == 422 and data["error"] == "invalid_answer", (edited, data)
        assert field in [f["field"] for f in data["details"]["fields"]], (edited, data)
    _, now = await api.call("GET", f"/v1/requests/{request['id']}")
    assert now["status"] == "pending"
    entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
    assert sum(e["event"] == "invalid_attempt" for e in entries) == len(cases)


async def test_proposals_are_checked_at_create(api: Api) -> None:
    cases = [
        (body("c1", kind="input"), "proposal", "approvals only"),
        (body("c2", sensitive=True), "proposal", "sensitive"),
        (body("c3", proposal_schema=None), "proposal_schema", "required"),
        (body("c4", proposal=None), "proposal", "required"),
        (body("c5", proposal_schema={"type": "string"}), "proposal_schema", "object"),
        (body("c6", proposal_schema={"type": "object", "properties": {"x": {"type": "string",
                                                                            "pattern": "(a)\\1"}}}),
         "proposal_schema.properties.x.pattern", "backreference"),
        (body("c7", proposal={**PROPOSAL, "replicas": 0}), "proposal.replicas", ""),
        (body("c8", proposal={"command": "x"}), "proposal.replicas", ""),
        (body("c9", proposal=["not", "an", "object"]), "proposal", ""),
    ]
    for request, field, words in cases:
        request = {k: v for k, v in request.items() if v is not None}
        status, data = await api.call("POST", "/v1/requests", json=request)
        assert status == 422, (request, data)
        fields = {f["field"]: f["message"] for f in data["details"]["fields"]}
        assert field in fields and words in fields[field], (request, data)


def test_the_outcome_names_the_edited_fields() -> None:
    from handraise.core.api import RequestView

    view = RequestView(id="req_1", tenant_id="acme", unique_id="u", status="answered", message_for_user="m",
                       schema=None, kind="approval", sensitive=False, run_id=None, channels=[], created_at=0.0,
                       expires_at=1.0, created_by="agent:a", resolved_at=1.0, resolved_by="operator:ann",
                       resolved_channel="inbox", proposal=PROPOSAL, proposal_schema=PROPOSAL_SCHEMA,
                       response={"decision": "approve", "proposal": {**PROPOSAL, "replicas": 2}, "edited": True})
    out = wording.outcome(view)
    assert out.code == "approved"
    assert ("Replicas (edited)", "2") in out.lines
    assert all("Command" not in title for title, _ in out.lines)  # unchanged fields are not repeated

"""Quorum approvals through the HTTP API, on SQLite and PostgreSQL: N distinct people, one person
counted once, rejections per reject_policy, votes journaled and shown, races with one resolution,
edits of a proposal refused, and every new field checked at create with a 422."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from conftest import AGENT_KEY, OPERATOR_KEY, READER_KEY, Api, base_config, running_app, settings_from
from sse import streams

from handraise.core.api import RequestView
from handraise.core.appkeys import BUS, CONNECTORS, DELIVERIES, DISPATCHER, SERVICE
from handraise.core.connectors import Connector
from handraise.core.events import REQUEST_VOTED

PEOPLE = [
    {"id": "alice", "name": "Alice", "telegram": 4242, "groups": ["oncall"]},
    {"id": "bob", "name": "Bob", "groups": ["oncall"]},
    {"id": "carol", "name": "Carol", "groups": ["oncall", "leads"]},
    {"id": "dave", "name": "Dave", "groups": ["leads"]},
]
# Each person's own answer key, bound to them: it acts as person:<id>, and only as them.
KEYS = {p["id"]: f"{p['id']}-answer-key-0123456789" for p in PEOPLE}


def quorum_config(storage_url: str) -> dict[str, Any]:
    config = base_config(storage_url)
    config["tenants"][0]["people"] = PEOPLE
    config["tenants"][0]["keys"] += [{"id": f"{pid}-key", "key": key, "scopes": ["answer", "read"], "person": pid}
                                     for pid, key in KEYS.items()]
    return config


@pytest.fixture
async def qapi(storage_url: str) -> AsyncIterator[Api]:
    async with running_app(settings_from(quorum_config(storage_url))) as a:
        yield a


def approval(uid: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Deploy v2 to production?", "kind": "approval",
            "timeout_seconds": 600, "approvals_required": n, **extra}


async def vote(api: Api, uid: str, who: str, decision: str, **extra: Any) -> tuple[int, Any]:
    """One person's vote through the API: (status, the request as it stands, or the error)."""
    status, body = await api.submit(uid, {"decision": decision, **extra}, key=KEYS[who])
    return status, body["request"] if status == 200 else body


async def _journal(api: Api, request_id: str) -> list[dict[str, Any]]:
    return await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request_id)


async def test_two_distinct_people_approve_and_the_result_lists_them(qapi: Api) -> None:
    req = await qapi.create(approval("q-2", 2))
    assert req["approvals_required"] == 2 and req["reject_policy"] == "any" and req["votes"] == []
    status, body = await vote(qapi, "q-2", "alice", "approve", reason="looks fine")
    assert status == 200 and body["status"] == "pending"
    status, got = await qapi.call("GET", f"/v1/requests/{req['id']}")
    assert got["status"] == "pending"
    assert [(v["person"], v["name"], v["decision"], v["channel"], v["reason"]) for v in got["votes"]] == [
        ("alice", "Alice", "approve", "api", "looks fine")]
    status, body = await vote(qapi, "q-2", "bob", "approve")
    assert status == 200 and body["status"] == "answered"
    done = await qapi.wait(req["id"])
    response = done["response"]
    assert response["decision"] == "approve"
    assert [(v["person"], v["principal"], v["channel"]) for v in response["votes"]] == [
        ("alice", "person:alice", "api"), ("bob", "person:bob", "api")]
    assert all(v["at"].endswith("Z") for v in response["votes"])
    assert done["answered_by"] == "person:bob"
    events = [e["event"] for e in await _journal(qapi, req["id"])]
    assert events == ["created", "voted", "voted", "answered"]
    assert await qapi.app[SERVICE].store.verify_journal() == []  # the chain and the requests table agree


async def test_the_same_person_counts_once_whatever_the_channel(qapi: Api) -> None:
    """Alice through her answer key and through Telegram is one person: her second approval is ignored."""
    req = await qapi.create(approval("q-once", 2))
    assert (await vote(qapi, "q-once", "alice", "approve"))[0] == 200
    service = qapi.app[SERVICE]
    again = await service.submit(tenant_id="acme", unique_id="q-once", response={"decision": "approve"},
                                 principal="telegram:4242", channel="telegram")
    assert again.status == "pending" and len(again.votes) == 1
    # The same answer again through the API: still one vote, still pending, 200 (idempotent).
    status, body = await vote(qapi, "q-once", "alice", "approve")
    assert status == 200 and body["status"] == "pending"
    # Changing her mind is refused: votes are final.
    status, body = await vote(qapi, "q-once", "alice", "reject")
    assert status == 409 and body["error"] == "already_voted"
    got = await qapi.call("GET", f"/v1/requests/{req['id']}")
    assert [v["person"] for v in got[1]["votes"]] == ["alice"]
    entries = await _journal(qapi, req["id"])
    assert [e["event"] for e in entries] == ["created", "voted", "vote_repeated", "vote_repeated", "answer_refused"]
    assert entries[2]["channel"] == "telegram" and entries[2]["data"]["person"] == "alice"
    assert entries[4]["data"]["reason"] == "already_voted"


async def test_any_rejection_rejects_by_default(qapi: Api) -> None:
    req = await qapi.create(approval("q-rej", 3))
    assert (await vote(qapi, "q-rej", "alice", "approve"))[0] == 200
    status, body = await vote(qapi, "q-rej", "bob", "reject", reason="the freeze is on")
    assert status == 200 and body["status"] == "answered"
    done = await qapi.wait(req["id"])
    assert done["response"]["decision"] == "reject" and done["response"]["reason"] == "the freeze is on"
    assert [v["decision"] for v in done["response"]["votes"]] == ["approve", "reject"]
    status, body = await vote(qapi, "q-rej", "carol", "approve")
    assert status == 409 and body["error"] == "already_answered"


async def test_a_quorum_reject_policy_needs_as_many_rejections(qapi: Api) -> None:
    req = await qapi.create(approval("q-qr", 2, reject_policy="quorum"))
    assert (await vote(qapi, "q-qr", "alice", "reject"))[1]["status"] == "pending"
    assert (await vote(qapi, "q-qr", "bob", "approve"))[1]["status"] == "pending"
    assert (await vote(qapi, "q-qr", "carol", "approve"))[1]["status"] == "answered"
    assert (await qapi.wait(req["id"]))["response"]["decision"] == "approve"
    req = await qapi.create(approval("q-qr2", 2, reject_policy="quorum"))
    await vote(qapi, "q-qr2", "alice", "reject")
    assert (await vote(qapi, "q-qr2", "dave", "reject"))[1]["status"] == "answered"
    assert (await qapi.wait(req["id"]))["response"]["decision"] == "reject"


async def test_only_people_vote_and_four_eyes_and_assignment_hold_per_vote(qapi: Api) -> None:
    await qapi.create(approval("q-who", 2, assign_to=["group:oncall"], on_behalf_of="alice"))
    status, body = await qapi.submit("q-who", {"decision": "approve"}, key=OPERATOR_KEY)  # operator:op-1: nobody
    assert status == 403 and body["error"] == "not_assigned"
    status, body = await vote(qapi, "q-who", "alice", "approve")
    assert status == 403 and body["error"] == "four_eyes"
    status, body = await vote(qapi, "q-who", "dave", "approve")  # not on call
    assert status == 403 and body["error"] == "not_assigned"
    assert (await vote(qapi, "q-who", "bob", "approve"))[1]["status"] == "pending"
    assert (await vote(qapi, "q-who", "carol", "approve"))[1]["status"] == "answered"


@pytest.mark.parametrize("n", [2, 3])
async def test_racing_votes_resolve_exactly_once(qapi: Api, n: int) -> None:
    """Every person approves at once (twice each): exactly N votes decide, once, and the rest are refused."""
    req = await qapi.create(approval(f"q-race-{n}", n))
    people = [p["id"] for p in PEOPLE]
    results = await asyncio.gather(*[vote(qapi, f"q-race-{n}", who, "approve") for who in people * 2])
    codes = sorted(status for status, _ in results)
    assert set(codes) <= {200, 409}
    done = await qapi.wait(req["id"])
    assert done["status"] == "answered" and len(done["response"]["votes"]) == n
    assert len({v["person"] for v in done["response"]["votes"]}) == n
    entries = await qapi.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
    assert [e["event"] for e in entries].count("answered") == 1
    assert [e["event"] for e in entries].count("voted") == n


async def test_a_rejection_racing_the_last_approval_gives_one_outcome(qapi: Api) -> None:
    for i in range(4):
        uid = f"q-mid-{i}"
        req = await qapi.create(approval(uid, 2))
        await vote(qapi, uid, "alice", "approve")
        (s1, b1), (s2, b2) = await asyncio.gather(vote(qapi, uid, "bob", "approve"), vote(qapi, uid, "carol", "reject"))
        done = await qapi.wait(req["id"])
        decided = done["response"]["decision"]
        winner = "bob" if decided == "approve" else "carol"
        assert done["response"]["votes"][-1]["person"] == winner
        assert sorted([s1, s2]) == [200, 409]


async def test_each_vote_publishes_progress(qapi: Api) -> None:
    seen: list[Any] = []
    qapi.app[BUS].add_listener(lambda ev: seen.append(ev) if ev.type == REQUEST_VOTED else None)
    req = await qapi.create(approval("q-ev", 2))
    await vote(qapi, "q-ev", "carol", "approve")
    assert [e.object_id for e in seen] == [req["id"]]
    assert seen[0].data["votes"][0]["person"] == "carol" and seen[0].data["status"] == "pending"


async def test_a_proposal_is_approved_as_proposed(qapi: Api) -> None:
    proposal = {"proposal": {"replicas": 3}, "proposal_schema": {
        "type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}}, "required": ["replicas"]}}
    req = await qapi.create(approval("q-prop", 2, **proposal))
    status, body = await vote(qapi, "q-prop", "alice", "approve", proposal={"replicas": 5})
    assert status == 422 and body["error"] == "invalid_answer"
    assert body["details"]["fields"][0]["field"] == "proposal"
    assert (await vote(qapi, "q-prop", "alice", "approve", proposal={"replicas": 3}))[0] == 200
    assert (await vote(qapi, "q-prop", "bob", "approve"))[1]["status"] == "answered"
    done = await qapi.wait(req["id"])
    assert done["response"]["proposal"] == {"replicas": 3} and done["response"]["edited"] is False
    # One approver may still edit, as without a quorum.
    req = await qapi.create(approval("q-prop1", 1, **proposal))
    assert (await vote(qapi, "q-prop1", "dave", "approve", proposal={"replicas": 2}))[1]["status"] == "answered"
    done = await qapi.wait(req["id"])
    assert done["response"]["proposal"] == {"replicas": 2} and done["response"]["edited"] is True


@pytest.mark.parametrize(("extra", "field", "needle"), [
    ({"approvals_required": 0}, "approvals_required", "greater than or equal to 1"),
    ({"approvals_required": True}, "approvals_required", "integer"),
    ({"approvals_required": "2"}, "approvals_required", "integer"),
    ({"approvals_required": 1.5}, "approvals_required", "integer"),
    ({"approvals_required": 5}, "approvals_required", "only 4 of this tenant's people"),
    ({"approvals_required": 3, "assign_to": ["group:leads"]}, "approvals_required", "only 2 of the people assigned"),
    ({"approvals_required": 3, "on_behalf_of": "alice", "assign_to": ["group:oncall"]}, "approvals_required",
     "only 2 of the people assigned but alice"),
    ({"approvals_required": 3, "assign_to": ["group:leads"], "escalation": [{"after_seconds": 60, "to": ["dave"]}]},
     "approvals_required", "only 2 of the people assigned"),
    ({"approvals_required": 2, "kind": "input"}, "approvals_required", "approvals only"),
    ({"approvals_required": 2, "sensitive": True}, "approvals_required", "sensitive"),
    ({"reject_policy": "any"}, "reject_policy", "only with approvals_required"),
    ({"approvals_required": 2, "reject_policy": "majority"}, "reject_policy", "'any' or 'quorum'"),
])
async def test_quorum_fields_are_checked_at_create(qapi: Api, extra: dict[str, Any], field: str,
                                                   needle: str) -> None:
    body = {"unique_id": "q-bad", "message_for_user": "Deploy?", "kind": "approval", **extra}
    status, error = await qapi.call("POST", "/v1/requests", json=body)
    assert status == 422, error
    assert error["error"] == "validation_error"
    assert any(f["field"] == field and needle in f["message"] for f in error["details"]["fields"]), error


async def test_a_tenant_without_people_has_no_quorum_of_two(api: Api) -> None:
    status, error = await api.call("POST", "/v1/requests", json=approval("q-nop", 2))
    assert status == 422 and "lists none" in error["details"]["fields"][0]["message"]
    # One approval needs nobody listed: whoever may answer votes.
    req = await api.create(approval("q-nop1", 1))
    status, body = await api.submit("q-nop1", {"decision": "approve"})
    assert status == 200 and body["request"]["status"] == "answered"
    done = await api.wait(req["id"])
    assert [v["person"] for v in done["response"]["votes"]] == ["operator:op-1"]


async def test_people_an_escalation_step_adds_count_towards_the_quorum(qapi: Api) -> None:
    """Assigned to the two leads, escalating to Alice: three people may approve it in time."""
    req = await qapi.create(approval("q-esc", 3, assign_to=["group:leads"],
                                     escalation=[{"after_seconds": 60, "to": ["alice"]}]))
    assert req["approvals_required"] == 3


async def test_votes_are_visible_to_readers_and_a_retried_create_is_the_same(qapi: Api) -> None:
    first = await qapi.create(approval("q-read", 2, reject_policy="quorum"))
    again = await qapi.create(approval("q-read", 2, reject_policy="quorum"))
    assert again["id"] == first["id"]
    status, error = await qapi.call("POST", "/v1/requests", json=approval("q-read", 3))
    assert status == 409
    await vote(qapi, "q-read", "dave", "approve")
    status, got = await qapi.call("GET", f"/v1/requests/{first['id']}", key=READER_KEY)
    assert status == 200 and got["votes"][0]["name"] == "Dave"
    status, got = await qapi.call("GET", f"/v1/requests/{first['id']}", key=AGENT_KEY)
    assert got["approvals_required"] == 2 and got["reject_policy"] == "quorum"


async def test_the_event_stream_tells_each_vote(qapi: Api) -> None:
    """GET /v1/events: request.voted with the tally so far, then request.resolved once decided."""
    async with streams() as start:
        reader = await start(qapi, READER_KEY)
        req = await qapi.create(approval("q-sse", 2))
        assert (await reader.next())[0] == "request.created"
        await vote(qapi, "q-sse", "alice", "approve")
        event, data = await reader.next()
        assert event == "request.voted" and data["id"] == req["id"] and data["status"] == "pending"
        assert [v["person"] for v in data["votes"]] == ["alice"]
        await vote(qapi, "q-sse", "bob", "approve")
        event, data = await reader.next()
        assert event == "request.voted" and [v["person"] for v in data["votes"]] == ["alice", "bob"]
        event, data = await reader.next()
        assert event == "request.resolved" and data["response"]["decision"] == "approve"


@pytest.mark.parametrize("n", [2, 3])
async def test_votes_racing_on_two_instances_resolve_once(pg_url: str, n: int) -> None:
    """Two instances on one PostgreSQL: every person votes twice, through both at once. Each vote's
    compare-and-set counts it once, exactly N decide, one resolution; the agent waiting on one
    instance hears it, whichever instance resolved it."""
    settings = settings_from(quorum_config(pg_url))
    async with running_app(settings, instance_id="a") as a, running_app(settings, instance_id="b") as b:
        for round_ in range(3):
            uid = f"q-two-{n}-{round_}"
            req = await a.create(approval(uid, n))
            waiter = asyncio.create_task(a.wait(req["id"], 30))
            people = [p["id"] for p in PEOPLE]
            results = await asyncio.gather(*[vote(api, uid, who, "approve") for who in people for api in (a, b)])
            assert {status for status, _ in results} <= {200, 409}
            done = await asyncio.wait_for(waiter, 30)
            assert done["status"] == "answered"
            persons = [v["person"] for v in done["response"]["votes"]]
            assert len(persons) == n == len(set(persons))
            entries = await _journal(b, req["id"])
            assert [e["event"] for e in entries].count("answered") == 1
            assert [e["event"] for e in entries].count("voted") == n


async def test_another_tenant_never_votes_and_bad_votes_change_nothing(qapi: Api) -> None:
    from conftest import OTHER_OPERATOR_KEY

    req = await qapi.create(approval("q-hostile", 2))
    status, body = await qapi.submit("q-hostile", {"decision": "approve"}, key=OTHER_OPERATOR_KEY)
    assert status == 404 and body["error"] == "not_found"  # globex's key: no such request there
    for bad in ({"decision": "maybe"}, {"decision": "approve", "extra": 1}, "approve", None,
                {"decision": "approve", "reason": "x" * 100_000}):
        status, body = await qapi.submit("q-hostile", bad, key=KEYS["bob"])
        assert status in (413, 422), (bad, status, body)
    got = (await qapi.call("GET", f"/v1/requests/{req['id']}"))[1]
    assert got["status"] == "pending" and got["votes"] == []


async def test_a_secret_shaped_reason_is_redacted_in_the_vote(qapi: Api) -> None:
    req = await qapi.create(approval("q-secret", 2))
    await vote(qapi, "q-secret", "alice", "approve", reason="ok, token ghp_" + "a" * 36)
    got = (await qapi.call("GET", f"/v1/requests/{req['id']}"))[1]
    assert "ghp_" + "a" * 36 not in got["votes"][0]["reason"]


async def test_on_timeout_reject_ends_an_undecided_quorum_keeping_the_votes(qapi: Api) -> None:
    from tests.core.test_on_timeout import past_the_deadline

    req = await qapi.create(approval("q-late", 2, on_timeout="reject"))
    assert (await vote(qapi, "q-late", "carol", "approve"))[1]["status"] == "pending"
    done = await past_the_deadline(qapi, req)  # the service's clock moved on: nothing sleeps
    assert done["status"] == "answered" and done["timed_out"] and done["response"]["decision"] == "reject"
    assert [v["person"] for v in done["votes"]] == ["carol"]  # the vote stays on the record
    status, body = await vote(qapi, "q-late", "dave", "approve")
    assert status == 410 and body["error"] == "expired"


async def test_the_person_it_is_asked_for_never_counts_but_may_reject(qapi: Api) -> None:
    req = await qapi.create(approval("q-own", 2, on_behalf_of="alice"))
    assert (await vote(qapi, "q-own", "alice", "approve"))[0] == 403
    assert (await vote(qapi, "q-own", "bob", "approve"))[1]["status"] == "pending"
    status, body = await vote(qapi, "q-own", "alice", "reject", reason="not any more")
    assert status == 200 and body["status"] == "answered"
    done = await qapi.wait(req["id"])
    assert done["response"]["decision"] == "reject" and done["response"]["reason"] == "not any more"


class TallyConnector(Connector):
    """A connector that records each tally it is asked to show; the first edit waits on a gate."""

    name: ClassVar[str] = "tally"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shown: list[int] = []
        self.editing = asyncio.Event()
        self.gate = asyncio.Event()
        self.withdrawn: list[str] = []

    def targets(self, tenant_id: str) -> list[str]:
        return ["t1"] if tenant_id == "acme" else []

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        return {"message": 1}

    async def show_votes(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.editing.set()
        await self.gate.wait()
        self.shown.append(len(request.votes))

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.withdrawn.append(request.status)


async def test_a_vote_counted_during_a_tally_edit_is_shown_by_the_next_edit(sqlite_url: str) -> None:
    """Bob votes while Alice's tally is being edited in: his own edit finds the message claimed and
    gives up, so the edit in progress edits once more with both votes, never leaving "1 of 3"."""
    async with running_app(settings_from(quorum_config(sqlite_url)), connector_classes=[TallyConnector]) as api:
        connector = api.app[CONNECTORS]["tally"]
        req = await api.create(approval("q-edit", 3, channels=["tally"]))
        await api.app[DISPATCHER].idle()
        await vote(api, "q-edit", "alice", "approve")
        await asyncio.wait_for(connector.editing.wait(), 10)
        await vote(api, "q-edit", "bob", "approve")
        connector.gate.set()
        await api.app[DISPATCHER].idle()
        assert connector.shown[-1] == 2 and connector.shown == sorted(connector.shown)
        await vote(api, "q-edit", "carol", "approve")
        await api.app[DISPATCHER].idle()
        assert connector.withdrawn == ["answered"] and connector.shown[-1] == 2
        rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=req["id"])
        assert [r.status for r in rows] == ["withdrawn"]


def test_a_long_tally_stays_one_short_line() -> None:
    from handraise.core import wording

    line = wording.tally(required=10, policy="quorum", approvers=[f"P{i}" for i in range(8)], rejecters=["R"],
                         expected=[f"E{i}" for i in range(20)])
    assert line == ("🗳 8 of 10 approved: P0, P1, P2, P3, P4, P5 and 2 more; 1 of 10 rejected: R. "
                    "Still expected: E0, E1, E2, E3, E4, E5 and 14 more.")
    assert wording.tally(required=2, policy="any", approvers=[], rejecters=[], expected=["Bob"]) == (
        "🗳 0 of 2 approved. Still expected: Bob. One rejection rejects it.")

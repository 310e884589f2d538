"""The Python client against a real ``handraise serve`` process: answers, decisions, forms, every error."""

from __future__ import annotations

import asyncio
import enum
import time
from datetime import date
from typing import Literal

import pytest
from harness.live import AGENT_KEY, OPERATOR_KEY, OTHER_OPERATOR_KEY, LiveServer, free_port
from pydantic import BaseModel, Field

from client.helpers import AnsweringHuman, answer_when_created, count_requests
from handraise.client import (
    AnswerDeleted,
    AsyncHandraise,
    Cancelled,
    Conflict,
    Expired,
    Forbidden,
    Handraise,
    InvalidRequest,
    NotFound,
    Rejected,
    RetryPolicy,
    ServerUnavailable,
    Unauthorized,
    new_unique_id,
)


@pytest.fixture
def agent(live_server: LiveServer) -> Handraise:
    with Handraise(live_server.url, AGENT_KEY) as hr:
        yield hr


@pytest.fixture
def operator(live_server: LiveServer) -> Handraise:
    with Handraise(live_server.url, OPERATOR_KEY) as hr:
        yield hr


def test_ask_returns_the_typed_answer(agent: Handraise, live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, 42).begin()
    assert agent.ask("How many?", schema={"type": "integer", "minimum": 0}, unique_id=uid, timeout=60) == 42
    human.join()


def test_ask_without_schema_returns_text_and_defaults_come_from_the_environment(
        live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDRAISE_URL", live_server.url)
    monkeypatch.setenv("HANDRAISE_KEY", AGENT_KEY)
    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, "blue").begin()
    with Handraise() as hr:
        assert hr.ask("Favourite colour?", unique_id=uid, timeout=60) == "blue"
    human.join()


def test_a_repeated_ask_with_the_same_unique_id_gets_the_one_answer(agent: Handraise, operator: Handraise,
                                                                      live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, "yes").begin()
    assert agent.ask("Proceed?", unique_id=uid, timeout=60) == "yes"
    human.join()
    assert agent.ask("Proceed?", unique_id=uid, timeout=60) == "yes"
    assert count_requests(live_server.url, uid) == 1


def test_approve_returns_a_decision_and_raises_rejected_only_when_asked(agent: Handraise,
                                                                         live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, {"decision": "approve", "reason": "fine"}).begin()
    decision = agent.approve("Delete 3 files", details={"path": "/tmp/x", "count": 3}, unique_id=uid, timeout=60)
    human.join()
    assert decision.approved and decision.reason == "fine"
    assert decision.decided_by == "operator:op-1"
    assert decision.request.kind == "approval"
    assert decision.request.message_for_user == "Delete 3 files\n\npath: /tmp/x\ncount: 3"

    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, {"decision": "reject"}).begin()
    decision = agent.approve("Wire $10,000", unique_id=uid, timeout=60)
    human.join()
    assert decision.approved is False

    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, {"decision": "reject", "reason": "too much"}).begin()
    with pytest.raises(Rejected, match="too much") as caught:
        agent.approve("Wire $20,000", unique_id=uid, timeout=60, raise_on_reject=True)
    human.join()
    assert caught.value.decision.approved is False


def test_approve_takes_a_quorum_and_lists_the_votes(agent: Handraise, live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, {"decision": "approve"}).begin()
    decision = agent.approve("Deploy", unique_id=uid, timeout=60, approvals_required=1, reject_policy="quorum")
    human.join()
    assert decision.approved and decision.request.approvals_required == 1
    assert decision.request.reject_policy == "quorum"
    assert [(v.person, v.decision, v.channel) for v in decision.votes] == [("operator:op-1", "approve", "api")]
    # Checked with the server's own model before anything is sent.
    with pytest.raises(InvalidRequest) as caught:
        agent.approve("Deploy", timeout=60, approvals_required=0)
    assert caught.value.details["fields"][0]["field"] == "approvals_required"


class Colour(enum.Enum):
    red = "red"
    green = "green"


class Booking(BaseModel):
    name: str = Field(min_length=1, max_length=50)
    nights: int = Field(ge=1, le=14)
    colour: Colour
    arrival: date
    extras: list[Literal["breakfast", "parking"]] = []
    note: str | None = None


def test_form_sends_the_model_and_returns_a_validated_instance(agent: Handraise, live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    seen = {}

    def fill(record):  # the human sees the flattened schema
        seen.update(record.form_schema)
        return {"name": "Ada", "nights": 2, "colour": "green", "arrival": "2027-01-02", "extras": ["parking"]}

    human = AnsweringHuman(live_server.url, uid, fill).begin()
    booking = agent.form("Book a room", Booking, unique_id=uid, timeout=60)
    human.join()
    assert booking == Booking(name="Ada", nights=2, colour=Colour.green, arrival=date(2027, 1, 2), extras=["parking"])
    assert seen["properties"]["colour"]["enum"] == ["red", "green"]
    assert seen["properties"]["note"]["type"] == "string" and "note" not in seen["required"]


class Address(BaseModel):
    street: str


class Nested(BaseModel):
    address: Address


class Either(BaseModel):
    value: int | str


@pytest.mark.parametrize(("model", "words"), [(Nested, "nested models"), (Either, "union of types")])
def test_form_refuses_a_model_outside_the_subset_before_any_call(model: type[BaseModel], words: str) -> None:
    # A closed port: the refusal must come before the network is touched.
    with Handraise(f"http://127.0.0.1:{free_port()}", AGENT_KEY) as hr, pytest.raises(InvalidRequest) as caught:
        hr.form("Where?", model)
    assert words in str(caught.value) and model.__name__ in str(caught.value)
    assert caught.value.code == "invalid_schema"
    assert [f["field"] for f in caught.value.fields] == [f"schema.properties.{next(iter(model.model_fields))}"]


def test_expiry_is_raised_never_returned(agent: Handraise) -> None:
    uid = new_unique_id("test")
    with pytest.raises(Expired) as caught:
        agent.ask("Anyone?", unique_id=uid, timeout=1)
    assert caught.value.request is not None and caught.value.request.status == "expired"
    with pytest.raises(Expired):
        agent.approve("Deploy", timeout=1)


def test_a_cancelled_request_raises_cancelled(agent: Handraise, live_server: LiveServer) -> None:
    uid = new_unique_id("test")

    def cancel(record):
        with Handraise(live_server.url, AGENT_KEY) as other:
            other.cancel(record.id)
        raise _Done

    human = AnsweringHuman(live_server.url, uid, cancel).begin()
    with pytest.raises(Cancelled, match="cancelled by agent:agent-1"):
        agent.ask("Will be cancelled", unique_id=uid, timeout=60)
    with pytest.raises(_Done):
        human.join()


class _Done(Exception):
    pass


def test_a_sensitive_answer_is_handed_over_once(agent: Handraise, live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    human = AnsweringHuman(live_server.url, uid, "123456").begin()
    schema = {"type": "string", "pattern": "^[0-9]{6}$"}
    assert agent.ask("Code?", schema=schema, sensitive=True, unique_id=uid, timeout=60) == "123456"
    human.join()
    with pytest.raises(AnswerDeleted):
        agent.ask("Code?", schema=schema, sensitive=True, unique_id=uid, timeout=60)


def test_keys_and_scopes(live_server: LiveServer) -> None:
    with Handraise(live_server.url, "not-a-key") as hr, pytest.raises(Unauthorized) as caught:
        hr.ask("Hello?", timeout=5)
    assert caught.value.status == 401 and not isinstance(caught.value, Forbidden)
    with Handraise(live_server.url, OPERATOR_KEY) as hr, pytest.raises(Forbidden):
        hr.ask("An operator cannot ask", timeout=5)
    with Handraise(live_server.url, AGENT_KEY) as hr, pytest.raises(Forbidden):
        hr.submit("anything", "an agent never answers")
    with pytest.raises(ValueError, match="HANDRAISE_KEY"):
        Handraise(live_server.url, "")


def test_invalid_requests_carry_the_servers_reasons(agent: Handraise) -> None:
    with pytest.raises(InvalidRequest) as caught:
        agent.ask("Pick", schema={"type": "object", "properties": {"a": {"type": "object"}}}, timeout=5)
    assert caught.value.status == 422 and caught.value.code == "invalid_schema"
    assert caught.value.fields == [{"field": "schema.properties.a", "message": "nested objects are not supported"}]
    # Several problems: each reaches the agent once, where it is.
    with pytest.raises(InvalidRequest) as caught:
        agent.ask("Pick", schema={"type": "string", "pattern": "(?=a)", "format": "ipv4"}, timeout=5)
    assert [f["field"] for f in caught.value.fields] == ["schema.pattern", "schema.format"]
    assert str(caught.value).count("schema.pattern:") == 1 and "schema.format: format 'ipv4'" in str(caught.value)
    with pytest.raises(InvalidRequest) as caught:
        agent.ask("Too long", timeout=10**9)
    assert caught.value.fields and caught.value.fields[0]["field"] == "timeout_seconds"
    with pytest.raises(InvalidRequest) as caught:  # refused before sending: the server's own body model
        agent.ask("", timeout=5)
    assert caught.value.status is None and caught.value.fields[0]["field"] == "message_for_user"


def test_the_same_unique_id_with_another_body_is_a_conflict(agent: Handraise) -> None:
    uid = new_unique_id("test")
    record = agent.create("First", unique_id=uid, timeout=60)
    assert record.status == "pending" and record.unique_id == uid
    assert agent.create("First", unique_id=uid, timeout=60).id == record.id
    with pytest.raises(Conflict) as caught:
        agent.ask("Second", unique_id=uid, timeout=60)
    assert caught.value.code == "conflict"
    agent.cancel(record.id)
    with pytest.raises(Conflict) as caught:
        agent.cancel(record.id)
    assert caught.value.code == "not_pending"


PROPOSAL_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
# Fields create() has no argument for: create_request sends them as given.
WHOLE_BODY = {"message_for_user": "Run it?", "kind": "approval", "timeout_seconds": 60, "on_timeout": "reject",
              "proposal": {"command": "make deploy"}, "proposal_schema": PROPOSAL_SCHEMA}


def test_create_request_sends_a_whole_body_and_the_server_judges_it(agent: Handraise) -> None:
    record = agent.create_request(WHOLE_BODY)
    assert record.unique_id.startswith("hr-") and record.status == "pending"  # a unique_id when it has none
    assert (record.on_timeout, record.proposal, record.proposal_schema) == ("reject", {"command": "make deploy"},
                                                                            PROPOSAL_SCHEMA)
    again = agent.create_request({**WHOLE_BODY, "unique_id": record.unique_id})
    assert again.id == record.id  # idempotent on its unique_id
    with pytest.raises(InvalidRequest) as caught:
        agent.create_request({**WHOLE_BODY, "on_timeout": {"default": "yes"}})
    assert caught.value.status == 422 and caught.value.fields[0]["field"] == "on_timeout"
    agent.cancel(record.id)


async def test_async_create_request_is_the_same_call(live_server: LiveServer) -> None:
    async with AsyncHandraise(live_server.url, AGENT_KEY) as hr:
        uid = new_unique_id("whole")
        record = await hr.create_request({**WHOLE_BODY, "unique_id": uid})
        assert record.unique_id == uid and record.on_timeout == "reject" and record.proposal == WHOLE_BODY["proposal"]
        with pytest.raises(InvalidRequest) as caught:
            await hr.create_request({**WHOLE_BODY, "unique_id": "", "surprise": 1})
        assert {f["field"] for f in caught.value.fields} == {"unique_id", "surprise"}
        await hr.cancel(record.id)


def test_operator_tools_submit_mint_link_and_their_errors(agent: Handraise, operator: Handraise,
                                                          live_server: LiveServer) -> None:
    uid = new_unique_id("test")
    record = agent.create("Ship it?", approval=True, unique_id=uid, timeout=60)
    link = operator.mint_link(record.id, recipient="Alice")
    assert link.url.startswith(live_server.url + "/f/") and link.expires_at == record.expires_at
    with pytest.raises(Forbidden):
        agent.mint_link(record.id)
    with pytest.raises(InvalidRequest) as caught:
        operator.submit(uid, {"decision": "maybe"})
    assert caught.value.code == "invalid_answer" and caught.value.fields
    answered = operator.submit(uid, {"decision": "approve"})
    assert answered.status == "answered" and answered.answered_by == "operator:op-1"
    assert answered.response is None and not answered.has_response  # operators are not handed the answer
    with pytest.raises(Conflict) as caught:
        operator.submit(uid, {"decision": "reject"})
    assert caught.value.code == "already_answered"
    decision = agent.wait(record.id)
    assert decision.response == {"decision": "approve"}
    with pytest.raises(NotFound):
        operator.submit(new_unique_id("absent"), "x")
    with Handraise(live_server.url, OTHER_OPERATOR_KEY) as stranger, pytest.raises(NotFound):
        stranger.submit(uid, {"decision": "reject"})

    expired = agent.create("Too late", unique_id=new_unique_id("test"), timeout=1)
    with pytest.raises(Expired):
        agent.wait(expired.id)
    with pytest.raises(Expired):
        operator.submit(expired.unique_id, "late")


def test_events_stream_created_and_resolved(agent: Handraise, operator: Handraise) -> None:
    uid = new_unique_id("test")
    with operator.events(types=["request.created", "request.resolved"]) as events:
        created = agent.create("Watch me", unique_id=uid, timeout=60)
        operator.submit(uid, "seen")
        seen = []
        for event in events:
            if event.request is not None and event.request.unique_id == uid:
                seen.append(event)
            if len(seen) == 2:
                break
    assert [e.type for e in seen] == ["request.created", "request.resolved"]
    assert seen[0].request.id == created.id and seen[1].request.status == "answered"
    with pytest.raises(Forbidden), agent.events():
        pass


def test_an_unreachable_server_is_retried_a_bounded_number_of_times() -> None:
    policy = RetryPolicy(attempts=3, base_seconds=0.01, cap_seconds=0.05, grace_seconds=0.5)
    with Handraise(f"http://127.0.0.1:{free_port()}", AGENT_KEY, retry=policy) as hr:
        started = time.monotonic()
        with pytest.raises(ServerUnavailable) as caught:
            hr.get("req_x")
        assert time.monotonic() - started < 5
        assert caught.value.status is None and caught.value.code == "unreachable"
        # An ask keeps trying until the request's own deadline, then says so.
        with pytest.raises(ServerUnavailable):
            hr.ask("Nobody home", timeout=1)


def test_requests_iterates_every_page_once(agent: Handraise, operator: Handraise) -> None:
    run = new_unique_id("pages")
    made = [agent.create("Paged?", unique_id=new_unique_id("page"), timeout=60, run_id=run) for _ in range(7)]
    operator.submit(made[2].unique_id, "yes")
    listed = list(agent.requests(run_id=run, page_size=3))
    assert [r.id for r in listed] == [r.id for r in made]
    assert [r.unique_id for r in operator.requests(run_id=run, status="answered", page_size=1)] == [made[2].unique_id]
    with pytest.raises(InvalidRequest):
        next(agent.requests(page_size=0))


# -- the async client, the same server ----------------------------------------------------------


async def test_async_ask_approve_and_form(live_server: LiveServer) -> None:
    async with AsyncHandraise(live_server.url, AGENT_KEY) as hr:
        for call, answer, check in [
            (lambda uid: hr.ask("Colour?", unique_id=uid, timeout=60), "teal", lambda v: v == "teal"),
            (lambda uid: hr.approve("Merge", unique_id=uid, timeout=60), {"decision": "approve"},
             lambda d: d.approved),
            (lambda uid: hr.form("Book", Booking, unique_id=uid, timeout=60),
             {"name": "Bo", "nights": 1, "colour": "red", "arrival": "2027-03-04"},
             lambda b: b.colour is Colour.red and b.extras == []),
        ]:
            uid = new_unique_id("async")
            ready = asyncio.Event()
            human = asyncio.create_task(answer_when_created(live_server.url, uid, answer, ready=ready))
            await asyncio.wait_for(ready.wait(), 30)
            assert check(await call(uid))
            assert (await asyncio.wait_for(human, 30)).status == "answered"


async def test_async_requests_iterates_every_page_once(live_server: LiveServer) -> None:
    run = new_unique_id("apages")
    async with AsyncHandraise(live_server.url, AGENT_KEY) as hr:
        made = [await hr.create("Paged?", unique_id=new_unique_id("apage"), timeout=60, run_id=run) for _ in range(5)]
        assert [r.id async for r in hr.requests(run_id=run, page_size=2)] == [r.id for r in made]


async def test_async_errors(live_server: LiveServer) -> None:
    async with AsyncHandraise(live_server.url, AGENT_KEY) as hr:
        with pytest.raises(Expired):
            await hr.ask("Quick", timeout=1)
        with pytest.raises(NotFound):
            await hr.get("req_does_not_exist")
    async with AsyncHandraise(live_server.url, "wrong") as hr:
        with pytest.raises(Unauthorized):
            await hr.ask("Hi", timeout=5)


def test_every_field_the_server_returns_is_declared_in_the_one_public_model(agent: Handraise,
                                                                               operator: Handraise) -> None:
    import httpx

    from handraise.core.api import DeliveryRecord, RequestRecord

    declared = {f.alias or name for name, f in RequestRecord.model_fields.items()}
    records = [agent.create("Declared?", unique_id=new_unique_id("shape"), timeout=60) for _ in range(3)]
    operator.submit(records[0].unique_id, "yes")
    agent.cancel(records[1].id)
    expired = agent.create("Gone soon", unique_id=new_unique_id("shape"), timeout=1)
    with pytest.raises(Expired):
        agent.wait(expired.id)
    for record in [*records, expired]:
        raw = httpx.get(f"{agent.url}/v1/requests/{record.id}", headers={"Authorization": f"Bearer {AGENT_KEY}"}).json()
        assert set(raw) <= declared, set(raw) - declared
        for delivery in raw["deliveries"]:
            assert set(delivery) <= set(DeliveryRecord.model_fields)

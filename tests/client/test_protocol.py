"""The client's flows without I/O: what is retried, what is re-posted, what is never sent twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from handraise.client import Conflict, ServerUnavailable
from handraise.client._protocol import Call, Reply, RetryPolicy, Sleep, TransportFailure, call_flow, settle_flow

POLICY = RetryPolicy(attempts=3, base_seconds=0.1, cap_seconds=1.0, grace_seconds=5.0)


def _record(status: str = "pending", **extra: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"id": "req_1", "unique_id": "u-1", "status": status, "message_for_user": "?", "kind": "input",
            "created_at": now.isoformat(), "expires_at": (now + timedelta(seconds=60)).isoformat(), **extra}


class Driver:
    """Runs a flow against scripted outcomes (a Reply, or a TransportFailure to throw)."""

    def __init__(self, flow: Any) -> None:
        self.flow = flow
        self.calls: list[Call] = []
        self.sleeps: list[float] = []

    def run(self, outcomes: list[Any]) -> Any:
        step = next(self.flow)
        try:
            while True:
                if isinstance(step, Sleep):
                    self.sleeps.append(step.seconds)
                    step = self.flow.send(None)
                    continue
                self.calls.append(step)
                outcome = outcomes.pop(0)
                step = self.flow.throw(outcome) if isinstance(outcome, Exception) else self.flow.send(outcome)
        except StopIteration as stop:
            assert not outcomes, "the flow ended before using every scripted outcome"
            return stop.value


def test_a_5xx_is_retried_with_backoff_honouring_retry_after() -> None:
    driver = Driver(call_flow(Call("GET", "/v1/requests/req_1"), policy=POLICY))
    body = driver.run([Reply(503, {"error": "unavailable", "message": "store"}, {"retry-after": "0.25"}),
                       Reply(500, {"error": "internal", "message": "boom"}), Reply(200, _record())])
    assert body["id"] == "req_1" and len(driver.calls) == 3
    assert driver.sleeps[0] == 0.25 and 0.05 <= driver.sleeps[1] <= 0.2


def test_retries_are_bounded() -> None:
    driver = Driver(call_flow(Call("GET", "/x"), policy=POLICY))
    with pytest.raises(ServerUnavailable):
        driver.run([Reply(502, None)] * 3)
    assert len(driver.calls) == 3


def test_a_call_that_may_have_acted_is_not_repeated_unless_idempotent() -> None:
    submit = Call("POST", "/api/human-feedback/submit", json={"unique_id": "u", "response": 1})
    driver = Driver(call_flow(submit, policy=POLICY, idempotent=False))
    with pytest.raises(ServerUnavailable):
        driver.run([TransportFailure("reset", maybe_sent=True)])
    assert len(driver.calls) == 1
    # A refused connection never reached the server: safe to try again.
    driver = Driver(call_flow(submit, policy=POLICY, idempotent=False))
    driver.run([TransportFailure("refused", maybe_sent=False), Reply(200, {"accepted": True})])
    assert len(driver.calls) == 2


def test_a_4xx_is_never_retried() -> None:
    driver = Driver(call_flow(Call("POST", "/v1/requests", json={}), policy=POLICY))
    with pytest.raises(Conflict):
        driver.run([Reply(409, {"error": "conflict", "message": "pending with another body"})])
    assert len(driver.calls) == 1


def test_waiting_reattaches_by_reposting_the_identical_create() -> None:
    create = Call("POST", "/v1/requests", json={"unique_id": "u-1", "message_for_user": "?", "timeout_seconds": 60})
    driver = Driver(settle_flow(create, timeout_seconds=60, policy=POLICY, wait_chunk=50))
    record = driver.run([
        Reply(201, _record()),
        TransportFailure("server gone", maybe_sent=True),          # the wait breaks
        TransportFailure("refused", maybe_sent=False),             # the server is down
        Reply(200, _record()),                                     # back: the same request, pending
        Reply(200, _record("answered", response=7)),
    ])
    assert record.response == 7
    assert [c.method + " " + c.path for c in driver.calls] == [
        "POST /v1/requests", "GET /v1/requests/req_1/wait", "POST /v1/requests", "POST /v1/requests",
        "GET /v1/requests/req_1/wait"]
    assert all(c.json == create.json for c in driver.calls if c.method == "POST")
    waits = [c for c in driver.calls if c.method == "GET"]
    assert all(0 < float(c.params["timeout"]) <= 50 and c.read_timeout > float(c.params["timeout"]) for c in waits)


def test_waiting_gives_up_past_the_deadline_and_grace() -> None:
    clock = [1000.0]

    def now() -> float:
        return clock[0]

    create = Call("POST", "/v1/requests", json={"unique_id": "u", "message_for_user": "?", "timeout_seconds": 1})
    flow = settle_flow(create, timeout_seconds=1, policy=POLICY, wait_chunk=50, clock=now)
    step = next(flow)
    calls = 0
    with pytest.raises(ServerUnavailable):
        while True:
            if isinstance(step, Sleep):
                clock[0] += step.seconds
                step = flow.send(None)
            else:
                calls += 1
                step = flow.throw(TransportFailure("refused", maybe_sent=False))
    assert clock[0] <= 1000.0 + 1 + POLICY.grace_seconds and calls > 3

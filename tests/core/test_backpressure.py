"""Backpressure (issue 19): past ``limits.max_writes_in_flight`` an instance sheds writes at once with
503 ``overloaded`` and Retry-After, having done nothing for them, and every write it accepted is stored."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import secrets
from typing import Any

import pytest

from conftest import AGENT_KEY, OPERATOR_KEY, base_config, running_app, settings_from
from handraise.core.appkeys import ADMISSION, METRICS, SERVICE, STORE
from handraise.core.errors import OverloadedError
from handraise.core.http.admission import BY_COUNT, BY_QUEUE, MAX_RETRY_AFTER, WriteAdmission


def ask_body(uid: str) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Code?", "timeout_seconds": 60,
            "schema": {"type": "string", "pattern": "^[0-9]{6}$"}}


async def test_an_overloaded_instance_sheds_with_retry_after_and_loses_no_accepted_write(storage_url: str) -> None:
    settings = settings_from(base_config(storage_url, limits={"max_writes_in_flight": 2,
                                                              "overload_retry_after_seconds": 3}))
    async with running_app(settings) as api:
        service = api.app[SERVICE]
        gate = asyncio.Event()
        entered = asyncio.Queue[str]()
        create = service.create

        async def held_create(**kwargs: Any) -> Any:
            # The first writes stay in flight until the test lets them go: the instance is "at capacity".
            await entered.put(kwargs["body"].unique_id)
            await gate.wait()
            return await create(**kwargs)

        service.create = held_create  # type: ignore[method-assign]
        run = secrets.token_hex(3)
        held = [asyncio.create_task(api.call("POST", "/v1/requests", json=ask_body(f"{run}-held-{i}")))
                for i in range(2)]
        for _ in range(2):
            await asyncio.wait_for(entered.get(), timeout=30)
        assert api.app[ADMISSION].in_flight == 2

        # At capacity: creates, answers and the blocking call are refused at once, reads still served.
        shed: list[tuple[int, Any, str | None]] = []
        for i in range(10):
            async with api.session.post(api.url("/v1/requests"), json=ask_body(f"{run}-shed-{i}"),
                                        headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
                shed.append((resp.status, await resp.json(), resp.headers.get("Retry-After")))
        async with api.session.post(api.url("/v1/human-feedback"), json=ask_body(f"{run}-blocking"),
                                    headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            shed.append((resp.status, await resp.json(), resp.headers.get("Retry-After")))
        async with api.session.post(api.url("/api/human-feedback/submit"),
                                    json={"unique_id": f"{run}-held-0", "response": "123456"},
                                    headers={"Authorization": f"Bearer {OPERATOR_KEY}"}) as resp:
            shed.append((resp.status, await resp.json(), resp.headers.get("Retry-After")))
        for status, body, retry_after in shed:
            assert status == 503, body
            assert body["error"] == "overloaded" and "retry" in body["message"]
            assert retry_after == "3"
        status, _ = await api.call("GET", "/healthz", key=None)
        assert status == 200
        assert api.app[ADMISSION].shed == len(shed)

        gate.set()
        accepted = [await t for t in held]
        assert [s for s, _ in accepted] == [201, 201]
        assert api.app[ADMISSION].in_flight == 0

        store = api.app[STORE]
        # Every accepted write is stored; nothing of a refused one is.
        for _, body in accepted:
            row = await store.get_request("acme", body["id"])
            assert row is not None and row["status"] == "pending"
            entries = await service.journal_entries(tenant_id="acme", request_id=body["id"])
            assert [e["event"] for e in entries] == ["created"]
        for i in range(10):
            assert await store.get_request_by_unique_id("acme", f"{run}-shed-{i}") is None
        assert await store.get_request_by_unique_id("acme", f"{run}-blocking") is None
        assert (await store.get_request_by_unique_id("acme", f"{run}-held-0"))["status"] == "pending"

        # Once under the bound again, the refused writes go through when retried.
        service.create = create  # type: ignore[method-assign]
        status, body = await api.call("POST", "/v1/requests", json=ask_body(f"{run}-shed-0"))
        assert status == 201, body
        status, body = await api.submit(f"{run}-held-0", "123456")
        assert status == 200 and body["accepted"] is True
        assert (await api.wait(accepted[0][1]["id"]))["response"] == "123456"


async def test_waiting_agents_do_not_hold_places_that_writes_need(storage_url: str) -> None:
    """Long-polls and the blocking call's wait are not writes in flight: a full house of waiting
    agents leaves the bound to creates and answers."""
    settings = settings_from(base_config(storage_url, limits={"max_writes_in_flight": 1}))
    async with running_app(settings) as api:
        run = secrets.token_hex(3)
        service = api.app[SERVICE]
        blocking = []
        for i in range(3):  # one after the other: two creates at once would be over the bound of one
            blocking.append(asyncio.create_task(api.call("POST", "/v1/human-feedback",
                                                         json=ask_body(f"{run}-b{i}"))))
            for _ in range(600):  # until this blocking call has created its request and waits
                if service.waiting == i + 1:
                    break
                await asyncio.sleep(0.05)
            assert service.waiting == i + 1
        assert api.app[ADMISSION].in_flight == 0
        for i in range(3):
            status, body = await api.submit(f"{run}-b{i}", "123456")
            assert status == 200, body
        results = [await t for t in blocking]
        assert [(s, b["status"], b["response"]) for s, b in results] == [(200, "answered", "123456")] * 3
        assert api.app[ADMISSION].shed == 0


# -- the time a write would queue (limits.max_write_queue_ms) ------------------------------------------------


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def enter(admission: WriteAdmission) -> contextlib.AbstractContextManager[None]:
    """One write admitted and still in flight (its context entered; leave it with ``.__exit__``)."""
    write = admission.admit()
    write.__enter__()
    return write


def leave(write: contextlib.AbstractContextManager[None]) -> None:
    write.__exit__(None, None, None)


def warmed(*, target: float = 0.095, limit: int = 0, service: float = 0.01) -> tuple[WriteAdmission, Clock]:
    """An admission that has watched a store taking one write at a time, ``service`` s each, with one
    write waiting behind the one it works on (1 / service writes a second, two in flight)."""
    clock = Clock()
    admission = WriteAdmission(limit=limit, retry_after=1, max_queue_seconds=target, clock=clock)
    queue = [enter(admission)]  # the first had none ahead: its time is the service time
    for _ in range(8):
        queue.append(enter(admission))
        clock.advance(service)
        leave(queue.pop(0))
    clock.advance(service)
    leave(queue.pop(0))
    return admission, clock


def test_nothing_is_shed_for_time_before_anything_is_measured() -> None:
    clock = Clock()
    admission = WriteAdmission(limit=5, retry_after=2, max_queue_seconds=0.001, clock=clock)
    writes = [enter(admission) for _ in range(5)]
    clock.advance(10)  # a long stall, but no rate is known yet: only the count bounds
    assert admission.drain_rate() is None and admission.expected_wait() == 0.0
    with pytest.raises(OverloadedError) as refused, admission.admit():
        pass
    assert refused.value.retry_after == 2 and admission.shed_by == {BY_COUNT: 1, BY_QUEUE: 0}
    for write in writes:
        leave(write)
    assert admission.in_flight == 0


@pytest.mark.parametrize(("limit", "said"), [(1, "has 1 write in flight;"), (3, "has 3 writes in flight;")])
def test_the_count_refusal_counts_its_writes_in_good_english(limit: int, said: str) -> None:
    admission = WriteAdmission(limit=limit, retry_after=2, clock=Clock())
    writes = [enter(admission) for _ in range(limit)]
    with pytest.raises(OverloadedError) as refused, admission.admit():
        pass
    assert str(refused.value) == f"this instance {said} retry after 2 s"
    for write in writes:
        leave(write)


def test_shedding_starts_when_the_expected_wait_passes_the_target_and_stops_when_it_drains() -> None:
    admission, clock = warmed()  # 100 writes a second, one at a time; target 95 ms
    assert admission.drain_rate() == pytest.approx(100.0)
    assert admission.service_seconds == pytest.approx(0.01)
    writes = []
    for n in range(10):  # with n ahead a write queues about n × 10 ms: 0 … 90 ms, all admitted
        assert admission.expected_wait() == pytest.approx(n * 0.01)
        writes.append(enter(admission))
    assert admission.expected_wait() == pytest.approx(0.1)  # 100 ms > 95 ms: shed
    for _ in range(3):
        with pytest.raises(OverloadedError) as refused, admission.admit():
            pass
        assert refused.value.retry_after == 1 and "about 100 ms" in str(refused.value)
    assert admission.in_flight == 10 and admission.shed_by == {BY_COUNT: 0, BY_QUEUE: 3}
    # The queue drains at the rate measured: one write out, the next is admitted again.
    clock.advance(0.01)
    leave(writes.pop(0))
    assert admission.expected_wait() == pytest.approx(0.09)
    writes.append(enter(admission))
    while writes:
        clock.advance(0.01)
        leave(writes.pop(0))
    assert admission.in_flight == 0 and admission.expected_wait() == 0.0 and admission.shed == 3


def test_a_stalled_store_is_seen_before_anything_completes_and_retry_after_is_its_drain_time() -> None:
    admission, clock = warmed()
    writes = [enter(admission) for _ in range(3)]
    assert admission.expected_wait() == pytest.approx(0.03)
    clock.advance(3.0)  # nothing completes for 3 s: the rate measured falls from 8 in 80 ms to 8 in 3.08 s
    assert admission.drain_rate() == pytest.approx(8 / 3.08)
    wait = 4 / (8 / 3.08) - 0.01  # three ahead and itself, less its own service time
    assert admission.expected_wait() == pytest.approx(wait)
    with pytest.raises(OverloadedError) as refused, admission.admit():
        pass
    # Retry-After: the three in flight and the one just refused, at the rate measured.
    assert refused.value.retry_after == math.ceil(4 / (8 / 3.08)) == 2
    clock.advance(1000.0)  # however long the stall, Retry-After stays bounded
    with pytest.raises(OverloadedError) as refused, admission.admit():
        pass
    assert refused.value.retry_after == MAX_RETRY_AFTER
    for write in writes:
        clock.advance(0.01)
        leave(write)
    # Idle time is not busy time: after the drain, the next write is admitted at once.
    clock.advance(3600)
    assert admission.in_flight == 0 and admission.expected_wait() == 0.0
    leave(enter(admission))


def test_retry_after_spreads_a_crowd_of_refused_writes_over_the_time_the_store_needs_for_them() -> None:
    admission, clock = warmed()  # 100 writes a second
    writes = [enter(admission) for _ in range(10)]
    refusals = []
    for _ in range(300):  # 300 refused within 30 ms: they all come back, at 100 a second
        clock.advance(0.0001)
        with pytest.raises(OverloadedError) as refused, admission.admit():
            pass
        refusals.append(refused.value.retry_after)
    assert refusals[0] == 1 and refusals == sorted(refusals)
    crowd = sum(math.exp(-0.0001 * k) for k in range(300))  # refused in about the last second (decaying)
    rate = admission.drain_rate()  # 8 completions over 110 ms of busy time, the 30 ms just past included
    assert rate == pytest.approx(8 / 0.11)
    assert refusals[-1] == math.ceil((10 + crowd) / rate) == 5
    clock.advance(5.0)  # a quiet spell: the crowd has come and gone (only the in-flight 10 are counted)
    for write in writes:
        leave(write)
    assert admission.retry_after_seconds() == 1


def test_slow_writes_side_by_side_are_not_queueing() -> None:
    """Writes of 300 ms each that the store works on in parallel (a webhook waiting on its messenger)
    drain 10 at a time: none waits for another, so none is shed for being slow."""
    clock = Clock()
    admission = WriteAdmission(limit=0, retry_after=1, max_queue_seconds=0.1, clock=clock)
    leave_after = enter(admission)
    clock.advance(0.3)
    leave(leave_after)
    assert admission.service_seconds == pytest.approx(0.3)
    for _ in range(5):
        writes = [enter(admission) for _ in range(10)]
        clock.advance(0.3)
        for write in writes:
            leave(write)
    assert admission.drain_rate() == pytest.approx(10 / 0.3, rel=0.15)
    writes = [enter(admission) for _ in range(12)]
    assert admission.expected_wait() == 0.0 and admission.shed == 0
    clock.advance(0.3)
    for write in writes:
        leave(write)


def test_the_count_stays_a_hard_cap_and_a_failed_write_leaves_the_queue() -> None:
    admission, clock = warmed(limit=2, target=10.0)
    first = enter(admission)
    with pytest.raises(RuntimeError), admission.admit():  # a write whose handler raised
        clock.advance(0.01)
        raise RuntimeError("store error")
    assert admission.in_flight == 1
    second = enter(admission)
    with pytest.raises(OverloadedError), admission.admit():
        pass
    assert admission.shed_by == {BY_COUNT: 1, BY_QUEUE: 0}
    leave(first)
    leave(second)
    assert admission.in_flight == 0


async def test_writes_past_the_queue_target_are_shed_over_http_with_nothing_done(storage_url: str) -> None:
    """Through the real app on an injected clock, with creates held by the test: shedding starts once the
    writes in flight would make a new one queue past the target, answers 503 with Retry-After computed
    from the drain rate, stores nothing of a shed write, serves reads and waits, counts each shed in the
    metrics, and stops as the queue drains."""
    settings = settings_from(base_config(storage_url, limits={"max_write_queue_ms": 95, "max_writes_in_flight": 100}))
    async with running_app(settings) as api:
        admission, service, store = api.app[ADMISSION], api.app[SERVICE], api.app[STORE]
        clock = Clock()
        admission.clock = clock
        gates: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        entered = asyncio.Queue[str]()
        create = service.create

        async def held_create(**kwargs: Any) -> Any:
            uid = kwargs["body"].unique_id
            await entered.put(uid)
            await gates[uid].wait()
            return await create(**kwargs)

        service.create = held_create  # type: ignore[method-assign]
        run = secrets.token_hex(3)
        tasks: dict[str, asyncio.Task[tuple[int, Any]]] = {}

        async def start(uid: str) -> None:
            tasks[uid] = asyncio.create_task(api.call("POST", "/v1/requests", json=ask_body(uid)))
            assert await asyncio.wait_for(entered.get(), timeout=30) == uid

        async def finish(uid: str) -> tuple[int, Any]:
            clock.advance(0.01)  # each write takes 10 ms on the test's clock
            gates[uid].set()
            return await asyncio.wait_for(tasks.pop(uid), timeout=30)

        async def shed(uid: str) -> tuple[int, Any, str | None]:
            async with asyncio.timeout(30), api.session.post(api.url("/v1/requests"), json=ask_body(uid),
                                        headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
                return resp.status, await resp.json(), resp.headers.get("Retry-After")

        # The store takes one write at a time, 10 ms each, with one more waiting: 100 writes a second.
        await start(f"{run}-warm-0")
        for i in range(1, 9):
            await start(f"{run}-warm-{i}")
            assert (await finish(f"{run}-warm-{i - 1}"))[0] == 201
        assert (await finish(f"{run}-warm-8"))[0] == 201
        for i in range(10):
            await start(f"{run}-q-{i}")
        assert admission.in_flight == 10

        status, body, retry_after = await shed(f"{run}-shed-0")
        assert (status, body["error"], retry_after) == (503, "overloaded", "1"), body
        async with api.session.post(api.url("/api/human-feedback/submit"),
                                    json={"unique_id": f"{run}-warm-0", "response": "123456"},
                                    headers={"Authorization": f"Bearer {OPERATOR_KEY}"}) as resp:
            assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        # Reads and waits are never shed.
        warm = await store.get_request_by_unique_id("acme", f"{run}-warm-0")
        status, _ = await api.call("GET", f"/v1/requests/{warm['id']}")
        assert status == 200
        status, body = await api.call("GET", f"/v1/requests/{warm['id']}/wait?timeout=0")
        assert status == 200 and body["status"] == "pending"

        # One write drains: the next is admitted again.
        assert (await finish(f"{run}-q-0"))[0] == 201
        await start(f"{run}-q-10")
        # The store stalls for 3 s: the measured rate falls and Retry-After says how long draining takes.
        clock.advance(3.0)
        expected = admission.expected_wait()
        assert expected > 1.0
        status, body, retry_after = await shed(f"{run}-shed-1")
        assert status == 503 and retry_after == str(admission.retry_after_seconds()), body
        assert int(retry_after) >= math.ceil(expected)  # it names at least the time the writes ahead need

        for i in range(1, 11):
            status, body = await finish(f"{run}-q-{i}")
            assert status == 201, body
        assert admission.in_flight == 0
        service.create = create  # type: ignore[method-assign]
        status, body = await api.call("POST", "/v1/requests", json=ask_body(f"{run}-shed-0"))
        assert status == 201, body  # the shed write, retried, goes through

        # Nothing of a shed write was done; every accepted one is stored and journaled once.
        assert await store.get_request_by_unique_id("acme", f"{run}-shed-1") is None
        assert (await store.get_request_by_unique_id("acme", f"{run}-warm-0"))["status"] == "pending"
        for i in range(11):
            row = await store.get_request_by_unique_id("acme", f"{run}-q-{i}")
            entries = await service.journal_entries(tenant_id="acme", request_id=row["id"])
            assert [e["event"] for e in entries] == ["created"]
        assert admission.shed_by == {BY_COUNT: 0, BY_QUEUE: 3}
        text = api.app[METRICS].render().decode()
        assert 'handraise_writes_shed_total{reason="queue"} 3.0' in text
        assert 'handraise_writes_shed_total{reason="count"} 0.0' in text
        assert "handraise_writes_in_flight 0.0" in text

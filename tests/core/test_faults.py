"""Faults of issue 19 on PostgreSQL: an instance killed with -9, a network stall to the database, the
database restarted. Each ends with one answer, the one that won, in the agent's hands, and a journal that
verifies. (bench/faults.py runs the same under load with three instances.)

What stops or restarts a server runs on a private throwaway cluster (tests/harness/pgcluster.py, the
``private_pg`` fixture), never on the machine's shared server: other engineers' runs use that one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest
from harness.live import AGENT_KEY as LIVE_AGENT_KEY
from harness.live import OPERATOR_KEY as LIVE_OPERATOR_KEY
from harness.fixtures import skip_or_fail
from harness.live import free_port, write_config
from harness.pgcluster import PgCluster, missing_reason
from harness.pgproxy import StallableProxy

from conftest import AGENT_KEY, OPERATOR_KEY, base_config, running_app, settings_from, until
from handraise.core.api import RequestView
from handraise.core.appkeys import CONNECTORS, DELIVERIES, DISPATCHER, SERVICE, STORE
from handraise.core.connectors import Connector
from handraise.core.errors import ConnectorError, UnavailableError
from handraise.core.store.breaker import StoreBreaker

STALL_SECONDS = 2.0


@pytest.fixture
def private_pg() -> Iterator[PgCluster]:
    """A PostgreSQL cluster of this test's own, free to stop and restart (removed afterwards)."""
    reason = missing_reason()
    if reason is not None:
        skip_or_fail(f"no private PostgreSQL cluster: {reason}")
    with PgCluster.create() as cluster:
        yield cluster


def body(uid: str) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Deploy?", "timeout_seconds": 120}


async def answered_entries(pg_url: str, request_id: str) -> int:
    conn = await asyncpg.connect(pg_url)
    try:
        return await conn.fetchval("SELECT count(*) FROM journal WHERE request_id = $1 AND event = 'answered'",
                                   request_id)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def through_proxy(pg_url: str) -> AsyncIterator[tuple[StallableProxy, str]]:
    parts = urlsplit(pg_url)
    proxy = StallableProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    await proxy.start()
    try:
        yield proxy, pg_url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}")
    finally:
        proxy.flowing.set()
        await proxy.close()


async def test_a_network_stall_to_postgresql_loses_and_doubles_nothing(pg_url: str) -> None:
    """Both instances' database traffic is held for a while mid-flight: two answers race through both
    instances meanwhile; once it flows again exactly one wins, the agent waiting on the other gets it."""
    async with through_proxy(pg_url) as (proxy_a, url_a), through_proxy(pg_url) as (proxy_b, url_b), \
            running_app(settings_from(base_config(url_a))) as a, running_app(settings_from(base_config(url_b))) as b:
        req = await a.create(body("stall-1"))
        waiting = asyncio.ensure_future(b.wait(req["id"], timeout=60))
        while not b.app[SERVICE].waiting:
            await asyncio.sleep(0.01)
        for proxy in (proxy_a, proxy_b):
            proxy.flowing.clear()
        submits = [asyncio.ensure_future(api.submit("stall-1", answer)) for api, answer in ((a, "yes"), (b, "no"))]
        await asyncio.sleep(STALL_SECONDS)
        assert not any(s.done() for s in submits), "the stall held the database's answers"
        for proxy in (proxy_a, proxy_b):
            proxy.flowing.set()
        results = await asyncio.wait_for(asyncio.gather(*submits), 60)
        statuses = sorted(status for status, _ in results)
        assert statuses == [200, 409], results
        winner = next(answer for (status, _), answer in zip(results, ("yes", "no"), strict=True) if status == 200)
        got = await asyncio.wait_for(waiting, 60)
        assert got["status"] == "answered" and got["response"] == winner
        assert await answered_entries(pg_url, req["id"]) == 1
        assert await a.app[STORE].verify_journal() == []
        # Both instances serve on, through the same connections.
        req2 = await b.create(body("stall-2"))
        assert (await a.submit("stall-2", "later"))[0] == 200
        assert (await b.wait(req2["id"]))["response"] == "later"


def _instance_config(path: Path, *, pg_url: str, port: int, secret: str) -> None:
    # Every instance of one database needs the same server secret (and verify too).
    write_config(path, storage_url=pg_url, port=port, extra=f'\n[security]\nsecret = "{secret}"\n')


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, name: str, *, pg_url: str, secret: str) -> AsyncIterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    config = tmp_path / f"{name}.toml"
    _instance_config(config, pg_url=pg_url, port=port, secret=secret)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDRAISE_")}
    process = subprocess.Popen([sys.executable, "-m", "handraise", "serve", "--config", str(config)], env=env,
                               cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession() as http:
            while True:
                assert process.poll() is None, f"{name} exited with {process.returncode}"
                assert time.monotonic() < deadline, f"{name} did not serve within 60 s"
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(base + "/healthz") as resp:
                        if resp.status == 200:
                            break
                await asyncio.sleep(0.1)
        yield base, process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def test_kill_9_of_an_instance_its_waiting_agent_reattaches_to_another_and_gets_the_answer(
        pg_url: str, tmp_path: Path) -> None:
    secret = secrets.token_hex(32)
    ask = {"Authorization": f"Bearer {LIVE_AGENT_KEY}"}
    answer = {"Authorization": f"Bearer {LIVE_OPERATOR_KEY}"}
    async with serve(tmp_path, "a", pg_url=pg_url, secret=secret) as (a, process_a), \
            serve(tmp_path, "b", pg_url=pg_url, secret=secret) as (b, _), aiohttp.ClientSession() as http:
        async with http.post(a + "/v1/requests", json=body("kill-1"), headers=ask) as resp:
            assert resp.status == 201
            rid = (await resp.json())["id"]
        wait_on_a = asyncio.ensure_future(http.get(f"{a}/v1/requests/{rid}/wait?timeout=60", headers=ask))
        await asyncio.sleep(0.5)  # parked on a
        process_a.send_signal(signal.SIGKILL)
        with pytest.raises(aiohttp.ClientError):
            async with await asyncio.wait_for(wait_on_a, 30) as resp:
                await resp.read()
        # The agent re-attaches to b; the answer arrives through b while it waits there.
        wait_on_b = asyncio.ensure_future(http.get(f"{b}/v1/requests/{rid}/wait?timeout=60", headers=ask))
        await asyncio.sleep(0.3)
        async with http.post(b + "/api/human-feedback/submit", json={"unique_id": "kill-1", "response": "go"},
                             headers=answer) as resp:
            assert resp.status == 200
        async with await asyncio.wait_for(wait_on_b, 30) as resp:
            got = await resp.json()
        assert got["status"] == "answered" and got["response"] == "go"
        async with http.post(b + "/api/human-feedback/submit", json={"unique_id": "kill-1", "response": "again"},
                             headers=answer) as resp:
            assert resp.status == 409
    assert await answered_entries(pg_url, rid) == 1
    config = tmp_path / "verify.toml"
    _instance_config(config, pg_url=pg_url, port=free_port(), secret=secret)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDRAISE_")}
    verify = await asyncio.create_subprocess_exec(sys.executable, "-m", "handraise", "journal", "verify", "--config",
                                                  str(config), env=env, stdout=asyncio.subprocess.PIPE,
                                                  stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(verify.communicate(), 100)
    assert verify.returncode == 0, output.decode()


async def test_postgresql_dropping_and_refusing_connections_is_503_then_every_instance_recovers(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """What a restart of PostgreSQL does to the instances (without restarting the machine's shared
    server): every connection drops, new ones are refused for a while, then it is back. Meanwhile
    the API answers 503 ``unavailable`` (which clients retry), never a 500; afterwards both instances
    serve, their listeners LISTEN again, and an agent parked on one throughout is woken by an
    answer given through the other."""
    async with through_proxy(pg_url) as (proxy_a, url_a), through_proxy(pg_url) as (proxy_b, url_b), \
            running_app(settings_from(base_config(url_a))) as a, running_app(settings_from(base_config(url_b))) as b:
        req = await a.create(body("restart-1"))
        assert (await b.call("GET", f"/v1/requests/{req['id']}"))[0] == 200  # b's pool holds a connection

        async def agent_waits_on_a() -> dict[str, Any]:
            # As the Python client does: a wait answered 503 (its first read fell into the outage) is
            # made again. Parked before the outage, it is simply woken after it.
            while True:
                status, data = await a.call("GET", f"/v1/requests/{req['id']}/wait", params={"timeout": "60"})
                if status == 200:
                    return data
                assert status == 503 and data["error"] == "unavailable", (status, data)
                await asyncio.sleep(0.1)

        waiting = asyncio.ensure_future(agent_waits_on_a())
        while not a.app[SERVICE].waiting:
            await asyncio.sleep(0.01)
        for proxy in (proxy_a, proxy_b):
            await proxy.cut()
        for api in (a, b):
            for method, path, payload in (("GET", f"/v1/requests/{req['id']}", None),
                                          ("POST", "/v1/requests", body("during")),
                                          ("POST", "/api/human-feedback/submit", None)):
                key = OPERATOR_KEY if path.startswith("/api") else AGENT_KEY
                data = {"unique_id": "restart-1", "response": "now"} if path.startswith("/api") else payload
                status, answer = await api.call(method, path, json=data, key=key)
                assert status == 503 and answer["error"] == "unavailable", (method, path, status, answer)
        # The sweepers (every 0.1 s here) skip their ticks with one line each, no traceback.
        caplog.set_level(logging.WARNING, logger="handraise.core.service")
        deadline = time.monotonic() + 10
        while not any(r.getMessage() == "sweep skipped: the store does not answer" for r in caplog.records):
            assert time.monotonic() < deadline, "no sweep ran while the database was away"
            await asyncio.sleep(0.05)
        assert not [r for r in caplog.records if r.getMessage() == "sweep failed"]
        for proxy in (proxy_a, proxy_b):
            await proxy.restore()
        deadline = time.monotonic() + 30
        while (await b.submit("restart-1", "after"))[0] != 200:
            assert time.monotonic() < deadline, "b did not recover"
            await asyncio.sleep(0.2)
        got = await asyncio.wait_for(waiting, 30)
        assert got["status"] == "answered" and got["response"] == "after"
        assert await answered_entries(pg_url, req["id"]) == 1
        assert await a.app[STORE].verify_journal() == []


async def test_healthz_is_the_apis_503_with_retry_after_while_the_store_is_away(pg_url: str) -> None:
    """A probe during an outage reads the envelope every other call reads then, with Retry-After, and
    nothing else beside it; once the store is back it is 200 ``{"status": "ok"}`` again."""
    async with through_proxy(pg_url) as (proxy, url), running_app(settings_from(base_config(url))) as a:
        assert await a.call("GET", "/healthz", key=None) == (200, {"status": "ok"})
        await proxy.cut()
        async with a.session.get(a.url("/healthz")) as resp:
            assert resp.status == 503
            assert await resp.json() == {"error": "unavailable", "message": "the store does not answer"}
            assert int(resp.headers["Retry-After"]) >= 1 and resp.headers["Cache-Control"] == "no-store"
        await proxy.restore()
        ok = await _until_status(lambda: a.call("GET", "/healthz", key=None), 200, within=15, what="healthz")
        assert ok == {"status": "ok"}


async def _until_status(call: Any, ok: int, *, within: float, what: str) -> Any:
    """Repeat ``call()`` (a (status, body) coroutine) while it answers 503 ``unavailable``, as clients do."""
    deadline = time.monotonic() + within
    while True:
        status, data = await call()
        if status == ok:
            return data
        assert status == 503 and data["error"] == "unavailable", (what, status, data)
        assert time.monotonic() < deadline, f"{what}: still {status} after {within} s"
        await asyncio.sleep(0.1)


async def parked_agent(api: Any, request_id: str) -> asyncio.Future[dict[str, Any]]:
    """An agent's wait, parked on ``api`` (made again while it answers 503, as the client does)."""
    waiting = asyncio.ensure_future(_until_status(lambda: api.call("GET", f"/v1/requests/{request_id}/wait",
                                                                   params={"timeout": "60"}),
                                                  200, within=60, what="wait"))
    await until(lambda: bool(api.app[SERVICE].waiting), what="the wait parked")
    return waiting


async def test_a_restart_of_postgresql_loses_nothing_and_a_waiter_parked_throughout_is_woken(
        private_pg: PgCluster) -> None:
    """``pg_ctl restart`` (fast: every session ends) of the database two instances share: afterwards both
    serve, an agent parked on one throughout is woken by an answer given through the other, the answer
    is stored once and the journal verifies."""
    url = await asyncio.to_thread(private_pg.create_database, "handraise")
    async with running_app(settings_from(base_config(url))) as a, running_app(settings_from(base_config(url))) as b:
        req = await a.create(body("restart-2"))
        waiting = await parked_agent(a, req["id"])
        await asyncio.to_thread(private_pg.restart)
        assert not waiting.done(), "a parked wait outlives the restart"
        await _until_status(lambda: b.submit("restart-2", "after"), 200, within=30, what="submit through b")
        got = await asyncio.wait_for(waiting, 30)
        assert got["status"] == "answered" and got["response"] == "after"
        assert (await a.submit("restart-2", "again"))[0] == 409
        assert await answered_entries(url, req["id"]) == 1
        assert await a.app[STORE].verify_journal() == []
        # New work after the restart, on both (a write's first use of a pooled connection the restart
        # closed may still be one 503, which clients retry).
        req2 = await _until_status(lambda: b.call("POST", "/v1/requests", json=body("restart-3")), 201, within=10,
                                   what="create through b")
        await _until_status(lambda: a.submit("restart-3", "fine"), 200, within=10, what="submit through a")
        assert (await b.wait(req2["id"]))["response"] == "fine"


BOUND_S = 1.0  # [storage] connect_timeout_seconds in the tests below


async def _timed(api: Any, method: str, path: str, *, key: str = AGENT_KEY,
                 json: Any = None) -> tuple[int, Any, str | None, float]:
    """One call: status, body, its Retry-After header, seconds it took."""
    t0 = time.monotonic()
    async with api.session.request(method, api.url(path), json=json,
                                   headers={"Authorization": f"Bearer {key}"}) as resp:
        data = await resp.json(content_type=None)
        return resp.status, data, resp.headers.get("Retry-After"), time.monotonic() - t0


async def test_a_stopped_postgresql_is_503_at_once_then_calls_succeed_when_it_is_back_and_nothing_is_lost(
        private_pg: PgCluster) -> None:
    """``pg_ctl stop``: every call gets 503 ``unavailable`` with Retry-After within the connect bound, and
    once the store is known gone, new calls are refused without trying; a parked wait keeps waiting. After
    ``pg_ctl start`` calls succeed again within a probe or two; the request made before the outage is
    answered once, to the agent that waited throughout, and the journal verifies."""
    url = await asyncio.to_thread(private_pg.create_database, "handraise")
    config = base_config(url, storage={"url": url, "connect_timeout_seconds": BOUND_S})
    async with running_app(settings_from(config)) as a:
        store = a.app[STORE]
        req = await a.create(body("stop-1"))
        waiting = await parked_agent(a, req["id"])
        await asyncio.to_thread(private_pg.stop)
        calls = [("GET", f"/v1/requests/{req['id']}", AGENT_KEY, None),
                 ("POST", "/v1/requests", AGENT_KEY, body("during")),
                 ("POST", "/api/human-feedback/submit", OPERATOR_KEY, {"unique_id": "stop-1", "response": "no"})]
        for method, path, key, payload in calls * 2:
            status, data, retry_after, took = await _timed(a, method, path, key=key, json=payload)
            assert (status, data["error"]) == (503, "unavailable"), (method, path, status, data)
            assert retry_after is not None and int(retry_after) >= 1
            assert took < BOUND_S + 1.5, f"{method} {path} took {took:.2f} s"
        assert store.breaker.lost_since is not None, "the store knows the server is gone"
        refused = store.breaker.refused
        status, _, _, took = await _timed(a, "POST", "/v1/requests", json=body("during"))
        assert status == 503 and took < 0.5 and store.breaker.refused == refused + 1, "refused without trying"
        assert not waiting.done(), "a parked wait keeps waiting through the outage"

        await asyncio.to_thread(private_pg.start)
        await _until_status(lambda: a.submit("stop-1", "yes"), 200, within=15, what="submit after the start")
        assert store.breaker.lost_since is None
        got = await asyncio.wait_for(waiting, 30)
        assert got["status"] == "answered" and got["response"] == "yes"
        # The create refused during the outage left nothing behind: made now, it is new.
        status, _ = await a.call("POST", "/v1/requests", json=body("during"))
        assert status == 201
        assert await answered_entries(url, req["id"]) == 1
        assert await store.verify_journal() == []


async def test_a_server_that_accepts_connections_and_never_answers_is_503_within_the_connect_bound(
        private_pg: PgCluster) -> None:
    """A hung postmaster (SIGSTOP: the kernel accepts connections, nothing answers them) once the pools'
    connections are spent: a call waits the connect bound, not asyncpg's 60 s, then 503; the next ones
    fail at once; resumed, the server is found again by a probe."""
    url = await asyncio.to_thread(private_pg.create_database, "handraise")
    config = base_config(url, storage={"url": url, "connect_timeout_seconds": BOUND_S})
    async with running_app(settings_from(config)) as a:
        store = a.app[STORE]
        req = await a.create(body("hung-1"))
        private_pg.pause()
        try:
            store.invalidate_pools()  # as after a restart: every call needs a new connection
            status, data, retry_after, took = await _timed(a, "GET", f"/v1/requests/{req['id']}")
            assert (status, data["error"]) == (503, "unavailable") and retry_after == "1"
            assert BOUND_S * 0.9 <= took < BOUND_S + 1.5, f"took {took:.2f} s"
            status, _, _, took = await _timed(a, "GET", f"/v1/requests/{req['id']}")
            assert status == 503 and took < 0.5, f"the second call took {took:.2f} s"
        finally:
            private_pg.resume()
        await _until_status(lambda: a.submit("hung-1", "ok"), 200, within=15, what="submit after the resume")
        assert (await a.wait(req["id"]))["response"] == "ok"


def test_the_breaker_opens_on_a_lost_server_only_lets_one_probe_a_second_through_and_closes_on_success() -> None:
    now = [100.0]
    lost: list[bool] = []
    breaker = StoreBreaker(probe_every=1.0, on_lost=lambda: lost.append(True), clock=lambda: now[0])
    breaker.admit()  # closed: every call passes
    # A call's own failure (not a lost server) leaves it closed.
    breaker.failed(UnavailableError("store is not open"))
    assert breaker.lost_since is None
    try:
        raise UnavailableError("the store does not answer") from ConnectionRefusedError(111, "refused")
    except UnavailableError as e:
        breaker.failed(e)
    assert breaker.lost_since == 100.0 and lost == [True]
    with pytest.raises(UnavailableError) as refused:
        breaker.admit()
    assert refused.value.retry_after == 1 and breaker.refused == 1
    now[0] = 101.0
    breaker.admit()  # the probe
    with pytest.raises(UnavailableError):
        breaker.admit()  # the others, meanwhile
    breaker.failed(_lost())  # the probe failed: still open, the next probe a second later
    assert lost == [True], "on_lost runs once per outage"
    now[0] = 102.5
    breaker.admit()
    breaker.succeeded()
    assert breaker.lost_since is None
    breaker.admit()
    breaker.admit()


def _lost() -> UnavailableError:
    error = UnavailableError("the store does not answer")
    error.__cause__ = TimeoutError()
    return error


class CountingConnector(Connector):
    """Posts to one room and counts the edits that withdraw its message, per instance."""

    name: ClassVar[str] = "counting"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delivered: list[str] = []
        self.withdrawn: list[str] = []

    def targets(self, tenant_id: str) -> list[str]:
        return ["room"] if tenant_id == "acme" else []

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        self.delivered.append(request.id)
        return {"message": request.id}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.withdrawn.append(request.id)


async def _left_withdrawing(api: Any, request_id: str, *, idle_for: float) -> Any:
    """The request's one delivery as an instance killed mid-withdrawal leaves it: ``withdrawing``, untouched
    for ``idle_for`` seconds."""
    delivery, = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)
    await api.app[STORE].deliveries.update(delivery.id, {"status": "withdrawing",
                                                         "updated_at": time.time() - idle_for})
    return delivery


async def test_a_withdrawal_left_by_a_dead_instance_is_finished_by_exactly_one_recovery_pass(
        storage_url: str) -> None:
    settings = settings_from(base_config(storage_url))
    async with running_app(settings, connector_classes=[CountingConnector]) as a, \
            running_app(settings, connector_classes=[CountingConnector]) as b:
        ca, cb = a.app[CONNECTORS]["counting"], b.app[CONNECTORS]["counting"]
        req = await a.create(body("stuck-1") | {"channels": ["counting"]})
        await a.app[DISPATCHER].idle()
        assert ca.delivered == [req["id"]]
        assert (await a.submit("stuck-1", "done"))[0] == 200
        await a.app[DISPATCHER].idle()
        ca.withdrawn.clear()
        stale = a.app[DISPATCHER]._claim_stale()

        # A claim younger than a live holder ever leaves one is left alone: its holder may be at it.
        await _left_withdrawing(a, req["id"], idle_for=stale / 2)
        assert await asyncio.gather(a.app[DISPATCHER].recover(), b.app[DISPATCHER].recover()) == [0, 0]

        # Older: both instances' passes see it at once; one takes it over and withdraws the message.
        await _left_withdrawing(a, req["id"], idle_for=stale + 5)
        resumed = await asyncio.gather(a.app[DISPATCHER].recover(), b.app[DISPATCHER].recover())
        await asyncio.gather(a.app[DISPATCHER].idle(), b.app[DISPATCHER].idle())
        assert sorted(resumed) == [0, 1]
        assert len(ca.withdrawn) + len(cb.withdrawn) == 1
        delivery, = await a.app[DELIVERIES].of_request(tenant_id="acme", request_id=req["id"])
        assert delivery.status == "withdrawn"
        events = [e["event"] for e in await a.journal(req["id"])]
        assert events.count("withdrawal_reclaimed") == 1
        assert events[-2:] == ["withdrawal_reclaimed", "withdrawn"]
        reclaimed = next(e for e in await a.journal(req["id"]) if e["event"] == "withdrawal_reclaimed")
        assert reclaimed["data"]["target"] == "room" and reclaimed["data"]["idle_seconds"] >= stale
        # Done: nothing more to take over.
        assert await b.app[DISPATCHER].recover() == 0
        assert await a.app[STORE].verify_journal() == []


async def test_a_tally_edit_left_by_a_dead_instance_on_a_pending_request_gives_the_message_back(
        sqlite_url: str) -> None:
    """The same claim guards a quorum tally's edit: on a pending request the message stays up (``sent``
    again, so its outcome can be withdrawn later), nothing is withdrawn."""
    async with running_app(settings_from(base_config(sqlite_url)), connector_classes=[CountingConnector]) as a:
        req = await a.create(body("stuck-2") | {"channels": ["counting"]})
        await a.app[DISPATCHER].idle()
        await _left_withdrawing(a, req["id"], idle_for=a.app[DISPATCHER]._claim_stale() + 5)
        assert await a.app[DISPATCHER].recover() == 1
        await a.app[DISPATCHER].idle()
        delivery, = await a.app[DELIVERIES].of_request(tenant_id="acme", request_id=req["id"])
        assert delivery.status == "sent" and a.app[CONNECTORS]["counting"].withdrawn == []
        # Answered now, it is withdrawn as usual.
        assert (await a.submit("stuck-2", "done"))[0] == 200
        await a.app[DISPATCHER].idle()
        assert a.app[CONNECTORS]["counting"].withdrawn == [req["id"]]


class GatedConnector(CountingConnector):
    """Each post waits at its request's gate; a request listed in ``fail_once`` fails its first post (a
    messenger hiccup, retried after the backoff)."""

    name: ClassVar[str] = "gated"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.fail_once: set[str] = set()
        self.posted: list[str] = []  # the posts that reached the chat (the others raised)

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        self.delivered.append(request.unique_id)
        self.started.setdefault(request.unique_id, asyncio.Event()).set()
        await self.gates.setdefault(request.unique_id, asyncio.Event()).wait()
        if request.unique_id in self.fail_once:
            self.fail_once.discard(request.unique_id)
            raise ConnectorError("messenger hiccup")
        self.posted.append(request.unique_id)
        return {"message": request.unique_id}


async def test_deliveries_under_way_when_postgresql_stops_are_posted_once_and_recorded_after_it_is_back(
        private_pg: PgCluster) -> None:
    """Two requests created just before the outage, their posts under way when the server stops: one post
    succeeds (its 'sent' cannot be written yet), one fails (its failure cannot be written, then its retry
    cannot read the request). The delivery tasks wait for the store instead of dying: once it is back each
    request is posted exactly once, recorded ``sent`` with one ``delivered`` entry, and a recovery pass
    afterwards (even one that takes every delivery for abandoned) posts nothing more."""
    url = await asyncio.to_thread(private_pg.create_database, "handraise")
    config = base_config(url, storage={"url": url, "connect_timeout_seconds": BOUND_S})
    async with running_app(settings_from(config), connector_classes=[GatedConnector]) as a:
        dispatcher, chat = a.app[DISPATCHER], a.app[CONNECTORS]["gated"]
        dispatcher.backoff_initial = dispatcher.backoff_cap = 0.2
        chat.fail_once.add("out-2")
        ids = {}
        for uid in ("out-1", "out-2"):
            ids[uid] = (await a.create(body(uid) | {"channels": ["gated"]}))["id"]
            await asyncio.wait_for(chat.started.setdefault(uid, asyncio.Event()).wait(), 10)
        await asyncio.to_thread(private_pg.stop)
        for uid in ("out-1", "out-2"):
            chat.gates[uid].set()
        # The server stays away for a while: the tasks meet it refusing (and the breaker open).
        await until(lambda: a.app[STORE].breaker.lost_since is not None, what="the store found the server gone")
        await asyncio.sleep(1.0)
        await asyncio.to_thread(private_pg.start)
        await asyncio.wait_for(dispatcher.idle(), 30)
        assert sorted(chat.posted) == ["out-1", "out-2"], chat.posted
        for uid, request_id in ids.items():
            delivery, = await a.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)
            assert delivery.status == "sent", (uid, delivery)
            events = [e["event"] for e in await a.journal(request_id)]
            assert events.count("delivered") == 1, (uid, events)
        # A pass that finds nothing abandoned sends nothing again (as after the stale horizon).
        dispatcher.backoff_cap = -1000.0  # every pending delivery counts as abandoned now
        await dispatcher.recover()
        await asyncio.wait_for(dispatcher.idle(), 30)
        assert sorted(chat.posted) == ["out-1", "out-2"]
        assert await a.app[STORE].verify_journal() == []

"""The client side of the bench: full cycles per second, wake latency, and thousands of parked waits.

The same loops run against the real server and the floor; both speak Handraise's three routes
(create, submit, wait), so any difference is the server's own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp

from servers import ANSWER_KEY, ASK_KEY, MESSAGE, SCHEMA, Running, cpu_seconds, rss_mb

ASK = {"Authorization": f"Bearer {ASK_KEY}"}
ANSWER = {"Authorization": f"Bearer {ANSWER_KEY}"}
ANSWER_VALUE = "123456"


class BenchError(RuntimeError):
    """The server answered something a correct Handraise never would."""


def _session(*, limit: int, trace: aiohttp.TraceConfig | None = None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=60, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                 trace_configs=[trace] if trace else None)


_counter = itertools.count(1)
_run = secrets.token_hex(3)


def _unique_id(tag: str) -> str:
    return f"bench-{_run}-{tag}-{next(_counter)}"


@dataclass(frozen=True)
class Lane:
    """Where one agent of a cycle run works: a server, and the keys of one tenant there."""

    server: Running
    ask: dict[str, str]
    answer: dict[str, str]


async def _create(http: aiohttp.ClientSession, base: str, unique_id: str, *, timeout_seconds: int = 600,
                  headers: dict[str, str] = ASK) -> str:
    body = {"unique_id": unique_id, "message_for_user": MESSAGE, "timeout_seconds": timeout_seconds,
            "schema": SCHEMA}
    async with http.post(f"{base}/v1/requests", json=body, headers=headers) as resp:
        data = await resp.json(content_type=None)
        if resp.status != 201:
            raise BenchError(f"create: {resp.status} {data}")
    return data["id"]


async def _submit(http: aiohttp.ClientSession, base: str, unique_id: str, *,
                  headers: dict[str, str] = ANSWER) -> float:
    """Answer; returns the perf_counter time at which the 200 arrived (status line and headers read)."""
    async with http.post(f"{base}/api/human-feedback/submit", json={"unique_id": unique_id, "response": ANSWER_VALUE},
                         headers=headers) as resp:
        arrived = time.perf_counter()
        data = await resp.json(content_type=None)
        if resp.status != 200:
            raise BenchError(f"submit: {resp.status} {data}")
    return arrived


async def _wait(http: aiohttp.ClientSession, base: str, request_id: str, *, timeout: float,
                trace_ctx: Any = None, headers: dict[str, str] = ASK) -> tuple[float, dict[str, Any]]:
    """Long-poll; returns the perf_counter time at which the whole answer was read, and the answer."""
    async with http.get(f"{base}/v1/requests/{request_id}/wait", params={"timeout": str(timeout)}, headers=headers,
                        trace_request_ctx=trace_ctx) as resp:
        data = await resp.json(content_type=None)
        returned = time.perf_counter()
        if resp.status != 200:
            raise BenchError(f"wait: {resp.status} {data}")
    return returned, data


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


# -- full cycles ------------------------------------------------------------------------------------------------


@dataclass
class Cycles:
    per_second: float
    cycles: int
    seconds: float
    p50_ms: float
    p99_ms: float
    server_cpu_percent: float


async def cycles(server: Running | list[Lane], *, workers: int, duration: float, warmup: float = 1.0) -> Cycles:
    """``workers`` agents, each looping create → answer → wait (the answer is already there) for ``duration`` s.

    ``server``: one server (the bench's tenant), or lanes the agents are dealt round (several instances of
    one database, several tenants); "server CPU" is then the sum over the lanes' servers."""
    lanes = server if isinstance(server, list) else [Lane(server, ASK, ANSWER)]
    pids = sorted({lane.server.pid for lane in lanes})
    latencies: list[float] = []
    stop_at = 0.0
    measuring = False

    async def worker(http: aiohttp.ClientSession, lane: Lane) -> int:
        done = 0
        base = lane.server.base
        while True:
            started = time.perf_counter()
            if started >= stop_at:
                return done
            unique_id = _unique_id("c")
            request_id = await _create(http, base, unique_id, headers=lane.ask)
            await _submit(http, base, unique_id, headers=lane.answer)
            _, data = await _wait(http, base, request_id, timeout=5, headers=lane.ask)
            if data.get("status") != "answered" or data.get("response") != ANSWER_VALUE:
                raise BenchError(f"wait returned {data.get('status')!r} instead of the answer")
            if measuring:
                done += 1
                latencies.append(time.perf_counter() - started)

    def cpu() -> float:
        return sum(cpu_seconds(pid) for pid in pids)

    async with _session(limit=workers * 2) as http:
        stop_at = time.perf_counter() + warmup
        await asyncio.gather(*(worker(http, lanes[i % len(lanes)]) for i in range(workers)))
        measuring = True
        cpu0 = cpu()
        t0 = time.perf_counter()
        stop_at = t0 + duration
        counts = await asyncio.gather(*(worker(http, lanes[i % len(lanes)]) for i in range(workers)))
        elapsed = time.perf_counter() - t0
        cpu_used = cpu() - cpu0
    total = sum(counts)
    return Cycles(per_second=total / elapsed, cycles=total, seconds=elapsed,
                  p50_ms=percentile(latencies, 50) * 1000, p99_ms=percentile(latencies, 99) * 1000,
                  server_cpu_percent=100 * cpu_used / elapsed)


# -- wake latency -----------------------------------------------------------------------------------------------


@dataclass
class Wake:
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float


async def wake_latency(server: Running, *, samples: int, park_ms: float = 20.0) -> Wake:
    """One agent at a time parks a wait; after ``park_ms`` a human answers. Measured: from the submit's 200
    arriving at the client to the wait's answer being read by the client."""
    gaps: list[float] = []
    async with _session(limit=4) as http:
        for i in range(samples + 10):
            unique_id = _unique_id("w")
            request_id = await _create(http, server.base, unique_id)
            waiting = asyncio.create_task(_wait(http, server.base, request_id, timeout=30))
            await asyncio.sleep(park_ms / 1000)
            if waiting.done():
                raise BenchError(f"a wait returned before the answer: {waiting.result()[1].get('status')!r}")
            answered = await _submit(http, server.base, unique_id)
            returned, data = await waiting
            if data.get("status") != "answered":
                raise BenchError(f"wait returned {data.get('status')!r} instead of the answer")
            if i >= 10:  # the first few warm the connections up
                gaps.append(returned - answered)
    return Wake(samples=len(gaps), p50_ms=percentile(gaps, 50) * 1000, p99_ms=percentile(gaps, 99) * 1000,
                max_ms=max(gaps) * 1000)


# -- many parked waits ------------------------------------------------------------------------------------------


@dataclass
class Parked:
    waiters: int
    rss_idle_mb: float
    rss_parked_mb: float
    open_seconds: float
    settle_seconds: float

    @property
    def kb_per_waiter(self) -> float:
        return (self.rss_parked_mb - self.rss_idle_mb) * 1024 / self.waiters


async def create_many(server: Running, *, count: int, workers: int = 16) -> list[str]:
    """``count`` pending requests created over HTTP (used for the floor; Handraise's are seeded)."""
    ids: list[str] = []
    async with _session(limit=workers) as http:
        queue = iter(range(count))

        async def creator() -> None:
            for _ in queue:
                ids.append(await _create(http, server.base, _unique_id("p"), timeout_seconds=3600))

        await asyncio.gather(*(creator() for _ in range(workers)))
    return ids


async def parked_waits(server: Running, *, request_ids: list[str], opening: int = 256) -> Parked:
    """Hold one long-poll wait open on each pending request at once and read the server's RSS.

    A wait counts as opened once its request has been written (aiohttp's headers-sent trace), at most
    ``opening`` at a time so the listen backlog is never flooded; the server is parked once its CPU goes quiet.
    """
    await _quiet(server.pid)
    rss_idle = rss_mb(server.pid)
    gate = asyncio.Semaphore(opening)
    all_written = asyncio.Event()
    written_count = 0
    returned_early: list[str] = []
    trace = aiohttp.TraceConfig()

    async def sent(_session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: Any) -> None:
        written: asyncio.Event = ctx.trace_request_ctx
        written.set()

    trace.on_request_headers_sent.append(sent)

    async def waiter(http: aiohttp.ClientSession, request_id: str) -> None:
        nonlocal written_count
        written = asyncio.Event()
        async with gate:
            task = asyncio.ensure_future(_wait(http, server.base, request_id, timeout=600, trace_ctx=written))
            on_wire = asyncio.ensure_future(written.wait())
            await asyncio.wait([task, on_wire], return_when=asyncio.FIRST_COMPLETED)
            on_wire.cancel()
        written_count += 1
        if written_count == len(request_ids):
            all_written.set()
        _, data = await task
        returned_early.append(data.get("status", "?"))

    async with _session(limit=0, trace=trace) as http:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(waiter(http, request_id)) for request_id in request_ids]
        await all_written.wait()
        opened_at = time.perf_counter()
        await _quiet(server.pid)
        settled_at = time.perf_counter()
        rss_parked = rss_mb(server.pid)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if returned_early:
        raise BenchError(f"{len(returned_early)} waits returned before any answer: {returned_early[:3]}")
    return Parked(waiters=len(request_ids), rss_idle_mb=rss_idle, rss_parked_mb=rss_parked,
                  open_seconds=opened_at - t0, settle_seconds=settled_at - opened_at)


async def _quiet(pid: int, *, window: float = 0.5, busy_below: float = 0.03, at_least: float = 1.0,
                 at_most: float = 60.0) -> None:
    """Until the process uses under ``busy_below`` of a core over ``window`` (after ``at_least`` s)."""
    start = time.perf_counter()
    await asyncio.sleep(at_least)
    while time.perf_counter() - start < at_most:
        before = cpu_seconds(pid)
        await asyncio.sleep(window)
        if (cpu_seconds(pid) - before) / window < busy_below:
            return
    raise BenchError(f"the server was still busy {at_most:.0f} s after the last wait was sent")

"""The Python client's overhead: the same full cycle over raw HTTP (httpx) and through ``handraise.client``, side by side.

    python bench/client.py                  # 400 cycles each way, sync and async, SQLite; about a minute
    python bench/client.py --cycles 2000 --json

A cycle is the agent's create → a human's answer → the agent collecting it: ``POST /v1/requests``,
``POST /api/human-feedback/submit`` (an ``answer`` key), ``GET /v1/requests/{id}/wait`` (the answer
already there). "raw" makes those three calls with an httpx client (one keep-alive connection per
key); "client" makes the same calls as ``create``, ``submit`` and ``wait`` of ``Handraise`` /
``AsyncHandraise`` (building and checking the body, parsing into the typed models, the retry
machinery). One agent, one cycle at a time, alternating raw and client cycle by cycle so the
machine's load falls on both alike; "added" is the median of the paired differences (client cycle minus
the raw cycle next to it). Target: the client adds at most 2 ms to a cycle. "agent
CPU" is this process's CPU time per cycle (the client's own work, the least sensitive to other load).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import ANSWER_KEY, ASK_KEY, MESSAGE, SCHEMA, handraise_server, machine, sqlite_url, workdir  # noqa: E402

from handraise.client import AsyncHandraise, Handraise  # noqa: E402

TARGET_MS = 2.0
# Per-cycle wall times (raw, client) and this process's CPU seconds over each.
Timings = tuple[tuple[list[float], list[float]], list[float]]
ROUND = 1


def _body() -> dict[str, Any]:
    return {"unique_id": f"bench-{uuid.uuid4()}", "message_for_user": MESSAGE, "timeout_seconds": 600,
            "schema": SCHEMA}


def _check(response: httpx.Response) -> Any:
    response.raise_for_status()
    return response.json()


def sync_cycles(base: str, *, cycles: int) -> Timings:
    ask_headers = {"Authorization": f"Bearer {ASK_KEY}"}
    answer_headers = {"Authorization": f"Bearer {ANSWER_KEY}"}
    with httpx.Client(base_url=base, headers=ask_headers) as agent, \
            httpx.Client(base_url=base, headers=answer_headers) as human, \
            Handraise(base, ASK_KEY) as hr, Handraise(base, ANSWER_KEY) as op:

        def raw() -> None:
            body = _body()
            created = _check(agent.post("/v1/requests", json=body))
            _check(human.post("/api/human-feedback/submit", json={"unique_id": body["unique_id"],
                                                                  "response": "123456"}))
            done = _check(agent.get(f"/v1/requests/{created['id']}/wait", params={"timeout": "60"}))
            assert done["response"] == "123456"

        def client() -> None:
            body = _body()
            created = hr.create(MESSAGE, schema=SCHEMA, timeout=600, unique_id=body["unique_id"])
            op.submit(created.unique_id, "123456")
            assert hr.wait(created.id).response == "123456"

        return _alternate(raw, client, cycles=cycles)


async def async_cycles(base: str, *, cycles: int) -> Timings:
    ask_headers = {"Authorization": f"Bearer {ASK_KEY}"}
    answer_headers = {"Authorization": f"Bearer {ANSWER_KEY}"}
    async with httpx.AsyncClient(base_url=base, headers=ask_headers) as agent, \
            httpx.AsyncClient(base_url=base, headers=answer_headers) as human, \
            AsyncHandraise(base, ASK_KEY) as hr, AsyncHandraise(base, ANSWER_KEY) as op:

        async def raw() -> None:
            body = _body()
            created = _check(await agent.post("/v1/requests", json=body))
            _check(await human.post("/api/human-feedback/submit", json={"unique_id": body["unique_id"],
                                                                        "response": "123456"}))
            done = _check(await agent.get(f"/v1/requests/{created['id']}/wait", params={"timeout": "60"}))
            assert done["response"] == "123456"

        async def client() -> None:
            body = _body()
            created = await hr.create(MESSAGE, schema=SCHEMA, timeout=600, unique_id=body["unique_id"])
            await op.submit(created.unique_id, "123456")
            assert (await hr.wait(created.id)).response == "123456"

        return await _alternate_async(raw, client, cycles=cycles)


def _alternate(raw: Callable[[], None], client: Callable[[], None], *, cycles: int) -> Timings:
    for _ in range(20):  # warm-up: connections, imports, the server's caches
        raw()
        client()
    times: tuple[list[float], list[float]] = ([], [])
    cpu = [0.0, 0.0]
    while len(times[0]) < cycles:
        for i, (fn, into) in enumerate(((raw, times[0]), (client, times[1]))):
            cpu_started = time.process_time()
            for _ in range(ROUND):
                started = time.perf_counter()
                fn()
                into.append((time.perf_counter() - started) * 1000)
            cpu[i] += time.process_time() - cpu_started
    return times, cpu


async def _alternate_async(raw: Callable[[], Awaitable[None]], client: Callable[[], Awaitable[None]], *,
                           cycles: int) -> Timings:
    for _ in range(20):
        await raw()
        await client()
    times: tuple[list[float], list[float]] = ([], [])
    cpu = [0.0, 0.0]
    while len(times[0]) < cycles:
        for i, (fn, into) in enumerate(((raw, times[0]), (client, times[1]))):
            cpu_started = time.process_time()
            for _ in range(ROUND):
                started = time.perf_counter()
                await fn()
                into.append((time.perf_counter() - started) * 1000)
            cpu[i] += time.process_time() - cpu_started
    return times, cpu


def summary(timings: Timings) -> dict[str, float]:
    (raw, client), cpu = timings
    return {"raw_cpu_ms": cpu[0] * 1000 / len(raw), "client_cpu_ms": cpu[1] * 1000 / len(client),
            "added_cpu_ms": cpu[1] * 1000 / len(client) - cpu[0] * 1000 / len(raw),
            "raw_p50_ms": statistics.median(raw), "client_p50_ms": statistics.median(client),
            "added_p50_ms": statistics.median(c - r for r, c in zip(raw, client, strict=True)),
            "raw_mean_ms": statistics.fmean(raw), "client_mean_ms": statistics.fmean(client),
            "added_mean_ms": statistics.fmean(client) - statistics.fmean(raw)}


async def measure(cycles: int) -> dict[str, Any]:
    with workdir() as work:
        async with sqlite_url(work) as url, handraise_server(storage_url=url, workdir=work, name="sqlite") as server:
            sync = await asyncio.to_thread(sync_cycles, server.base, cycles=cycles)
            asynchronous = await async_cycles(server.base, cycles=cycles)
    return {"machine": machine(), "cycles": cycles, "sync": summary(sync), "async": summary(asynchronous)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args.cycles))
    met = all(report[flavour]["added_p50_ms"] <= TARGET_MS for flavour in ("sync", "async"))
    if args.json:
        print(json.dumps(report | {"target_met": met}, indent=2))
    else:
        print(f"{args.cycles} cycles each way, SQLite, one agent at a time")
        print("| | raw p50 | client p50 | added (paired median) | added mean | agent CPU raw | agent CPU client | added CPU |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for flavour in ("sync", "async"):
            s = report[flavour]
            print(f"| {flavour} | {s['raw_p50_ms']:.2f} ms | {s['client_p50_ms']:.2f} ms | {s['added_p50_ms']:+.2f} ms "
                  f"| {s['added_mean_ms']:+.2f} ms | {s['raw_cpu_ms']:.2f} ms | {s['client_cpu_ms']:.2f} ms "
                  f"| {s['added_cpu_ms']:+.2f} ms |")
        print(f"target (client adds at most {TARGET_MS:.0f} ms, median of paired cycles): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())

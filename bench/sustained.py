"""Sustained load on PostgreSQL (issue 19): agents waiting while answers arrive at a fixed rate, checked for
loss; and full cycles on one instance against two instances of one database.

    python bench/sustained.py [--agents 1000] [--rate 300] [--duration 60] [--instances 1] [--tenants 1]
                              [--max-writes 128] [--max-queue-ms 100] [--cycle-duration 10] [--workers 16] [--no-cycles] [--json]

**Sustained**: ``--agents`` agents each loop create → wait (a long-poll, renewed while pending) on
their instance, spread over ``--tenants`` tenants and ``--instances`` instances of one fresh
database. An open-loop answerer offers ``--rate`` answers a second for ``--duration`` seconds, each
to the agent that has waited longest, through another instance than the agent's when there are
two (so the wake crosses instances through NOTIFY); the offer keeps its schedule whatever the
server's latency. Every answer is distinct, so the agent can tell it got its own. A call shed with
503 and ``Retry-After`` (``limits.max_write_queue_ms``, ``--max-queue-ms``, 0 for none: the count
alone; ``limits.max_writes_in_flight``, ``--max-writes``) is counted and made again after the time
it names, as a client should. Reported: answers accepted per second, submit
p50/p99 (each accepted call, send to 200), wake p50/p99 (the submit's 200 to the agent's wait
returning the answer), 503s and whether each carried Retry-After, other errors; then, after a drain,
what was lost: an accepted answer its agent never got, an agent woken twice or with another
answer, a request with two ``answered`` journal entries, and ``handraise journal verify``.

**Cycles**: ``--workers`` agents loop create → answer → wait (bench/README.md's cycle) on one
instance, then dealt over two instances of the same database, then on one again; the ratio is two
over the mean of the ones. The floor (bare aiohttp) runs first in the same run, for scale.

Exit status 0 when nothing was lost and the journal verifies (the latency targets are reported,
not enforced: on a shared machine they say as much about the neighbours).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import (  # noqa: E402
    ANSWER_KEY,
    ASK_KEY,
    MESSAGE,
    SCHEMA,
    Running,
    config_toml,
    cpu_seconds,
    floor_server,
    handraise_server,
    journal_check,
    machine,
    postgres_url,
    raise_fd_limit,
    tenant_suffixes,
    workdir,
)
from workloads import Lane, cycles, percentile  # noqa: E402

TARGET_SUBMIT_P99_MS = 100.0
TARGET_WAKE_P99_MS = 20.0
TARGET_TWO_INSTANCES = 1.6
RETRY_CAP_S = 5.0
WAIT_S = 60


@dataclass(frozen=True)
class Tenant:
    id: str
    ask: dict[str, str]
    answer: dict[str, str]


def tenants(count: int) -> list[Tenant]:
    """The bench's ``count`` tenants (servers.config_toml), each with its ask and answer key's header."""
    return [Tenant(f"bench{n}", {"Authorization": f"Bearer {ASK_KEY}{n}"},
                   {"Authorization": f"Bearer {ANSWER_KEY}{n}"}) for n in tenant_suffixes(count)]


def config_text(url: str, *, secret: str, tenant_count: int, max_writes: int | None,
                max_queue_ms: int | None = None) -> str:
    """The bench's config, with one server secret for every instance, more tenants and the write bounds."""
    text = config_toml(url, tenants=tenant_count)
    if max_writes is not None:
        text = text.replace("[limits]\n", f"[limits]\nmax_writes_in_flight = {max_writes}\n", 1)
    if max_queue_ms is not None:
        text = text.replace("[limits]\n", f"[limits]\nmax_write_queue_ms = {max_queue_ms}\n", 1)
    return text + f'\n[security]\nsecret = "{secret}"\n'


@contextlib.asynccontextmanager
async def instances(url: str, tmp: Path, *, count: int, tenant_count: int, max_writes: int | None,
                    tag: str, max_queue_ms: int | None = None) -> Any:
    """``count`` instances of ``handraise serve`` on one database, started one after the other (the first
    migrates it); yields them and the config file (for ``handraise journal verify``)."""
    config = tmp / f"{tag}.toml"
    config.write_text(config_text(url, secret=secrets.token_hex(32), tenant_count=tenant_count,
                                  max_writes=max_writes, max_queue_ms=max_queue_ms), encoding="utf-8")
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(
            handraise_server(storage_url=url, workdir=tmp, name=f"{tag}-{i}", config=config)) for i in range(count)]
        yield servers, config


# -- sustained load -------------------------------------------------------------------------------------------


@dataclass
class Waiting:
    uid: str
    request_id: str
    agent: int


@dataclass
class Tally:
    """What the client saw; checked against itself and the database after the drain."""

    offered: int = 0
    no_waiter: int = 0
    accepted: int = 0
    submit_ms: list[float] = field(default_factory=list)
    wake_ms: list[float] = field(default_factory=list)
    shed: collections.Counter[str] = field(default_factory=collections.Counter)   # 503s by route
    shed_without_retry_after: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    answer_of: dict[str, str] = field(default_factory=dict)         # uid -> the answer submitted
    accepted_at: dict[str, float] = field(default_factory=dict)     # uid -> when its 200 arrived
    woken: dict[str, list[str]] = field(default_factory=dict)       # uid -> the answers its agent got
    returned_at: dict[str, float] = field(default_factory=dict)
    created: int = 0


class Sustained:
    def __init__(self, servers: list[Running], http: aiohttp.ClientSession, *, tenant_count: int) -> None:
        self.servers = servers
        self.http = http
        self.tenants = tenants(tenant_count)
        self.tally = Tally()
        self.ready: collections.deque[Waiting] = collections.deque()
        self.stopping = False
        self.run = secrets.token_hex(3)
        self.answers = itertools.count(1)

    def _tenant(self, agent: int) -> Tenant:
        return self.tenants[agent % len(self.tenants)]

    async def _call(self, route: str, method: str, url: str, **kwargs: Any) -> tuple[int, Any, float]:
        """One call, made again after Retry-After while shed; (status, body, seconds of the last attempt)."""
        while True:
            t0 = time.perf_counter()
            try:
                async with self.http.request(method, url, **kwargs) as resp:
                    data = await resp.json(content_type=None)
                    status, retry_after = resp.status, resp.headers.get("Retry-After")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                self.tally.errors[f"{route}: {type(e).__name__}"] += 1
                await asyncio.sleep(0.5)
                continue
            seconds = time.perf_counter() - t0
            if status != 503:
                return status, data, seconds
            self.tally.shed[route] += 1
            if retry_after is None:
                self.tally.shed_without_retry_after += 1
            await asyncio.sleep(min(float(retry_after or 1), RETRY_CAP_S))

    async def agent(self, number: int) -> None:
        server = self.servers[number % len(self.servers)]
        tenant = self._tenant(number)
        for n in itertools.count():
            if self.stopping:
                return
            uid = f"sus-{self.run}-{number}-{n}"
            body = {"unique_id": uid, "message_for_user": MESSAGE, "timeout_seconds": 3600, "schema": SCHEMA}
            status, data, _ = await self._call("create", "POST", f"{server.base}/v1/requests", json=body,
                                               headers=tenant.ask)
            if status != 201:
                self.tally.errors[f"create: {status} {data.get('error')}"] += 1
                return
            self.tally.created += 1
            request_id = data["id"]
            self.ready.append(Waiting(uid, request_id, number))
            while True:
                status, data, _ = await self._call(
                    "wait", "GET", f"{server.base}/v1/requests/{request_id}/wait", params={"timeout": str(WAIT_S)},
                    headers=tenant.ask)
                if status != 200:
                    self.tally.errors[f"wait: {status} {data.get('error')}"] += 1
                    return
                if data["status"] != "pending":
                    break
            self.tally.returned_at[uid] = time.perf_counter()
            self.tally.woken.setdefault(uid, []).append(data.get("response"))
            if data["status"] != "answered":
                self.tally.errors[f"wait returned {data['status']}"] += 1

    async def answer(self, waiting: Waiting) -> None:
        # Through another instance than the agent's, when there is one.
        server = self.servers[(waiting.agent + 1) % len(self.servers)]
        value = f"{next(self.answers) % 1_000_000:06d}"
        self.tally.answer_of[waiting.uid] = value
        status, data, seconds = await self._call(
            "submit", "POST", f"{server.base}/api/human-feedback/submit", json={"unique_id": waiting.uid,
                                                                                "response": value},
            headers=self._tenant(waiting.agent).answer)
        if status != 200:
            self.tally.errors[f"submit: {status} {data.get('error')}"] += 1
            return
        self.tally.accepted_at[waiting.uid] = time.perf_counter()
        self.tally.accepted += 1
        self.tally.submit_ms.append(seconds * 1000)

    async def offer(self, *, rate: float, duration: float) -> float:
        """``rate`` answers a second on a fixed schedule for ``duration`` s; returns the seconds it took."""
        submits: set[asyncio.Task[None]] = set()
        t0 = time.perf_counter()
        for k in itertools.count():
            due = t0 + k / rate
            if due >= t0 + duration:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self.tally.offered += 1
            if not self.ready:
                self.tally.no_waiter += 1
                continue
            task = asyncio.create_task(self.answer(self.ready.popleft()))
            submits.add(task)
            task.add_done_callback(submits.discard)
        elapsed = time.perf_counter() - t0
        if submits:
            await asyncio.gather(*submits)
        return elapsed


async def _until_woken(load: Sustained, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline and any(uid not in load.tally.woken for uid in load.tally.accepted_at):
        await asyncio.sleep(0.1)


async def offered_load(servers: list[Running], args: argparse.Namespace) -> dict[str, Any]:
    """The sustained run's client against running servers (Handraise's instances or the floor)."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=120)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
        load = Sustained(servers, http, tenant_count=args.tenants)
        agents = [asyncio.create_task(load.agent(i)) for i in range(args.agents)]
        t0 = time.perf_counter()
        while len(load.ready) < args.agents and time.perf_counter() - t0 < 300:
            await asyncio.sleep(0.1)
        ramp = time.perf_counter() - t0
        # Every agent has sent its wait; give the last ones a moment to park.
        await asyncio.sleep(2)
        pids = [s.pid for s in servers]
        cpu0, client0 = sum(cpu_seconds(p) for p in pids), cpu_seconds(os.getpid())
        elapsed = await load.offer(rate=args.rate, duration=args.duration)
        cpu, client = sum(cpu_seconds(p) for p in pids) - cpu0, cpu_seconds(os.getpid()) - client0
        load.stopping = True
        await _until_woken(load, timeout=30)
        for task in agents:
            task.cancel()
        await asyncio.gather(*agents, return_exceptions=True)
    t = load.tally
    for uid, at in t.accepted_at.items():
        if uid in t.returned_at:
            t.wake_ms.append(max(0.0, t.returned_at[uid] - at) * 1000)
    lost = [uid for uid in t.accepted_at if uid not in t.woken]
    doubled = [uid for uid, got in t.woken.items() if len(got) > 1]
    wrong = [uid for uid, got in t.woken.items() if uid in t.accepted_at and got[0] != t.answer_of[uid]]
    unasked = [uid for uid in t.woken if uid not in t.accepted_at]
    return {
        "agents": args.agents, "instances": len(servers), "tenants": args.tenants, "rate_offered": args.rate,
        "duration_s": round(elapsed, 1), "ramp_s": round(ramp, 1), "created": t.created, "offered": t.offered,
        "offered_without_a_waiter": t.no_waiter, "accepted": t.accepted,
        "accepted_per_s": round(t.accepted / elapsed, 1),
        "submit_p50_ms": _p(t.submit_ms, 50), "submit_p99_ms": _p(t.submit_ms, 99),
        "wake_p50_ms": _p(t.wake_ms, 50), "wake_p99_ms": _p(t.wake_ms, 99),
        "shed_503": dict(t.shed), "shed_without_retry_after": t.shed_without_retry_after, "errors": dict(t.errors),
        "lost": len(lost), "woken_twice": len(doubled), "wrong_answer": len(wrong), "woken_unanswered": len(unasked),
        "server_cpu_percent": round(100 * cpu / elapsed), "client_cpu_percent": round(100 * client / elapsed),
        "ok": not (lost or doubled or wrong or unasked),
        "load_avg_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


async def sustained(url: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with instances(url, tmp, count=args.instances, tenant_count=args.tenants, max_writes=args.max_writes,
                         max_queue_ms=args.max_queue_ms, tag="sustained") as (servers, config):
        out = await offered_load(servers, args)
    db = await journal_check(url, config)
    out.update(db)
    out["ok"] = (out["ok"] and db["journal_doubled"] == 0 and db["journal_verify_rc"] == 0
                 and db["db_answered"] == out["accepted"])
    return out


def _p(values: list[float], p: float) -> float | None:
    return round(percentile(values, p), 2) if values else None


# -- one instance against two -----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def lock_waiters(url: str, every: float = 0.02) -> Any:
    """Samples, every ``every`` s while the block runs, how many of the database's backends wait for a lock
    (pg_stat_activity): the writers queued on a journal head (or, through BENCH_SERVE_SCRIPT, on another
    lock), a figure the machine's load moves less than a rate."""
    import asyncpg

    samples: list[int] = []
    stop = asyncio.Event()
    conn = await asyncpg.connect(url, timeout=10)

    async def sample() -> None:
        while not stop.is_set():
            samples.append(await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"))
            await asyncio.sleep(every)

    task = asyncio.create_task(sample())
    try:
        yield samples
    finally:
        stop.set()
        await task
        await conn.close()


@contextlib.asynccontextmanager
async def backend_cpu(url: str) -> Any:
    """The CPU seconds the database's backends used while the block ran (``used["seconds"]``), read from
    /proc/<pid>/stat of the PostgreSQL processes serving it (a backend the pools opened meanwhile counts
    whole); nothing when the server's processes are not on this machine. Like the lock waits, a cost per
    cycle the machine's load moves less than a rate."""
    import asyncpg

    conn = await asyncpg.connect(url, timeout=10)

    async def backends() -> dict[int, float]:
        pids = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid()")
        seconds = {}
        for (pid,) in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                seconds[pid] = cpu_seconds(pid)
        return seconds

    used: dict[str, float] = {}
    before = await backends()
    try:
        yield used
    finally:
        after = await backends()
        if after:
            used["seconds"] = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
        await conn.close()


async def one_vs_two(url: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with floor_server(workdir=tmp) as floor:
        floor_rate = (await cycles(floor, workers=args.workers, duration=args.cycle_duration)).per_second
    ts = tenants(args.tenants)
    async with instances(url, tmp, count=2, tenant_count=args.tenants, max_writes=args.max_writes,
                         max_queue_ms=args.max_queue_ms, tag="cycles") as (servers, _config):
        def lanes(on: list[Running]) -> list[Lane]:
            return [Lane(s, t.ask, t.answer) for s in on for t in ts]

        runs, waiters, backends = {}, {}, {}
        for name, on in (("one", servers[:1]), ("two", servers), ("one_again", servers[:1])):
            async with lock_waiters(url) as samples, backend_cpu(url) as pg:
                t0 = time.perf_counter()
                runs[name] = asdict(await cycles(lanes(on), workers=args.workers, duration=args.cycle_duration))
                elapsed = time.perf_counter() - t0  # the warm-up's cycles too: the backends' CPU covers it
            waiters[name] = round(sum(samples) / max(1, len(samples)), 2)
            if "seconds" in pg:
                backends[name] = round(1000 * pg["seconds"] / (runs[name]["per_second"] * elapsed), 2)
    one = (runs["one"]["per_second"] + runs["one_again"]["per_second"]) / 2
    return {"floor": round(floor_rate, 1), "workers": args.workers, "duration_s": args.cycle_duration,
            **{k: round(v["per_second"], 1) for k, v in runs.items()},
            "server_cpu_percent": {k: round(v["server_cpu_percent"]) for k, v in runs.items()},
            # CPU a cycle (ms): the instances' together, and the database's backends' (None: not on this machine).
            "server_ms_per_cycle": {k: round(10 * v["server_cpu_percent"] / v["per_second"], 2)
                                    for k, v in runs.items()},
            "backend_ms_per_cycle": backends or None,
            "mean_lock_waiters": waiters,
            "two_over_one": round(runs["two"]["per_second"] / one, 2), "one_of_floor": round(one / floor_rate, 3)}


def render(report: dict[str, Any]) -> str:
    m, lines = report["machine"], []
    lines.append(f"machine: {m['nproc']} cores, {m['cpu']}; load average at start {m['load_avg_at_start']}")
    for name in ("sustained_floor", "sustained"):
        s = report.get(name)
        if not s:
            continue
        what = "floor (bare aiohttp)" if name == "sustained_floor" else "handraise, PostgreSQL"
        lines += [
            f"{what}: {s['agents']} agents waiting on {s['instances']} instance(s), {s['tenants']} tenant(s); "
            f"{s['rate_offered']:g} answers/s offered for {s['duration_s']} s",
            f"  accepted {s['accepted']} ({s['accepted_per_s']}/s); offered with no agent waiting "
            f"{s['offered_without_a_waiter']}; server CPU {s['server_cpu_percent']} %, client CPU "
            f"{s['client_cpu_percent']} %; load average after {s.get('load_avg_after')}",
            f"  submit p50 {s['submit_p50_ms']} ms, p99 {s['submit_p99_ms']} ms (target < {TARGET_SUBMIT_P99_MS:g}); "
            f"wake p50 {s['wake_p50_ms']} ms, p99 {s['wake_p99_ms']} ms (target < {TARGET_WAKE_P99_MS:g})",
            f"  503 shed {s['shed_503'] or 0} (without Retry-After: {s['shed_without_retry_after']}); "
            f"errors {s['errors'] or 0}; lost {s['lost']}, woken twice {s['woken_twice']}, wrong answer "
            f"{s['wrong_answer']}",
        ]
        if "journal_doubled" in s:
            lines.append(f"  journal doubled {s['journal_doubled']}, answered in the database {s['db_answered']}; "
                         f"journal verify rc {s['journal_verify_rc']} ({s['journal_entries']} entries, "
                         f"{s['chains']} chains)")
    c = report.get("cycles")
    if c:
        lines.append(f"cycles ({c['workers']} workers, {c['duration_s']:g} s each): floor {c['floor']}/s; one "
                     f"instance {c['one']} then {c['one_again']}/s ({c['one_of_floor']} of floor); two instances "
                     f"{c['two']}/s: {c['two_over_one']}x (target >= {TARGET_TWO_INSTANCES}); server CPU "
                     f"{c['server_cpu_percent']}; backends waiting for a lock, mean {c['mean_lock_waiters']}")
        lines.append(f"  CPU a cycle: instances {c.get('server_ms_per_cycle')} ms; PostgreSQL's backends "
                     f"{c.get('backend_ms_per_cycle')} ms")
    return "\n".join(lines)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    raise_fd_limit()
    report: dict[str, Any] = {"machine": machine()}
    with workdir() as tmp:
        if args.agents and args.floor:
            async with floor_server(workdir=tmp) as floor:
                report["sustained_floor"] = await offered_load([floor], args)
        if args.agents:
            async with postgres_url() as url:
                report["sustained"] = await sustained(url, tmp, args)
        if args.cycles:
            async with postgres_url() as url:
                report["cycles"] = await one_vs_two(url, tmp, args)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000, help="agents waiting at once; 0 skips (default 1000)")
    parser.add_argument("--rate", type=float, default=300.0, help="answers offered a second (default 300)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of offered answers (default 60)")
    parser.add_argument("--instances", type=int, default=1, choices=[1, 2, 3], help="for the sustained run")
    parser.add_argument("--tenants", type=int, default=1, help="tenants the agents are dealt over (default 1)")
    parser.add_argument("--max-writes", type=int, default=None, help="limits.max_writes_in_flight (server default)")
    parser.add_argument("--max-queue-ms", type=int, default=None,
                        help="limits.max_write_queue_ms (server default; 0: the count alone)")
    parser.add_argument("--no-floor", dest="floor", action="store_false", help="skip the floor's sustained run")
    parser.add_argument("--cycle-duration", type=float, default=10.0, help="seconds of each cycle run (default 10)")
    parser.add_argument("--workers", type=int, default=16, help="agents looping in the cycle runs (default 16)")
    parser.add_argument("--no-cycles", dest="cycles", action="store_false", help="skip one vs two instances")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if all(report.get(name, {}).get("ok", True) for name in ("sustained", "sustained_floor")) else 1


if __name__ == "__main__":
    sys.exit(main())

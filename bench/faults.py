"""Faults under load: three instances on one PostgreSQL lose an instance, the database, or the network.

    python bench/faults.py [--scenario kill|restart|stall|all] [--agents 24] [--before 6] [--after 12] [--json]

Each scenario gets a fresh database and three ``handraise serve`` instances sharing it, each
reaching PostgreSQL through its own TCP proxy in this process (which can stop forwarding: the
network stall) and each running the Telegram connector against a fake Bot API on loopback (so one
instance holds the polling lock: the connector leadership). Steady load: ``--agents`` agents each
loop create → wait (a long-poll on their instance; when it fails they re-attach to another), and
for every request two answerers submit different answers through two different instances at the
same moment (each retried on another instance while it fails), so exactly one must win.

After ``--before`` seconds of load the fault strikes; load goes on ``--after`` seconds, then stops
creating and drains. The scenarios:

- ``kill``: ``kill -9`` of the instance that holds the Telegram polling lock. Its waiting agents
  re-attach to another instance and get their answers; another instance takes the lock.
- ``restart``: ``pg_ctl restart`` (fast mode: every connection drops) of a private throwaway cluster
  (tests/harness/pgcluster.py: initdb into a temporary folder, its own port, removed afterwards), never
  the machine's shared server. Instances reconnect, LISTEN resumes, waiters on other instances are woken.
- ``stall``: every proxy stops forwarding for 5 s (bytes held, nothing dropped), then resumes.

Checked after each (exit 1 if any fails): every request created was answered and its agent got the
answer (none lost); no request had two winning submissions and the journal holds one ``answered``
entry per request (none doubled); the answer the agent got is the one whose submission won;
``handraise journal verify`` passes; for ``kill``, the polling lock moved to a live instance within 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fakes import tests.fakes.server

from harness.pgcluster import PgCluster, missing_reason  # noqa: E402
from harness.pgproxy import StallableProxy  # noqa: E402
from servers import (  # noqa: E402
    ANSWER_KEY,
    ASK_KEY,
    PG_ADMIN_DSN,
    REPO,
    config_toml,
    free_port,
    journal_check,
    machine,
    postgres_url,
    workdir,
)

INSTANCES = 3
STALL_SECONDS = 5.0
LEADER_MOVE_TARGET_S = 10.0
# The lock the Telegram connector's poller holds (bots/telegram/polling.py POLL_LOCK), as Leadership keys it.
POLL_LOCK = "telegram-poll"
CHAT_ID = -1001234567
ASK = {"Authorization": f"Bearer {ASK_KEY}"}
ANSWER = {"Authorization": f"Bearer {ANSWER_KEY}"}
TRANSIENT = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, OSError)


# -- the instances ---------------------------------------------------------------------------------


@dataclass
class Instance:
    index: int
    base: str
    config: Path
    proxy: StallableProxy
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _instance_config(*, url: str, secret: str, telegram_url: str) -> str:
    from fakes.telegram import DEFAULT_TOKEN

    return config_toml(url) + f"""
[security]
secret = "{secret}"

[telegram]
token = "{DEFAULT_TOKEN}"
base_url = "{telegram_url}"
chat_ids = [{CHAT_ID}]
allowed_user_ids = [111]
"""


async def _healthy(base: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{base} exited with {process.returncode} before serving")
            with contextlib.suppress(*TRANSIENT):
                async with http.get(f"{base}/healthz") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{base} did not answer /healthz within {timeout:.0f} s")


def _via_proxy(url: str, proxy: StallableProxy) -> str:
    host, port = proxy.upstream
    return url.replace(f"{host}:{port}", f"{host}:{proxy.port}")


@contextlib.asynccontextmanager
async def cluster(tmp: Path, url: str, *, proxied: bool = True) -> AsyncIterator[list[Instance]]:
    """Three instances on the database at ``url``, each through its own proxy (``proxied``: else
    straight to it, the proxy idle beside it); the fake Bot API beside them."""
    from fakes.telegram import FakeTelegram

    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1].split("/", 1)[0])
    secret = secrets.token_hex(32)
    instances: list[Instance] = []
    async with FakeTelegram() as telegram:
        try:
            for i in range(INSTANCES):
                proxy = StallableProxy((host, port))
                await proxy.start()
                via_proxy = _via_proxy(url, proxy) if proxied else url
                config = tmp / f"instance-{i}.toml"
                config.write_text(_instance_config(url=via_proxy, secret=secret, telegram_url=telegram.base_url),
                                  encoding="utf-8")
                http_port = free_port()
                instances.append(Instance(index=i, base=f"http://127.0.0.1:{http_port}", config=config, proxy=proxy,
                                          log=tmp / f"instance-{i}.log"))
            # One at a time: the first migrates the fresh database, the others find it at head.
            for inst in instances:
                log = inst.log.open("wb")
                inst.process = subprocess.Popen(
                    [sys.executable, "-m", "handraise.core.cli", "serve", "--config", str(inst.config),
                     "--port", inst.base.rsplit(":", 1)[1]], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
                log.close()
                await _healthy(inst.base, inst.process)
            yield instances
        finally:
            for inst in instances:
                if inst.alive:
                    inst.process.terminate()
            for inst in instances:
                if inst.process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        inst.process.wait(timeout=15)
                    if inst.process.poll() is None:
                        inst.process.kill()
                        inst.process.wait()
                await inst.proxy.close()


async def lock_holder(admin_url: str, instances: list[Instance]) -> int | None:
    """Which instance holds the Telegram polling lock (by the proxy its backend's connection came through)."""
    import zlib

    import asyncpg

    key = zlib.crc32(("leader:" + POLL_LOCK).encode()) & 0x7FFFFFFF
    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        port = await conn.fetchval(
            "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objid = $1 AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())", key)
    finally:
        await conn.close()
    for inst in instances:
        if port in inst.proxy.upstream_ports:
            return inst.index
    return None


# -- the load --------------------------------------------------------------------------------------


@dataclass
class Ledger:
    created: dict[str, str] = field(default_factory=dict)  # unique_id -> request id
    wins: dict[str, list[str]] = field(default_factory=dict)  # unique_id -> answers whose submit got 200
    submitted: dict[str, list[str]] = field(default_factory=dict)  # unique_id -> answers sent (any outcome)
    answered_at: dict[str, float] = field(default_factory=dict)  # unique_id -> the first 200's arrival
    finals: dict[str, dict[str, Any]] = field(default_factory=dict)  # unique_id -> what its agent got
    wake_ms: list[tuple[float, float]] = field(default_factory=list)  # (when, ms from the 200 to the agent)
    reattached: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # what failed calls heard (retried)


class Load:
    def __init__(self, instances: list[Instance], http: aiohttp.ClientSession, *, tag: str) -> None:
        self.instances = instances
        self.http = http
        self.tag = tag
        self.ledger = Ledger()
        self.creating = True
        self._n = itertools.count()
        self._rr = itertools.count()
        self.answering: set[asyncio.Future[None]] = set()

    def _pick(self, avoid: int | None = None) -> Instance:
        live = [i for i in self.instances if i.alive and i.index != avoid] or [i for i in self.instances if i.alive]
        return live[next(self._rr) % len(live)]

    async def _call(self, method: str, inst: Instance, path: str, *, headers: dict[str, str],
                    json_body: Any = None, timeout: float = 30) -> tuple[int, Any]:
        async with self.http.request(method, inst.base + path, json=json_body, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return resp.status, await resp.json(content_type=None)

    async def agent(self, number: int) -> None:
        home = self.instances[number % len(self.instances)]
        while self.creating:
            uid = f"{self.tag}-{number}-{next(self._n)}"
            body = {"unique_id": uid, "message_for_user": "Approve the fault drill?", "timeout_seconds": 300}
            request_id = await self._until_ok("POST", "/v1/requests", headers=ASK, json_body=body, first=home,
                                              ok=(200, 201), what="create")
            if request_id is None:
                continue
            rid = request_id["id"]
            self.ledger.created[uid] = rid
            answering = asyncio.ensure_future(self.answer(uid))
            self.answering.add(answering)
            answering.add_done_callback(self.answering.discard)
            inst = home if home.alive else self._pick()
            while True:
                try:
                    status, data = await self._call("GET", inst, f"/v1/requests/{rid}/wait?timeout=20", headers=ASK,
                                                    timeout=40)
                except TRANSIENT as e:
                    status, data = None, type(e).__name__
                if status == 200 and data["status"] != "pending":
                    arrived = time.monotonic()
                    self.ledger.finals[uid] = data
                    if uid in self.ledger.answered_at:
                        self.ledger.wake_ms.append((arrived, 1000 * (arrived - self.ledger.answered_at[uid])))
                    break
                if status != 200:
                    # The instance went away or cannot reach the store: re-attach elsewhere.
                    self.ledger.refused[f"wait {status or data}"] += 1
                    self.ledger.reattached += 1
                    inst = self._pick(avoid=inst.index)
                    await asyncio.sleep(0.2)
            home = inst

    async def answer(self, uid: str) -> None:
        await asyncio.sleep(0.05)  # the agent parks its wait first, most of the time
        first = self._pick()
        second = self._pick(avoid=first.index)
        await asyncio.gather(self._submit(uid, f"A {uid}", first), self._submit(uid, f"B {uid}", second))

    async def _submit(self, uid: str, response: str, first: Instance) -> None:
        self.ledger.submitted.setdefault(uid, []).append(response)
        result = await self._until_ok("POST", "/api/human-feedback/submit", headers=ANSWER, first=first,
                                      json_body={"unique_id": uid, "response": response}, ok=(200, 409, 410),
                                      what="submit")
        if result is not None and result.get("accepted"):
            self.ledger.answered_at.setdefault(uid, time.monotonic())
            self.ledger.wins.setdefault(uid, []).append(response)

    async def _until_ok(self, method: str, path: str, *, headers: dict[str, str], first: Instance, ok: tuple[int, ...],
                        what: str, json_body: Any = None, give_up_s: float = 120) -> dict[str, Any] | None:
        """The call, retried on another instance while it fails (5xx, 429, no answer); None if it never succeeds."""
        inst, deadline = first, time.monotonic() + give_up_s
        while time.monotonic() < deadline:
            if not inst.alive:
                inst = self._pick(avoid=inst.index)
            try:
                status, data = await self._call(method, inst, path, headers=headers, json_body=json_body)
                if status in ok:
                    return data
                self.ledger.refused[f"{what} {status} {data.get('error') if isinstance(data, dict) else ''}"] += 1
            except TRANSIENT as e:
                self.ledger.refused[f"{what} {type(e).__name__}"] += 1
            inst = self._pick(avoid=inst.index)
            await asyncio.sleep(0.2)
        return None


# -- the scenarios ---------------------------------------------------------------------------------


async def _pg_restart(pg: PgCluster) -> float:
    t0 = time.monotonic()
    await asyncio.to_thread(pg.restart)
    return time.monotonic() - t0


@contextlib.asynccontextmanager
async def _database(name: str) -> AsyncIterator[tuple[str, PgCluster | None]]:
    """A fresh database: for ``restart`` on a private cluster of its own (the one restarted), else on the
    machine's server (``BENCH_PG_ADMIN_DSN``), dropped afterwards."""
    if name != "restart":
        async with postgres_url() as url:
            yield url, None
        return
    reason = missing_reason()
    if reason is not None:
        raise SystemExit(f"the restart scenario needs a private PostgreSQL cluster: {reason}")
    with PgCluster.create() as pg:
        yield await asyncio.to_thread(pg.create_database, "handraise_bench"), pg


async def _journal_check(url: str, instances: list[Instance]) -> dict[str, Any]:
    # The CLI as an operator runs it, straight to the database (not through a proxy of this loop).
    config = instances[0].config.with_name("verify.toml")
    config.write_text(instances[0].config.read_text().replace(_via_proxy(url, instances[0].proxy), url),
                      encoding="utf-8")
    return await journal_check(url, config)


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def run_scenario(name: str, *, agents: int, before: float, after: float, tmp: Path) -> dict[str, Any]:
    async with _database(name) as (url, pg):
        admin_url = url  # the bench connects directly, not through the proxies
        (tmp / name).mkdir()
        # A restart goes straight to PostgreSQL, as instances would; the proxies are the stall's.
        async with cluster(tmp / name, url, proxied=name != "restart") as instances, aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0)) as http:
            out: dict[str, Any] = {"scenario": name}
            leader_before = None
            for _ in range(100 if name != "restart" else 0):  # the first poller takes the lock within seconds
                leader_before = await lock_holder(admin_url, instances)
                if leader_before is not None:
                    break
                await asyncio.sleep(0.2)
            out["leader_before"] = leader_before
            load = Load(instances, http, tag=f"{name}-{secrets.token_hex(2)}")
            tasks = [asyncio.ensure_future(load.agent(i)) for i in range(agents)]
            await asyncio.sleep(before)
            struck = time.monotonic()
            if name == "kill":
                victim = instances[leader_before if leader_before is not None else 0]
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait()
                out["killed"] = victim.index
                moved_after = None
                while time.monotonic() - struck < 30:
                    holder = await lock_holder(admin_url, instances)
                    if holder is not None and holder != victim.index and instances[holder].alive:
                        moved_after = time.monotonic() - struck
                        out["leader_after"] = holder
                        break
                    await asyncio.sleep(0.1)
                out["leader_moved_s"] = moved_after
            elif name == "restart":
                assert pg is not None
                out["restart_s"] = round(await _pg_restart(pg), 2)
            elif name == "stall":
                for inst in instances:
                    inst.proxy.flowing.clear()
                await asyncio.sleep(STALL_SECONDS)
                for inst in instances:
                    inst.proxy.flowing.set()
            fault_over = time.monotonic()
            await asyncio.sleep(max(0.0, after - (fault_over - struck)))
            load.creating = False
            done, stuck = await asyncio.wait(tasks, timeout=120)
            if load.answering:
                await asyncio.wait(set(load.answering), timeout=60)
            for t in [*stuck, *load.answering]:
                t.cancel()
            out["agents_stuck"] = len(stuck)
            for t in done:
                if t.exception() is not None:
                    raise t.exception()
            out["leader_end"] = await lock_holder(admin_url, instances)
            led = load.ledger
            lost = [u for u in led.created if led.finals.get(u, {}).get("status") != "answered"]
            mismatched = [u for u, f in led.finals.items() if led.wins.get(u) and f.get("response") != led.wins[u][0]]
            not_ours = [u for u, f in led.finals.items() if f.get("response") not in led.submitted.get(u, [])]
            doubled = [u for u, w in led.wins.items() if len(w) > 1]
            during = [ms for when, ms in led.wake_ms if struck <= when <= fault_over + 10]
            out.update({
                "created": len(led.created), "agents_answered": sum(1 for f in led.finals.values()
                                                                    if f.get("status") == "answered"),
                "lost": len(lost), "lost_examples": lost[:3], "answer_mismatch": len(mismatched),
                "answer_not_submitted": len(not_ours), "double_wins": len(doubled),
                "reattached_waits": led.reattached, "retried_calls": dict(led.refused.most_common(8)),
                "wake_p50_ms": round(_percentile([ms for _, ms in led.wake_ms], 50), 1),
                "wake_p99_ms": round(_percentile([ms for _, ms in led.wake_ms], 99), 1),
                "wake_max_after_fault_ms": round(max(during), 1) if during else None,
            })
            out.update(await _journal_check(admin_url, instances))
            out["passed"] = (not lost and not mismatched and not not_ours and not doubled
                             and out["journal_doubled"] == 0 and out["journal_verify_rc"] == 0
                             and out["db_answered"] == len(led.created)
                             and (name != "kill" or (out["leader_moved_s"] is not None
                                                     and out["leader_moved_s"] <= LEADER_MOVE_TARGET_S)))
            return out


def render(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        lines.append(f"## {r['scenario']}: {'PASSED' if r['passed'] else 'FAILED'}")
        for k, v in r.items():
            if k not in ("scenario", "passed"):
                lines.append(f"  {k}: {v}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["kill", "restart", "stall", "all"], default="all")
    parser.add_argument("--agents", type=int, default=24)
    parser.add_argument("--before", type=float, default=6.0, help="seconds of load before the fault")
    parser.add_argument("--after", type=float, default=12.0, help="seconds of load after the fault strikes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = ["kill", "restart", "stall"] if args.scenario == "all" else [args.scenario]
    results = []
    with workdir() as tmp:
        for name in names:
            print(f"{name}: three instances, {args.agents} agents", file=sys.stderr, flush=True)
            results.append(asyncio.run(run_scenario(name, agents=args.agents, before=args.before, after=args.after,
                                                    tmp=tmp)))
    report = {"machine": machine(), "pg": PG_ADMIN_DSN.rsplit("@", 1)[-1] + " (restart: a private cluster)",
              "results": results}
    print(json.dumps(report, indent=2) if args.json else render(results))
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

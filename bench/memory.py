"""Memory with many agents waiting: one instance's RSS idle and with N long-polls parked, beside the floor;
or several instances of one PostgreSQL database, N waiting on each at once.

    python bench/memory.py [--store sqlite|postgresql|both] [--waiters 10000] [--as-deployed] [--json]
    python bench/memory.py --instances 3 [--waiters 10000] [--as-deployed] [--json]

N pending requests are seeded through the real ``RequestService.create`` before a fresh ``handraise
serve`` starts (so the reading holds no create traffic), then one ``GET /v1/requests/{id}/wait`` per
request is held open at once; the server's VmRSS is read once every wait has been written and its CPU
has gone quiet. The floor (``bench/floor.py``: bare aiohttp, the same routes doing no work) parks the
same number of waits, so "over floor" is what Handraise adds to aiohttp's own per-connection cost.

``--as-deployed`` hides from the server every installed package outside the wheel's declared
dependencies (what this checkout has only for its tests: structlog imports ``rich`` and ``twisted``
and Mako imports ``pygments`` when they are present, about 20 MB), as ``pip install handraise``
would leave it; the default reads the development environment as it is.
With ``--instances K`` (PostgreSQL), K × N pending requests are seeded the same way, K instances of
``handraise serve`` share the fresh database (each with ``storage.pool_size = 4``, so three open at
most 42 connections of the shared server), and N waits are parked on every instance at once, each
instance's by a client process of its own (one process may not hold 30,000 sockets), opened at 1,000
a second; every instance's RSS is read once all K × N waits are written and every server is quiet.
No floor run in this mode.
Target (issue 19): 10,000 waiting agents under 250 MB on one instance; 30,000 across three.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import textwrap
from importlib import metadata
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import (  # noqa: E402
    _tail,
    floor_server,
    handraise_server,
    machine,
    postgres_url,
    raise_fd_limit,
    rss_mb,
    seed_requests,
    sqlite_url,
    workdir,
)
from workloads import ASK, BenchError, _quiet, create_many, parked_waits  # noqa: E402

TARGET_MB = 250.0


def _declared_closure() -> set[str]:
    """The distributions ``pip install handraise`` brings: its requirements, theirs, and so on (no extras)."""
    import platform

    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = {**default_environment(), "python_full_version": platform.python_version()}
    todo = [(Requirement(r), "") for r in metadata.distribution("handraise").requires or []]
    seen: set[tuple[str, str]] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        # Each (distribution, extra) once: sqlalchemy reached plain and as sqlalchemy[asyncio] (greenlet).
        for e in ("", *req.extras):
            if (canonicalize_name(req.name), e) not in seen:
                seen.add((canonicalize_name(req.name), e))
                todo.extend((Requirement(r), e) for r in metadata.distribution(req.name).requires or [])
    return {"handraise"} | {name for name, _ in seen}


def _test_only_modules() -> list[str]:
    """Top-level modules of every installed distribution outside the declared closure."""
    from packaging.utils import canonicalize_name

    wanted = _declared_closure()
    keep: set[str] = set()
    hide: set[str] = set()
    for dist in metadata.distributions():
        tops = {Path(str(f)).parts[0].removesuffix(".py") for f in dist.files or []
                if not str(f).startswith("..") and ".dist-info" not in str(f) and not str(f).endswith(".pth")}
        tops = {t for t in tops if t.isidentifier()}
        (keep if canonicalize_name(dist.metadata["Name"]) in wanted else hide).update(tops)
    return sorted(hide - keep - set(sys.stdlib_module_names))


def _deployed_entry(tmp: Path) -> Path:
    """A serve script that makes the test-only packages unimportable, then runs the CLI."""
    script = tmp / "serve_as_deployed.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        for name in {_test_only_modules()!r}:
            sys.modules.setdefault(name, None)  # import raises ImportError, as where it is not installed
        from handraise.core.cli import main
        sys.exit(main(sys.argv[1:]))
        """), encoding="utf-8")
    return script


async def measure(stores: list[str], waiters: int, *, as_deployed: bool) -> dict[str, Any]:
    limit = raise_fd_limit()
    if waiters + 1000 > limit:
        raise SystemExit(f"--waiters {waiters} needs more file descriptors than RLIMIT_NOFILE allows ({limit})")
    out: dict[str, Any] = {"machine": machine(), "waiters": waiters, "as_deployed": as_deployed, "results": {}}
    with workdir() as tmp:
        if as_deployed:
            os.environ["BENCH_SERVE_SCRIPT"] = str(_deployed_entry(tmp))
        async with floor_server(workdir=tmp) as floor:
            ids = await create_many(floor, count=waiters)
            out["results"]["floor"] = asdict(await parked_waits(floor, request_ids=ids))
        for store in stores:
            (tmp / store).mkdir()
            async with (sqlite_url(tmp / store) if store == "sqlite" else postgres_url()) as url:
                print(f"{store}: seeding {waiters:,} requests", file=sys.stderr, flush=True)
                ids = await seed_requests(storage_url=url, workdir=tmp, count=waiters)
                async with handraise_server(storage_url=url, workdir=tmp, name=f"{store}-parked") as server:
                    out["results"][store] = asdict(await parked_waits(server, request_ids=ids))
    return out


# Connections in each of an instance's two pools: three instances open at most 3 × (2 × 4 + 6) = 42
# of a shared server's max_connections (core/config.py).
INSTANCE_POOL = 4
# Waits opened a second on each instance (--instances): each reads its request once through the pool
# before it parks, and a pool caller waits at most 30 s for a connection; 10,000 at once on a loaded
# machine queued past that (500s), agents arriving over 10 s do not.
OPEN_RATE = 1000
_BATCH = 100


async def hold_waits(base: str, ids: list[str], *, opening: int = 256) -> None:
    """The client of one instance (``--hold``): one long-poll wait on each request, at most ``opening``
    being opened at a time; prints ``written`` once every wait is on the wire, then holds them until
    stdin closes. A wait that returns (none is answered) is an error."""
    import aiohttp

    gate = asyncio.Semaphore(opening)
    written = 0
    all_written = asyncio.Event()
    trace = aiohttp.TraceConfig()

    async def sent(_session: aiohttp.ClientSession, ctx: Any, _params: Any) -> None:
        ctx.trace_request_ctx.set()

    trace.on_request_headers_sent.append(sent)

    async def wait(http: aiohttp.ClientSession, request_id: str) -> None:
        nonlocal written
        on_wire = asyncio.Event()
        async with gate:
            call = asyncio.ensure_future(http.get(f"{base}/v1/requests/{request_id}/wait", params={"timeout": "600"},
                                                  headers=ASK, trace_request_ctx=on_wire))
            signal = asyncio.ensure_future(on_wire.wait())
            await asyncio.wait([call, signal], return_when=asyncio.FIRST_COMPLETED)
            signal.cancel()
        written += 1
        if written == len(ids):
            all_written.set()
        resp = await call
        raise BenchError(f"a wait returned before any answer: {resp.status}")

    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                     trace_configs=[trace]) as http:
        tasks = []
        for start in range(0, len(ids), _BATCH):  # agents arriving at about OPEN_RATE a second
            tasks += [asyncio.create_task(wait(http, i)) for i in ids[start:start + _BATCH]]
            await asyncio.sleep(_BATCH / OPEN_RATE)
        done = asyncio.ensure_future(asyncio.gather(*tasks))
        ready = asyncio.ensure_future(all_written.wait())
        await asyncio.wait([done, ready], return_when=asyncio.FIRST_COMPLETED)
        if done.done():
            done.result()  # raises what went wrong
        print("written", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(asyncio.CancelledError):
            await done


async def measure_instances(count: int, waiters: int, *, as_deployed: bool) -> dict[str, Any]:
    """``count`` instances on one fresh PostgreSQL database, ``waiters`` parked on each at once."""
    raise_fd_limit()
    out: dict[str, Any] = {"machine": machine(), "waiters": waiters, "instances": count,
                           "as_deployed": as_deployed, "results": {}}
    with workdir() as tmp:
        if as_deployed:
            os.environ["BENCH_SERVE_SCRIPT"] = str(_deployed_entry(tmp))
        async with postgres_url() as url:
            print(f"postgresql: seeding {count * waiters:,} requests", file=sys.stderr, flush=True)
            ids = await seed_requests(storage_url=url, workdir=tmp, count=count * waiters)
            config = tmp / "instances.toml"
            config.write_text((tmp / "postgresql.toml").read_text(encoding="utf-8").replace(
                "[storage]\n", f"[storage]\npool_size = {INSTANCE_POOL}\n", 1), encoding="utf-8")
            async with contextlib.AsyncExitStack() as stack:
                servers = [await stack.enter_async_context(handraise_server(
                    storage_url=url, workdir=tmp, name=f"instance-{i}", config=config)) for i in range(count)]
                for server in servers:
                    await _quiet(server.pid)
                idle = [rss_mb(s.pid) for s in servers]
                clients = []
                for i, server in enumerate(servers):
                    ids_file = tmp / f"ids-{i}.txt"
                    ids_file.write_text("\n".join(ids[i * waiters:(i + 1) * waiters]), encoding="utf-8")
                    clients.append(await asyncio.create_subprocess_exec(
                        sys.executable, __file__, "--hold", server.base, "--ids", str(ids_file),
                        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE))
                try:
                    for client in clients:
                        assert client.stdout is not None
                        line = await asyncio.wait_for(client.stdout.readline(), timeout=600)
                        if line.strip() != b"written":
                            logs = "\n".join(_tail(tmp / f"instance-{i}.log", 40) for i in range(count))
                            raise BenchError(f"a client stopped before its waits were written; the servers "
                                             f"said:\n{logs}")
                    for server in servers:
                        await _quiet(server.pid)
                    parked = [rss_mb(s.pid) for s in servers]
                finally:
                    for client in clients:
                        assert client.stdin is not None
                        client.stdin.close()
                    for client in clients:
                        await client.wait()
                for i, server in enumerate(servers):
                    out["results"][f"instance {i + 1}"] = {"rss_idle_mb": idle[i], "rss_parked_mb": parked[i]}
    out["total_parked_mb"] = round(sum(r["rss_parked_mb"] for r in out["results"].values()), 1)
    return out


def render_instances(report: dict[str, Any]) -> str:
    n, k = report["waiters"], report["instances"]
    lines = [f"{k * n:,} agents waiting, {n:,} on each of {k} instances of one PostgreSQL database "
             f"({'as deployed' if report['as_deployed'] else 'development environment'}; target < "
             f"{TARGET_MB:g} MB each); load average at start {report['machine']['load_avg_at_start']}",
             f"{'':12}{'RSS idle':>10}{'RSS parked':>12}{'kB/waiter':>11}"]
    for name, r in report["results"].items():
        per = (r["rss_parked_mb"] - r["rss_idle_mb"]) * 1024 / n
        lines.append(f"{name:12}{r['rss_idle_mb']:>8.0f}MB{r['rss_parked_mb']:>10.0f}MB{per:>11.1f}")
    lines.append(f"{'all':12}{'':>10}{report['total_parked_mb']:>10.0f}MB")
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    if "instances" in report:
        return render_instances(report)
    n, floor = report["waiters"], report["results"]["floor"]
    lines = [f"{n:,} agents waiting ({'as deployed' if report['as_deployed'] else 'development environment'}; "
             f"target < {TARGET_MB:g} MB)",
             f"{'':12}{'RSS idle':>10}{'RSS parked':>12}{'kB/waiter':>11}{'over floor':>12}"]
    for name, r in report["results"].items():
        per = (r["rss_parked_mb"] - r["rss_idle_mb"]) * 1024 / n
        over = r["rss_parked_mb"] - floor["rss_parked_mb"]
        lines.append(f"{name:12}{r['rss_idle_mb']:>8.0f}MB{r['rss_parked_mb']:>10.0f}MB{per:>11.1f}"
                     f"{'' if name == 'floor' else f'{over:>+10.0f}MB':>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument("--as-deployed", action="store_true",
                        help="hide the packages installed only for the tests, as a wheel install would")
    parser.add_argument("--instances", type=int, default=1,
                        help="instances of one PostgreSQL database, --waiters parked on each at once (default 1)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--hold", help=argparse.SUPPRESS)  # the client of one instance (--instances)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hold:
        asyncio.run(hold_waits(args.hold, Path(args.ids).read_text(encoding="utf-8").split()))
        return 0
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    if args.instances > 1:
        report = asyncio.run(measure_instances(args.instances, args.waiters, as_deployed=args.as_deployed))
    else:
        report = asyncio.run(measure(stores, args.waiters, as_deployed=args.as_deployed))
    print(json.dumps(report, indent=2) if args.json else render(report))
    met = all(r["rss_parked_mb"] < TARGET_MB for name, r in report["results"].items() if name != "floor")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

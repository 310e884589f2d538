"""Handraise benchmarks, run by hand: full cycles per second, wake latency, RSS with many waiting agents.

    python bench/run.py [--store sqlite|postgresql|both] [--duration 10] [--workers 16] [--samples 500]
                        [--waiters 10000] [--json]

Each server (the floor, then Handraise on each store) runs as its own process; this process is the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import (  # noqa: E402  (bench/ is not a package: its modules are found through sys.path)
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
from workloads import Parked, create_many, cycles, parked_waits, wake_latency  # noqa: E402

TARGET_WAKE_P99_MS = 10.0
TARGET_SQLITE_CYCLES = 700.0
TARGET_POSTGRES_CYCLES = 500.0
TARGET_PARKED_MB = 250.0


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    limit = raise_fd_limit()
    if args.waiters + 1000 > limit:
        raise SystemExit(f"--waiters {args.waiters} needs more file descriptors than RLIMIT_NOFILE allows ({limit})")
    report: dict[str, Any] = {"machine": machine(), "settings": {
        "workers": args.workers, "duration_s": args.duration, "samples": args.samples, "waiters": args.waiters,
        "park_ms": args.park_ms}, "results": {}}
    report["settings"]["server"] = os.environ.get("BENCH_SERVE_SCRIPT") or "python -m core.cli serve"
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    quiet = args.json

    with workdir() as tmp:
        _say(quiet, "floor: bare aiohttp server")
        async with floor_server(workdir=tmp) as floor:
            result: dict[str, Any] = {"rss_idle_mb": rss_mb(floor.pid)}
            result["cycles"] = asdict(await cycles(floor, workers=args.workers, duration=args.duration))
            result["wake"] = asdict(await wake_latency(floor, samples=args.samples, park_ms=args.park_ms))
        if args.waiters:
            async with floor_server(workdir=tmp) as floor:
                ids = await create_many(floor, count=args.waiters)
                result["parked"] = _parked_json(await parked_waits(floor, request_ids=ids))
        report["results"]["floor"] = result

        for store in stores:
            _say(quiet, f"{store}: handraise serve")
            urls = sqlite_url(tmp / store) if store == "sqlite" else postgres_url()
            (tmp / store).mkdir(exist_ok=True)
            async with urls as url:
                async with handraise_server(storage_url=url, workdir=tmp, name=f"{store}-cycles") as server:
                    result = {"rss_idle_mb": rss_mb(server.pid)}
                    result["cycles"] = asdict(await cycles(server, workers=args.workers, duration=args.duration))
                    result["wake"] = asdict(await wake_latency(server, samples=args.samples, park_ms=args.park_ms))
                    result["rss_after_cycles_mb"] = rss_mb(server.pid)
                if args.waiters:
                    _say(quiet, f"{store}: seeding {args.waiters:,} requests")
                    t0 = time.monotonic()
                    ids = await seed_requests(storage_url=url, workdir=tmp, count=args.waiters)
                    result["seed_seconds"] = round(time.monotonic() - t0, 1)
                    # A fresh process, so the reading is the waiters' cost rather than the cycle run's leftovers.
                    async with handraise_server(storage_url=url, workdir=tmp, name=f"{store}-parked") as server:
                        result["parked"] = _parked_json(await parked_waits(server, request_ids=ids))
            report["results"][store] = result
    report["targets"] = targets(report)
    return report


def _parked_json(parked: Parked) -> dict[str, Any]:
    return asdict(parked) | {"kb_per_waiter": parked.kb_per_waiter}


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    results = report["results"]
    out = []
    for store in ("sqlite", "postgresql"):
        if store not in results:
            continue
        p99 = results[store]["wake"]["p99_ms"]
        out.append({"target": f"wake p99 < {TARGET_WAKE_P99_MS:g} ms ({store})", "value": round(p99, 2),
                    "met": p99 < TARGET_WAKE_P99_MS})
    for store, target in (("sqlite", TARGET_SQLITE_CYCLES), ("postgresql", TARGET_POSTGRES_CYCLES)):
        if store in results:
            rate = results[store]["cycles"]["per_second"]
            out.append({"target": f">= {target:g} cycles/s ({store})", "value": round(rate), "met": rate >= target})
    for store in ("sqlite", "postgresql"):
        parked = results.get(store, {}).get("parked")
        if parked:
            out.append({"target": f"{parked['waiters']:,} waiting < {TARGET_PARKED_MB:g} MB ({store})",
                        "value": round(parked["rss_parked_mb"]), "met": parked["rss_parked_mb"] < TARGET_PARKED_MB})
    return out


def render(report: dict[str, Any]) -> str:
    m, s, results = report["machine"], report["settings"], report["results"]
    floor = results["floor"]
    lines = [
        f"machine: {m['nproc']} cores, {m['cpu']}, {m['memory_gb']} GB; Python {m['python']}, aiohttp {m['aiohttp']}; "
        f"load average at start {m['load_avg_at_start']}",
        f"run: {s['workers']} workers for {s['duration_s']:g} s; {s['samples']} wake samples; "
        f"{s['waiters']:,} waiters; server: {s['server']}",
        "",
    ]
    head = ["", "cycles/s", "of floor", "cycle p50", "cycle p99", "server CPU", "wake p50", "wake p99",
            "p50 vs floor", "RSS idle", f"RSS {s['waiters']:,} waiting"]
    rows = [head]
    for name, r in results.items():
        c, w = r["cycles"], r["wake"]
        parked = r.get("parked")
        label = "floor (bare aiohttp)" if name == "floor" else f"handraise, {name}"
        rows.append([
            label, f"{c['per_second']:.0f}", f"{c['per_second'] / floor['cycles']['per_second']:.2f}",
            f"{c['p50_ms']:.1f} ms", f"{c['p99_ms']:.1f} ms", f"{c['server_cpu_percent']:.0f} %",
            f"{w['p50_ms']:.2f} ms", f"{w['p99_ms']:.2f} ms", f"{w['p50_ms'] / floor['wake']['p50_ms']:.1f}x",
            f"{r['rss_idle_mb']:.0f} MB",
            f"{parked['rss_parked_mb']:.0f} MB ({parked['kb_per_waiter']:.1f} kB each)" if parked else "-",
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                               for i, cell in enumerate(row)))
    lines.append("")
    for t in report["targets"]:
        lines.append(f"{'met   ' if t['met'] else 'MISSED'}  {t['target']}: {t['value']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the cycle run (default 10)")
    parser.add_argument("--workers", type=int, default=16, help="concurrent agents in the cycle run (default 16)")
    parser.add_argument("--samples", type=int, default=500, help="wake-latency samples (default 500)")
    parser.add_argument("--waiters", type=int, default=10000, help="agents waiting at once for the RSS reading; "
                                                                   "0 skips it (default 10000)")
    parser.add_argument("--park-ms", type=float, default=20.0,
                        help="how long a wait is given to park before the answer (default 20)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = asyncio.run(measure(args))
    report["bench_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if all(t["met"] for t in report["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Memory with many agents waiting: one instance's RSS idle and with N long-polls parked, beside the floor.

    python bench/memory.py [--store sqlite|postgresql|both] [--waiters 10000] [--as-deployed] [--json]

N pending requests are seeded through the real ``RequestService.create`` before a fresh ``handraise
serve`` starts (so the reading holds no create traffic), then one ``GET /v1/requests/{id}/wait`` per
request is held open at once; the server's VmRSS is read once every wait has been written and its CPU
has gone quiet. The floor (``bench/floor.py``: bare aiohttp, the same routes doing no work) parks the
same number of waits, so "over floor" is what Handraise adds to aiohttp's own per-connection cost.

``--as-deployed`` hides from the server every installed package outside the wheel's declared
dependencies (what this checkout has only for its tests: structlog imports ``rich`` and ``twisted``
and Mako imports ``pygments`` when they are present, about 20 MB), as ``pip install handraise``
would leave it; the default reads the development environment as it is.
Target (issue 19): 10,000 waiting agents under 250 MB on one instance.
"""

from __future__ import annotations

import argparse
import asyncio
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
    floor_server,
    handraise_server,
    machine,
    postgres_url,
    raise_fd_limit,
    seed_requests,
    sqlite_url,
    workdir,
)
from workloads import create_many, parked_waits  # noqa: E402

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


def render(report: dict[str, Any]) -> str:
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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    report = asyncio.run(measure(stores, args.waiters, as_deployed=args.as_deployed))
    print(json.dumps(report, indent=2) if args.json else render(report))
    met = all(r["rss_parked_mb"] < TARGET_MB for name, r in report["results"].items() if name != "floor")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

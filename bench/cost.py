"""Work per cycle, counted rather than timed: figures that a loaded machine does not move.

    python bench/cost.py [--store sqlite|postgresql|floor|all] [--cycles 300] [--profile N]

The server (the real ``create_app``, or the floor) runs on this process's main event loop, of the kind
``handraise serve`` runs (uvloop's where installed); one agent loops create → answer → wait (the answer
already there) from a client on a thread of its own, so the counts below are the server's alone:

- **store calls**: calls of the ``Store``'s public methods, transactions and readers included;
- **SQL statements**: statements the drivers executed, with the write transactions' BEGIN and
  COMMIT/ROLLBACK counted on PostgreSQL (each is a round trip there, so this is the round-trip count),
  and there the hot units' statements on the raw asyncpg connection (asyncpg's query logger); on
  SQLite every statement SQLite ran (its trace callback on every connection: SQLAlchemy's and the
  raw connection's alike, BEGIN and COMMIT included);
- **Python calls**: function calls on the server's event-loop thread (cProfile), the floor's own
  count beside it for the HTTP layer's share;
- **CPU ms**: the server's CPU time per cycle (process CPU less the client thread's), cProfile's
  overhead on the loop thread included; this one does move with the machine's load, unlike the others;
- **DB thread ms** (SQLite): the database thread's own CPU time per cycle (core/store/sqlite.py; not
  profiled, but the statement trace adds a few microseconds a statement): every statement and the
  rows' conversion run there. bench/instructions.py counts the same work without either counter.

``--profile N`` prints the N functions with the most own time on the server's loop thread.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import contextlib
import gc
import io
import os
import pstats
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from servers import free_port, postgres_url, workdir, write_config  # noqa: E402
from workloads import ANSWER, ANSWER_VALUE, ASK, MESSAGE, SCHEMA  # noqa: E402


class Counts:
    def __init__(self) -> None:
        self.store: Counter[str] = Counter()
        self.sql = 0

    def reset(self) -> None:
        self.store.clear()
        self.sql = 0


def _count_store(store: Any, counts: Counts) -> None:
    """Wrap the store's public methods on the instance: each call is one store call."""
    import functools
    import inspect

    for name in dir(type(store)):
        if name.startswith("_"):
            continue
        attr = getattr(type(store), name)
        if inspect.iscoroutinefunction(attr):
            def wrap(fn: Any, name: str = name) -> Any:
                @functools.wraps(fn)
                async def counted(*a: Any, **k: Any) -> Any:
                    counts.store[name] += 1
                    return await fn(*a, **k)
                return counted
            setattr(store, name, wrap(getattr(store, name)))
        elif name in ("transaction", "reader"):
            def wrap_cm(fn: Any, name: str = name) -> Any:
                @contextlib.asynccontextmanager
                async def counted(*a: Any, **k: Any) -> AsyncIterator[Any]:
                    counts.store[name] += 1
                    async with fn(*a, **k) as conn:
                        yield conn
                return counted
            setattr(store, name, wrap_cm(getattr(store, name)))


def _count_sqlite(counts: Counts) -> None:
    """Every statement SQLite runs on any connection opened from now on (set before the store opens)."""
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def statement(_sql: str) -> None:
        counts.sql += 1

    def connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.set_trace_callback(statement)

    event.listen(Engine, "connect", connect)


def _count_sql(engine: Any, counts: Counts, *, transactions: bool) -> None:
    """SQLAlchemy's statements (and, with ``transactions``, its BEGIN and COMMIT/ROLLBACK), plus on
    PostgreSQL the statements run on the raw asyncpg connection (core/store/pgunits.py), counted by
    asyncpg's query logger on every connection the pool hands out. SQLAlchemy's own statements are
    prepared statements, which asyncpg does not log; its BEGIN/COMMIT are, so the logger skips them."""
    import weakref

    from sqlalchemy import event

    def statement(*_a: Any, **_k: Any) -> None:
        counts.sql += 1

    event.listen(engine, "before_cursor_execute", statement)
    if transactions:
        for name in ("begin", "commit", "rollback"):
            event.listen(engine, name, statement)
    if engine.dialect.name != "postgresql":
        return
    logged: weakref.WeakSet[Any] = weakref.WeakSet()

    def raw_statement(record: Any) -> None:
        if not record.query.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            counts.sql += 1

    def checkout(dbapi_connection: Any, *_a: Any) -> None:
        raw = dbapi_connection.driver_connection
        if raw not in logged:
            logged.add(raw)
            raw.add_query_logger(raw_statement)

    event.listen(engine.pool, "checkout", checkout)


async def _handraise_app(storage_url: str, tmp: Path, counts: Counts | None) -> web.Application:
    """The real app on ``storage_url``; ``counts``: what to count its store calls and statements in (None: nothing)."""
    from handraise.core.app import create_app
    from handraise.core.appkeys import STORE
    from handraise.core.config import load_settings

    settings = load_settings(write_config(storage_url=storage_url, workdir=tmp))
    if counts is None:
        return await create_app(settings)
    if storage_url.startswith("sqlite"):
        _count_sqlite(counts)
    app = await create_app(settings)
    store = app[STORE]
    _count_store(store, counts)

    async def engines(app: web.Application) -> AsyncIterator[None]:
        # After the store opened (cleanup contexts run in order: the store's is first).
        # Readers run in autocommit (no BEGIN/COMMIT is sent); writers' BEGIN and COMMIT are round trips.
        for engine, transactions in ((store._engine, True), (store._read_engine, False)):
            if engine is not None:
                _count_sql(engine.sync_engine, counts, transactions=transactions)
        yield

    app.cleanup_ctx.append(engines)
    return app


def _client(base: str, cycles: int, warmup: int, ready: threading.Event, go: threading.Event,
            out: dict[str, float]) -> None:
    async def cycle(http: aiohttp.ClientSession, i: int) -> None:
        unique_id = f"cost-{time.time_ns()}-{i}"
        body = {"unique_id": unique_id, "message_for_user": MESSAGE, "timeout_seconds": 600, "schema": SCHEMA}
        async with http.post(f"{base}/v1/requests", json=body, headers=ASK) as r:
            assert r.status == 201, await r.text()
            request_id = (await r.json())["id"]
        async with http.post(f"{base}/api/human-feedback/submit", headers=ANSWER,
                             json={"unique_id": unique_id, "response": ANSWER_VALUE}) as r:
            assert r.status == 200, await r.text()
            await r.read()
        async with http.get(f"{base}/v1/requests/{request_id}/wait", params={"timeout": "5"}, headers=ASK) as r:
            data = await r.json()
            assert data["status"] == "answered", data

    async def main() -> None:
        async with aiohttp.ClientSession() as http:
            for i in range(warmup):
                await cycle(http, i)
            ready.set()
            go.wait()
            t0 = time.thread_time()
            for i in range(cycles):
                await cycle(http, warmup + i)
            out["client_cpu"] = time.thread_time() - t0

    asyncio.run(main())


def _db_thread_cpu(app: web.Application | None) -> Any:
    """The SQLite database thread's CPU clock (seconds so far), or None on the floor and PostgreSQL."""
    if app is None:
        return None
    from handraise.core.appkeys import STORE

    runner = app[STORE]._runner
    return None if runner is None else runner.thread.cpu_seconds


async def measure(kind: str, *, cycles: int, warmup: int, profile: int, counted: bool = True) -> dict[str, Any]:
    """``counted=False``: no store calls, statements or Python calls counted (no cProfile, no trace
    callback), so the server does only its own work (bench/instructions.py)."""
    counts = Counts()
    handraise_app: web.Application | None = None
    async with contextlib.AsyncExitStack() as stack:
        tmp = stack.enter_context(workdir())
        if kind == "floor":
            from floor import build_app

            app = build_app()
        elif kind == "sqlite":
            app = handraise_app = await _handraise_app(f"sqlite:///{tmp / 'cost.db'}", tmp, counts if counted else None)
        else:
            url = await stack.enter_async_context(postgres_url())
            app = handraise_app = await _handraise_app(url, tmp, counts if counted else None)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        if handraise_app is not None:
            # As `handraise serve` does: startup's heap left out of later collections, so a full one that
            # lands in a run walks only what the cycles made (bench/instructions.py's two runs stay comparable).
            from handraise.core.commands.serve import freeze_startup_heap

            freeze_startup_heap()
            stack.callback(gc.unfreeze)  # the next measure's app is not this one: this one's heap may go
        ready, go, out = threading.Event(), threading.Event(), {}
        client = threading.Thread(target=_client, args=(f"http://127.0.0.1:{port}", cycles, warmup, ready, go, out))
        client.start()
        while not ready.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # let the warm-up's trailing work (hand-overs, events) finish
        counts.reset()
        db_cpu = _db_thread_cpu(handraise_app)
        db_cpu0 = db_cpu() if db_cpu is not None else 0.0
        profiler = cProfile.Profile()
        cpu0 = time.process_time()
        if counted:
            profiler.enable()
        go.set()
        while client.is_alive():
            await asyncio.sleep(0.005)
        profiler.disable()
        cpu = time.process_time() - cpu0 - out["client_cpu"]
        db_ms = None if db_cpu is None else 1000 * (db_cpu() - db_cpu0) / cycles
        stats = pstats.Stats(profiler) if counted else None
        result = {
            "store_calls": sum(counts.store.values()) / cycles,
            "store_by_name": {k: v / cycles for k, v in sorted(counts.store.items())},
            "sql": counts.sql / cycles,
            "python_calls": None if stats is None else stats.total_calls / cycles,  # type: ignore[attr-defined]
            "cpu_ms": 1000 * cpu / cycles,
            "db_thread_ms": db_ms,
        }
        if profile and counted:
            buf = io.StringIO()
            pstats.Stats(profiler, stream=buf).sort_stats(os.environ.get("BENCH_PROFILE_SORT", "tottime")).print_stats(profile)
            result["profile"] = buf.getvalue()
        return result


def run_as_served(coro: Any) -> Any:
    """``coro`` on the event loop ``handraise serve`` runs the server on (uvloop's where installed:
    core/commands/serve.py), so the counts are the served server's."""
    from handraise.core.commands.serve import event_loop_factory

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgresql", "floor", "all"], default="all")
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with the most own time")
    args = parser.parse_args(argv)
    kinds = ["floor", "sqlite", "postgresql"] if args.store == "all" else [args.store]
    rows = []
    for kind in kinds:
        r = run_as_served(measure(kind, cycles=args.cycles, warmup=args.warmup, profile=args.profile))
        rows.append((kind, r))
        if args.profile:
            print(f"== {kind}\n{r['profile']}")
    print(f"per cycle (create → answer → wait), {args.cycles} cycles, one agent:")
    print(f"{'':12}{'store calls':>12}{'SQL stmts':>11}{'Python calls':>14}{'CPU ms':>8}{'DB thread ms':>14}")
    for kind, r in rows:
        db = "" if r["db_thread_ms"] is None else f"{r['db_thread_ms']:14.3f}"
        print(f"{kind:12}{r['store_calls']:12.1f}{r['sql']:11.1f}{r['python_calls']:14.0f}{r['cpu_ms']:8.2f}{db}")
    for kind, r in rows:
        if r["store_by_name"]:
            print(f"{kind} store calls: " + ", ".join(f"{k} {v:g}" for k, v in r["store_by_name"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Flat costs: each hot operation on a near-empty database and on one holding N requests, side by side.

    python bench/flat.py [--store sqlite|postgresql|both] [--rows 1000000] [--rounds 60] [--plans FILE]

Two databases per store, both migrated by the real store and filled by a bulk loader (SQL, not the
API: ``fill``): the baseline with 1,000 requests (so that a run and a first page of pending exist in
both), the other with ``--rows`` requests, their journal entries (created, then answered or
expired; two per request) and their runs (ten requests each). Of the requests 0.5 % are pending,
0.5 % expired, 0.1 % answered sensitive and still held (their retention not over), the rest answered.
The filled journal's hashes are placeholders: the chain does not verify, and no measured query
reads a hash.

Each round runs every operation once on each database, alternating, through the real service and
store in this process (no HTTP): create, submit (answer the request just created), wait (on an
answered request: one read), list pending (the first page, 100), a deep page of the whole list
(the 100 requests after a cursor at the middle of the table: keyset, so it costs what the first
does), run bundle (a run of ten requests with its journal), and the sweeper's two queries (overdue
requests, held sensitive answers). The
table gives medians, and "x" is the large database's over the baseline's. ``--plans`` writes EXPLAIN (ANALYZE) of each hot
query on the filled PostgreSQL database and SQLite's EXPLAIN QUERY PLAN.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sqlite3
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import TENANT, postgres_url, workdir, write_config  # noqa: E402

CHUNK = 20_000
BASELINE_ROWS = 1_000
# Pending requests at the start of each table, so that both have a full first page of pending.
PENDING_PAGE = 100
RUN_SIZE = 10
PLACEHOLDER = "0" * 64


def _request_rows(n: int, now: float, pending: int) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Requests with their journal entries (seq filled in by the caller)."""
    schema = json.dumps({"type": "string", "pattern": "^[0-9]{6}$"})
    for i in range(n):
        created = now - 86400 * 30 + i * (86400 * 30 / n)
        kind = i % 1000
        status = "pending" if kind < 5 or i < pending else "expired" if kind < 10 else "answered"
        sensitive_held = kind == 10
        row = {
            "id": f"req_fill{i:08d}", "tenant_id": TENANT, "unique_id": f"fill-{i}", "body_sha256": PLACEHOLDER,
            "message_for_user": "Enter the six-digit code sent to your phone.", "form_schema_json": schema,
            "kind": "input", "sensitive": sensitive_held, "run_id": f"run-fill-{i // RUN_SIZE}",
            "channels_json": '["web"]', "status": status, "created_by": "agent:bench-agent",
            "created_at": created,
            "expires_at": now + 86400 * 365 if status == "pending" else created + 300,
            "response_json": '"123456"' if status == "answered" and not sensitive_held else None,
            "response_digest": PLACEHOLDER if status == "answered" else None,
            # Within its retention: the sweeper's query finds it and leaves it.
            "response_delivered_at": None, "response_purged": False, "votes_version": 0,
            "resolved_by": "operator:bench-operator" if status == "answered" else None,
            "resolved_via": {"answered": "api", "expired": "timeout"}.get(status),
            "resolved_at": None if status == "pending" else (now - 60 if sensitive_held else created + 5),
        }
        entries = [{"request_id": row["id"], "run_id": row["run_id"], "event": "created",
                    "principal": "agent:bench-agent", "channel": None, "data_json": '{"unique_id":"fill"}',
                    "at": created}]
        if status != "pending":
            entries.append({"request_id": row["id"], "run_id": row["run_id"], "event": status,
                            "principal": row["resolved_by"], "channel": row["resolved_via"], "data_json": "{}",
                            "at": row["resolved_at"]})
        yield row, entries


Chunk = tuple[list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, str, str, str]]]


def _chunks(n: int, pending: int) -> Iterator[Chunk]:
    """Requests, journal entries and held sensitive answers (sealed_answers rows), CHUNK requests at a time."""
    now, seq = time.time(), 0
    requests: list[dict[str, Any]] = []
    journal: list[dict[str, Any]] = []
    sealed: list[tuple[str, str, str, str]] = []
    for row, entries in _request_rows(n, now, pending):
        requests.append(row)
        if row["sensitive"]:
            sealed.append((row["id"], TENANT, "sealed-placeholder", "key-placeholder"))
        for e in entries:
            seq += 1
            journal.append({"tenant_id": TENANT, "seq": seq, **e, "prev_hash": PLACEHOLDER, "hash": PLACEHOLDER})
        if len(requests) >= CHUNK:
            yield requests, journal, sealed
            requests, journal, sealed = [], [], []
    if requests:
        yield requests, journal, sealed


async def fill(url: str, rows: int, *, pending: int = 0) -> float:
    """Bulk-load ``rows`` requests and their journal; seconds taken."""
    from handraise.core.models import JournalRow, RequestRow

    req_cols = [c.name for c in RequestRow.__table__.columns]
    jr_cols = [c.name for c in JournalRow.__table__.columns]
    t0 = time.monotonic()
    last_seq = 0
    if url.startswith("sqlite"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        db.execute("PRAGMA synchronous=OFF")
        for requests, journal, sealed in _chunks(rows, pending):
            db.executemany(f"INSERT INTO requests ({','.join(req_cols)}) VALUES ({','.join('?' * len(req_cols))})",
                           [tuple(r.get(c) for c in req_cols) for r in requests])
            db.executemany(f"INSERT INTO journal ({','.join(jr_cols)}) VALUES ({','.join('?' * len(jr_cols))})",
                           [tuple(j[c] for c in jr_cols) for j in journal])
            db.executemany("INSERT INTO sealed_answers (request_id, tenant_id, sealed, wrapped_key) VALUES (?, ?, ?, ?)",
                           sealed)
            last_seq = journal[-1]["seq"]
            db.commit()
        db.execute("INSERT OR REPLACE INTO journal_heads (tenant_id, seq, hash) VALUES (?, ?, ?)",
                   (TENANT, last_seq, PLACEHOLDER))
        db.commit()
        db.close()
    else:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            for requests, journal, sealed in _chunks(rows, pending):
                await conn.copy_records_to_table("requests", columns=req_cols,
                                                 records=[tuple(r.get(c) for c in req_cols) for r in requests])
                await conn.copy_records_to_table("journal", columns=jr_cols,
                                                 records=[tuple(j[c] for c in jr_cols) for j in journal])
                await conn.copy_records_to_table("sealed_answers", records=sealed)
                last_seq = journal[-1]["seq"]
            await conn.execute("INSERT INTO journal_heads (tenant_id, seq, hash) VALUES ($1, $2, $3) "
                               "ON CONFLICT (tenant_id) DO UPDATE SET seq = $2, hash = $3",
                               TENANT, last_seq, PLACEHOLDER)
            # As autovacuum would after such growth: the planner knows the table's size.
            await conn.execute("ANALYZE")
        finally:
            await conn.close()
    return time.monotonic() - t0


class Target:
    """One database with the real service and store on it."""

    def __init__(self, url: str, tmp: Path, name: str, rows: int) -> None:
        self.url, self.tmp, self.name, self.rows = url, tmp, name, rows

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[Target]:
        from handraise.core.annotations import AnnotationService
        from handraise.core.config import load_settings
        from handraise.core.events import EventBus
        from handraise.core.serversecret import load_server_secret
        from handraise.core.service import RequestService
        from handraise.core.store import Store

        (self.tmp / self.name).mkdir(exist_ok=True)
        settings = load_settings(write_config(storage_url=self.url, workdir=self.tmp / self.name))
        self.store = Store(url=settings.storage.url, secret=load_server_secret(settings))
        bus = EventBus(instance_id=f"flat-{self.name}")
        self.service = RequestService(settings=settings, store=self.store, bus=bus)
        self.annotations = AnnotationService(settings=settings, store=self.store, bus=bus)
        await self.store.open()
        try:
            self.deep_cursor = await self._middle_cursor()
            yield self
        finally:
            await self.store.close()


    async def _middle_cursor(self) -> str | None:
        """A cursor at the middle row of the whole list, as a client paging from the start would hold."""
        from handraise.core.cursors import KEY_PURPOSE, CursorSigner, Position

        row = await self.store.get_request(TENANT, f"req_fill{self.rows // 2:08d}")
        if row is None:  # not filled yet
            return None
        return CursorSigner(self.store.secret.key(KEY_PURPOSE)).encode(
            Position(row["created_at"], row["id"]), scope={"tenant": TENANT, "status": None, "run_id": None})


async def _ops(t: Target, run: str, i: int) -> dict[str, float]:
    from handraise.core.api import CreateRequestBody

    out: dict[str, float] = {}
    body = CreateRequestBody.model_validate({
        "unique_id": f"flat-{run}-{i}", "message_for_user": "Enter the six-digit code sent to your phone.",
        "timeout_seconds": 600, "schema": {"type": "string", "pattern": "^[0-9]{6}$"}, "run_id": f"flat-{run}"})
    s = t.service
    t0 = time.perf_counter()
    view, _ = await s.create(tenant_id=TENANT, principal="agent:bench-agent", body=body)
    t1 = time.perf_counter()
    await s.submit(tenant_id=TENANT, unique_id=body.unique_id, response="123456", principal="operator:bench-operator",
                   channel="api")
    t2 = time.perf_counter()
    await s.wait(tenant_id=TENANT, request_id=view.id, timeout=0)
    t3 = time.perf_counter()
    await s.list(tenant_id=TENANT, status="pending", limit=100)
    t4 = time.perf_counter()
    views, _ = await s.page(tenant_id=TENANT, cursor=t.deep_cursor, limit=100)
    assert len(views) == 100
    t4b = time.perf_counter()
    await t.annotations.bundle(tenant_id=TENANT, run_id=f"run-fill-{(i * 7919) % (BASELINE_ROWS // RUN_SIZE)}")
    t5 = time.perf_counter()
    now = time.time()
    await t.store.overdue_requests(now)
    await t.store.sealed.due(resolved_before=now - 3600, delivered_before=now - 30)
    t6 = time.perf_counter()
    out.update(create=t1 - t0, submit=t2 - t1, wait=t3 - t2, list_pending=t4 - t3, deep_page=t4b - t4,
               bundle=t5 - t4b, sweeper=t6 - t5)
    return out


OPS = ["create", "submit", "wait", "list_pending", "deep_page", "bundle", "sweeper"]


async def measure(store: str, rows: int, rounds: int, tmp: Path, plans: list[str]) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        if store == "sqlite":
            empty_url, full_url = f"sqlite:///{tmp / 'empty.db'}", f"sqlite:///{tmp / 'full.db'}"
        else:
            empty_url = await stack.enter_async_context(postgres_url())
            full_url = await stack.enter_async_context(postgres_url())
        empty_target = Target(empty_url, tmp, f"{store}-empty", BASELINE_ROWS)
        full_target = Target(full_url, tmp, f"{store}-full", rows)
        for target in (empty_target, full_target):
            async with target.opened():
                pass  # migrated
        print(f"{store}: filling {rows:,} requests …", file=sys.stderr, flush=True)
        await fill(empty_url, BASELINE_ROWS, pending=PENDING_PAGE)
        fill_s = await fill(full_url, rows, pending=PENDING_PAGE)
        print(f"{store}: filled in {fill_s:.0f} s", file=sys.stderr, flush=True)
        empty = await stack.enter_async_context(empty_target.opened())
        full = await stack.enter_async_context(full_target.opened())
        run = secrets.token_hex(3)
        times: dict[str, dict[str, list[float]]] = {"empty": {o: [] for o in OPS}, "full": {o: [] for o in OPS}}
        for i in range(rounds + 5):
            for name, t in (("empty", empty), ("full", full)) if i % 2 else (("full", full), ("empty", empty)):
                r = await _ops(t, run, i)
                if i >= 5:  # warm-up rounds
                    for o in OPS:
                        times[name][o].append(r[o])
        if plans is not None:
            plans.append(await explain(store, full_url))
        return {"fill_seconds": fill_s, "median_ms": {
            n: {o: 1000 * statistics.median(v) for o, v in ops.items()} for n, ops in times.items()}}


async def explain(store: str, url: str) -> str:
    """The plans of the hot queries on the filled database, as text."""
    from sqlalchemy.dialects import postgresql, sqlite

    from handraise.core.store import statements as st
    from handraise.core.store.sealed import HELD_DUE

    now = time.time()
    queries = {
        "get request with deliveries (wait, submit)": (st.GET_REQUEST_JOINED, {"id": "req_fill00500000",
                                                                              "tenant_id": TENANT}),
        "by unique_id (submit)": (st.GET_REQUEST_BY_UNIQUE_ID_JOINED, {"unique_id": "fill-500000",
                                                                      "tenant_id": TENANT}),
        "list pending, first page": (st.list_requests_statement(TENANT, status="pending", run_id=None, limit=100),
                                     {}),
        "a deep page of the whole list (cursor at the middle)": (st.list_requests_statement(
            TENANT, status=None, run_id=None, limit=101, after=(time.time() - 86400 * 15, "req_fill00500000")), {}),
        "requests of a run (bundle)": (st.list_requests_statement(TENANT, status=None, run_id="run-fill-50000",
                                                                  limit=10000), {}),
        "journal of a run (bundle)": (st.journal_t.select().where(st.journal_t.c.tenant_id == TENANT,
                                                                  st.journal_t.c.run_id == "run-fill-50000")
                                      .order_by(st.journal_t.c.seq), {}),
        "overdue (sweeper)": (st.overdue_statement(now, limit=500), {}),
        "held sensitive (sweeper)": (HELD_DUE.limit(500), {"resolved_before": now - 3600,
                                                           "delivered_before": now - 30}),
    }
    out = [f"## {store}, {url.rsplit('/', 1)[-1]}"]
    dialect = sqlite.dialect() if store == "sqlite" else postgresql.dialect()
    for title, (stmt, params) in queries.items():
        sql = str(stmt.compile(dialect=dialect, compile_kwargs={"literal_binds": True}) if not params
                  else stmt.params(**params).compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        out.append(f"### {title}\n{sql}")
        if store == "sqlite":
            db = sqlite3.connect(url.removeprefix("sqlite:///"))
            try:
                plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql)]
            finally:
                db.close()
        else:
            import asyncpg

            conn = await asyncpg.connect(url)
            try:
                plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql)]
            finally:
                await conn.close()
        out.append("\n".join(plan))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--plans", type=Path, default=None, help="write the hot queries' plans here")
    args = parser.parse_args(argv)
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    plans: list[str] | None = [] if args.plans else None
    results = {}
    with workdir() as tmp:
        for store in stores:
            (tmp / store).mkdir()
            results[store] = asyncio.run(measure(store, args.rows, args.rounds, tmp / store, plans))
    if plans is not None:
        args.plans.write_text("\n\n".join(plans) + "\n", encoding="utf-8")
    print(f"median ms per operation, {BASELINE_ROWS:,} vs {args.rows:,} stored requests ({args.rounds} rounds):")
    print(f"{'':24}" + "".join(f"{o:>14}" for o in OPS))
    for store, r in results.items():
        m = r["median_ms"]
        print(f"{store + f', {BASELINE_ROWS:,}':24}" + "".join(f"{m['empty'][o]:14.2f}" for o in OPS))
        print(f"{store + f', {args.rows:,}':24}" + "".join(f"{m['full'][o]:14.2f}" for o in OPS))
        print(f"{store + ', x':24}" + "".join(f"{m['full'][o] / m['empty'][o]:14.2f}" for o in OPS))
        print(f"{store}: filled in {r['fill_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

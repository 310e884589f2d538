"""Crypto-shredding leaves nothing that opens (issue 29, item 9), on both stores: once the agent collected
sensitive answers and they were deleted, no file of the database, read raw, holds any of their sealed
values or wrapped keys, and no token in them shaped like a wrapped key opens any of them."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import Api, base_config, running_app, settings_from, sweeper_held
from handraise.core.appkeys import SERVICE, STORE
from handraise.core.sealing import Sealer

# A wrapped key is 60 bytes (nonce, key, tag): 80 base64 characters, no padding. A row may hold it right
# after or before another column's text (SQLite's records have nothing between values), so a run of
# base64 characters may start or end with one.
BASE64_RUN = re.compile(rb"[A-Za-z0-9+/=]{80,}")
# Large enough to leave the row: PostgreSQL's TOAST table, SQLite's overflow pages.
LARGE = "x" * 3000 + "".join(f"{i:05d}" for i in range(800))


@dataclass(frozen=True)
class Held:
    request_id: str
    answer: str
    sealed: str
    key: str


def body(uid: str) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "The secret, please", "timeout_seconds": 600, "sensitive": True}


async def answered(api: Api, n: int) -> list[Held]:
    """``n`` sensitive requests answered (the last with a large answer), with what the store holds of each."""
    held = []
    for i in range(n):
        answer = LARGE if i == n - 1 else f"secret {i:04d} {time.time()}"
        req = await api.create(body(f"shred-{i}"))
        assert (await api.submit(f"shred-{i}", answer))[0] == 200
        row = await api.app[STORE].get_request("acme", req["id"])
        assert row["response_sealed"] and row["response_key"]
        held.append(Held(req["id"], answer, row["response_sealed"], row["response_key"]))
    return held


def windows(sealed: str) -> list[bytes]:
    """Pieces of a sealed value, each found in a file even when the value was stored in chunks."""
    return [sealed[i:i + 40].encode() for i in range(0, max(len(sealed) - 40, 1), 400)]


def leftovers(files: dict[str, bytes], held: list[Held], sealer: Sealer) -> list[str]:
    """What the files still hold of each answer, by name; [] when nothing."""
    found = []
    for name, data in files.items():
        for h in held:
            if h.key.encode() in data:
                found.append(f"{name}: the wrapped key of {h.request_id}")
            if any(piece in data for piece in windows(h.sealed)):
                found.append(f"{name}: the sealed answer of {h.request_id}")
        # Not only the bytes known beforehand: nothing in the files shaped like a wrapped key opens any answer.
        runs = [m.group().decode() for m in BASE64_RUN.finditer(data)]
        for token in {run[:80] for run in runs} | {run[-80:] for run in runs}:
            for h in held:
                with contextlib.suppress(ValueError):
                    sealer.open(tenant_id="acme", request_id=h.request_id, sealed=h.sealed, wrapped=token)
                    found.append(f"{name}: a key that opens {h.request_id}")
    return found


async def postgres_files(url: str) -> dict[str, bytes]:
    """Every file of the database's own directory (each table, TOAST table and index), read raw once
    PostgreSQL has written its buffers out."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CHECKPOINT")
        directory = Path(await conn.fetchval("SHOW data_directory"))
        relation = await conn.fetchval("SELECT pg_relation_filepath('sealed_answers')")
        oid = await conn.fetchval("SELECT oid FROM pg_database WHERE datname = current_database()")
    finally:
        await conn.close()
    folder = directory / "base" / str(oid)
    try:
        (directory / relation).stat()
        return {f"base/{oid}/{p.name}": p.read_bytes() for p in folder.iterdir() if p.is_file()}
    except OSError as e:
        pytest.skip(f"PostgreSQL's data directory is not readable from here ({e}): not the same machine, "
                    "or not as root")


def sqlite_files(folder: Path) -> dict[str, bytes]:
    """The database file with its -wal and -shm beside it."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith("handraise.db")}


async def test_nothing_of_a_shredded_answer_is_left_in_the_files(storage_url: str, tmp_path: Path) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        store, service = api.app[STORE], api.app[SERVICE]
        sealer = Sealer(store.secret)

        async def files() -> dict[str, bytes]:
            return await postgres_files(storage_url) if store.is_postgres else sqlite_files(tmp_path)

        async with sweeper_held(api):
            held = await answered(api, 13)
            # The scan sees what is there: every answer still held is found, each of its parts, and opens.
            before = " ".join(leftovers(await files(), held, sealer))
            for h in held:
                for what in ("the wrapped key of", "the sealed answer of", "a key that opens"):
                    assert f"{what} {h.request_id}" in before, f"the scan does not see {what} {h.request_id}"
            old_snapshot = await _old_snapshot(storage_url) if store.is_postgres else None
            for i, h in enumerate(held[:-1]):
                assert (await api.wait(h.request_id))["response"] == h.answer
                if i % 2:
                    assert (await api.call("POST", f"/v1/requests/{h.request_id}/ack"))[0] == 200
                else:
                    assert (await api.wait(h.request_id))["response"] == h.answer  # the second hand-over deletes it
            await service.drain()
            # The last was never collected: the sweeper deletes it once its retention is over, then cleans.
            service.clock = lambda: time.time() + 7200
            await service.sweep()
            assert store.sealed.dirty is False
            for h in held:
                row = await store.get_request("acme", h.request_id)
                assert row["response_purged"] and row["response_sealed"] is None
            # A transaction open since before the deletions does not keep them in the files (as VACUUM FULL would).
            assert leftovers(await files(), held, sealer) == []
            if old_snapshot is not None:
                await old_snapshot.close()


async def _old_snapshot(url: str) -> Any:
    """A connection in a REPEATABLE READ transaction whose snapshot sees every answer still held."""
    import asyncpg

    conn = await asyncpg.connect(url)
    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    await conn.fetchval("SELECT count(*) FROM requests")
    return conn


async def test_a_cleaning_that_cannot_lock_the_table_soon_gives_up_and_the_next_one_does_it(pg_url: str) -> None:
    """The rewrite waits for its lock at most LOCK_TIMEOUT_MS (queued behind it, the answering and collecting
    of sensitive answers would wait too), and stays due until a later tick does it."""
    import asyncpg

    from handraise.core.store.sealed import LOCK_TIMEOUT_MS

    async with running_app(settings_from(base_config(pg_url))) as api:
        store = api.app[STORE]
        async with sweeper_held(api):
            held = await answered(api, 2)
            for h in held:
                assert (await api.call("POST", f"/v1/requests/{h.request_id}/ack"))[0] == 200
            blocker = await asyncpg.connect(pg_url)
            try:
                await blocker.execute("BEGIN")
                await blocker.fetchval("SELECT count(*) FROM sealed_answers")  # holds its lock to the end
                started = time.monotonic()
                assert await store.sealed.shred() is False
                assert time.monotonic() - started < LOCK_TIMEOUT_MS / 1000 + 2.0
                assert store.sealed.dirty is True
                # Meanwhile nothing else waited: other requests never touch the table.
                assert (await api.create({"unique_id": "plain", "message_for_user": "Go?", "timeout_seconds": 60}))
            finally:
                await blocker.close()
            assert await store.sealed.shred() is True and store.sealed.dirty is False
            assert leftovers(await postgres_files(pg_url), held, Sealer(store.secret)) == []
            # A tick with nothing deleted since rewrites nothing.
            assert await asyncio.wait_for(store.sealed.shred(), 1) is True


async def test_a_wal_another_process_keeps_from_truncating_is_truncated_by_a_later_tick(sqlite_url: str,
                                                                                       tmp_path: Path) -> None:
    """SQLite: a reader of another process (the CLI, a backup) keeps the WAL from being truncated; the
    checkpoint gives up at once rather than holding the database thread, and a later tick finishes it."""
    import sqlite3

    async with running_app(settings_from(base_config(sqlite_url))) as api:
        store = api.app[STORE]
        async with sweeper_held(api):
            held = await answered(api, 2)
            reader = sqlite3.connect(tmp_path / "handraise.db")
            try:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM requests").fetchall()  # a snapshot from before the deletions
                started = time.monotonic()
                for h in held:
                    assert (await api.call("POST", f"/v1/requests/{h.request_id}/ack"))[0] == 200
                assert await store.sealed.shred() is False and store.sealed.dirty is True
                assert time.monotonic() - started < 3.0  # not the 10 s the store's writers wait for a lock
                assert leftovers(sqlite_files(tmp_path), held, Sealer(store.secret)) != []  # the WAL holds them
            finally:
                reader.close()
            assert await store.sealed.shred() is True and store.sealed.dirty is False
            assert leftovers(sqlite_files(tmp_path), held, Sealer(store.secret)) == []

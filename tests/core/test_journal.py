"""The journal's tamper evidence (issue 11, item 7) and its chains per tenant (issue 19): keyed
chains nobody can recompute, an anchor that catches a cut tail, a cross-check with the requests
table; and an older database upgraded in place."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from sqlalchemy import text

from conftest import Api, base_config, running_app, settings_from
from handraise.core.appkeys import STORE
from handraise.core.canonical import canonical_json
from handraise.core.serversecret import ServerSecret
from handraise.core.store import Store
from handraise.core.store.journal import GENESIS_HASH, chain_hash

SECRET = ServerSecret(bytes(range(32)))


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Go?", "timeout_seconds": 60, **extra}


async def sql(store: Store, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Tampering as someone with write access to the database would: plain SQL, no server secret."""
    def run(c: Any) -> list[Any]:
        result = c.execute(text(statement), params or {})
        return [tuple(r) for r in result] if result.returns_rows else []

    async with store.transaction() as conn:
        return await conn.run(run)


async def answered_requests(api: Api, n: int, prefix: str = "j") -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        req = await api.create(body(f"{prefix}-{i}"))
        assert (await api.submit(f"{prefix}-{i}", f"answer {i}"))[0] == 200
        out.append(req)
    return out


async def test_recomputing_the_whole_chain_without_the_secret_is_caught(api: Api) -> None:
    await answered_requests(api, 3)
    store = api.app[STORE]
    assert await store.verify_journal() == []
    # Alter an answer's principal in both tables, then recompute every hash as the old unkeyed chain did
    # (and, as a forger would try, with a guessed key): neither passes.
    await sql(store, "UPDATE journal SET principal = 'operator:mallory' WHERE event = 'answered'")
    await sql(store, "UPDATE requests SET resolved_by = 'operator:mallory'")
    for forged_key in (None, b"guessed key"):
        rows = await sql(store, "SELECT tenant_id, seq, request_id, run_id, event, principal, channel, data_json, "
                                "at FROM journal ORDER BY tenant_id, seq")
        prev = GENESIS_HASH
        for tenant, seq, request_id, run_id, event, principal, channel, data_json, at in rows:
            fields = {"seq": seq, "tenant_id": tenant, "request_id": request_id, "run_id": run_id,
                      "event": event, "principal": principal, "channel": channel, "data_json": data_json, "at": at}
            if forged_key is None:  # the old chain's unkeyed sha256
                old_body = {k: v for k, v in fields.items() if k != "data_json"} | {"data": data_json, "at": repr(at)}
                digest = hashlib.sha256((prev + canonical_json(old_body)).encode()).hexdigest()
            else:
                digest = chain_hash(forged_key, prev_hash=prev, **fields)
            await sql(store, "UPDATE journal SET prev_hash = :p, hash = :h WHERE tenant_id = :t AND seq = :s",
                      {"p": prev, "h": digest, "t": tenant, "s": seq})
            prev = digest
        await sql(store, "UPDATE journal_heads SET seq = :s, hash = :h", {"s": rows[-1][1], "h": prev})
        problems = await store.verify_journal()
        assert any("altered" in p for p in problems), problems


async def test_a_cut_tail_with_a_rewritten_head_is_caught_by_the_anchor_and_the_requests(api: Api) -> None:
    store = api.app[STORE]
    await answered_requests(api, 2)
    anchor = await store.journal.anchor()
    assert await store.verify_journal(anchor=anchor) == []
    # Cut the last two entries (the second answer and its creation's neighbour) and move the head to match.
    await sql(store, "DELETE FROM journal WHERE tenant_id = 'acme' AND seq > (SELECT max(seq) - 2 FROM journal "
                     "WHERE tenant_id = 'acme')")
    seq, digest = (await sql(store, "SELECT seq, hash FROM journal WHERE tenant_id = 'acme' ORDER BY seq DESC "
                                    "LIMIT 1"))[0]
    await sql(store, "UPDATE journal_heads SET seq = :s, hash = :h WHERE tenant_id = 'acme'", {"s": seq, "h": digest})
    with_anchor = await store.verify_journal(anchor=anchor)
    assert any("anchor" in p and "removed from the end" in p for p in with_anchor), with_anchor
    # Without an anchor, the requests table still tells: an answered request lost its journal entry.
    without = await store.verify_journal()
    assert any("answered, but the journal has no such entry" in p for p in without), without


async def test_the_requests_table_is_cross_checked(api: Api) -> None:
    store = api.app[STORE]
    req = (await answered_requests(api, 1))[0]
    await sql(store, "UPDATE requests SET response_digest = :d WHERE id = :i", {"d": "0" * 64, "i": req["id"]})
    assert any("digest differs" in p for p in await store.verify_journal())
    pending = await api.create(body("still-pending"))
    await sql(store, "UPDATE requests SET status = 'answered', resolved_by = 'operator:op-1' WHERE id = :i",
              {"i": pending["id"]})
    assert any(pending["id"] in p and "no such entry" in p for p in await store.verify_journal())


async def test_journal_anchor_and_verify_on_the_command_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from handraise.core.cli import main

    db = tmp_path / "j.db"
    config = tmp_path / "handraise.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{db}"\n')
    async with running_app(settings_from(base_config(f"sqlite:///{db}"))) as api:
        await answered_requests(api, 2)
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "anchor"]) == 0
    anchor = capsys.readouterr().out.strip()
    assert json.loads(anchor)["heads"]["acme"]["seq"] == 4
    (tmp_path / "anchor.json").write_text(anchor)
    for given in (anchor, str(tmp_path / "anchor.json")):
        assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify", "--anchor", given]) == 0
        assert "reaches the anchor" in capsys.readouterr().out
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM journal WHERE seq = 4")
    conn.execute("UPDATE journal_heads SET seq = 3, hash = (SELECT hash FROM journal WHERE seq = 3)")
    conn.commit()
    conn.close()
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify", "--anchor", anchor]) == 1
    assert "removed from the end" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify", "--anchor", "{}"]) == 64


async def test_tenants_chains_do_not_wait_for_each_other(pg_url: str) -> None:
    store = Store(url=pg_url, secret=SECRET)
    await store.open()
    try:
        holding = asyncio.Event()
        release = asyncio.Event()

        async def slow_tenant() -> None:
            async with store.transaction() as conn:
                await store.append_journal(conn, tenant_id="slow", event="created")
                holding.set()
                await release.wait()  # this tenant's head stays locked until COMMIT

        task = asyncio.create_task(slow_tenant())
        await holding.wait()
        # A second writer of the held tenant queues behind its head's row lock (the lock is per tenant, not
        # absent): seen in PostgreSQL's own view of who waits for a lock, not guessed from a delay.
        async def append(tenant: str) -> None:
            async with store.transaction() as conn:
                await store.append_journal(conn, tenant_id=tenant, event="created")

        queued = asyncio.create_task(append("slow"))
        await until_lock_waiters(store, 1)
        # Another tenant appends and commits while the first transaction is still open.
        await asyncio.wait_for(append("fast"), timeout=10)
        assert not queued.done()
        release.set()
        await task
        await queued
        assert [e.seq for e in await store.journal_entries(tenant_id="fast")] == [1]
        assert [e.seq for e in await store.journal_entries(tenant_id="slow")] == [1, 2]
        assert await store.verify_journal() == []
    finally:
        await store.close()


async def until_lock_waiters(store: Store, count: int, timeout: float = 10.0) -> None:
    """Until ``count`` backends of this database wait for a heavyweight lock (pg_stat_activity)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = await sql(store, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND wait_event_type = 'Lock'")
        if rows[0][0] >= count:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{count} lock waiter(s) never appeared"
        await asyncio.sleep(0.02)


async def test_concurrent_writers_of_two_tenants_leave_two_whole_chains(storage_url: str) -> None:
    store = Store(url=storage_url, secret=SECRET)
    await store.open()
    try:
        async def append(tenant: str, i: int) -> None:
            async with store.transaction() as conn:
                await store.append_journal(conn, tenant_id=tenant, event="annotation", data={"i": i})

        await asyncio.gather(*(append(tenant, i) for i in range(25) for tenant in ("acme", "globex")))
        for tenant in ("acme", "globex"):
            entries = await store.journal_entries(tenant_id=tenant)
            assert [e.seq for e in entries] == list(range(1, 26))
            assert sorted(e.data["i"] for e in entries) == list(range(25))
            # Each chain starts at the genesis and links only its own tenant's entries.
            assert [e.prev_hash for e in entries] == [GENESIS_HASH] + [e.hash for e in entries[:-1]]
            assert {e.tenant_id for e in entries} == {tenant}
        assert await store.verify_journal() == []
    finally:
        await store.close()


async def test_tampering_is_reported_for_its_tenant_only(api: Api) -> None:
    store = api.app[STORE]
    await answered_requests(api, 2, prefix="a")
    async with store.transaction() as conn:
        await store.append_journal(conn, tenant_id="globex", event="annotation", data={"note": "kept"})
    await sql(store, "UPDATE journal SET data_json = :d WHERE tenant_id = 'globex'", {"d": '{"note":"forged"}'})
    problems = await store.verify_journal()
    assert problems and all(p.startswith("tenant globex") for p in problems), problems
    assert any("altered" in p for p in problems), problems


async def test_an_entry_moved_into_another_tenants_chain_is_caught(api: Api) -> None:
    """Chains never cross: an entry of one tenant re-homed at the end of another's (its seq and its
    prev_hash made to fit, the head moved to it) fails its HMAC, which covers the tenant."""
    store = api.app[STORE]
    await answered_requests(api, 1, prefix="m")
    async with store.transaction() as conn:
        await store.append_journal(conn, tenant_id="globex", event="annotation", data={"note": "globex's"})
    (acme_seq, acme_hash), = await sql(store, "SELECT seq, hash FROM journal_heads WHERE tenant_id = 'acme'")
    await sql(store, "UPDATE journal SET tenant_id = 'acme', seq = :s, prev_hash = :p WHERE tenant_id = 'globex'",
              {"s": acme_seq + 1, "p": acme_hash})
    moved_hash, = (await sql(store, "SELECT hash FROM journal WHERE tenant_id = 'acme' AND seq = :s",
                             {"s": acme_seq + 1}))[0]
    await sql(store, "UPDATE journal_heads SET seq = :s, hash = :h WHERE tenant_id = 'acme'",
              {"s": acme_seq + 1, "h": moved_hash})
    problems = await store.verify_journal()
    assert f"tenant acme, entry {acme_seq + 1}: altered (its HMAC does not match)" in problems, problems
    assert any(p.startswith("tenant globex") and "removed from the end" in p for p in problems), problems

# -- upgrading a database made at the previous head (0003) -------------------------------


@pytest.fixture
async def empty_url(storage_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database (not the migrated template) on each store."""
    if storage_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    import asyncpg

    from conftest import _admin_dsn

    name = f"hr_old_{secrets.token_hex(5)}"
    admin = await asyncpg.connect(_admin_dsn())
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield _admin_dsn(name)
    admin = await asyncpg.connect(_admin_dsn())
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def _legacy_database(c: Any) -> None:
    """A database as revision 0003 left it, with the old global sha256 chain and plain answers."""
    from handraise.core.store.store import upgrade

    upgrade(c, None, "0003")
    now = 1_700_000_000.0
    requests = [  # (id, tenant, sensitive, response_json, purged)
        ("req_a", "acme", False, '"blue"', False),
        ("req_b", "acme", True, '"480137"', False),   # sensitive, not collected yet
        ("req_c", "globex", True, None, True),        # sensitive, collected and deleted
    ]
    for rid, tenant, sensitive, response, purged in requests:
        c.execute(text(
            "INSERT INTO requests (id, tenant_id, unique_id, body_sha256, message_for_user, kind, sensitive, "
            "channels_json, status, created_by, created_at, expires_at, response_json, response_sha256, "
            "response_purged, resolved_by, resolved_via, resolved_at) VALUES (:id, :t, :id, :z, 'q', 'input', :s, "
            "'[]', 'answered', 'agent:a', :now, :exp, :r, :h, :p, 'operator:op', 'api', :now)"),
            {"id": rid, "t": tenant, "z": "0" * 64, "s": sensitive, "now": now, "exp": now + 60, "r": response,
             "h": hashlib.sha256(b'"480137"').hexdigest(), "p": purged})
    prev, seq = GENESIS_HASH, 0
    for rid, tenant, sensitive, response, _purged in requests:
        for event in ("created", "answered"):
            seq += 1
            data: dict[str, Any] = {}
            if event == "answered":
                data["response_sha256"] = hashlib.sha256(b'"480137"').hexdigest()
                if not sensitive:
                    data["response"] = json.loads(response)
            row = {"seq": seq, "tenant_id": tenant, "request_id": rid, "run_id": None, "event": event,
                   "principal": "operator:op" if event == "answered" else "agent:a",
                   "channel": "api" if event == "answered" else None, "data_json": canonical_json(data), "at": now}
            body = canonical_json({**{k: v for k, v in row.items() if k != "data_json"}, "data": row["data_json"],
                                   "at": repr(now)})
            digest = hashlib.sha256((prev + body).encode()).hexdigest()
            c.execute(text("INSERT INTO journal (seq, tenant_id, request_id, run_id, event, principal, channel, "
                           "data_json, at, prev_hash, hash) VALUES (:seq, :tenant_id, :request_id, :run_id, :event, "
                           ":principal, :channel, :data_json, :at, :prev, :hash)"), {**row, "prev": prev, "hash": digest})
            prev = digest
    c.execute(text("INSERT INTO kv_state (namespace, key, value, updated_at) VALUES ('journal', 'head', :v, :now)"),
              {"v": json.dumps({"seq": seq, "hash": prev}), "now": now})


async def test_a_database_made_at_the_previous_head_is_upgraded(empty_url: str) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.ext.asyncio import create_async_engine

    from handraise.core.store import to_async_url

    if empty_url.startswith("sqlite"):
        engine = create_engine(empty_url)
        with engine.begin() as c:
            _legacy_database(c)
        engine.dispose()
    else:
        async_engine = create_async_engine(to_async_url(empty_url))
        async with async_engine.begin() as conn:
            await conn.run_sync(_legacy_database)
        await async_engine.dispose()

    store = Store(url=empty_url, secret=SECRET)
    await store.open()
    try:
        assert await store.verify_journal() == []
        acme = await store.journal_entries(tenant_id="acme")
        assert [e.seq for e in acme] == [1, 2, 3, 4, 5] and acme[-1].event == "journal_upgraded"
        assert acme[-1].data["legacy_entries"] == 6 and acme[-1].data["legacy_breaks"] == 0
        assert [e.event for e in await store.journal_entries(tenant_id="globex")] == [
            "created", "answered", "journal_upgraded"]
        dump = json.dumps([e.data for e in acme])
        assert "response_sha256" not in dump and hashlib.sha256(b'"480137"').hexdigest() not in dump
        held = await store.get_request("acme", "req_b")
        assert held["response_json"] is None and held["response_sealed"] and "480137" not in json.dumps(held)
        from handraise.core.sealing import Sealer

        assert Sealer(SECRET).open(tenant_id="acme", request_id="req_b", sealed=held["response_sealed"],
                                   wrapped=held["response_key"]) == '"480137"'
        # The upgraded journal goes on: new entries extend each tenant's chain.
        async with store.transaction() as conn:
            await store.append_journal(conn, tenant_id="acme", event="created", request_id=None)
        assert await store.verify_journal() == []
    finally:
        await store.close()


async def test_another_server_secret_is_refused(storage_url: str) -> None:
    from handraise.core.errors import ConfigError

    first = Store(url=storage_url, secret=SECRET)
    await first.open()
    await first.close()
    second = Store(url=storage_url, secret=ServerSecret(bytes(reversed(range(32)))))
    with pytest.raises(ConfigError, match="another server secret"):
        await second.open()


@pytest.mark.parametrize("text", ["plain", "téléphone", "新しい", "emoji \U0001f600", "line\u2028sep", "tab\tquote\"back\\",
                                  "ctl\x00\x01\x1f\x7f", "\ufeffbom"])
def test_the_chain_hash_is_the_hmac_of_the_rfc_8785_form_of_any_text(text: str) -> None:
    """The journal's HMAC covers the RFC 8785 (JCS) form of the entry; text that is not ASCII takes the C
    encoder too, which must spell it exactly as JCS does (an entry written before this must still verify)."""
    key = b"k" * 32
    fields = {"tenant_id": "t", "request_id": text, "run_id": None, "event": "created", "principal": text,
              "channel": "api", "data_json": json.dumps({"message": text}, ensure_ascii=False), "at": 1764659000.25}
    body = {**{k: v for k, v in fields.items() if k not in ("data_json", "at")}, "seq": 7,
            "data": fields["data_json"], "at": repr(fields["at"])}
    expected = hmac.new(key, ("p" * 64 + rfc8785.dumps(body).decode()).encode(), hashlib.sha256).hexdigest()
    assert chain_hash(key, prev_hash="p" * 64, seq=7, **fields) == expected  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # a lone surrogate has no canonical form
        chain_hash(key, prev_hash="p" * 64, seq=7, **{**fields, "principal": text + "\ud800"})  # type: ignore[arg-type]

"""Sensitive answers at rest (issue 11, items 4-6): a keyed digest that is never exported, the answer
sealed under a key of its own that is destroyed at delivery, and a short grace for a lost response."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import AGENT_KEY, OPERATOR_KEY, READER_KEY, Api, base_config, running_app, settings_from
from handraise.core.appkeys import SERVICE, STORE
from handraise.core.sealing import Sealer
from handraise.core.serversecret import default_secret_path

OTP = "480137"


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "The code, please", "timeout_seconds": 60, "sensitive": True,
            "schema": {"type": "string", "pattern": "^[0-9]{6}$"}, **extra}


async def answered(api: Api, uid: str, **extra: Any) -> dict[str, Any]:
    req = await api.create(body(uid, **extra))
    status, _ = await api.submit(uid, OTP)
    assert status == 200
    return req


async def test_the_answer_digest_is_keyed_and_never_exported(api: Api) -> None:
    req = await answered(api, "otp-bundle", run_id="run-otp")
    row = await api.app[STORE].get_request("acme", req["id"])
    unsalted = hashlib.sha256(json.dumps(OTP).encode()).hexdigest()
    # A dictionary of the 10^6 codes is no use without the server secret: the digest is an HMAC salted
    # by the request, so it matches no plain sha256 of any code.
    assert row["response_digest"] and row["response_digest"] != unsalted
    codes = {hashlib.sha256(json.dumps(f"{n:06d}").encode()).hexdigest() for n in range(480000, 481000)}
    assert row["response_digest"] not in codes
    status, bundle = await api.call("GET", "/v1/runs/run-otp/bundle", key=READER_KEY)
    assert status == 200, bundle
    entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
    for exported in (json.dumps(bundle), json.dumps(entries)):
        assert row["response_digest"] not in exported and unsalted not in exported and OTP not in exported
        # No 64-hex digest of the answer under any name: only chain hashes are exported.
        assert "response_sha256" not in exported and "response_digest" not in exported


async def test_the_store_holds_a_sensitive_answer_only_sealed_and_shreds_its_key(api: Api) -> None:
    req = await answered(api, "otp-sealed")
    store = api.app[STORE]
    row = await store.get_request("acme", req["id"])
    assert row["response_json"] is None and row["response_sealed"] and row["response_key"]
    assert OTP not in json.dumps(row)
    # Only the server secret opens it, and only on its own request.
    sealer = Sealer(store.secret)
    assert sealer.open(tenant_id="acme", request_id=req["id"], sealed=row["response_sealed"],
                       wrapped=row["response_key"]) == json.dumps(OTP)
    with pytest.raises(ValueError):
        sealer.open(tenant_id="acme", request_id="req_other", sealed=row["response_sealed"],
                    wrapped=row["response_key"])
    assert (await api.wait(req["id"]))["response"] == OTP
    status, acked = await api.call("POST", f"/v1/requests/{req['id']}/ack")
    assert status == 200 and acked["response_deleted"] is True
    row = await store.get_request("acme", req["id"])
    assert row["response_sealed"] is None and row["response_key"] is None and row["response_purged"]
    # An acknowledgement of nothing held is harmless; a pending request has nothing to acknowledge.
    assert (await api.call("POST", f"/v1/requests/{req['id']}/ack"))[0] == 200
    pending = await api.create(body("otp-pending"))
    assert (await api.call("POST", f"/v1/requests/{pending['id']}/ack"))[0] == 409
    assert (await api.call("POST", f"/v1/requests/{req['id']}/ack", key=OPERATOR_KEY))[0] == 403


async def test_postgres_heap_never_holds_the_answer(pg_url: str) -> None:
    import asyncpg

    async with running_app(settings_from(base_config(pg_url))) as api:
        for i in range(5):
            req = await answered(api, f"otp-heap-{i}")
            assert (await api.wait(req["id"]))["response"] == OTP
            await api.call("POST", f"/v1/requests/{req['id']}/ack")
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CHECKPOINT")
        directory = await conn.fetchval("SHOW data_directory")
        relation = await conn.fetchval("SELECT pg_relation_filepath('requests')")
    finally:
        await conn.close()
    heap = Path(directory) / relation
    if not heap.exists():
        pytest.skip("the PostgreSQL data directory is not readable from here")
    # Dead tuples of the purged rows are still in the file (no VACUUM ran): they hold ciphertext only.
    assert OTP.encode() not in heap.read_bytes()


async def _drop_connection_after_headers(api: Api, path: str) -> None:
    """An agent that dies as its response arrives: the server wrote every byte, nobody read them."""
    host, port = api.server.host, api.server.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {AGENT_KEY}\r\n"
                 "Connection: close\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    assert b" 200 " in status_line
    writer.transport.abort()


async def test_a_response_lost_on_the_way_is_handed_over_again_on_the_next_call(storage_url: str) -> None:
    config = base_config(storage_url, limits={"sensitive_grace_seconds": 60})
    async with running_app(settings_from(config)) as api:
        req = await answered(api, "otp-lost")
        await _drop_connection_after_headers(api, f"/v1/requests/{req['id']}/wait?timeout=5")
        service = api.app[SERVICE]
        await service.drain()  # the hand-over's bookkeeping is done
        again = await api.wait(req["id"])
        assert again["response"] == OTP
        await service.drain()
        # That second hand-over ends the grace: the value is gone.
        gone = await api.wait(req["id"])
        assert "response" not in gone and gone["response_deleted"] is True
        reasons = [e["data"].get("reason") for e in await service.journal_entries(tenant_id="acme",
                                                                                    request_id=req["id"])
                   if e["event"] == "response_deleted"]
        assert reasons == ["delivered"]


async def test_a_handed_out_answer_nobody_fetches_again_is_deleted_when_its_grace_ends(storage_url: str) -> None:
    config = base_config(storage_url, limits={"sensitive_grace_seconds": 0.3, "sweep_interval_seconds": 0.05})
    async with running_app(settings_from(config)) as api:
        req = await answered(api, "otp-grace")
        assert (await api.wait(req["id"]))["response"] == OTP
        store = api.app[STORE]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while (await store.get_request("acme", req["id"]))["response_sealed"] is not None:
            assert loop.time() < deadline, "the grace never ended"
            await asyncio.sleep(0.05)  # polling the store for the sweeper's change
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=req["id"])
        assert entries[-1]["event"] == "response_deleted" and entries[-1]["data"] == {"reason": "grace_over"}


async def test_the_digest_matches_no_sha256_in_the_sqlite_files(tmp_path: Path) -> None:
    async with running_app(settings_from(base_config(f"sqlite:///{tmp_path / 'd.db'}"))) as api:
        req = await answered(api, "otp-files")
        assert (await api.wait(req["id"]))["response"] == OTP
    unsalted = hashlib.sha256(json.dumps(OTP).encode()).hexdigest().encode()
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert unsalted not in data and OTP.encode() not in data, path.name
    # The key to those digests is not among the database's files: it lives in the user's config folder.
    assert not [path for path in tmp_path.iterdir() if "secret" in path.name]
    secret_file = default_secret_path()
    assert secret_file.stat().st_mode & 0o777 == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}\n", secret_file.read_text())

"""Request callbacks end to end: a real receiver on loopback (allowed in the tenant's config), signed
POSTs verified, retries after 5xx, refused hosts, and no second POST across a restart."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from conftest import OTHER_AGENT_KEY, Api, base_config, running_app, settings_from
from harness.receiver import Receiver, receiver  # noqa: F401  (the fixture)

from handraise.core import callbacks
from handraise.core.appkeys import DELIVERIES, DISPATCHER, SERVICE
from handraise.core.callbacks import CallbackHttp, PublicOnlyResolver
from handraise.core.config import CallbackSettings, Settings
from handraise.core.errors import ConnectorError
from handraise.core.signedpost import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    post_signed,
    verify_signature,
)

SECRET = "cbsec-0123456789abcdef"
RESOLVED = "request.resolved"


def callback_settings(storage_url: str, **callbacks: Any) -> Settings:
    config = base_config(storage_url)
    config["tenants"][0]["callbacks"] = {"secret": SECRET, "allow_hosts": ["127.0.0.1"], **callbacks}
    return settings_from(config)


def ask(uid: str, receiver: Receiver, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Pick a size", "timeout_seconds": 60,
            "callback_url": receiver.url("/cb?token=s3cr3t-in-path"), **extra}


async def callback_delivery(api: Api, request_id: str) -> dict[str, Any]:
    await api.app[DISPATCHER].idle()
    status, body = await api.call("GET", f"/v1/requests/{request_id}")
    assert status == 200, body
    [delivery] = [d for d in body["deliveries"] if d["channel"] == "callback"]
    return delivery


async def failure_recorded(api: Api, request_id: str) -> None:
    """Until the first failed attempt is on the delivery row (it lands just after the receiver's 500)."""
    async with asyncio.timeout(15):
        while True:
            rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)
            if any(r.channel == "callback" and r.attempts >= 1 for r in rows):
                return
            await asyncio.sleep(0.05)


async def test_the_result_is_posted_signed_like_a_webhook(storage_url: str, receiver: Receiver) -> None:
    async with running_app(callback_settings(storage_url)) as api:
        request = await api.create(ask("cb-1", receiver))
        host = receiver.url().split("//")[1].split("/")[0]
        assert request["callback_host"] == host and "callback_url" not in request
        status, _ = await api.submit("cb-1", "large")
        assert status == 200
        [hit] = await receiver.wait_for(RESOLVED, timeout=15)
        assert hit.path == "/cb?token=s3cr3t-in-path"
        assert verify_signature(SECRET, timestamp=hit.headers[TIMESTAMP_HEADER], body=hit.body,
                                signature=hit.headers[SIGNATURE_HEADER])
        assert not verify_signature("another-secret-0123456", timestamp=hit.headers[TIMESTAMP_HEADER],
                                    body=hit.body, signature=hit.headers[SIGNATURE_HEADER])
        assert hit.headers[DELIVERY_HEADER] == f"{request['id']}:callback"
        sent = hit.json
        assert sent["event"] == RESOLVED and sent["tenant_id"] == "acme"
        assert sent["request"]["id"] == request["id"] and sent["request"]["status"] == "answered"
        assert sent["request"]["response"] == "large" and sent["request"]["answered_via"] == "api"
        delivery = await callback_delivery(api, request["id"])
        assert delivery | {"updated_at": None} == {"channel": "callback", "target": host, "status": "sent",
                                                   "attempts": 1, "last_error": None, "updated_at": None}
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
        assert [e["data"]["target"] for e in entries if e["event"] == "delivered"] == [host]
        # The secret in the URL's path stays out of the request's views and journal.
        assert "s3cr3t" not in str(entries) and "s3cr3t" not in str(await api.call("GET", f"/v1/requests/{request['id']}"))


async def test_retried_with_the_backoff_after_server_errors(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(500, {}), (503, {})]
    async with running_app(callback_settings(f"sqlite:///{tmp_path / 'cb.db'}")) as api:
        request = await api.create(ask("cb-retry", receiver))
        await api.call("POST", f"/v1/requests/{request['id']}/cancel")
        hits = await receiver.wait_for(RESOLVED, count=3, timeout=30)
        assert {h.headers[DELIVERY_HEADER] for h in hits} == {f"{request['id']}:callback"}
        assert hits[-1].json["request"]["status"] == "cancelled"
        assert hits[1].at - hits[0].at >= 0.2  # a pause between attempts, not a burst
        delivery = await callback_delivery(api, request["id"])
        assert delivery["status"] == "sent" and delivery["attempts"] == 3 and delivery["last_error"] is None
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
        failed = [e["data"] for e in entries if e["event"] == "delivery_failed"]
        assert [f["error"].rsplit(" ", 1)[-1] for f in failed] == ["500", "503"]
        assert "s3cr3t" not in str(failed)


async def test_a_client_error_is_final(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(404, {})]
    async with running_app(callback_settings(f"sqlite:///{tmp_path / 'cb.db'}")) as api:
        request = await api.create(ask("cb-404", receiver))
        await api.submit("cb-404", "small")
        await receiver.wait_for(RESOLVED, timeout=15)
        delivery = await callback_delivery(api, request["id"])
        assert delivery["status"] == "failed" and delivery["attempts"] == 1 and "404" in delivery["last_error"]
        assert len(receiver.hits) == 1


async def test_a_sensitive_answer_never_rides_the_callback(tmp_path: Path, receiver: Receiver) -> None:
    async with running_app(callback_settings(f"sqlite:///{tmp_path / 'cb.db'}")) as api:
        await api.create(ask("cb-secret", receiver, sensitive=True))
        await api.submit("cb-secret", "hunter2-password")
        [hit] = await receiver.wait_for(RESOLVED, timeout=15)
        assert hit.json["request"]["status"] == "answered" and "response" not in hit.json["request"]
        assert b"hunter2" not in hit.body


async def test_refused_hosts_are_422_at_create(tmp_path: Path, receiver: Receiver) -> None:
    # 127.0.0.1 is allowed for acme; "localhost" is not, though it is the same machine.
    port = receiver.url().rsplit(":", 1)[1].split("/")[0]
    cases = [
        (f"https://localhost:{port}/cb", "loopback, private or reserved"),
        ("https://10.1.2.3/cb", "loopback, private or reserved"),
        ("https://192.168.1.1/cb", "loopback, private or reserved"),
        ("https://169.254.169.254/latest/meta-data", "loopback, private or reserved"),
        ("https://[::1]/cb", "loopback, private or reserved"),
        ("https://[::ffff:10.0.0.1]/cb", "loopback, private or reserved"),
        ("https://0.0.0.0/cb", "loopback, private or reserved"),
        ("http://93.184.215.14/cb", "must be https"),
        ("ftp://93.184.215.14/cb", "absolute https:// URL"),
        ("/relative/cb", "absolute https:// URL"),
        ("https://user:pw@93.184.215.14/cb", "user name or password"),
        ("https://93.184.215.14:99999/cb", "absolute https:// URL"),
        ("https://no-such-host.invalid/cb", "cannot be resolved"),
    ]
    async with running_app(callback_settings(f"sqlite:///{tmp_path / 'cb.db'}")) as api:
        for i, (url, words) in enumerate(cases):
            status, data = await api.call("POST", "/v1/requests", json={
                "unique_id": f"bad-{i}", "message_for_user": "x", "callback_url": url})
            assert status == 422, (url, data)
            [problem] = data["details"]["fields"]
            assert problem["field"] == "callback_url" and words in problem["message"], (url, data)
        # A tenant without [tenants.callbacks] has nothing to sign with.
        status, data = await api.call("POST", "/v1/requests", key=OTHER_AGENT_KEY, json={
            "unique_id": "other", "message_for_user": "x", "callback_url": receiver.url("/cb")})
        assert status == 422 and "[tenants.callbacks]" in data["details"]["fields"][0]["message"]
        # A public https URL passes the check (it is never reached: the request stays pending).
        status, data = await api.call("POST", "/v1/requests", json={
            "unique_id": "public", "message_for_user": "x", "callback_url": "https://93.184.215.14/cb"})
        assert status == 201 and data["callback_host"] == "93.184.215.14"


async def test_no_second_post_across_a_restart(tmp_path: Path, receiver: Receiver) -> None:
    url = f"sqlite:///{tmp_path / 'cb.db'}"
    receiver.script = [(500, {})] * 50
    async with running_app(callback_settings(url)) as api:
        pending = await api.create(ask("cb-cut", receiver))
        done = await api.create(ask("cb-done", receiver))
        await api.submit("cb-cut", "large")
        await receiver.wait_for(RESOLVED, count=1, timeout=15)
        await failure_recorded(api, pending["id"])
        # cb-cut's callback is failing and retrying as the process stops.
    first_run = len(receiver.hits)
    receiver.script = []
    async with running_app(callback_settings(url)) as api:
        # The recovery pass at start resumes the interrupted callback: one more POST, which succeeds.
        hits = await receiver.wait_for(RESOLVED, count=first_run + 1, timeout=30)
        assert hits[-1].json["request"]["id"] == pending["id"]
        await api.submit("cb-done", "small")
        await receiver.wait_for(RESOLVED, count=first_run + 2, timeout=15)
        delivery = await callback_delivery(api, pending["id"])
        assert delivery["status"] == "sent" and delivery["attempts"] == first_run + 1
    total = len(receiver.hits)
    async with running_app(callback_settings(url)) as api:
        assert await api.app[DISPATCHER].recover(startup=True) == 0
        await api.app[DISPATCHER].idle()
    assert len(receiver.hits) == total
    assert [h.json["request"]["id"] for h in receiver.hits[first_run:]] == [pending["id"], done["id"]]


# -- DNS rebinding: the connection itself reaches public addresses only ---------------------------


class Names(AbstractResolver):
    """A resolver answering from a table (what a hostile DNS server would say at connect time)."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        self.asked.append(host)
        return [ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST) for a in self.names[host]]

    async def close(self) -> None:
        pass


async def test_the_callback_resolver_keeps_public_addresses_only() -> None:
    resolver = PublicOnlyResolver(Names({
        "loopback.test": ["127.0.0.1"], "private.test": ["10.1.2.3", "192.168.1.9"], "mapped.test": ["::ffff:127.0.0.1"],
        "metadata.test": ["169.254.169.254"], "mixed.test": ["10.1.2.3", "93.184.215.14"], "public.test": ["2606:4700::1"],
    }))
    for host in ("loopback.test", "private.test", "mapped.test", "metadata.test"):
        with pytest.raises(OSError, match="resolves to no public address"):
            await resolver.resolve(host, 443)
    assert [r["host"] for r in await resolver.resolve("mixed.test", 443)] == ["93.184.215.14"]
    assert [r["host"] for r in await resolver.resolve("public.test", 443)] == ["2606:4700::1"]


async def test_a_name_rebound_to_a_private_address_after_the_check_reaches_nothing(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    port = receiver.url().split(":")[-1].split("/")[0]
    url = f"https://rebind.test:{port}/cb"
    # The check's lookup says public; the connection's lookup says loopback (the rebinding trick).
    checked: list[str] = []

    async def public_at_check(host: str, port: int) -> list[Any]:
        checked.append(host)
        return [ipaddress.ip_address("93.184.215.14")]

    monkeypatch.setattr(callbacks, "_addresses", public_at_check)
    not_allowed = CallbackSettings(secret=SECRET)
    assert await callbacks.url_problem(url, not_allowed) is None and checked == ["rebind.test"]
    names = Names({"rebind.test": ["127.0.0.1"]})
    async with aiohttp.ClientSession() as shared:
        http = CallbackHttp(shared, resolver=names)
        signed = {"event": RESOLVED, "delivery_id": "req_1:callback", "request": {"id": "req_1"}}
        with pytest.raises(ConnectorError, match="ClientConnector"):
            await post_signed(http.session_for(url, not_allowed), url=url, secret=SECRET, payload=signed,
                              timeout=5, log=logging.getLogger("test"))
        assert names.asked == ["rebind.test"] and receiver.hits == []
        # A host the tenant allows goes through the shared session, private addresses and all.
        allowed = CallbackSettings(secret=SECRET, allow_hosts=["rebind.test"])
        assert http.session_for(url, allowed) is shared
        assert http.session_for(url, not_allowed) is http.session_for(url, not_allowed) is not shared
        await http.close()

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

from handraise.core import addresses, callbacks
from handraise.core.appkeys import DELIVERIES, DISPATCHER, SERVICE
from handraise.core.api import RequestView
from handraise.core.callbacks import CallbackHttp
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


# -- the address rule, and DNS rebinding: an attempt connects where its own check looked ----------


@pytest.mark.parametrize("ipv4", ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
                                  "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "93.184.215.14", "8.8.8.8"])
def test_an_ipv4_address_inside_ipv6_is_judged_as_itself(ipv4: str) -> None:
    plain = ipaddress.IPv4Address(ipv4)
    packed = int(plain)
    spellings = [f"::ffff:{ipv4}", f"::{ipv4}", f"64:ff9b::{ipv4}",
                 str(ipaddress.IPv6Address((0x2002 << 112) | (packed << 80) | 1))]
    for spelling in spellings:
        wrapped = ipaddress.IPv6Address(spelling)
        assert addresses.embedded_ipv4(wrapped) == plain, spelling
        assert addresses.is_public(wrapped) == addresses.is_public(plain), spelling
    assert addresses.is_public(plain) == (ipv4 in ("93.184.215.14", "8.8.8.8"))


class ScriptedDns(AbstractResolver):
    """A hostile DNS server: each lookup gets the next answer of its script, the last one for ever after."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        self.asked.append(host)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return [ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST) for a in answer]

    async def close(self) -> None:
        pass


_ANSWERED = RequestView(id="req_1", tenant_id="acme", unique_id="u", status="answered", message_for_user="m",
                        schema=None, kind="input", sensitive=False, run_id=None, channels=[], created_at=1.0,
                        expires_at=61.0, created_by="agent-1", response="x", resolved_by="op-1",
                        resolved_channel="api", resolved_at=2.0)


async def test_a_name_rebound_to_loopback_after_the_check_cannot_steer_the_post(receiver: Receiver) -> None:
    port = receiver.url().split(":")[-1].split("/")[0]
    # The check's lookup says public; any later lookup says loopback, where the receiver listens.
    dns = ScriptedDns(["93.184.215.14"], ["127.0.0.1"])
    async with aiohttp.ClientSession() as shared:
        with pytest.raises(ConnectorError) as failed:
            await callbacks.send(CallbackHttp(shared, resolver=dns), view=_ANSWERED, url=f"https://rebind.test:{port}/cb",
                                 settings=CallbackSettings(secret=SECRET), log=logging.getLogger("test"))
    assert dns.asked == ["rebind.test"]  # one lookup, judged; the connection asked nobody
    assert receiver.hits == []
    # It went for the address that was checked (which this test machine will not leave loopback for).
    cause = failed.value.__cause__
    assert isinstance(cause, aiohttp.ClientConnectorError) and "'93.184.215.14'" in str(cause.os_error)
    assert not failed.value.permanent  # a network failure: retried, to the address its next check finds


async def test_every_address_of_the_lookup_is_judged(receiver: Receiver) -> None:
    dns = ScriptedDns(["93.184.215.14", "::ffff:127.0.0.1"])
    async with aiohttp.ClientSession() as shared:
        with pytest.raises(ConnectorError, match="loopback, private or reserved") as failed:
            await callbacks.send(CallbackHttp(shared, resolver=dns), view=_ANSWERED, url="https://mixed.test/cb",
                                 settings=CallbackSettings(secret=SECRET), log=logging.getLogger("test"))
    assert failed.value.permanent and receiver.hits == []


async def test_an_attempt_connects_to_its_checked_address_under_the_urls_name(receiver: Receiver) -> None:
    port = int(receiver.url().split(":")[-1].split("/")[0])
    dns = ScriptedDns(["93.184.215.14"])
    checked = ResolveResult(hostname="pinned.test", host="127.0.0.1", port=port, family=socket.AF_INET, proto=0,
                            flags=socket.AI_NUMERICHOST)
    async with aiohttp.ClientSession() as shared:
        http = CallbackHttp(shared, resolver=dns)
        async with http.session_to(callbacks.Destination(addresses=[checked])) as pinned:
            assert pinned is not shared
            signed = {"event": RESOLVED, "delivery_id": "req_1:callback", "request": {"id": "req_1"}}
            assert await post_signed(pinned, url=f"http://pinned.test:{port}/cb", secret=SECRET, payload=signed,
                                     timeout=5, log=logging.getLogger("test")) == 200
        assert pinned.closed  # one attempt, one session: nothing pooled carries over to the next
        # A host the tenant allows (allow_hosts) goes through the shared session, looked up as usual.
        async with http.session_to(callbacks.Destination(addresses=None)) as allowed:
            assert allowed is shared
    [hit] = receiver.hits
    assert hit.headers["Host"] == f"pinned.test:{port}" and dns.asked == []

"""The outgoing webhook channel end to end: a real receiver on loopback, signed POSTs, retries, one-time links."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from conftest import OTHER_AGENT_KEY, base_config, question, running_app, settings_from
from harness.receiver import Receiver, receiver  # noqa: F401  (the fixture)

from handraise.bots.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookConnector,
    verify_signature,
)
from handraise.core.appkeys import DISPATCHER, SERVICE
from handraise.core.config import Settings
from handraise.core.errors import ConfigError

SECRET = "whsec-0123456789abcdef"


def endpoint(receiver: Receiver, **extra: Any) -> dict[str, Any]:
    return {"id": "pager", "url": receiver.url("/hook?token=abc123secretpath"), "secret": SECRET,
            "tenants": ["acme"], **extra}


def settings(tmp_path: Path, *endpoints: dict[str, Any]) -> Settings:
    return settings_from(base_config(f"sqlite:///{tmp_path / 'wh.db'}", webhooks=list(endpoints)))


def ask(uid: str, **extra: Any) -> dict[str, Any]:
    return question(uid, message=f"Page the on-call for {uid}", channels=["webhooks"], **extra)


def assert_signed(hit: Hit) -> None:
    timestamp = hit.headers[TIMESTAMP_HEADER]
    # The documented format, recomputed independently of bots.webhooks.sign.
    expected = "v1=" + hmac.new(SECRET.encode(), f"{timestamp}.".encode() + hit.body, hashlib.sha256).hexdigest()
    assert hit.headers[SIGNATURE_HEADER] == expected
    assert abs(int(timestamp) - time.time()) < 10
    assert verify_signature(SECRET, timestamp=timestamp, body=hit.body, signature=hit.headers[SIGNATURE_HEADER])


async def test_created_and_resolved_are_signed_and_the_link_answers(tmp_path: Path, receiver: Receiver) -> None:
    async with running_app(settings(tmp_path, endpoint(receiver)), connector_classes=[WebhookConnector]) as api:
        request = await api.create(ask("wh-1", schema={"type": "integer"}))
        [created] = await receiver.wait_for("request.created")
        assert_signed(created)
        payload = created.json
        assert payload["event"] == "request.created" and payload["tenant_id"] == "acme"
        assert payload["delivery_id"] == created.headers[DELIVERY_HEADER] == f"{request['id']}:pager:request.created"
        assert payload["request"]["id"] == request["id"] and payload["request"]["status"] == "pending"
        assert payload["form_url"].startswith("http://127.0.0.1:8080/f/")

        token = payload["form_url"].rsplit("/f/", 1)[1]
        await api.app[SERVICE].submit_link(token=token, response=17)
        [resolved] = await receiver.wait_for("request.resolved")
        assert_signed(resolved)
        assert resolved.json["request"]["status"] == "answered"
        assert resolved.json["request"]["response"] == 17
        assert resolved.json["request"]["answered_via"] == "web"
        await api.app[DISPATCHER].idle()
        _, body = await api.call("GET", f"/v1/requests/{request['id']}")
        assert [(d["channel"], d["target"], d["status"]) for d in body["deliveries"]] == [
            ("webhooks", "pager", "withdrawn")]


async def test_failures_are_retried_with_retry_after_and_fresh_signatures(tmp_path: Path,
                                                                          receiver: Receiver) -> None:
    receiver.script = [(503, {}), (429, {"Retry-After": "1"})]
    async with running_app(settings(tmp_path, endpoint(receiver)), connector_classes=[WebhookConnector]) as api:
        request = await api.create(ask("wh-2"))
        hits = await receiver.wait_for("request.created", count=3)
        await api.app[DISPATCHER].idle()

        assert hits[2].at - hits[1].at >= 0.95  # Retry-After honoured
        assert len({h.headers[DELIVERY_HEADER] for h in hits}) == 1  # one delivery, for the receiver's dedupe
        # Every try posts the one link the first minted: the receiver holds one live link, not three.
        assert len({h.json["form_url"] for h in hits}) == 1
        for hit in hits:
            assert_signed(hit)
        _, body = await api.call("GET", f"/v1/requests/{request['id']}")
        [delivery] = body["deliveries"]
        assert (delivery["status"], delivery["attempts"], delivery["last_error"]) == ("sent", 3, None)
        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=request["id"])
        errors = [e["data"]["error"] for e in entries if e["event"] == "delivery_failed"]
        host = receiver.url().split("//")[1].split("/")[0]
        assert errors == [f"request.created to {host}: HTTP 503", f"request.created to {host}: HTTP 429"]
        [minted] = [e["data"] for e in entries if e["event"] == "link_minted"]
        assert api.app[SERVICE].link_url(minted["link_id"]) == hits[0].json["form_url"]


async def test_a_client_error_is_final_and_the_url_path_is_not_shown(tmp_path: Path, receiver: Receiver) -> None:
    receiver.script = [(404, {})]
    async with running_app(settings(tmp_path, endpoint(receiver)), connector_classes=[WebhookConnector]) as api:
        request = await api.create(ask("wh-3"))
        await receiver.wait_for("request.created")
        await api.app[DISPATCHER].idle()

        _, body = await api.call("GET", f"/v1/requests/{request['id']}")
        [delivery] = body["deliveries"]
        assert (delivery["status"], delivery["attempts"]) == ("failed", 1)
        assert "HTTP 404" in delivery["last_error"] and "abc123secretpath" not in delivery["last_error"]
        assert len(receiver.hits) == 1


async def test_an_unreachable_endpoint_is_retried(tmp_path: Path, receiver: Receiver) -> None:
    closed = TestServer(web.Application(), host="127.0.0.1", port=0)
    await closed.start_server()
    dead_url = str(closed.make_url("/hook"))
    await closed.close()
    async with running_app(settings(tmp_path, endpoint(receiver, url=dead_url)),
                           connector_classes=[WebhookConnector]) as api:
        dispatcher = api.app[DISPATCHER]
        dispatcher.backoff_initial = dispatcher.backoff_cap = 0.01
        dispatcher.max_attempts = 2
        request = await api.create(ask("wh-4"))
        await dispatcher.idle()
        _, body = await api.call("GET", f"/v1/requests/{request['id']}")
        [delivery] = body["deliveries"]
        assert (delivery["status"], delivery["attempts"]) == ("failed", 2)
        assert "ClientConnectorError" in delivery["last_error"]


async def test_routing_by_tenant_and_event_filter(tmp_path: Path, receiver: Receiver) -> None:
    resolved_only = endpoint(receiver, id="audit", url=receiver.url("/audit"), events=["request.resolved"])
    globex = endpoint(receiver, id="globex-pager", url=receiver.url("/globex"), tenants=["globex"])
    async with running_app(settings(tmp_path, resolved_only, globex), connector_classes=[WebhookConnector]) as api:
        request = await api.create(ask("wh-5", sensitive=True))
        await api.app[DISPATCHER].idle()
        assert receiver.hits == []  # audit wants only resolutions; globex serves another tenant

        await api.app[SERVICE].submit(tenant_id="acme", request_id=request["id"], response="hunter2",
                                      principal="operator:op-1", channel="api")
        [hit] = await receiver.wait_for("request.resolved")
        assert hit.path == "/audit"
        assert "hunter2" not in hit.body.decode() and "response" not in hit.json["request"]

        other = await api.create(ask("wh-6"), key=OTHER_AGENT_KEY)
        [paged] = await receiver.wait_for("request.created")
        assert paged.path == "/globex" and paged.json["tenant_id"] == "globex"
        assert paged.json["request"]["id"] == other["id"]


def test_verify_signature_refuses_tampering_and_replays() -> None:
    body = b'{"event":"request.created"}'
    now = 1_800_000_000
    from handraise.bots.webhooks import sign

    signature = sign(SECRET, timestamp=now, body=body)
    assert verify_signature(SECRET, timestamp=str(now), body=body, signature=signature, now=now + 299)
    assert not verify_signature(SECRET, timestamp=str(now), body=body, signature=signature, now=now + 301)
    assert not verify_signature(SECRET, timestamp=str(now), body=body + b" ", signature=signature, now=now)
    assert not verify_signature("another-secret-123456", timestamp=str(now), body=body, signature=signature, now=now)
    assert not verify_signature(SECRET, timestamp="soon", body=body, signature=signature, now=now)


@pytest.mark.parametrize(("entry", "message"), [
    ({"url": "ftp://x/hook"}, r"webhooks\[0\]\.url: .*http"),
    ({"secret": "short"}, r"webhooks\[0\]\.secret: .*16"),
    ({"tenants": ["nobody"]}, r"webhooks\[0\]\.tenants: no such tenant 'nobody'"),
    ({"events": ["request.updated"]}, r"webhooks\[0\]\.events\[0\]"),
    ({"headers": {}}, r"webhooks\[0\]\.headers: unknown key"),
])
def test_config_errors_name_the_entry(entry: dict[str, Any], message: str) -> None:
    raw = {"id": "a", "url": "https://example.test/hook", "secret": SECRET, "tenants": ["acme"], **entry}
    app_settings = settings_from(base_config("sqlite:///unused.db", webhooks=[raw]))
    with pytest.raises(ConfigError, match=message):
        WebhookConnector.load_settings(app_settings)


def test_duplicate_ids_and_enabling() -> None:
    raw = {"id": "a", "url": "https://example.test/hook", "secret": SECRET, "tenants": ["acme"]}
    with pytest.raises(ConfigError, match=r"webhooks\[1\]\.id: 'a' appears twice"):
        WebhookConnector.load_settings(settings_from(base_config("sqlite:///u.db", webhooks=[raw, raw])))
    assert WebhookConnector.is_enabled(settings_from(base_config("sqlite:///u.db", webhooks=[raw])))
    assert not WebhookConnector.is_enabled(settings_from(base_config("sqlite:///u.db", webhooks=[])))
    assert not WebhookConnector.is_enabled(settings_from(base_config("sqlite:///u.db",
                                                                     webhooks=[{**raw, "enabled": False}])))


async def test_a_quorum_request_tells_each_vote_to_an_endpoint_that_asks(tmp_path: Path, receiver: Receiver) -> None:
    config = base_config(f"sqlite:///{tmp_path / 'wh.db'}", webhooks=[
        endpoint(receiver, events=["request.created", "request.voted", "request.resolved"]),
        endpoint(receiver, id="audit", url=receiver.url("/audit"))])
    config["tenants"][0]["people"] = [{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}]
    async with running_app(settings_from(config), connector_classes=[WebhookConnector]) as api:
        request = await api.create(ask("wh-q", kind="approval", approvals_required=2))
        await receiver.wait_for("request.created", count=2)
        await api.app[DISPATCHER].idle()
        await api.app[SERVICE].submit(tenant_id="acme", request_id=request["id"], response={"decision": "approve"},
                                      principal="person:alice", channel="web")
        [voted] = await receiver.wait_for("request.voted")
        assert_signed(voted)
        assert voted.json["delivery_id"] == f"{request['id']}:pager:request.voted:1"
        assert [v["person"] for v in voted.json["request"]["votes"]] == ["alice"]
        await api.app[SERVICE].submit(tenant_id="acme", request_id=request["id"], response={"decision": "approve"},
                                      principal="person:bob", channel="web")
        resolved = await receiver.wait_for("request.resolved", count=2)
        assert {len(hit.json["request"]["response"]["votes"]) for hit in resolved} == {2}
        await api.app[DISPATCHER].idle()
        # The audit endpoint kept the default events: no vote reached it; the pager heard one.
        assert [h.json["event"] for h in receiver.hits].count("request.voted") == 1

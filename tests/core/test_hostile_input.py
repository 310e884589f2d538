"""Malformed input gets its documented 4xx, never a 500, on both stores (issue 11, items 2, 8 and 12; issue 29,
items 5 to 7: forms, UTF-8 and integers, at the end).

Each case here was a 500 (or a stored oddity on SQLite and a 500 on PostgreSQL):
integers past 2**53, JSON nested 10,000 deep, lone surrogates, NUL and other control
characters, bytes that are not UTF-8 in ``Authorization``; and loose types that were
silently accepted (``"timeout_seconds": true`` made a request that expired in 1 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from conftest import (
    AGENT_KEY,
    ANNOTATOR_KEY,
    OPERATOR_KEY,
    READER_KEY,
    Api,
    base_config,
    running_app,
    settings_from,
    web_app,
)

from handraise.bots.webhooks import WebhookConnector
from handraise.core import signedpost
from handraise.core.appkeys import BUS, DELIVERIES, DISPATCHER, SERVICE
from handraise.core.chat import read_reply
from handraise.core.errors import ConnectorError, InvalidAnswerError
from handraise.core.schema.messages import problem
from handraise.core.signedpost import post_signed
from handraise.webforms.render import CSRF_FIELD, ROOT_NAME
from tests.webforms.html_tools import csrf_of, visible_text
from tests.webforms.test_inbox_http import signed_in

BIG = 2**53  # one past the largest integer JSON keeps exact
RUN_ANNOTATIONS = "/v1/runs/run-1/annotations"


def create_body(**extra: Any) -> dict[str, Any]:
    return {"unique_id": f"h-{secrets.token_hex(6)}", "message_for_user": "Question?", **extra}


async def post_raw(api: Api, path: str, raw: bytes | str, *, key: str = AGENT_KEY) -> tuple[int, Any]:
    return await api.call("POST", path, data=raw.encode() if isinstance(raw, str) else raw, key=key,
                          headers={"Content-Type": "application/json"})


# --------------------------------------------------------------------------- numbers


async def test_integers_beyond_2_53_in_a_schema_are_invalid_schema(api: Api) -> None:
    for schema, where in [({"type": "integer", "maximum": BIG}, "schema.maximum"),
                          ({"type": "integer", "default": -BIG}, "schema.default"),
                          ({"type": "object", "properties": {"n": {"type": "number", "minimum": BIG * 10}}},
                           "schema.properties.n.minimum"),
                          ({"type": "string", "examples": [BIG]}, "schema.examples.0")]:
        status, body = await api.call("POST", "/v1/requests", json=create_body(schema=schema))
        assert status == 422 and body["error"] == "invalid_schema", body
        assert body["message"].startswith(f"{where}: is too large to be exact")


async def test_integers_beyond_2_53_in_an_answer_are_invalid_answer(api: Api) -> None:
    request = await api.create(create_body(schema={"type": "object", "properties": {"n": {"type": "integer"}}}))
    status, body = await api.submit(request["unique_id"], {"n": BIG})
    assert status == 422 and body["error"] == "invalid_answer"
    assert body["details"]["fields"] == [{"field": "n", "message":
                                          "Enter a number between -9007199254740991 and 9007199254740991."}]
    assert (await api.submit(request["unique_id"], {"n": BIG - 1}))[0] == 200


async def test_numbers_json_cannot_carry_are_400(sqlite_api: Api) -> None:
    for raw in ['{"unique_id": "n", "message_for_user": "m", "timeout_seconds": NaN}',
                '{"unique_id": "n", "message_for_user": "m", "timeout_seconds": Infinity}',
                '{"unique_id": "n", "message_for_user": "m", "schema": {"type": "number", "maximum": 1e400}}',
                '{"unique_id": "n", "message_for_user": "m", "timeout_seconds": 1' + "0" * 5000 + "}"]:
        status, body = await post_raw(sqlite_api, "/v1/requests", raw)
        assert status == 400 and body["error"] == "bad_request", (raw[:80], body)
        assert body["message"].startswith("malformed JSON")


async def test_a_huge_timeout_is_422(sqlite_api: Api) -> None:
    status, body = await sqlite_api.call("POST", "/v1/requests", json=create_body(timeout_seconds=BIG * 1000))
    assert status == 422 and body["error"] == "validation_error"


# --------------------------------------------------------------------------- depth


@pytest.mark.parametrize("depth", [33, 10_000])
async def test_json_nested_too_deep_is_400_everywhere(sqlite_api: Api, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    cases = [
        ("/v1/requests", AGENT_KEY, '{"unique_id": "d", "message_for_user": "m", "schema": %s}'),
        ("/api/human-feedback/submit", OPERATOR_KEY, '{"unique_id": "d", "response": %s}'),
        (RUN_ANNOTATIONS, ANNOTATOR_KEY, '{"signal": {"kind": "flag"}, "note": %s}'),
    ]
    for path, key, template in cases:
        status, body = await post_raw(sqlite_api, path, template % nested, key=key)
        assert status == 400 and body["error"] == "bad_request", (path, body)
        assert "nested more than 32 deep" in body["message"]


async def test_json_at_the_depth_limit_is_read(sqlite_api: Api) -> None:
    # 32 levels: the body, then the answer's 31 — refused by the schema, not by the reader.
    request = await sqlite_api.create(create_body())
    status, body = await sqlite_api.submit(request["unique_id"], [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])
    assert status == 422 and body["error"] == "invalid_answer"


# --------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize(("path", "key", "raw"), [
    ("/v1/requests", AGENT_KEY, '{"unique_id": "s", "message_for_user": "m", "schema": {"type": "string", "title": "\\ud800"}}'),
    ("/v1/requests", AGENT_KEY, '{"unique_id": "s", "message_for_user": "a\\udfff b"}'),
    ("/v1/requests", AGENT_KEY, '{"unique_id": "s", "message_for_user": "m", "\\ud800": 1}'),
    ("/api/human-feedback/submit", OPERATOR_KEY, '{"unique_id": "s", "response": "\\ud800"}'),
    (RUN_ANNOTATIONS, ANNOTATOR_KEY, '{"signal": {"kind": "flag"}, "note": "\\ud83d"}'),
])
async def test_lone_surrogates_are_400(api: Api, path: str, key: str, raw: str) -> None:
    status, body = await post_raw(api, path, raw, key=key)
    assert status == 400 and body["error"] == "bad_request", body
    assert "lone surrogate" in body["message"]


async def test_a_surrogate_pair_is_text(sqlite_api: Api) -> None:
    status, body = await post_raw(sqlite_api, "/v1/requests",
                                  '{"unique_id": "pair", "message_for_user": "smile \\ud83d\\ude00"}')
    assert status == 201 and body["message_for_user"] == "smile \U0001F600"


async def test_a_body_that_is_not_utf8_is_400(sqlite_api: Api) -> None:
    status, body = await post_raw(sqlite_api, "/v1/requests", b'{"unique_id": "\xff", "message_for_user": "m"}')
    assert status == 400 and body["error"] == "bad_request" and "not UTF-8" in body["message"]


# --------------------------------------------------------------------------- control characters


@pytest.mark.parametrize(("body", "field"), [
    ({"message_for_user": "a\x00b"}, "message_for_user"),
    ({"message_for_user": "bell\x07"}, "message_for_user"),
    ({"message_for_user": "\x1b[31mred"}, "message_for_user"),
    ({"run_id": "run\x00"}, "run_id"),
    ({"run_id": "two\nlines"}, "run_id"),
    ({"unique_id": "u\x00"}, "unique_id"),
    ({"channels": ["web\x00"]}, "channels.0"),
])
async def test_control_characters_are_422_on_both_stores(api: Api, body: dict[str, Any], field: str) -> None:
    status, err = await api.call("POST", "/v1/requests", json=create_body(**body))
    assert status == 422 and err["error"] == "validation_error", err
    assert [f["field"] for f in err["details"]["fields"]] == [field]
    assert "control characters" in err["details"]["fields"][0]["message"]
    assert "\x00" not in str(err)


async def test_prose_keeps_line_breaks_and_tabs(api: Api) -> None:
    created = await api.create(create_body(message_for_user="First line\r\n\tsecond line\nthird"))
    assert created["message_for_user"] == "First line\r\n\tsecond line\nthird"


async def test_control_characters_elsewhere_are_refused_on_both_stores(api: Api) -> None:
    request = await api.create(create_body(schema={"type": "string"}))
    status, err = await api.submit(request["unique_id"], "12\x0034")
    assert status == 422 and err["error"] == "invalid_answer"
    assert err["details"]["fields"] == [{"field": "", "message":
                                         "Remove the invisible control characters; only line breaks and tabs may stay."}]
    status, err = await api.submit(f"{request['unique_id']}\x00", "1234")
    assert status == 422 and err["details"]["fields"][0]["field"] == "unique_id"
    status, err = await api.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY,
                                 json={"recipient": "ann\x00"})
    assert status == 422 and err["details"]["fields"][0]["field"] == "recipient"
    status, err = await api.call("POST", RUN_ANNOTATIONS, key=ANNOTATOR_KEY,
                                 json={"signal": {"kind": "flag"}, "note": "n\x00"})
    assert status == 422 and err["details"]["fields"][0]["field"] == "note"
    status, err = await api.call("POST", RUN_ANNOTATIONS, key=ANNOTATOR_KEY,
                                 json={"signal": {"kind": "flag"}, "target": {"eventId": "e\x00"}})
    assert status == 422 and err["details"]["fields"][0]["field"] == "target.eventId"
    # Nothing was stored by any of them: not even the run they named (its annotation list is 404).
    status, _ = await api.call("GET", RUN_ANNOTATIONS, key=READER_KEY)
    assert status == 404


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/requests/req%00x"),
    ("GET", "/v1/requests/req%00x/wait"),
    ("POST", "/v1/requests/req%00x/cancel"),
    ("GET", "/v1/requests?run_id=run%00"),
    ("GET", "/v1/requests?status=pending%07"),
    ("GET", "/v1/runs/run%00/annotations"),
    ("GET", "/v1/feedback/summary?run_id=%00"),
    ("GET", "/v1/events?run_id=%1b"),
])
async def test_control_characters_in_paths_and_queries_are_400(api: Api, method: str, path: str) -> None:
    async with api.session.request(method, api.base + path, headers={"Authorization": f"Bearer {READER_KEY}"}) as resp:
        assert resp.status == 400, await resp.text()
        body = await resp.json()
    assert body["error"] == "bad_request"


async def _raw_get(api: Api, path: str, authorization: bytes) -> bytes:
    host, port = api.server.host, api.server.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + f"{host}:{port}".encode()
                 + b"\r\nAuthorization: " + authorization + b"\r\nConnection: close\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


@pytest.mark.parametrize("authorization", [b"Bearer \xff\xfe\x80", b"Bearer caf\xc3\xa9"])
async def test_an_authorization_header_that_is_not_ascii_is_400(sqlite_api: Api, authorization: bytes) -> None:
    response = await _raw_get(sqlite_api, "/v1/requests", authorization)
    status_line = response.split(b"\r\n", 1)[0]
    assert status_line.split()[1] == b"400", response[:300]
    assert b'"error": "bad_request"' in response or b'"error":"bad_request"' in response


# --------------------------------------------------------------------------- strict types


@pytest.mark.parametrize(("extra", "field"), [
    ({"timeout_seconds": True}, "timeout_seconds"),
    ({"timeout_seconds": "120"}, "timeout_seconds"),
    ({"timeout_seconds": 120.5}, "timeout_seconds"),
    ({"sensitive": "true"}, "sensitive"),
    ({"sensitive": 1}, "sensitive"),
    ({"kind": 1}, "kind"),
    ({"channels": "web"}, "channels"),
    ({"run_id": 42}, "run_id"),
    ({"unique_id": 5}, "unique_id"),
    ({"message_for_user": ["a"]}, "message_for_user"),
    ({"schema": "a string"}, "schema"),
])
async def test_loose_types_are_422(sqlite_api: Api, extra: dict[str, Any], field: str) -> None:
    status, err = await sqlite_api.call("POST", "/v1/requests", json=create_body(**extra))
    assert status == 422 and err["error"] == "validation_error", err
    assert [f["field"] for f in err["details"]["fields"]] == [field]


async def test_an_integral_float_is_an_integer(sqlite_api: Api) -> None:
    created = await sqlite_api.create(create_body(timeout_seconds=120.0))
    assert created["status"] == "pending"


async def test_loose_types_in_submit_and_links_are_422(sqlite_api: Api) -> None:
    request = await sqlite_api.create(create_body())
    status, err = await sqlite_api.call("POST", "/api/human-feedback/submit", key=OPERATOR_KEY,
                                        json={"unique_id": 5, "response": "x"})
    assert status == 422 and err["details"]["fields"][0]["field"] == "unique_id"
    status, err = await sqlite_api.call("POST", "/api/human-feedback/submit", key=OPERATOR_KEY,
                                        json={"unique_id": request["unique_id"]})
    assert status == 422 and err["details"]["fields"] == [{"field": "response", "message": "is required"}]
    status, err = await sqlite_api.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY,
                                        json={"recipient": 5})
    assert status == 422 and err["details"]["fields"][0]["field"] == "recipient"


@pytest.mark.parametrize(("path", "key"), [
    ("/v1/requests?limit=0", READER_KEY),
    ("/v1/requests?limit=501", READER_KEY),
    ("/v1/requests?limit=ten", READER_KEY),
    ("/v1/requests?status=done", READER_KEY),
    ("/v1/requests?run_id=", READER_KEY),
    ("/v1/requests/x/wait?timeout=-1", AGENT_KEY),
    ("/v1/requests/x/wait?timeout=nan", AGENT_KEY),
    ("/v1/requests/x/wait?timeout=inf", AGENT_KEY),
    (f"{RUN_ANNOTATIONS}?cursor=", READER_KEY),
    (f"{RUN_ANNOTATIONS}?cursor=a%20b", READER_KEY),
    (f"{RUN_ANNOTATIONS}?limit=501", READER_KEY),
    ("/v1/feedback/summary?since=", READER_KEY),
    ("/v1/feedback/summary?until=", READER_KEY),
    ("/v1/feedback/summary?since=yesterday", READER_KEY),
    ("/v1/feedback/summary?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", READER_KEY),
])
async def test_bad_query_parameters_are_400(sqlite_api: Api, path: str, key: str) -> None:
    status, err = await sqlite_api.call("GET", path, key=key)
    assert status == 400 and err["error"] == "bad_request", (path, err)


# --------------------------------------------------------------------------- no-store


async def test_responses_carrying_an_answer_are_never_stored(sqlite_api: Api) -> None:
    request = await sqlite_api.create(create_body(sensitive=True, schema={"type": "string"}))
    assert (await sqlite_api.submit(request["unique_id"], "424242"))[0] == 200
    async with sqlite_api.session.get(sqlite_api.url(f"/v1/requests/{request['id']}/wait"), params={"timeout": "5"},
                                      headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
        assert resp.status == 200 and (await resp.json())["response"] == "424242"
        assert resp.headers["Cache-Control"] == "no-store"
    for path in (f"/v1/requests/{request['id']}", "/v1/requests"):
        async with sqlite_api.session.get(sqlite_api.url(path),
                                          headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    blocking = create_body(sensitive=True, schema={"type": "string"})

    async def ask_and_block() -> tuple[int, str, Any]:
        async with sqlite_api.session.post(sqlite_api.url("/v1/human-feedback"), json=blocking,
                                           headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            return resp.status, resp.headers.get("Cache-Control", ""), await resp.json()

    task = asyncio.create_task(ask_and_block())
    for _ in range(200):
        status, _ = await sqlite_api.submit(blocking["unique_id"], "777")
        if status == 200:
            break
        assert status == 404  # not created yet
        await asyncio.sleep(0.05)
    status, cache, body = await asyncio.wait_for(task, 15)
    assert status == 200 and body["response"] == "777" and cache == "no-store"


async def test_every_tenant_response_and_every_error_says_no_store(sqlite_api: Api) -> None:
    """Runs, annotations, the summary and every error envelope too, not only the request views: a run's
    record names its requests, an annotation carries a person's note, and an error may echo a field."""
    api = sqlite_api
    request = await api.create(create_body(run_id="run-cached"))
    annotation = {"signal": {"kind": "rating", "rating": 4}, "note": "fine"}
    calls: list[tuple[str, str, str | None, Any, int]] = [
        ("POST", "/v1/runs", AGENT_KEY, {"run_id": "run-cached-2"}, 201),
        ("POST", "/v1/runs", AGENT_KEY, {"run_id": "run-cached-2"}, 200),
        ("GET", "/v1/runs", READER_KEY, None, 200),
        ("GET", "/v1/runs/run-cached", READER_KEY, None, 200),
        ("POST", "/v1/runs/run-cached-2/complete", AGENT_KEY, {"status": "completed"}, 200),
        ("POST", "/v1/runs/run-cached/annotations", ANNOTATOR_KEY, annotation, 201),
        ("GET", "/v1/runs/run-cached/annotations", READER_KEY, None, 200),
        ("GET", "/v1/feedback/summary?run_id=run-cached", READER_KEY, None, 200),
        ("GET", "/v1/runs/run-cached/bundle", READER_KEY, None, 200),
        ("POST", "/api/human-feedback/submit", OPERATOR_KEY, {"unique_id": request["unique_id"], "response": "x"},
         200),
        # Errors, wherever they come from: the service, the key check, the router, the body reader.
        ("GET", "/v1/runs/run-nowhere", READER_KEY, None, 404),
        ("POST", "/v1/requests", None, create_body(), 401),
        ("POST", "/v1/requests", READER_KEY, create_body(), 403),
        ("POST", "/v1/requests", AGENT_KEY, {"unique_id": "u"}, 422),
        ("GET", "/v1/nothing", AGENT_KEY, None, 404),
        ("PUT", "/v1/requests", AGENT_KEY, None, 405),
        ("GET", "/metrics", AGENT_KEY, None, 403),
    ]
    for method, path, key, body, want in calls:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with api.session.request(method, api.url(path), json=body, headers=headers) as resp:
            assert resp.status == want, (method, path, resp.status, await resp.text())
            assert resp.headers.get("Cache-Control") == "no-store", (method, path)
    # Discovery and the document stay as they were: the same for every caller, no key, no tenant.
    for path in ("/v1/capabilities", "/.well-known/openwop", "/.well-known/hitl.json", "/openapi.json", "/healthz"):
        async with api.session.get(api.url(path)) as resp:
            assert resp.status == 200 and "Cache-Control" not in resp.headers, path


# ---- callbacks (issue 29)
# A callback_url is an outsider's address, and its receiver an outsider: the address is judged with every
# IPv4 address an IPv6 spelling carries, and the receiver's answer is read within a size and a time.

CALLBACK_SECRET = "cbsec-0123456789abcdef"
HUGE_BYTES = 200 * 1024 * 1024


@pytest.fixture
async def callback_api(storage_url: str) -> AsyncIterator[Api]:
    """The app on both stores, acme signing callbacks and allowing only its loopback receiver's host."""
    config = base_config(storage_url)
    config["tenants"][0]["callbacks"] = {"secret": CALLBACK_SECRET, "allow_hosts": ["127.0.0.1"],
                                         "timeout_seconds": 1}
    async with running_app(settings_from(config)) as api:
        yield api


NON_PUBLIC_SPELLINGS = [
    "[::7f00:1]", "[::127.0.0.1]",                   # IPv4-compatible loopback
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",         # IPv4-mapped loopback
    "[64:ff9b::7f00:1]", "[64:ff9b::127.0.0.1]",     # NAT64's well-known prefix to loopback
    "[2002:7f00:1::]", "[2002:7f00:1::1]",           # 6to4 through loopback
    "[64:ff9b::a9fe:a9fe]",                          # NAT64 to the cloud metadata address
    "[64:ff9b::a00:1]", "[::a00:1]", "[2002:c0a8:101::1]",  # NAT64, compatible, 6to4 to private addresses
    "[64:ff9b::6440:1]",                             # NAT64 to shared (carrier-grade NAT) space
    "[64:ff9b::e000:1]", "[2002:e000:1::1]",         # to IPv4 multicast
    "[64:ff9b::]", "[::]", "[2002::1]",              # to 0.0.0.0
    "[64:ff9b::f000:1]",                             # to reserved 240.0.0.0/4
    "[64:ff9b:1::7f00:1]", "[64:ff9b:1:ffff::1]",    # NAT64's local-use prefix, refused whole
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",        # Teredo, refused whole
    "[::ffff:0:7f00:1]",                             # IPv4-translated (SIIT), reserved
    "[fe80::1%25eth0]",                              # link-local with a zone
]
# 93.184.215.14 through NAT64 and 6to4, and a plain public IPv6 address: the embedded address is judged,
# the spelling itself is not refused.
PUBLIC_SPELLINGS = ["[64:ff9b::5db8:d70e]", "[2002:5db8:d70e::1]", "[2606:4700::1]"]


async def test_ipv6_spellings_are_judged_by_the_ipv4_they_carry_at_create(callback_api: Api) -> None:
    accepted = []
    for host in NON_PUBLIC_SPELLINGS:
        status, data = await callback_api.call("POST", "/v1/requests", json=create_body(
            callback_url=f"https://{host}/cb"))
        if status != 422:
            accepted.append((host, status))
            continue
        assert data["error"] == "validation_error"
        [problem] = data["details"]["fields"]
        assert problem["field"] == "callback_url" and "loopback, private or reserved" in problem["message"], data
    assert accepted == []
    for host in PUBLIC_SPELLINGS:
        status, data = await callback_api.call("POST", "/v1/requests", json=create_body(
            callback_url=f"https://{host}/cb"))
        assert status == 201 and data["callback_host"] == host, data


@dataclass
class HostileTarget:
    """Loopback receivers that misbehave: ``/huge`` answers 200 with 200 MB made as it is sent, ``/drip``
    answers 200 and then one byte of body every 50 ms forever, ``silent`` takes the POST and never answers."""

    base: str = ""
    silent: str = ""
    sent: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def huge(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Length": str(HUGE_BYTES)})
        await resp.prepare(request)
        chunk = b"x" * 65536
        try:
            while self.sent < HUGE_BYTES and not self.stop.is_set():
                await resp.write(chunk)
                self.sent += len(chunk)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            pass  # the client hung up: what it cost us is self.sent
        finally:
            self.done.set()
        return resp

    async def drip(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            while not self.stop.is_set():
                await resp.write(b".")
                self.sent += 1
                await asyncio.sleep(0.05)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            pass
        finally:
            self.done.set()
        return resp


@pytest.fixture
async def hostile() -> AsyncIterator[HostileTarget]:
    target = HostileTarget()
    app = web.Application()
    app.router.add_post("/huge", target.huge)
    app.router.add_post("/drip", target.drip)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    target.base = str(server.make_url("")).rstrip("/")

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    target.silent = f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}"
    yield target
    target.stop.set()
    silent.close()
    await server.close()


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak resident size starts again from the current one


def signed_payload() -> dict[str, Any]:
    return {"event": "request.resolved", "delivery_id": "req_1:callback", "request": {"id": "req_1"}}


async def test_a_huge_answer_is_delivered_after_reading_a_few_kib(hostile: HostileTarget) -> None:
    reset_peak_rss()
    before = peak_rss_kib()
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        status = await post_signed(http, url=f"{hostile.base}/huge", secret=CALLBACK_SECRET,
                                   payload=signed_payload(), timeout=30, log=logging.getLogger("test"))
    took = time.monotonic() - started
    await asyncio.wait_for(hostile.done.wait(), 10)
    # The status is the answer; the body is not ours to read, and its connection was closed, not drained.
    assert status == 200
    assert took < 5, took
    assert hostile.sent < 32 * 1024 * 1024, hostile.sent  # socket buffers at most, never the 200 MB
    assert peak_rss_kib() - before < 8 * 1024, (before, peak_rss_kib())  # KiB: a few MB at most
    assert signedpost.MAX_RESPONSE_BYTES <= 4096


async def test_a_body_that_drips_ends_at_the_exchange_cap_and_the_2xx_stands(hostile: HostileTarget) -> None:
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        status = await post_signed(http, url=f"{hostile.base}/drip", secret=CALLBACK_SECRET,
                                   payload=signed_payload(), timeout=0.6, log=logging.getLogger("test"))
    assert status == 200 and 0.5 <= time.monotonic() - started < 3
    await asyncio.wait_for(hostile.done.wait(), 10)


async def test_a_receiver_that_never_answers_fails_within_the_timeout(hostile: HostileTarget) -> None:
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        with pytest.raises(ConnectorError, match="TimeoutError") as failed:
            await post_signed(http, url=f"{hostile.silent}/cb", secret=CALLBACK_SECRET, payload=signed_payload(),
                              timeout=0.5, log=logging.getLogger("test"))
    assert not failed.value.permanent  # retried later, like any network failure
    assert time.monotonic() - started < 3


async def test_no_setting_stretches_an_exchange_past_the_cap(hostile: HostileTarget,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signedpost, "MAX_EXCHANGE_SECONDS", 0.5)  # 60 s in earnest: too long to wait for here
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        with pytest.raises(ConnectorError, match="TimeoutError"):
            await post_signed(http, url=f"{hostile.silent}/cb", secret=CALLBACK_SECRET, payload=signed_payload(),
                              timeout=3600, log=logging.getLogger("test"))
    assert time.monotonic() - started < 3


async def callback_row(api: Api, request_id: str, *, settled: bool) -> Any:
    """The request's callback delivery once it has been tried (``settled``: once sent or failed for good)."""
    async with asyncio.timeout(20):
        while True:
            rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)
            row = next((r for r in rows if r.channel == "callback"), None)
            if row is not None and row.attempts >= 1 and (not settled or row.status in ("sent", "failed")):
                return row
            await asyncio.sleep(0.05)


async def test_a_callback_answered_with_a_huge_body_is_delivered(callback_api: Api, hostile: HostileTarget) -> None:
    request = await callback_api.create(create_body(callback_url=f"{hostile.base}/huge"))
    await callback_api.call("POST", f"/v1/requests/{request['id']}/cancel")
    row = await callback_row(callback_api, request["id"], settled=True)
    assert row.status == "sent" and row.attempts == 1 and row.last_error is None
    await asyncio.wait_for(hostile.done.wait(), 10)
    assert hostile.sent < 32 * 1024 * 1024, hostile.sent


async def test_a_callback_that_is_never_answered_fails_and_is_retried(callback_api: Api,
                                                                      hostile: HostileTarget) -> None:
    request = await callback_api.create(create_body(callback_url=f"{hostile.silent}/cb"))
    await callback_api.call("POST", f"/v1/requests/{request['id']}/cancel")
    row = await callback_row(callback_api, request["id"], settled=False)
    assert row.status != "sent" and "TimeoutError" in (row.last_error or "")


async def test_a_webhook_answered_with_a_huge_body_is_delivered(tmp_path: Path, hostile: HostileTarget) -> None:
    # [[webhooks]] go through the same signed POST (core/signedpost.py), bounds and all.
    endpoint = {"id": "pager", "url": f"{hostile.base}/huge", "secret": CALLBACK_SECRET, "tenants": ["acme"],
                "events": ["request.created"]}
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'wh.db'}", webhooks=[endpoint]))
    async with running_app(settings, connector_classes=[WebhookConnector]) as api:
        request = await api.create(create_body(channels=["webhooks"]))
        await asyncio.wait_for(hostile.done.wait(), 20)
        await api.app[DISPATCHER].idle()
        _, view = await api.call("GET", f"/v1/requests/{request['id']}")
        assert [(d["channel"], d["status"], d["attempts"]) for d in view["deliveries"]] == [("webhooks", "sent", 1)]
    assert hostile.sent < 32 * 1024 * 1024, hostile.sent


# ---- forms, UTF-8 and integers (issue 29)
#
# A broken multipart body was a 500 on the hosted form and the inbox; %FF%FE in a form was stored as
# "\ufffd\ufffd"; 1e300 passed {"type": "integer"} (and 1e17 given for a number was a 500) while 2**53 + 1 was
# a 422. Every case runs on both stores, through every surface that takes it, and checks that nothing was
# stored (the request still pending, no answer, nothing journaled) and that a correct answer is taken after.

TOO_BIG = "Enter a number between -9007199254740991 and 9007199254740991."
NOT_UTF8 = "the form must be sent as UTF-8 text"


@pytest.fixture
async def forms(storage_url: str) -> AsyncIterator[Api]:
    """The app with the web channel (the hosted form under /f/, the inbox under /inbox), on both stores."""
    async with web_app(settings_from(base_config(storage_url))) as app:
        yield app


async def _still_pending(api: Api, request: dict[str, Any], why: str, *, unread: bool = True) -> None:
    """No answer stored; and for a body that could not be read (``unread``), not even an attempt journaled."""
    status, now = await api.call("GET", f"/v1/requests/{request['id']}", key=READER_KEY)
    assert status == 200 and now["status"] == "pending" and now.get("response") is None, (why, now)
    events = [e["event"] for e in await api.journal(request["id"])]
    assert "answered" not in events, (why, events)
    if unread:
        assert "invalid_attempt" not in events, (why, events)


async def _answered(api: Api, request: dict[str, Any]) -> Any:
    status, now = await api.call("GET", f"/v1/requests/{request['id']}", key=AGENT_KEY)
    assert status == 200 and now["status"] == "answered", now
    return now["response"]


async def _link(api: Api, schema: dict[str, Any] | None = None) -> tuple[dict[str, Any], str, str]:
    """A request, a one-time link's path to its form, and the form's CSRF token."""
    request = await api.create(create_body(**({"schema": schema} if schema else {})))
    status, minted = await api.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY, json={})
    assert status == 201, minted
    path = "/f/" + minted["url"].rsplit("/f/", 1)[1]
    async with api.session.get(api.url(path)) as resp:
        assert resp.status == 200
        return request, path, csrf_of(await resp.text())


async def _send(http: ClientSession, url: str, body: Any, content_type: str | None, **headers: str) -> tuple[int, str, str]:
    if content_type is not None:
        headers["Content-Type"] = content_type
    async with http.post(url, data=body, headers=headers, allow_redirects=False) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


def _part(name: str, value: str, *headers: str) -> str:
    return "\r\n".join(("--zz", f'Content-Disposition: form-data; name="{name}"', *headers, "", value)) + "\r\n"


MULTIPART = "multipart/form-data; boundary=zz"
# (why, content type, body): {csrf} is the surface's token; each has the token and an answer, so only the
# body's shape is wrong.
UNREADABLE = [
    ("a part whose header is not one (the report)", MULTIPART, "--zz\r\nbroken\r\n\r\n"),
    ("the report, after the token", MULTIPART, _part(CSRF_FIELD, "{csrf}") + "--zz\r\nbroken\r\n\r\n"),
    ("cut short in a value", MULTIPART, _part(CSRF_FIELD, "{csrf}") + _part(ROOT_NAME, "hello")[:-8]),
    ("cut short after a boundary", MULTIPART, _part(CSRF_FIELD, "{csrf}") + _part(ROOT_NAME, "hello") + "--zz\r\n"),
    ("no closing boundary", MULTIPART, _part(CSRF_FIELD, "{csrf}") + _part(ROOT_NAME, "hello")),
    ("a part without a name", MULTIPART,
     _part(CSRF_FIELD, "{csrf}") + "--zz\r\nContent-Disposition: form-data\r\n\r\nhello\r\n--zz--\r\n"),
    ("a part with an empty name", MULTIPART, _part(CSRF_FIELD, "{csrf}") + _part("", "hello") + "--zz--\r\n"),
    ("a file where a field is expected", MULTIPART, _part(CSRF_FIELD, "{csrf}") + (
        f'--zz\r\nContent-Disposition: form-data; name="{ROOT_NAME}"; filename="a.txt"\r\n\r\nhello\r\n--zz--\r\n')),
    ("a part typed as a file", MULTIPART, _part(CSRF_FIELD, "{csrf}")
     + _part(ROOT_NAME, "hello", "Content-Type: application/octet-stream") + "--zz--\r\n"),
    ("a nested multipart", MULTIPART, _part(CSRF_FIELD, "{csrf}")
     + _part(ROOT_NAME, "--yy--\r\n", "Content-Type: multipart/mixed; boundary=yy") + "--zz--\r\n"),
    ("an encoded part", MULTIPART, _part(CSRF_FIELD, "{csrf}")
     + _part(ROOT_NAME, "aGVsbG8=", "Content-Transfer-Encoding: base64") + "--zz--\r\n"),
    ("a compressed part", MULTIPART, _part(CSRF_FIELD, "{csrf}")
     + _part(ROOT_NAME, "hello", "Content-Encoding: gzip") + "--zz--\r\n"),
    ("no boundary named", "multipart/form-data", _part(CSRF_FIELD, "{csrf}") + "--zz--\r\n"),
    ("another boundary", "multipart/form-data; boundary=yy", _part(CSRF_FIELD, "{csrf}") + "--zz--\r\n"),
    # RFC 7578's _charset_ field: our forms send none, and aiohttp 3.14 cannot read past one (a 400 either way,
    # "not UTF-8" once it can).
    ("a _charset_ field", MULTIPART, _part("_charset_", "iso-8859-1") + _part(CSRF_FIELD, "{csrf}") + "--zz--\r\n"),
]
# Bytes that are not UTF-8, or a charset that is not: refused, never stored as U+FFFD.
NOT_UTF8_BODIES = [
    ("percent escapes that are not UTF-8 (the report)", "application/x-www-form-urlencoded",
     f"{CSRF_FIELD}={{csrf}}&{ROOT_NAME}=%FF%FEab".encode()),
    ("raw bytes that are not UTF-8", "application/x-www-form-urlencoded",
     f"{CSRF_FIELD}={{csrf}}&{ROOT_NAME}=".encode() + b"\xff\xfeab"),
    ("another charset", "application/x-www-form-urlencoded; charset=iso-8859-1",
     f"{CSRF_FIELD}={{csrf}}&{ROOT_NAME}=ab".encode()),
    ("a multipart value that is not UTF-8", MULTIPART,
     (_part(CSRF_FIELD, "{csrf}") + _part(ROOT_NAME, "@@") + "--zz--\r\n").encode().replace(b"@@", b"\xff\xfeab")),
    ("a multipart part in another charset", MULTIPART,
     (_part(CSRF_FIELD, "{csrf}") + _part(ROOT_NAME, "ab", "Content-Type: text/plain; charset=iso-8859-1")
      + "--zz--\r\n").encode()),
    ("a field name that is not UTF-8", MULTIPART,
     (_part(CSRF_FIELD, "{csrf}") + _part("@@", "ab") + "--zz--\r\n").encode().replace(b"@@", b"\xff")),
]


# What the inbox's envelope says for each (what is wrong, never quoting the bytes).
_CUT = "the form could not be read: its body is malformed or cut short"
_NO_NAME = "a part of the form has no field name"
_FILE = "the form holds a file where a text field is expected"
INBOX_SAYS = {
    "a part whose header is not one (the report)": _CUT, "the report, after the token": _CUT,
    "cut short in a value": _CUT, "cut short after a boundary": _CUT, "no closing boundary": _CUT,
    "a part without a name": _NO_NAME, "a part with an empty name": _NO_NAME,
    "a file where a field is expected": _FILE, "a part typed as a file": _FILE,
    "a nested multipart": "the form holds a nested multipart body",
    "an encoded part": "a field of the form is encoded; send it as plain text",
    "a compressed part": "a field of the form is encoded; send it as plain text",
    "no boundary named": _CUT, "another boundary": _CUT, "a _charset_ field": _CUT,
}


def _body(raw: str | bytes, csrf: str) -> bytes:
    return raw.replace("{csrf}", csrf).encode() if isinstance(raw, str) else raw.replace(b"{csrf}", csrf.encode())


async def _chunks(head: bytes, size: int) -> AsyncIterator[bytes]:
    # No Content-Length: the limit must hold while the body is read.
    yield head
    for _ in range(size // 10_000 + 1):
        yield b"y" * 10_000


async def test_a_form_that_cannot_be_read_is_a_400_page_and_nothing_is_stored(forms: Api) -> None:
    cases = [(why, kind, raw, "Open the link again") for why, kind, raw in UNREADABLE]
    cases += [(why, kind, raw, "The form must be sent as UTF-8 text") for why, kind, raw in NOT_UTF8_BODIES]
    for why, content_type, raw, says in cases:
        request, path, csrf = await _link(forms)
        status, kind, html = await _send(forms.session, forms.url(path), _body(raw, csrf), content_type)
        assert status == 400 and kind.startswith("text/html"), (why, status, html[:300])
        text = visible_text(html)
        assert "Your answer could not be read" in text and says in text, (why, text)
        await _still_pending(forms, request, why)
        # The link still takes its answer, in UTF-8, as a browser's multipart form too.
        good = _part(CSRF_FIELD, csrf) + _part(ROOT_NAME, "Zoë ✓", "Content-Type: text/plain; charset=UTF-8") + \
            "--zz--\r\n"
        status, _, html = await _send(forms.session, forms.url(path), good.encode(), MULTIPART)
        assert status == 200, (why, visible_text(html))
        assert await _answered(forms, request) == "Zoë ✓"


async def test_a_form_past_the_body_limit_is_413_also_one_part_read_without_a_length(forms: Api) -> None:
    request, path, csrf = await _link(forms)
    head = (_part(CSRF_FIELD, csrf) + _part(ROOT_NAME, "")[:-2]).encode()
    status, kind, html = await _send(forms.session, forms.url(path), _chunks(head, 70_000), MULTIPART)
    assert status == 413 and kind.startswith("text/html") and "too large" in visible_text(html)
    await _still_pending(forms, request, "an oversized part")
    assert (await _send(forms.session, forms.url(path), {CSRF_FIELD: csrf, ROOT_NAME: "fits"}, None))[0] == 200
    assert await _answered(forms, request) == "fits"


async def test_an_inbox_post_that_cannot_be_read_is_400_in_the_envelope_and_nothing_is_stored(forms: Api) -> None:
    cases = [(why, kind, raw, INBOX_SAYS[why]) for why, kind, raw in UNREADABLE]
    cases += [(why, kind, raw, NOT_UTF8) for why, kind, raw in NOT_UTF8_BODIES]
    async with signed_in(forms) as browser:
        for why, content_type, raw, says in cases:
            request = await forms.create(create_body())
            page = f"/inbox/r/{request['id']}"
            assert (await browser.get(page))[0] == 200
            status, kind, text = await _send(browser.http, forms.url(page), _body(raw, browser.csrf), content_type)
            assert status == 400 and kind.startswith("application/json"), (why, status, text[:300])
            error = json.loads(text)
            assert error["error"] == "bad_request", (why, error)
            assert error["message"] in ((says, NOT_UTF8) if why == "a _charset_ field" else (says,)), (why, error)
            await _still_pending(forms, request, why)
            good = _part(CSRF_FIELD, browser.csrf) + _part(ROOT_NAME, "Zoë ✓") + "--zz--\r\n"
            status, _, _ = await _send(browser.http, forms.url(page), good.encode(), MULTIPART)
            assert status == 303, why
            assert await _answered(forms, request) == "Zoë ✓"
        # Past the body limit, read without a Content-Length: 413, as the form and the API answer.
        request = await forms.create(create_body())
        page = f"/inbox/r/{request['id']}"
        head = (_part(CSRF_FIELD, browser.csrf) + _part(ROOT_NAME, "")[:-2]).encode()
        status, _, text = await _send(browser.http, forms.url(page), _chunks(head, 70_000), MULTIPART)
        assert status == 413 and json.loads(text)["error"] == "payload_too_large"
        await _still_pending(forms, request, "an oversized part")


async def test_a_body_cut_off_by_the_client_leaves_the_request_pending(forms: Api,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The client promises more bytes than it sends and hangs up: no reply can reach it, nothing is taken and
    nothing fails on the server."""
    request, path, csrf = await _link(forms)
    body = (_part(CSRF_FIELD, csrf) + _part(ROOT_NAME, "hello")).encode()
    reader, writer = await asyncio.open_connection(forms.server.host, forms.server.port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {MULTIPART}\r\n"
                 f"Content-Length: {len(body) + 500}\r\n\r\n".encode() + body)
    await writer.drain()
    writer.write_eof()
    await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await _still_pending(forms, request, "cut off by the client")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (await _send(forms.session, forms.url(path), {CSRF_FIELD: csrf, ROOT_NAME: "later"}, None))[0] == 200
    assert await _answered(forms, request) == "later"


# Every spelling of a number past ±(2**53 - 1): one rule for integers and numbers alike.
PAST_EXACT = ["1e300", "-1e300", "1e17", "9007199254740992.0", "9007199254740992", "-9007199254740993",
              "1.7976931348623157e308"]
NUMBERS = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}}}


async def test_numbers_past_2_53_are_invalid_answers_however_written(api: Api) -> None:
    request = await api.create(create_body(schema=NUMBERS))
    for raw in PAST_EXACT:
        for field in ("n", "x"):
            status, body = await post_raw(api, "/api/human-feedback/submit",
                                          '{"unique_id": "%s", "response": {"%s": %s}}' % (
                                              request["unique_id"], field, raw), key=OPERATOR_KEY)
            assert status == 422 and body["error"] == "invalid_answer", (raw, field, body)
            assert body["details"]["fields"] == [{"field": field, "message": TOO_BIG}], (raw, field, body)
            status, now = await api.call("GET", f"/v1/requests/{request['id']}", key=READER_KEY)
            assert now["status"] == "pending" and now.get("response") is None
    # 3.0 is the integer 3 (JSON Schema), and the agent gets 3; the bounds themselves are taken.
    raw = '{"unique_id": "%s", "response": {"n": 3.0, "x": 9007199254740991.0}}' % request["unique_id"]
    status, body = await post_raw(api, "/api/human-feedback/submit", raw, key=OPERATOR_KEY)
    assert status == 200, body
    answer = await _answered(api, request)
    assert answer == {"n": 3, "x": 9007199254740991} and type(answer["n"]) is int
    waited = await api.wait(request["id"])
    assert waited["response"] == {"n": 3, "x": 9007199254740991}


async def test_a_primitive_integer_answer_of_1e300_is_invalid(api: Api) -> None:
    request = await api.create(create_body(schema={"type": "integer"}))
    status, body = await post_raw(api, "/api/human-feedback/submit",
                                  '{"unique_id": "%s", "response": 1e300}' % request["unique_id"], key=OPERATOR_KEY)
    assert status == 422 and body["details"]["fields"] == [{"field": "", "message": TOO_BIG}]
    status, now = await api.call("GET", f"/v1/requests/{request['id']}", key=READER_KEY)
    assert now["status"] == "pending" and now.get("response") is None
    assert (await api.submit(request["unique_id"], 7))[0] == 200
    assert await _answered(api, request) == 7


@pytest.mark.parametrize(("schema", "where"), [
    ({"type": "integer", "maximum": 1e300}, "schema.maximum"),
    ({"type": "integer", "minimum": -1e300}, "schema.minimum"),
    ({"type": "number", "maximum": 1e308}, "schema.maximum"),
    ({"type": "number", "exclusiveMaximum": 1e17}, "schema.exclusiveMaximum"),
    ({"type": "integer", "default": 9007199254740992.0}, "schema.default"),
    ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 1e300}}}, "schema.properties.n.maximum"),
])
async def test_a_schema_bound_past_2_53_is_invalid_schema_however_written(api: Api, schema: dict[str, Any],
                                                                          where: str) -> None:
    status, body = await api.call("POST", "/v1/requests", json=create_body(schema=schema))
    assert status == 422 and body["error"] == "invalid_schema", body
    assert body["message"].startswith(f"{where}: is too large to be exact")


async def test_bounds_within_the_exact_range_are_taken_and_worded_plainly(api: Api) -> None:
    request = await api.create(create_body(schema={"type": "number", "minimum": -1e15, "maximum": 9e15}))
    status, body = await api.submit(request["unique_id"], 9.001e15)
    assert status == 422 and body["details"]["fields"] == [
        {"field": "", "message": "Enter a number from -1000000000000000 to 9000000000000000."}]
    assert (await api.submit(request["unique_id"], 8.5e15))[0] == 200


def test_a_bound_stored_before_the_rule_is_worded_with_its_exponent() -> None:
    """A schema created before issue 29 may hold maximum 1e300: its sentence is short, never 301 digits."""
    assert problem("maximum", {"type": "number", "maximum": 1e300}) == "Enter a number of at most 1e+300."
    assert problem("maximum", {"type": "integer", "maximum": 40.0}) == "Enter a whole number of at most 40."


async def test_a_default_answer_past_2_53_is_refused_at_create(api: Api) -> None:
    status, body = await api.call("POST", "/v1/requests", json=create_body(
        schema={"type": "number"}, on_timeout={"default": 1e17}))
    assert status == 422 and TOO_BIG in json.dumps(body), body


async def test_the_hosted_form_and_the_inbox_refuse_1e300_for_an_integer(forms: Api) -> None:
    schema = {"type": "object", "properties": {"count": {"type": "integer", "title": "How many"},
                                               "size": {"type": "number", "title": "How big"}}}
    for typed in ("1e300", "9007199254740992", "1e17"):
        for field in ("count", "size"):
            request, path, csrf = await _link(forms, schema)
            status, _, html = await _send(forms.session, forms.url(path), {CSRF_FIELD: csrf, field: typed}, None)
            assert status == 422 and TOO_BIG in visible_text(html), (typed, field, visible_text(html))
            status, now = await forms.call("GET", f"/v1/requests/{request['id']}", key=READER_KEY)
            assert now["status"] == "pending" and now.get("response") is None
    status, _, _ = await _send(forms.session, forms.url(path), {CSRF_FIELD: csrf, "count": "3.0", "size": "2.5"},
                               None)
    assert status == 200 and await _answered(forms, request) == {"count": 3, "size": 2.5}
    async with signed_in(forms) as browser:
        request = await forms.create(create_body(schema=schema))
        page = f"/inbox/r/{request['id']}"
        await browser.get(page)
        status, html, _ = await browser.post(page, {"count": "1e300"})
        assert status == 422 and TOO_BIG in visible_text(html)
        status, now = await forms.call("GET", f"/v1/requests/{request['id']}", key=READER_KEY)
        assert now["status"] == "pending" and now.get("response") is None
        status, _, _ = await browser.post(page, {"count": "3.0"})
        assert status == 303 and await _answered(forms, request) == {"count": 3}


async def test_a_chat_reply_of_1e300_for_an_integer_is_invalid(api: Api) -> None:
    service = api.app[SERVICE]
    for schema, typed, field in [({"type": "integer"}, "1e300", ""),
                                 ({"type": "number"}, "1e17", ""),
                                 ({"type": "object", "properties": {"n": {"type": "integer"}}}, "n: 1e300", "n")]:
        request = await api.create(create_body(schema=schema))
        view = await service.get(tenant_id="acme", request_id=request["id"])
        answer, problems = read_reply(view, typed)
        assert problems is None, problems
        with pytest.raises(InvalidAnswerError) as refused:
            await service.submit(tenant_id="acme", request_id=request["id"], response=answer,
                                 principal="telegram:42", channel="telegram")
        assert refused.value.fields == [{"field": field, "message": TOO_BIG}], typed
        status, now = await api.call("GET", f"/v1/requests/{request['id']}", key=READER_KEY)
        assert now["status"] == "pending" and now.get("response") is None
        answer, _ = read_reply(view, typed.replace("1e300", "3.0").replace("1e17", "3.0"))
        await service.submit(tenant_id="acme", request_id=request["id"], response=answer, principal="telegram:42",
                             channel="telegram")
        assert await _answered(api, request) == ({"n": 3} if field else 3)


async def test_an_mcp_tool_gets_no_1e300_for_an_integer(api: Api) -> None:
    from .test_mcp import http_session

    refusals: list[tuple[int, Any]] = []

    async def human(request: dict[str, Any]) -> None:
        raw = '{"unique_id": "%s", "response": 1e300}' % request["unique_id"]
        refusals.append(await post_raw(api, "/api/human-feedback/submit", raw, key=OPERATOR_KEY))
        await _still_pending(api, request, "1e300 over MCP", unread=False)
        assert (await api.submit(request["unique_id"], 3.0))[0] == 200

    async with http_session(api) as session:
        with api.app[BUS].subscribe(tenant_id="acme", types={"request.created"}) as sub:
            call = asyncio.ensure_future(session.call_tool("ask_human", {
                "question": "How many?", "timeout_seconds": 60, "schema": {"type": "integer"}}))
            created = await asyncio.wait_for(sub.queue.get(), 30)
            await human(created.data)
            result = await asyncio.wait_for(call, 30)
        assert refusals[0][0] == 422 and refusals[0][1]["details"]["fields"] == [{"field": "", "message": TOO_BIG}]
        assert not result.is_error and result.structured_content["answer"] == 3
        assert type(result.structured_content["answer"]) is int
        refused = await session.call_tool("ask_human", {"question": "How many?", "schema": {
            "type": "integer", "maximum": 1e300}})
        assert refused.is_error
        assert refused.content[0].text.startswith("invalid_schema: schema.maximum: is too large to be exact")
        refused = await session.call_tool("ask_human", {"question": "How long?", "timeout_seconds": 1e300})
        assert refused.is_error and "timeout_seconds" in refused.content[0].text

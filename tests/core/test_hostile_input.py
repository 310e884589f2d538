"""Malformed input gets its documented 4xx, never a 500, on both stores (issue 11, items 2, 8 and 12; issue 29's
cases are in test_hostile_callbacks.py and test_hostile_forms.py).

Each case here was a 500 (or a stored oddity on SQLite and a 500 on PostgreSQL):
integers past 2**53, JSON nested 10,000 deep, lone surrogates, NUL and other control
characters, bytes that are not UTF-8 in ``Authorization``; and loose types that were
silently accepted (``"timeout_seconds": true`` made a request that expired in 1 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import AGENT_KEY, ANNOTATOR_KEY, OPERATOR_KEY, READER_KEY, Api, base_config, settings_from, web_app
from tests.core.test_observability import _scrape as scrape
from tests.core.test_observability import _value as metric
from tests.core.test_observability import logged_app
from tests.webforms.test_inbox_http import PUBLIC, signed_in


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


# ---- logs and malformed HTTP (issue 29)

# A line a client would like the log to show as the server's own.
FORGED = "1999-12-31T23:59:59.000000Z [info     ] request answered"
# Only as an escape may these reach a log: C0 (CR, ESC, NUL ...; LF ends a line), DEL, C1 (NEL), the line
# and paragraph separators, bidi overrides and isolates.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# How a console line starts: a record's timestamp, or a traceback's indented line.
CONSOLE_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[|\s")


def assert_only_records(text: str, log_format: str) -> list[Any]:
    """Every line of ``text`` is one the renderer made (JSON objects, or console records and their indented
    tracebacks) and none is the client's; returns the JSON records."""
    assert not RAW_CONTROL.search(text), RAW_CONTROL.search(text)
    lines = text.split("\n")[:-1]
    assert lines and text.endswith("\n")
    if log_format == "json":
        return [json.loads(line) for line in lines]  # each line one whole object
    for line in lines:
        assert CONSOLE_LINE.match(line) and not line.startswith(FORGED[:4]), line
    return []


async def raw_http(api: Api, raw: bytes) -> bytes:
    """Send ``raw`` on a connection of its own; what came back once the server closed it."""
    reader, writer = await asyncio.open_connection(api.server.host, api.server.port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def http_status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("log_format", ["console", "json"])
async def test_nothing_a_client_sends_starts_a_log_line(tmp_path: Path, log_format: str) -> None:
    forged = "%0d%0a" + FORGED.replace(" ", "%20") + "%1b[2J%c2%85%e2%80%a8%e2%80%ae%e2%81%a6"
    async with logged_app(tmp_path, log_format=log_format) as (api, buffer):
        answer = await raw_http(api, f"GET /nope{forged} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert http_status(answer) == 400 and b'"bad_request"' in answer
        # A library's record, its fields and a traceback whose message breaks lines go the same way.
        log = logging.getLogger("handraise.test")
        log.warning("said %s", "\r\n" + FORGED, extra={"field": "\u2028" + FORGED, "nested": ["\x85" + FORGED]})
        try:
            raise ValueError("bad\n" + FORGED + "\x1b[0m")
        except ValueError:
            log.exception("failed\r" + FORGED)
    text = buffer.getvalue()
    records = assert_only_records(text, log_format)
    path = "/nope\\r\\n" + FORGED + "\\x1b[2J\\x85\\u2028\\u202e\\u2066"
    if log_format == "console":
        assert f"GET {path} 400" in text and "  ValueError: bad\n  " + FORGED + "\\x1b[0m\n" in text
    else:
        assert [r["path"] for r in records if r["logger"] == "handraise.access"] == [path]
        warned, failed = (r for r in records if r["logger"] == "handraise.test")
        assert warned["event"] == "said \\r\\n" + FORGED and warned["field"] == "\\u2028" + FORGED
        assert warned["nested"] == ["\\x85" + FORGED] and failed["event"] == "failed\\r" + FORGED
        assert failed["exception"].splitlines()[-2:] == ["ValueError: bad", FORGED + "\\x1b[0m"]


MALFORMED = {
    "a bare CR": b"GET /nope\r2026-12-04T00:00:00.000000Z [info] forged HTTP/1.1\r\nHost: x\r\n\r\n",
    "a 20 KB request line": b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "500 headers": b"GET / HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(500)) + b"\r\n",
    "a NUL in a header": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "a 20 KB header": b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
    "U+2028 in the path": "GET /x\u2028y HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
    "an obsolete folded header": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n",
    "Content-Length beside chunked": b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                                     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "a broken chunk": b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n",
    "TLS on the HTTP port": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "a gzip body that is not": b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + AGENT_KEY.encode()
                               + b"\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                               b"Content-Length: 5\r\nConnection: close\r\n\r\nhello",
}


async def test_malformed_http_is_one_400_line_and_counted(tmp_path: Path) -> None:
    async with logged_app(tmp_path) as (api, buffer):
        for name, raw in MALFORMED.items():
            assert http_status(await raw_http(api, raw)) == 400, name
        # A method no client of ours sends is counted, but not under its own name.
        answer = await raw_http(api, b"PROPFIND /v1/requests HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert http_status(answer) == 405
        _status, _kind, metrics = await scrape(api)
    records = assert_only_records(buffer.getvalue(), "json")
    assert not [r for r in records if r["level"] != "info" or "exception" in r], buffer.getvalue()[-3000:]
    refused = [r for r in records if r.get("logger") == "handraise.access" and r["status"] == 400]
    assert len(refused) == len(MALFORMED)
    # What aiohttp's parser refused has no method or path: its words say why, never the client's bytes.
    unparsed = [r for r in refused if "method" not in r]
    assert unparsed and all(r["reason"] and "aaaa" not in r["event"] for r in unparsed)
    counted = {m: metric(metrics, "handraise_http_requests_total", method=m, status="400")
               for m in ("GET", "POST", "unparsed")}
    assert counted["unparsed"] == len(unparsed) and sum(counted.values()) == len(MALFORMED), counted
    assert metric(metrics, "handraise_http_requests_total", method="other", status="405") == 1
    assert "PROPFIND" not in metrics


async def test_every_response_says_nosniff(tmp_path: Path) -> None:
    """No browser reads an API's JSON, a stream or an error as a page or a script: one header on every
    response, however written (the inbox's JSON lacked it)."""
    async with web_app(settings_from(base_config(f"sqlite:///{tmp_path / 'n.db'}"))) as api, \
            signed_in(api) as browser:
        request = await api.create(create_body())
        _status, link = await api.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY, json={})
        anyone = ["/", "/docs", "/healthz", "/openapi.json", "/v1/capabilities", "/.well-known/openwop", "/nothing",
                  link["url"][len(PUBLIC):], "/inbox"]
        agent = [f"/v1/requests/{request['id']}", "/v1/requests?limit=1", "/v1/nothing", "/metrics"]
        inbox = ["/inbox", "/inbox/api/pending", f"/inbox/api/requests/{request['id']}", f"/inbox/r/{request['id']}",
                 "/inbox/history", "/inbox/api/requests/nope"]
        agent_key = {"Authorization": f"Bearer {AGENT_KEY}"}
        for http, headers, paths in ((api.session, {}, anyone), (api.session, agent_key, agent),
                                     (browser.http, {}, inbox)):
            for path in paths:
                async with http.get(api.url(path), headers=headers, allow_redirects=False) as resp:
                    assert resp.headers.get("X-Content-Type-Options") == "nosniff", (path, resp.status)
        async with api.session.get(api.url("/v1/events"), headers={"Authorization": f"Bearer {READER_KEY}"}) as resp:
            assert resp.status == 200 and resp.headers.get("X-Content-Type-Options") == "nosniff"

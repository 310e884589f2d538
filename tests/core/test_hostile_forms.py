"""Hostile forms (issue 29, items 5 to 7): broken multipart, non-UTF-8 bytes and numbers past the exact range
answer their documented 4xx on the hosted form, the inbox, the API, chat and MCP, on both stores; nothing is stored."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession
from conftest import AGENT_KEY, OPERATOR_KEY, READER_KEY, Api, base_config, settings_from, web_app

from handraise.core.appkeys import BUS, SERVICE
from handraise.core.chat import read_reply
from handraise.core.errors import InvalidAnswerError
from handraise.core.schema.messages import problem
from handraise.webforms.render import CSRF_FIELD, ROOT_NAME
from tests.webforms.html_tools import csrf_of, visible_text
from tests.webforms.test_inbox_http import signed_in
from tests.core.test_hostile_input import create_body, post_raw


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

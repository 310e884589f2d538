"""Hostile posts to the hosted form: the human gets a page (400, 403, 422), never a 500 or a JSON error.

Issue 11: an integer past 2**53 gave the human a raw JSON error page; an unknown charset
or broken multipart was a 500; a post from another site was taken whenever its CSRF
token was right. ``Origin`` is now checked when the browser sends one.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Api

from handraise.core.appkeys import SERVICE
from handraise.webforms.render import CSRF_FIELD, ROOT_NAME

from .html_tools import csrf_of, visible_text
from .test_http import ask, fetch, mint


async def _form(api: Api, schema: dict[str, Any] | None = None) -> tuple[dict[str, Any], str, str]:
    request = await ask(api, schema)
    path = await mint(api, request["id"])
    csrf = csrf_of((await fetch(api, path)).html)
    return request, path, csrf


async def _post(api: Api, path: str, body: bytes | dict[str, str], *, content_type: str | None = None,
                origin: str | None = None) -> tuple[int, str, str]:
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if origin is not None:
        headers["Origin"] = origin
    async with api.session.post(api.url(path), data=body, headers=headers, allow_redirects=False) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def _status(api: Api, request: dict[str, Any]) -> str:
    return (await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])).status


@pytest.mark.parametrize(("content_type", "body"), [
    ("application/x-www-form-urlencoded; charset=klingon", "{csrf}&answer=yes"),
    ("application/x-www-form-urlencoded", b"\xff\xfe=\xff"),
    ("multipart/form-data; boundary=XX", b"no boundary here"),
    ("multipart/form-data", b"--XX\r\n"),
    ("multipart/form-data; boundary=XX", b'--XX\r\nContent-Disposition: form-data; name="answer"\r\n\r\nyes\r\n'),
    ("multipart/form-data; boundary=XX",
     b'--XX\r\nContent-Disposition: form-data; name="answer"\r\nContent-Type: text/plain; charset=klingon\r\n'
     b"\r\nyes\r\n--XX--\r\n"),
    ("multipart/form-data; boundary=XX", b"--XX\r\nContent-Disposition: form-data\r\n\r\nyes\r\n--XX--\r\n"),
])
async def test_a_post_that_cannot_be_read_is_a_400_page(web: Api, content_type: str, body: Any) -> None:
    request, path, csrf = await _form(web)
    if isinstance(body, str):
        body = body.format(csrf=f"{CSRF_FIELD}={csrf}").encode()
    status, kind, html = await _post(web, path, body, content_type=content_type)
    assert status == 400 and kind.startswith("text/html"), html[:300]
    assert "Your answer could not be read" in visible_text(html)
    assert await _status(web, request) == "pending"


async def test_an_integer_past_2_53_is_a_422_page_naming_the_field(web: Api) -> None:
    request, path, csrf = await _form(web, {"type": "object", "properties": {
        "count": {"type": "integer", "title": "How many"}}})
    status, kind, html = await _post(web, path, {CSRF_FIELD: csrf, "count": str(2**53)})
    assert status == 422 and kind.startswith("text/html")
    assert "Enter a number between" in visible_text(html)
    assert await _status(web, request) == "pending"
    status, _, _ = await _post(web, path, {CSRF_FIELD: csrf, "count": str(2**53 - 1)})
    assert status == 200 and await _status(web, request) == "answered"


async def test_control_characters_in_a_posted_answer_are_a_422_page(web: Api) -> None:
    request, path, csrf = await _form(web, {"type": "string"})
    status, _, html = await _post(web, path, {CSRF_FIELD: csrf, ROOT_NAME: "12\x0034"})
    assert status == 422 and "Remove the invisible control characters" in visible_text(html)
    assert await _status(web, request) == "pending"


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:9", "null-ish", "http://"])
async def test_a_post_from_another_origin_is_refused(web: Api, origin: str) -> None:
    request, path, csrf = await _form(web, {"type": "string"})
    status, kind, html = await _post(web, path, {CSRF_FIELD: csrf, ROOT_NAME: "hello"}, origin=origin)
    assert status == 403 and kind.startswith("text/html")
    assert "could not be verified" in visible_text(html)
    assert await _status(web, request) == "pending"


@pytest.mark.parametrize("origin", [None, "null", "http://127.0.0.1:8080", "HTTP://127.0.0.1:8080", "{server}"])
async def test_a_post_from_this_server_or_without_origin_is_taken(web: Api, origin: str | None) -> None:
    request, path, csrf = await _form(web, {"type": "string"})
    if origin == "{server}":
        origin = web.base  # reached under another name than public_url, as behind a proxy
    status, _, html = await _post(web, path, {CSRF_FIELD: csrf, ROOT_NAME: "hello"}, origin=origin)
    assert status == 200, visible_text(html)
    assert await _status(web, request) == "answered"

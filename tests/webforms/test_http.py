"""HTTP tests of the hosted form: links, every status of /f/{token}, headers, CSRF, limits, typed answers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse

from conftest import (
    AGENT_KEY,
    OPERATOR_KEY,
    OTHER_AGENT_KEY,
    OTHER_OPERATOR_KEY,
    READER_KEY,
    Api,
    base_config,
    named,
    settings_from,
    sweeper_held,
    web_app,
)
from handraise.core.appkeys import CHANNELS, CONNECTORS, DISPATCHER, SERVICE, STORE
from handraise.core.connectors import Connector
from handraise.core.errors import ConfigError
from handraise.webforms.connector import WebFormsChannel
from handraise.webforms.pages import CONTENT_SECURITY_POLICY
from handraise.webforms.render import CSRF_FIELD, OFFSET_PREFIX, ROOT_NAME

from .html_tools import by_id, csrf_of, field_container, find, one, parse, visible_text, within

TENANT_NAME = "Acme Corp"
AGENT_NAME = "Deploy bot"
OPERATOR_NAME = "On-call desk"

EVERY_FIELD = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40, "title": "Your name"},
        "notes": {"type": "string", "maxLength": 1000},
        "count": {"type": "integer", "minimum": 0, "maximum": 100},
        "price": {"type": "number"},
        "agree": {"type": "boolean"},
        "sure": {"type": "boolean"},
        "size": {"type": "string", "enum": ["S", "M", "L"]},
        "country": {"type": "string", "enum": ["de", "fr", "it", "es", "pt", "nl"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}},
        "trip": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "time"},
        "when": {"type": "string", "format": "date-time"},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "pin": {"type": "string", "writeOnly": True},
    },
    "required": ["name", "sure"],
}
EVERY_FIELD_POST = [
    ("name", "Ann"), ("notes", "line one\r\nline two"), ("count", "7"), ("price", "2.5"), ("agree", "true"),
    ("sure", "false"), ("size", "L"), ("country", "pt"), ("tags", "x"), ("tags", "z"),
    ("trip", "2026-05-01"), ("trip", "2026-05-09"), ("day", "2026-01-02"), ("at", "09:15"),
    ("when", "2026-01-02T14:30"), (OFFSET_PREFIX + "when", "-300"), ("email", "ann@example.com"),
    ("site", "https://example.com/a?b=c"), ("pin", "0000-9"),
]
EVERY_FIELD_ANSWER = {
    "name": "Ann", "notes": "line one\nline two", "count": 7, "price": 2.5, "agree": True, "sure": False,
    "size": "L", "country": "pt", "tags": ["x", "z"], "trip": ["2026-05-01", "2026-05-09"], "day": "2026-01-02",
    "at": "09:15", "when": "2026-01-02T14:30:00-05:00", "email": "ann@example.com",
    "site": "https://example.com/a?b=c", "pin": "0000-9",
}


def web_settings(storage_url: str, **extra: Any) -> Any:
    return settings_from(named(base_config(storage_url, **extra), tenant=TENANT_NAME, agent=AGENT_NAME,
                               operator=OPERATOR_NAME))


@pytest.fixture
async def web(sqlite_url: str) -> AsyncIterator[Api]:
    """The web channel's app, with the names the pages show (overrides conftest's ``web``)."""
    async with web_app(web_settings(sqlite_url)) as api:
        yield api


@pytest.fixture
async def web_any_store(storage_url: str) -> AsyncIterator[Api]:
    async with web_app(web_settings(storage_url)) as api:
        yield api


async def ask(api: Api, schema: dict | None = None, **body: Any) -> dict[str, Any]:
    payload = {"unique_id": f"q-{secrets.token_hex(6)}", "message_for_user": "Please fill this in.", **body}
    if schema is not None:
        payload["schema"] = schema
    return await api.create(payload)


async def mint(api: Api, request_id: str, *, recipient: str | None = None) -> str:
    """A link's path, /f/<token>."""
    status, body = await api.call("POST", f"/v1/requests/{request_id}/links", key=OPERATOR_KEY,
                                  json={"recipient": recipient} if recipient else {})
    assert status == 201, body
    prefix = "http://127.0.0.1:8080/f/"
    assert body["url"].startswith(prefix)
    return body["url"][len(prefix) - 3:]


class Page:
    def __init__(self, resp: ClientResponse, html: str) -> None:
        self.status = resp.status
        self.headers = resp.headers
        self.html = html
        self.text = visible_text(html) if html else ""


async def fetch(api: Api, path: str, *, method: str = "GET", data: Any = None,
                headers: dict[str, str] | None = None) -> Page:
    async with api.session.request(method, api.url(path), data=data, headers=headers or {},
                                   allow_redirects=False) as resp:
        return Page(resp, await resp.text())


async def post(api: Api, path: str, pairs: list[tuple[str, str]], *, csrf: str | None = None) -> Page:
    if csrf is None:
        csrf = csrf_of((await fetch(api, path)).html)
    return await fetch(api, path, method="POST", data=[(CSRF_FIELD, csrf), *pairs])


def assert_page_headers(page: Page) -> None:
    assert page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert csp == CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp and "script-src 'self'" in csp
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["Cache-Control"] == "no-store"
    assert page.headers["X-Content-Type-Options"] == "nosniff"


async def state(api: Api, request_id: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"/v1/requests/{request_id}", key=READER_KEY)
    assert status == 200
    return body


# --------------------------------------------------------------------------- minting links


async def test_minting_needs_the_answer_scope_and_an_ask_key_is_refused(web: Api) -> None:
    request = await ask(web)
    for key in (AGENT_KEY, READER_KEY):
        status, body = await web.call("POST", f"/v1/requests/{request['id']}/links", key=key, json={})
        assert status == 403 and body["error"] == "forbidden"
    status, _ = await web.call("POST", f"/v1/requests/{request['id']}/links", key=OTHER_OPERATOR_KEY, json={})
    assert status == 404
    status, body = await web.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY,
                                  json={"recipient": "Alice"})
    assert status == 201
    assert body["expires_at"] == request["expires_at"]
    token = body["url"].rsplit("/", 1)[1]
    # token_urlsafe: 6 bits a character, so 22+ characters are at least 128 random bits.
    assert re.fullmatch(r"[A-Za-z0-9_-]{22,}", token) and len(token) * 6 >= 128


async def test_the_token_is_stored_only_as_a_hash_and_the_recipient_is_journaled(web: Api) -> None:
    request = await ask(web)
    path = await mint(web, request["id"], recipient="Alice")
    token = path.rsplit("/", 1)[1]
    row = await web.app[STORE].links.by_hash(hashlib.sha256(token.encode()).hexdigest())
    assert row is not None and row["request_id"] == request["id"]
    assert token not in json.dumps(row, default=str)
    entries = await web.journal(request["id"])
    minted = [e for e in entries if e["event"] == "link_minted"]
    assert len(minted) == 1 and minted[0]["data"]["recipient"] == "Alice"
    assert minted[0]["principal"] == "operator:op-1"
    assert token not in json.dumps(entries)


async def test_no_link_for_a_terminal_request(web: Api) -> None:
    request = await ask(web)
    await web.call("POST", f"/v1/requests/{request['id']}/cancel")
    status, body = await web.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY, json={})
    assert status == 410 and body["error"] == "cancelled"


# --------------------------------------------------------------------------- the form page


async def test_the_form_page_shows_the_question_who_asks_and_the_time_left(web: Api) -> None:
    request = await ask(web, EVERY_FIELD, message_for_user="Who are you? <script>x()</script>",
                        timeout_seconds=600)
    path = await mint(web, request["id"], recipient="Alice")
    page = await fetch(web, path)
    assert page.status == 200
    assert_page_headers(page)
    assert "Who are you? <script>x()</script>" in page.text
    assert "&lt;script&gt;x()&lt;/script&gt;" in page.html
    assert one(page.html, "title").text == f"Question from {TENANT_NAME} · Handraise"
    assert f"Asked by {AGENT_NAME} for Alice" in page.text
    # Names people read, never ids.
    assert "agent-1" not in page.text and "acme" not in page.text.replace(TENANT_NAME, "")
    countdown = by_id(page.html, "countdown")
    assert 590 <= int(countdown.get("data-seconds-left")) <= 600
    assert re.fullmatch(r"(10 min 0 s|9 min \d+ s)", countdown.text)
    elements = parse(page.html)
    named = {e.get("name") for e in elements if e.tag in ("input", "select", "textarea")}
    assert named >= set(EVERY_FIELD["properties"])


async def test_the_page_and_its_assets_are_small_and_same_origin(web: Api) -> None:
    request = await ask(web, EVERY_FIELD)
    page = await fetch(web, await mint(web, request["id"]))
    elements = parse(page.html)
    assets = [e.get("src") or e.get("href") for e in elements if e.get("src") or e.get("href")]
    assert assets and all(a.startswith("/f/-/static/") for a in assets)
    total = len(page.html.encode())
    for url in assets:
        asset = await fetch(web, url)
        assert asset.status == 200, url
        assert asset.headers["X-Content-Type-Options"] == "nosniff"
        total += len(asset.html.encode())
        if url.startswith("/f/-/static/form.css"):
            assert asset.headers["Content-Type"].startswith("text/css")
            assert "prefers-color-scheme: dark" in asset.html
            # No url(): fonts, images and imports would be more requests.
            assert "url(" not in asset.html and "@import" not in asset.html
        if url.startswith("/f/-/static/form.js"):
            assert asset.headers["Content-Type"].startswith("text/javascript")
            assert "fetch(" not in asset.html and "XMLHttpRequest" not in asset.html
    assert total < 30 * 1024, total


async def test_assets_are_cacheable_and_unknown_ones_are_404(web: Api) -> None:
    first = await fetch(web, "/f/-/static/form.css")
    etag = first.headers["ETag"]
    again = await fetch(web, "/f/-/static/form.css", headers={"If-None-Match": etag})
    assert again.status == 304
    assert (await fetch(web, "/f/-/static/../../pyproject.toml")).status == 404
    assert (await fetch(web, "/f/-/static/form.html")).status == 404


async def test_get_decides_nothing(web: Api) -> None:
    request = await ask(web, {"type": "string"})
    path = await mint(web, request["id"])
    for _ in range(3):
        assert (await fetch(web, path)).status == 200
    assert (await fetch(web, path, method="HEAD")).status == 200
    assert (await fetch(web, path + "?answer=yes&handraise%3Acsrf=x")).status == 200
    assert (await state(web, request["id"]))["status"] == "pending"
    # Opening is recorded, once however often the page is fetched (the HITL protocol's "opened").
    assert [e["event"] for e in await web.journal(request["id"])] == ["created", "link_minted", "opened"]
    assert (await state(web, request["id"]))["opened_at"]
    page = await post(web, path, [(ROOT_NAME, "yes")])
    assert page.status == 200


@pytest.mark.parametrize("headers", [
    {"User-Agent": "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"},
    {"User-Agent": "TelegramBot (like TwitterBot)"},
    {"User-Agent": "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)"},
    {"User-Agent": "facebookexternalhit/1.1;line-poker/1.0"},
    {"User-Agent": "WhatsApp/2.23.20.0 A"},
    {"User-Agent": "Synapse (bot; +https://github.com/matrix-org/synapse)"},
    {"User-Agent": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) SkypeUriPreview Preview/0.5"},
    {"User-Agent": ""},
    {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0", "Sec-Purpose": "prefetch;prerender"},
])
async def test_a_link_preview_gets_the_page_but_is_not_an_open(web: Api, headers: dict[str, str]) -> None:
    request = await ask(web, {"type": "string"})
    path = await mint(web, request["id"])
    page = await fetch(web, path, headers=headers)
    assert page.status == 200 and "<form" in page.html
    assert (await fetch(web, path, method="HEAD")).status == 200
    assert "opened_at" not in await state(web, request["id"])
    assert "opened" not in [e["event"] for e in await web.journal(request["id"])]
    # The person who then follows the link opens it.
    person = {"User-Agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"}
    assert (await fetch(web, path, headers=person)).status == 200
    assert (await state(web, request["id"]))["opened_at"]


@pytest.mark.parametrize("token", ["A" * 43, "nope", "x" * 300])
async def test_an_unknown_link_is_404_with_a_plain_page(web: Api, token: str) -> None:
    for method in ("GET", "POST"):
        page = await fetch(web, f"/f/{token}", method=method, data={CSRF_FIELD: "x"} if method == "POST" else None)
        assert page.status == 404
        assert_page_headers(page)
        assert "This link is not valid" in page.text


# --------------------------------------------------------------------------- answering


async def test_a_valid_form_answers_and_the_agent_gets_the_typed_answer(web: Api) -> None:
    request = await ask(web, EVERY_FIELD)
    path = await mint(web, request["id"])
    page = await post(web, path, EVERY_FIELD_POST)
    assert page.status == 200, page.text
    assert_page_headers(page)
    assert "Thank you, your answer was sent" in page.text and "You can close this tab" in page.text
    result = await web.wait(request["id"])
    assert result["status"] == "answered"
    assert result["response"] == EVERY_FIELD_ANSWER
    assert result["answered_via"] == "web"
    assert re.fullmatch(r"link:lnk_[A-Za-z0-9_-]+", result["answered_by"])

    # The same answer through the API gives the same stored value, byte for byte.
    twin = await ask(web, EVERY_FIELD)
    status, _ = await web.submit(twin["unique_id"], EVERY_FIELD_ANSWER)
    assert status == 200
    via_api = await web.wait(twin["id"])
    assert json.dumps(via_api["response"], sort_keys=True) == json.dumps(result["response"], sort_keys=True)


async def test_unknown_fields_are_ignored(web: Api) -> None:
    request = await ask(web, {"type": "object", "properties": {"a": {"type": "string"}}})
    path = await mint(web, request["id"])
    page = await post(web, path, [("a", "kept"), ("b", "dropped"), ("decision", "approve"), ("a.b", "x")])
    assert page.status == 200
    assert (await web.wait(request["id"]))["response"] == {"a": "kept"}


async def test_a_wrong_type_is_422_naming_the_field_and_the_link_stays_usable(web: Api) -> None:
    request = await ask(web, EVERY_FIELD)
    path = await mint(web, request["id"])
    bad = [(k, v) for k, v in EVERY_FIELD_POST if k not in ("count", "email")]
    bad += [("count", "seven"), ("email", "ann@localhost")]
    page = await post(web, path, bad)
    assert page.status == 422
    assert_page_headers(page)
    elements = parse(page.html)
    count = one(elements, "input", name="count")
    assert count.get("aria-invalid") == "true" and count.get("value") == "seven"
    count_box = field_container(elements, "count")
    assert [p.text for p in within(elements, count_box, "p") if "error" in (p.get("class") or "")] == [
        "Enter a whole number."]
    assert "Count: Enter a whole number." in page.text
    assert "Email: Enter an email address like name@example.com." in page.text
    # The human's values are kept, a masked one is not.
    assert one(elements, "input", name="name").get("value") == "Ann"
    assert [b.has("checked") for b in find(elements, "input", name="tags")] == [True, False, True]
    assert one(elements, "input", name="pin").get("value") is None
    assert "0000-9" not in page.html
    # Nothing was decided: the request is pending, the attempt journaled, the same link still works.
    assert (await state(web, request["id"]))["status"] == "pending"
    attempts = [e for e in await web.journal(request["id"]) if e["event"] == "invalid_attempt"]
    assert len(attempts) == 1 and attempts[0]["channel"] == "web"
    assert {e["field"] for e in attempts[0]["data"]["errors"]} == {"count", "email"}
    page = await post(web, path, EVERY_FIELD_POST, csrf=csrf_of(page.html))
    assert page.status == 200
    assert (await web.wait(request["id"]))["response"] == EVERY_FIELD_ANSWER


async def test_an_empty_one_value_answer_is_422_and_journaled(web: Api) -> None:
    request = await ask(web)
    path = await mint(web, request["id"])
    page = await post(web, path, [(ROOT_NAME, "  ")])
    assert page.status == 422
    area = one(page.html, "textarea", name=ROOT_NAME)
    assert area.get("aria-invalid") == "true"
    assert by_id(page.html, f"{area.get('id')}-error").text == "Enter an answer."
    events = [e["event"] for e in await web.journal(request["id"])]
    assert events[-1] == "invalid_attempt"
    assert (await post(web, path, [(ROOT_NAME, "fine")])).status == 200
    assert (await web.wait(request["id"]))["response"] == "fine"


async def test_an_approval_takes_the_pressed_button_and_the_reason(web: Api) -> None:
    request = await ask(web, kind="approval", message_for_user="Delete the production database?")
    path = await mint(web, request["id"])
    page = await fetch(web, path)
    assert [b.get("value") for b in find(page.html, "button", name="decision")] == ["approve", "reject"]
    page = await post(web, path, [("reason", "Not on a Friday"), ("decision", "reject")])
    assert page.status == 200
    result = await web.wait(request["id"])
    assert result["response"] == {"decision": "reject", "reason": "Not on a Friday"}


async def test_an_approval_without_a_decision_is_422(web: Api) -> None:
    request = await ask(web, kind="approval", message_for_user="Ship it?")
    path = await mint(web, request["id"])
    page = await post(web, path, [("reason", "hm")])
    assert page.status == 422
    assert "Decision: Choose an answer." in page.text
    assert one(page.html, "textarea", name="reason").text == "hm"


# --------------------------------------------------------------------------- dead links: 410


async def test_a_used_link_is_410(web: Api) -> None:
    request = await ask(web, {"type": "string"})
    path = await mint(web, request["id"])
    form = await fetch(web, path)
    assert (await post(web, path, [(ROOT_NAME, "first")], csrf=csrf_of(form.html))).status == 200
    again = await post(web, path, [(ROOT_NAME, "second")], csrf=csrf_of(form.html))
    assert again.status == 410
    assert_page_headers(again)
    assert "This link was used already" in again.text
    page = await fetch(web, path)
    assert page.status == 410 and "This link was used already" in page.text
    assert "Answered with this link" in page.text
    answered_at = (await web.wait(request["id"]))["answered_at"]
    assert one(page.html, "time").get("datetime")[:19] == answered_at[:19]
    assert (await web.wait(request["id"]))["response"] == "first"


async def test_an_expired_question_is_410(web: Api) -> None:
    request = await ask(web, {"type": "string"}, timeout_seconds=1)
    path = await mint(web, request["id"])
    form = await fetch(web, path)
    assert (await web.wait(request["id"], timeout=30))["status"] == "expired"
    for page in (await fetch(web, path), await post(web, path, [(ROOT_NAME, "late")], csrf=csrf_of(form.html))):
        assert page.status == 410
        assert_page_headers(page)
        assert "This question expired" in page.text and "The time ran out" in page.text
        assert one(page.html, "time").has("datetime")
    assert "response" not in await state(web, request["id"])


async def test_a_link_opened_past_the_deadline_before_the_sweep_is_410_expired(web_any_store: Api) -> None:
    # The deadline has passed and the sweeper has not run: opening the link applies it there and then (journaled
    # once), and the page and a late post say what they would after the sweep.
    web = web_any_store
    request = await ask(web, {"type": "string"}, timeout_seconds=600)
    path = await mint(web, request["id"])
    form = await fetch(web, path)
    async with sweeper_held(web):
        web.app[SERVICE].clock = lambda: time.time() + 3600
        for page in (await fetch(web, path), await post(web, path, [(ROOT_NAME, "late")], csrf=csrf_of(form.html))):
            assert page.status == 410
            assert "This question expired" in page.text and "The time ran out" in page.text
    events = [e["event"] for e in await web.journal(request["id"])]
    assert events.count("expired") == 1 and "answered" not in events


async def test_a_cancelled_question_is_410(web: Api) -> None:
    request = await ask(web, {"type": "string"})
    path = await mint(web, request["id"])
    form = await fetch(web, path)
    status, _ = await web.call("POST", f"/v1/requests/{request['id']}/cancel")
    assert status == 200
    for page in (await fetch(web, path), await post(web, path, [(ROOT_NAME, "x")], csrf=csrf_of(form.html))):
        assert page.status == 410 and "This question was cancelled" in page.text
        assert f"Cancelled by {AGENT_NAME}" in page.text


async def test_a_question_answered_elsewhere_is_410(web: Api) -> None:
    request = await ask(web, {"type": "string"})
    path = await mint(web, request["id"])
    status, _ = await web.submit(request["unique_id"], "the plan")
    assert status == 200
    page = await fetch(web, path)
    assert page.status == 410 and "This question was answered already" in page.text
    assert f"Answered by {OPERATOR_NAME} via the API" in page.text
    # Who answered and when, never what: the answer is not this link holder's to read.
    assert one(page.html, "time").has("datetime")
    assert "the plan" not in page.text and "Your answer" not in page.text


async def test_two_links_to_one_question_give_one_answer(web: Api) -> None:
    request = await ask(web, {"type": "string"})
    first, second = await mint(web, request["id"]), await mint(web, request["id"])
    assert (await post(web, first, [(ROOT_NAME, "one")])).status == 200
    page = await fetch(web, second)
    assert page.status == 410 and "answered already" in page.text


async def test_a_double_submit_from_two_tabs_accepts_exactly_one(web_any_store: Api) -> None:
    api = web_any_store
    request = await ask(api, {"type": "string"})
    path = await mint(api, request["id"])
    tab_one, tab_two = await fetch(api, path), await fetch(api, path)
    pages = await asyncio.gather(
        post(api, path, [(ROOT_NAME, "from tab one")], csrf=csrf_of(tab_one.html)),
        post(api, path, [(ROOT_NAME, "from tab two")], csrf=csrf_of(tab_two.html)),
    )
    assert sorted(p.status for p in pages) == [200, 410]
    loser = next(p for p in pages if p.status == 410)
    assert "This link was used already" in loser.text
    result = await api.wait(request["id"])
    winner = "from tab one" if pages[0].status == 200 else "from tab two"
    assert result["response"] == winner
    answered = [e for e in await api.journal(request["id"]) if e["event"] == "answered"]
    assert len(answered) == 1


# --------------------------------------------------------------------------- CSRF and limits


async def test_a_post_without_the_csrf_token_is_403(web: Api) -> None:
    request = await ask(web, {"type": "string"})
    path = await mint(web, request["id"])
    other_path = await mint(web, (await ask(web, {"type": "string"}))["id"])
    other_csrf = csrf_of((await fetch(web, other_path)).html)
    for data in ([(ROOT_NAME, "x")], [(CSRF_FIELD, ""), (ROOT_NAME, "x")], [(CSRF_FIELD, "0" * 64), (ROOT_NAME, "x")],
                 [(CSRF_FIELD, other_csrf), (ROOT_NAME, "x")]):
        page = await fetch(web, path, method="POST", data=data)
        assert page.status == 403
        assert_page_headers(page)
        assert "could not be verified" in page.text
    assert (await state(web, request["id"]))["status"] == "pending"
    assert (await post(web, path, [(ROOT_NAME, "x")])).status == 200


async def test_an_oversized_post_is_413(tmp_path: Path) -> None:
    settings = web_settings(f"sqlite:///{tmp_path / 'h.db'}", server={"max_body_bytes": 2048})
    async with web_app(settings) as api:
        request = await ask(api, {"type": "string"})
        path = await mint(api, request["id"])
        csrf = csrf_of((await fetch(api, path)).html)
        page = await fetch(api, path, method="POST", data=[(CSRF_FIELD, csrf), (ROOT_NAME, "x" * 5000)])
        assert page.status == 413
        assert_page_headers(page)
        assert "too large" in page.text

        async def chunks() -> AsyncIterator[bytes]:
            # No Content-Length: the limit must hold while reading too.
            yield f"{CSRF_FIELD}={csrf}&{ROOT_NAME}=".encode()
            for _ in range(10):
                yield b"y" * 1000

        page = await fetch(api, path, method="POST", data=chunks(),
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert page.status == 413
        assert (await state(api, request["id"]))["status"] == "pending"
        assert (await post(api, path, [(ROOT_NAME, "small")], csrf=csrf)).status == 200


# --------------------------------------------------------------------------- sensitive requests


async def test_a_sensitive_value_is_masked_never_echoed_and_never_logged(
        web: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret_bad, secret = "98765X", "424242"
    request = await ask(web, {"type": "string", "pattern": "^[0-9]{6}$"}, sensitive=True,
                        message_for_user="Enter the code")
    path = await mint(web, request["id"])
    page = await fetch(web, path)
    control = one(page.html, "input", name=ROOT_NAME)
    assert control.get("type") == "password" and control.get("autocomplete") == "one-time-code"
    invalid = await post(web, path, [(ROOT_NAME, secret_bad)], csrf=csrf_of(page.html))
    assert invalid.status == 422
    assert secret_bad not in invalid.html
    assert one(invalid.html, "input", name=ROOT_NAME).get("value") is None
    done = await post(web, path, [(ROOT_NAME, secret)], csrf=csrf_of(page.html))
    assert done.status == 200 and secret not in done.html
    # The receipt says it was sent, and that a private answer is not shown.
    assert "Sent" in done.text and "Your answer is private" in done.text
    result = await web.wait(request["id"])
    assert result["response"] == secret
    assert secret not in json.dumps(await web.journal(request["id"]))
    for record in caplog.records:
        rendered = record.getMessage() + json.dumps(vars(record), default=str)
        assert secret not in rendered and secret_bad not in rendered


# --------------------------------------------------------------------------- the channel


async def test_the_web_channel_posts_nowhere(web: Api) -> None:
    channel = web.app[CHANNELS]["web"]
    assert isinstance(channel, WebFormsChannel) and not isinstance(channel, Connector)
    # Not among the connectors the dispatcher delivers through, yet every tenant may name it.
    assert "web" not in web.app[CONNECTORS] and "web" not in web.app[DISPATCHER].connectors
    assert channel.serves("acme") and channel.serves("globex")
    request = await ask(web, channels=["web"])
    assert request["channels"] == ["web"]
    assert (await state(web, request["id"]))["deliveries"] == []


def test_the_web_section_has_no_keys_and_typos_are_reported(tmp_path: Path) -> None:
    settings = web_settings(f"sqlite:///{tmp_path / 'h.db'}", web={"enabled": True})
    assert WebFormsChannel.load_settings(settings) is not None
    with pytest.raises(ConfigError, match=r"web\.colour: unknown key"):
        WebFormsChannel.load_settings(web_settings(f"sqlite:///{tmp_path / 'h.db'}", web={"colour": "blue"}))


# --------------------------------------------------------------------------- receipts and looks


async def test_an_approval_receipt_says_approved_and_a_rejection_gives_its_reason(web: Api) -> None:
    for decision, reason, headline in (("approve", "", "Approved"), ("reject", "no backup", "Rejected: no backup")):
        request = await ask(web, kind="approval", message_for_user="Drop the table?")
        path = await mint(web, request["id"])
        form = await fetch(web, path)
        fields = [("decision", decision)] + ([("reason", reason)] if reason else [])
        done = await post(web, path, fields, csrf=csrf_of(form.html))
        assert done.status == 200
        assert one(done.html, "h1").text.strip() == headline
        assert one(done.html, "title").text == f"{headline} · Handraise"


async def test_a_receipt_recaps_the_answer_by_field_title_in_schema_order(web: Api) -> None:
    schema = {"type": "object", "properties": {
        "guests": {"type": "integer", "title": "Guests"},
        "name": {"type": "string", "title": "Your name"},
        "vegan": {"type": "boolean", "title": "Vegan menu"},
        "note": {"type": "string", "title": "Note"},
    }}
    request = await ask(web, schema)
    path = await mint(web, request["id"])
    form = await fetch(web, path)
    done = await post(web, path, [("name", "Ann <b>"), ("guests", "3"), ("vegan", "true")],
                      csrf=csrf_of(form.html))
    assert done.status == 200 and one(done.html, "h1").text.strip() == "Sent"
    terms = [e.text for e in find(done.html, "dt")]
    values = [e.text for e in find(done.html, "dd")]
    assert terms == ["Guests", "Your name", "Vegan menu"]
    assert values == ["3", "Ann <b>", "yes"]
    assert "Ann &lt;b&gt;" in done.html


async def test_a_tenants_accent_and_logo_are_served_from_our_origin(tmp_path: Path) -> None:
    logo = tmp_path / "logo.svg"
    logo.write_text('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><rect width="10" height="10"/></svg>')
    settings = web_settings(f"sqlite:///{tmp_path / 'h.db'}",
                            web={"tenants": {"acme": {"accent_color": "#ffd400", "logo": str(logo)}}})
    async with web_app(settings) as api:
        request = await ask(api, {"type": "string"})
        page = await fetch(api, await mint(api, request["id"]))
        sheets = [e.get("href") for e in find(page.html, "link", rel="stylesheet")]
        assert len(sheets) == 2 and all(h.startswith("/f/-/static/") for h in sheets)
        async with api.session.get(api.url(sheets[1])) as theme:
            css = await theme.text()
            assert theme.status == 200 and theme.headers["Content-Type"].startswith("text/css")
        # A yellow accent is too light for text on white: darkened for light mode, with dark text on it.
        light = css.split("@media")[0]
        assert "--accent: #ffd400" not in light and "--accent-text: #0b1020" in css
        image = one(page.html, "img")
        assert image.get("alt") == ""  # the tenant's name is written beside it
        async with api.session.get(api.url(image.get("src"))) as served:
            assert served.status == 200 and served.headers["Content-Type"] == "image/svg+xml"
            assert served.headers["Content-Security-Policy"] == "default-src 'none'"
            assert await served.read() == logo.read_bytes()
        # Another tenant's page carries neither.
        other = await api.create({"unique_id": "g-1", "message_for_user": "x"}, key=OTHER_AGENT_KEY)
        status, minted = await api.call("POST", f"/v1/requests/{other['id']}/links", key=OTHER_OPERATOR_KEY)
        assert status == 201
        plain = await fetch(api, minted["url"].removeprefix("http://127.0.0.1:8080"))
        assert len(find(plain.html, "link", rel="stylesheet")) == 1 and not find(plain.html, "img")


async def test_looks_of_an_unknown_tenant_stop_the_start(tmp_path: Path) -> None:
    settings = web_settings(f"sqlite:///{tmp_path / 'h.db'}", web={"tenants": {"nope": {"accent_color": "#123456"}}})
    with pytest.raises(ConfigError, match="web.tenants.nope"):
        async with web_app(settings):
            pass


def test_looks_refuse_a_bad_colour_and_a_missing_logo(tmp_path: Path) -> None:
    for looks, problem in (({"accent_color": "blue"}, "accent_color"),
                           ({"logo": str(tmp_path / "none.png")}, "logo"),
                           ({"logo": str(tmp_path)}, "logo")):
        with pytest.raises(ConfigError, match=problem):
            WebFormsChannel.load_settings(web_settings("sqlite://", web={"tenants": {"acme": looks}}))

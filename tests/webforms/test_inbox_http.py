"""The operator inbox over HTTP: sign-in links and sessions, every endpoint the page uses, and their refusals.

The real app on a loopback port (with the web channel, which mounts /inbox), a cookie jar per browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, CookieJar

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
    web_app,
)
from handraise.core.appkeys import INBOX
from handraise.core.logs import mask_tokens

PUBLIC = "http://127.0.0.1:8080"


@contextlib.asynccontextmanager
async def inbox_app(tmp_path: Path, **extra: Any) -> AsyncIterator[Api]:
    config = named(base_config(f"sqlite:///{tmp_path / 'inbox.db'}", **extra), tenant="Acme Ops", agent="Deploy bot")
    async with web_app(settings_from(config)) as api:
        yield api


class Browser:
    """One browser: its own cookie jar; follows nothing by itself so each step's status is seen."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.http = ClientSession(cookie_jar=CookieJar(unsafe=True))
        self.csrf = ""

    async def close(self) -> None:
        await self.http.close()

    async def get(self, path: str, **kwargs: Any) -> tuple[int, str, Any]:
        async with self.http.get(self.api.url(path), allow_redirects=False, **kwargs) as r:
            text = await r.text()
            token = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', text)
            if token:
                self.csrf = token.group(1)
            return r.status, text, r.headers

    async def post(self, path: str, data: dict[str, Any] | None = None, *, csrf: bool = True,
                   headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
        form = dict(data or {})
        if csrf:
            form["handraise:csrf"] = self.csrf
        async with self.http.post(self.api.url(path), data=form, allow_redirects=False,
                                  headers=headers or {}) as r:
            return r.status, await r.text(), r.headers

    async def sign_in(self, url: str) -> None:
        path = url[len(PUBLIC):]
        status, _, headers = await self.post(path, csrf=False)
        assert status == 303, status
        assert headers["Location"] == "/inbox"
        status, _, _ = await self.get("/inbox")
        assert status == 200


async def mint(api: Api, name: str = "Alice", *, key: str = OPERATOR_KEY, person: str | None = None) -> str:
    """A sign-in link for an operator ``name``, or (``person``) for one of the tenant's people, minted with
    ``key``, which must then be bound to that person (``person_key``)."""
    status, body = await api.call("POST", "/v1/inbox/links", key=key,
                                  json={"person": person} if person is not None else {"name": name})
    assert status == 201, body
    assert body["url"].startswith(f"{PUBLIC}/inbox/signin/") and (person is not None or body["name"] == name)
    return body["url"]


def person_key(person: str) -> dict[str, Any]:
    """A config key bound to ``person`` (answer, read): it mints sign-ins that act as them."""
    return {"id": f"{person}-own", "key": f"{person}-own-key-0123456789", "scopes": ["answer", "read"],
            "person": person}


async def ask(api: Api, *, key: str = AGENT_KEY, **body: Any) -> dict[str, Any]:
    payload = {"unique_id": f"q-{time.monotonic_ns()}", "message_for_user": "Which size?", **body}
    return await api.create(payload, key=key)


@contextlib.asynccontextmanager
async def signed_in(api: Api, name: str = "Alice", *, key: str = OPERATOR_KEY) -> AsyncIterator[Browser]:
    browser = Browser(api)
    try:
        await browser.sign_in(await mint(api, name, key=key))
        yield browser
    finally:
        await browser.close()


@contextlib.asynccontextmanager
async def signed_in_as(api: Api, person: str) -> AsyncIterator[Browser]:
    """Signed in as one of the tenant's people, through a link their own key minted (``person_key``)."""
    browser = Browser(api)
    try:
        await browser.sign_in(await mint(api, key=person_key(person)["key"], person=person))
        yield browser
    finally:
        await browser.close()


# -- minting ---------------------------------------------------------------------------


async def test_minting_needs_an_answer_key_and_a_plain_name(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        assert (await api.call("POST", "/v1/inbox/links", json={"name": "A"}, key=None))[0] == 401
        assert (await api.call("POST", "/v1/inbox/links", json={"name": "A"}, key=AGENT_KEY))[0] == 403
        assert (await api.call("POST", "/v1/inbox/links", json={"name": "A"}, key=READER_KEY))[0] == 403
        for bad in ({"name": ""}, {"name": "   "}, {"name": "a:b"}, {"name": "<b>"}, {"name": "x" * 65},
                    {"name": 7}, {"name": None}, {}, {"name": "A", "tenant": "globex"}, {"name": "a\u202eb"},
                    {"name": "line\nbreak"}):
            status, body = await api.call("POST", "/v1/inbox/links", json=bad, key=OPERATOR_KEY)
            assert status == 422, (bad, status, body)
            assert body["error"] == "validation_error"
        status, body = await api.call("POST", "/v1/inbox/links", data=b"{not json", key=OPERATOR_KEY,
                                      headers={"Content-Type": "application/json"})
        assert status == 400 and body["error"] == "bad_request"
        url = await mint(api, "Zoë Müller")
        # The token is never stored, only its hash; and never logged.
        token = url.rsplit("/", 1)[1]
        assert len(token) == 43
        assert token not in mask_tokens(f"GET /inbox/signin/{token} 200") and "<token>" in mask_tokens(url)


# -- sign-in and its refusals ----------------------------------------------------------


async def test_a_link_signs_in_once_with_a_strict_cookie(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        url = await mint(api)
        path = url[len(PUBLIC):]
        browser, other = Browser(api), Browser(api)
        try:
            # GET only shows who it signs in: scanners and previews fetch links too.
            for _ in range(2):
                status, html, headers = await browser.get(path)
                assert status == 200 and "Alice" in html and "Acme Ops" in html
                assert headers["Cache-Control"] == "no-store"
            status, _, headers = await browser.post(path, csrf=False)
            assert status == 303
            cookie = headers["Set-Cookie"]
            assert "handraise_inbox=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
            assert "Path=/inbox" in cookie and "Secure" not in cookie  # served over plain http here
            status, html, _ = await browser.get("/inbox")
            assert status == 200 and "Alice" in html
            # Reused: refused, and the other browser gets no session.
            status, html, _ = await other.post(path, csrf=False)
            assert status == 410 and "used already" in html
            assert (await other.get("/inbox"))[0] == 401
            status, html, _ = await other.get(path)
            assert status == 410
            # Forged or cut short.
            assert (await other.post("/inbox/signin/" + "A" * 43, csrf=False))[0] == 404
            assert (await other.get("/inbox/signin/x"))[0] == 404
            assert (await other.get("/inbox/signin/" + "A" * 300))[0] == 404
            # Posted from another site's page.
            fresh = (await mint(api, "Bob"))[len(PUBLIC):]
            status, _, _ = await other.post(fresh, csrf=False, headers={"Origin": "https://evil.example"})
            assert status == 403
            assert (await other.get("/inbox"))[0] == 401
        finally:
            await browser.close()
            await other.close()


async def test_an_expired_link_and_an_idle_or_old_session_sign_nobody_in(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        access = api.app[INBOX]
        late = await mint(api)
        now = time.time()
        access.clock = lambda: now + 901  # past signin_link_seconds (900)
        browser = Browser(api)
        try:
            status, html, _ = await browser.post(late[len(PUBLIC):], csrf=False)
            assert status == 410 and "expired" in html
            access.clock = time.time
            await browser.sign_in(await mint(api))
            assert (await browser.get("/inbox"))[0] == 200
            access.clock = lambda: time.time() + 8 * 3600 + 1  # idle past session_idle_seconds
            assert (await browser.get("/inbox"))[0] == 401
            assert (await browser.get("/inbox/api/pending"))[0] == 401
        finally:
            access.clock = time.time
            await browser.close()


async def test_sign_out_ends_the_session_and_needs_the_csrf_token(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        assert (await browser.post("/inbox/signout", csrf=False))[0] == 403
        assert (await browser.get("/inbox"))[0] == 200
        status, _, headers = await browser.post("/inbox/signout")
        assert status == 303 and "handraise_inbox=" in headers["Set-Cookie"]
        assert (await browser.get("/inbox"))[0] == 401


async def test_every_page_is_no_store_with_a_strict_csp(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        req = await ask(api, run_id="run-7")
        for path in ("/inbox", f"/inbox/r/{req['id']}", "/inbox/history", "/inbox/runs/run-7", "/inbox/signin/x"):
            status, html, headers = await browser.get(path)
            csp = headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp, path
            assert headers["Cache-Control"] == "no-store" and headers["X-Frame-Options"] == "DENY", path
            assert "<script>" not in html and " on" + "click=" not in html, path


# -- the list and the stream -------------------------------------------------------------


async def test_the_list_shows_this_tenants_pending_requests_newest_first(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        first = await ask(api, message_for_user="First <b>question</b>", run_id="run-1", sensitive=True)
        second = await ask(api, message_for_user="Second question", kind="approval")
        theirs = await ask(api, key=OTHER_AGENT_KEY, message_for_user="Globex secret plan")
        done = await ask(api, message_for_user="Already answered")
        assert (await api.submit(done["unique_id"], "ok"))[0] == 200
        status, body, _ = await browser.get("/inbox/api/pending")
        data = json.loads(body)
        assert status == 200
        assert [c["id"] for c in data["requests"]] == [second["id"], first["id"]]
        card = data["requests"][1]
        assert card["asker"] == "Deploy bot" and card["run_id"] == "run-1" and card["sensitive"] is True
        assert card["channels"] == ["web"] and 0 < card["seconds_left"] <= 300
        assert data["last_event_id"] > 0
        status, html, _ = await browser.get("/inbox")
        assert "First &lt;b&gt;question&lt;/b&gt;" in html and "Globex" not in html
        assert "<title>(2) Inbox" in html and "/inbox/favicon/2.svg" in html
        # Another tenant's request is missing, whichever way it is asked for.
        assert (await browser.get(f"/inbox/api/requests/{theirs['id']}"))[0] == 404
        assert (await browser.get(f"/inbox/r/{theirs['id']}"))[0] == 404
        assert (await browser.post(f"/inbox/r/{theirs['id']}", {"answer": "x"}))[0] == 404
        assert (await browser.get("/inbox/api/requests/" + "x" * 500))[0] == 404
        status, body, _ = await browser.get(f"/inbox/api/requests/{first['id']}")
        assert status == 200 and json.loads(body)["question"] == "First <b>question</b>"


async def test_endpoints_refuse_without_a_session_and_to_another_tenants_session(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        mine = await ask(api, run_id="run-a")
        anonymous = Browser(api)
        try:
            for path in ("/inbox", f"/inbox/r/{mine['id']}", "/inbox/history", "/inbox/runs/run-a"):
                status, html, _ = await anonymous.get(path)
                assert status == 401 and "inbox-link" in html, path
            for path in ("/inbox/api/pending", f"/inbox/api/requests/{mine['id']}", "/inbox/events"):
                status, body, _ = await anonymous.get(path)
                assert status == 401 and json.loads(body)["error"] == "unauthorized", path
            # A cookie that names no session is no session.
            anonymous.http.cookie_jar.update_cookies({"handraise_inbox": "A" * 43})
            assert (await anonymous.get("/inbox/api/pending"))[0] == 401
        finally:
            await anonymous.close()
        async with signed_in(api, "Gina", key=OTHER_OPERATOR_KEY) as globex:
            status, body, _ = await globex.get("/inbox/api/pending")
            assert json.loads(body)["requests"] == []
            assert (await globex.get(f"/inbox/r/{mine['id']}"))[0] == 404
            assert (await globex.post(f"/inbox/r/{mine['id']}", {"answer": "x"}))[0] == 404
            assert (await globex.get("/inbox/runs/run-a"))[0] == 404
            status, body = await api.call("GET", f"/v1/requests/{mine['id']}", key=READER_KEY)
            assert body["status"] == "pending"


async def read_events(api: Api, path: str, *, cookies: Any = None, headers: dict[str, str] | None = None,
                      key: str | None = None, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """``count`` events (id, type, data) from an SSE endpoint, then hang up."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    hdrs = dict(headers or {})
    if key:
        hdrs["Authorization"] = f"Bearer {key}"
    async with ClientSession(cookie_jar=cookies or CookieJar(unsafe=True)) as http, \
            http.get(api.url(path), headers=hdrs) as resp:
        assert resp.status == 200, await resp.text()
        ident = kind = None
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                out.append((ident or "", kind or "", json.loads(line[6:])))
                if len(out) == count:
                    return out
    return out


async def test_the_stream_resumes_after_last_event_id_and_misses_nothing(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        first = await ask(api)
        # What a client saw before it dropped: the create of the first request.
        seen = await read_events(api, "/v1/events?after=0", key=READER_KEY, count=1)
        assert seen[0][1] == "request.created" and seen[0][2]["id"] == first["id"]
        last_id = seen[0][0]
        # While it is away: a second request, the first answered, another tenant's request.
        second = await ask(api)
        await ask(api, key=OTHER_AGENT_KEY)
        assert (await api.submit(first["unique_id"], "L"))[0] == 200
        again = await read_events(api, "/v1/events", key=READER_KEY, headers={"Last-Event-ID": last_id}, count=2)
        assert [(k, d["id"]) for _, k, d in again] == [("request.created", second["id"]),
                                                        ("request.resolved", first["id"])]
        assert int(again[0][0]) > int(last_id) and int(again[1][0]) > int(again[0][0])
        # And live events keep coming after the replay, ids still growing.
        reader = asyncio.create_task(read_events(api, "/v1/events", key=READER_KEY,
                                                 headers={"Last-Event-ID": again[1][0]}, count=1))
        await asyncio.sleep(0)
        third = await ask(api)
        live = await asyncio.wait_for(reader, 10)
        assert live[0][2]["id"] == third["id"] and int(live[0][0]) > int(again[1][0])
        for bad in ("abc", "-1", "1.5", "9" * 40):
            status, body = await api.call("GET", "/v1/events", key=READER_KEY, headers={"Last-Event-ID": bad})
            assert status == 400 and body["error"] == "bad_request", bad


async def test_the_inbox_stream_is_the_sessions_tenant_only(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        _, body, _ = await browser.get("/inbox/api/pending")
        after = json.loads(body)["last_event_id"]
        await ask(api, key=OTHER_AGENT_KEY, message_for_user="not yours")
        mine = await ask(api)
        events = await read_events(api, f"/inbox/events?after={after}", cookies=browser.http.cookie_jar, count=1)
        assert events[0][1] == "request.created" and events[0][2]["id"] == mine["id"]


# -- answering in place ----------------------------------------------------------------


async def test_answering_in_place_goes_through_the_lifecycle_as_the_operator(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"size": {"type": "string", "enum": ["S", "M", "L"]},
                                               "count": {"type": "integer", "minimum": 1, "maximum": 5}},
              "required": ["size", "count"]}
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        req = await ask(api, schema=schema)
        status, html, _ = await browser.get(f"/inbox/r/{req['id']}")
        assert status == 200 and 'name="size"' in html and 'action="/inbox/r/' in html
        # No CSRF token, a wrong one, another site's Origin: refused, the request stays pending.
        assert (await browser.post(f"/inbox/r/{req['id']}", {"size": "M", "count": "2"}, csrf=False))[0] == 403
        bad = dict(size="M", count="2")
        bad["handraise:csrf"] = "0" * 64
        assert (await browser.post(f"/inbox/r/{req['id']}", bad, csrf=False))[0] == 403
        assert (await browser.post(f"/inbox/r/{req['id']}", {"size": "M", "count": "2"},
                                   headers={"Origin": "https://evil.example"}))[0] == 403
        # Invalid: the hosted form's messages, the request still pending.
        status, html, _ = await browser.post(f"/inbox/r/{req['id']}", {"size": "M", "count": "9"})
        assert status == 422 and 'class="summary"' in html
        _, body = await api.call("GET", f"/v1/requests/{req['id']}", key=READER_KEY)
        assert body["status"] == "pending"
        status, _, headers = await browser.post(f"/inbox/r/{req['id']}", {"size": "M", "count": "2"})
        assert status == 303 and headers["Location"] == "/inbox?sent=1"
        done = await api.wait(req["id"])
        assert done["response"] == {"size": "M", "count": 2}
        assert done["answered_by"] == "operator:Alice" and done["answered_via"] == "inbox"
        # Answered meanwhile: the page says who answered and how, and takes nothing.
        status, html, _ = await browser.post(f"/inbox/r/{req['id']}", {"size": "L", "count": "1"})
        assert status == 409 and "Alice" in html and "the inbox" in html
        # The detail page: the journal (who, when, via), the answer shown (not sensitive).
        status, html, _ = await browser.get(f"/inbox/r/{req['id']}")
        assert "operator:Alice" in html and "answered" in html and "<dd>M</dd>" in html


async def test_a_sensitive_answer_is_never_shown_and_an_approval_has_two_buttons(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        secret = await ask(api, sensitive=True, schema={"type": "string", "pattern": "^[0-9]{6}$"})
        status, html, _ = await browser.post(f"/inbox/r/{secret['id']}", {"answer": "12345"})
        assert status == 422 and "12345" not in html
        assert (await browser.post(f"/inbox/r/{secret['id']}", {"answer": "424242"}))[0] == 303
        for path in (f"/inbox/r/{secret['id']}", "/inbox/history", "/inbox/api/pending"):
            assert "424242" not in (await browser.get(path))[1], path
        approval = await ask(api, kind="approval")
        status, html, _ = await browser.get(f"/inbox/r/{approval['id']}")
        assert 'value="approve"' in html and 'value="reject"' in html
        assert (await browser.post(f"/inbox/r/{approval['id']}", {"decision": "reject",
                                                                   "reason": "too risky"}))[0] == 303
        done = await api.wait(approval["id"])
        assert done["response"] == {"decision": "reject", "reason": "too risky"}


# -- history and runs --------------------------------------------------------------------


async def test_history_filters_and_pages(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        answered = await ask(api, message_for_user="Answered one", run_id="run-h")
        assert (await api.submit(answered["unique_id"], "yes"))[0] == 200
        cancelled = await ask(api, message_for_user="Cancelled one")
        assert (await api.call("POST", f"/v1/requests/{cancelled['id']}/cancel"))[0] == 200
        await ask(api, message_for_user="Still pending")
        status, html, _ = await browser.get("/inbox/history")
        assert status == 200 and "Answered one" in html and "Cancelled one" in html and "Still pending" not in html
        html = (await browser.get("/inbox/history?status=cancelled"))[1]
        assert "Cancelled one" in html and "Answered one" not in html
        html = (await browser.get("/inbox/history?channel=api&run=run-h&agent=agent-1"))[1]
        assert "Answered one" in html and "Cancelled one" not in html
        html = (await browser.get("/inbox/history?since=2999-01-01"))[1]
        assert "Answered one" not in html
        for bad in ("status=pending", "status=x", "since=yesterday", "older=x", "newer=" + "a" * 300,
                    "channel=%3Cb%3E"):
            assert (await browser.get(f"/inbox/history?{bad}"))[0] == 400, bad
        for i in range(26):
            r = await ask(api, message_for_user=f"Bulk {i:02d}")
            await api.call("POST", f"/v1/requests/{r['id']}/cancel")
        first_page = (await browser.get("/inbox/history"))[1]
        assert "Bulk 25" in first_page and "Answered one" not in first_page and 'rel="next"' in first_page
        assert 'rel="prev"' not in first_page
        older = (await browser.get(pager_link(first_page, "next")))[1]
        assert "Answered one" in older and "Cancelled one" in older and "Bulk 25" not in older
        assert 'rel="next"' not in older
        assert pager_link(first_page, "next").count("status=") == 0
        newer = (await browser.get(pager_link(older, "prev")))[1]
        assert cards(newer) == cards(first_page) and 'rel="prev"' not in newer


def cards(html: str) -> list[str]:
    """The request ids a list page shows, in order."""
    return re.findall(r'<li class="card[^"]*" data-id="([^"]+)"', html)


def pager_link(html: str, rel: str) -> str:
    found = re.search(rf'<a href="([^"]+)" rel="{rel}">', html)
    assert found, f"no {rel} link"
    return found.group(1).replace("&amp;", "&")


async def test_history_pages_by_signed_cursor_and_refuses_a_forged_altered_or_foreign_one(
        tmp_path: Path, storage_url: str) -> None:
    """Keyset pages (no OFFSET) on SQLite and PostgreSQL: each page starts where the last ended, rows
    created meanwhile shift nothing, and a cursor altered, forged, made for other filters or given out to
    another tenant is refused with 400 rather than read as a position."""
    config = named(base_config(storage_url), tenant="Acme Ops", agent="Deploy bot")
    async with web_app(settings_from(config)) as api, signed_in(api) as browser, \
            signed_in(api, "Gina", key=OTHER_OPERATOR_KEY) as globex:
        run = f"run-{time.monotonic_ns()}"
        made = []
        for i in range(60):  # creation times may tie on a coarse clock: ids break the ties
            r = await ask(api, message_for_user=f"Paged {i:02d}", run_id=run)
            assert (await api.call("POST", f"/v1/requests/{r['id']}/cancel"))[0] == 200
            made.append(r["id"])
        seen, html, pages = [], (await browser.get(f"/inbox/history?run={run}"))[1], 0
        while True:
            pages += 1
            seen += cards(html)
            if 'rel="next"' not in html:
                break
            link = pager_link(html, "next")
            if pages == 1:
                first_older = link
                late = await ask(api, message_for_user="Late one", run_id=run)  # newer than every page
                await api.call("POST", f"/v1/requests/{late['id']}/cancel")
            status, html, _ = await browser.get(link)
            assert status == 200
        assert pages == 3 and seen == made[::-1]  # every row once, newest first, the late one on no page
        cursor = re.search(r"older=([^&]+)", first_older).group(1)

        refused = {
            "altered": first_older.replace(cursor, cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB")),
            "forged": first_older.replace(cursor, cursor.split(".")[0] + "." + "A" * 22),
            "another run": first_older.replace(f"run={run}", "run=run-other"),
            "another status": first_older.replace("older=", "newer=") + "&status=expired",
        }
        for what, link in refused.items():
            status, html, _ = await browser.get(link)
            assert status == 400 and "cursor is not one this server gave out" in html, what
            assert "Paged" not in html, what
        # Another tenant's operator with acme's cursor: refused, and nothing of acme's shown.
        status, html, _ = await globex.get(first_older)
        assert status == 400 and "Paged" not in html
        # The same cursor, still valid for its own list, pages as before.
        assert cards((await browser.get(first_older))[1]) == made[::-1][25:50]


async def test_the_run_page_lists_requests_annotations_and_records_one(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        req = await ask(api, run_id="run-9", message_for_user="Deploy?")
        # An answer-only key mints a session that may not annotate.
        async with signed_in(api, "Ann") as plain:
            html = (await plain.get("/inbox/runs/run-9"))[1]
            assert "Deploy?" in html and 'name="kind"' not in html
            assert (await plain.post("/inbox/runs/run-9/annotations", {"kind": "flag"}))[0] == 403
        # The CLI mints with annotate (the operator on the server).
        url = (await api.app[INBOX].mint(tenant_id="acme", name="Root", created_by="cli:inbox-link")).url
        browser = Browser(api)
        try:
            await browser.sign_in(url)
            assert (await browser.post("/inbox/runs/run-9/annotations", {"kind": "rating", "value": "4"},
                                       csrf=False))[0] == 403
            status, _, headers = await browser.post("/inbox/runs/run-9/annotations",
                                                    {"kind": "rating", "value": "4", "note": "fine"})
            assert status == 303 and headers["Location"] == "/inbox/runs/run-9"
            status, html = (await browser.get("/inbox/runs/run-9"))[:2]
            assert "operator:Root" in html and "fine" in html and req["id"] in html
            status, html, _ = await browser.post("/inbox/runs/run-9/annotations", {"kind": "rating", "value": "9"})
            assert status == 422
            assert (await browser.post("/inbox/runs/run-9/annotations", {"kind": "nonsense"}))[0] == 422
            assert (await browser.get("/inbox/runs/nobody-ran-this"))[0] == 404
            assert (await browser.post("/inbox/runs/nobody-ran-this/annotations", {"kind": "flag"}))[0] == 404
        finally:
            await browser.close()


async def test_the_favicon_carries_the_count(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api:
        browser = Browser(api)
        try:
            status, svg, headers = await browser.get("/inbox/favicon/3.svg")
            assert status == 200 and headers["Content-Type"].startswith("image/svg+xml") and ">3</text>" in svg
            assert ">99+</text>" in (await browser.get("/inbox/favicon/120.svg"))[1]
            assert "<text" not in (await browser.get("/inbox/favicon/0.svg"))[1]
            assert (await browser.get("/inbox/favicon/abc.svg"))[0] == 404
            assert (await browser.get("/inbox/favicon/99999.svg"))[0] == 404
        finally:
            await browser.close()

"""The operator inbox in Debian's Chromium: sign in, a card within 1 s of a create, answered on one tab and
gone from another, closed by a Telegram answer (the wire-level fake), a dropped stream that catches up,
generic notifications, nothing private in storage, keyboard use, an axe scan, and screenshots.

Runs on the session event loop with the session-wide browser (see tests/harness/browser.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web

from conftest import AGENT_KEY, OPERATOR_KEY, OTHER_OPERATOR_KEY, base_config, settings_from
from handraise.bots.telegram import TelegramConnector
from handraise.core.app import create_app
from handraise.core.appkeys import DELIVERIES, SERVICE
from handraise.webforms.connector import WebFormsChannel
from harness.a11y import assert_no_serious_violations
from harness.browser import screenshot
from harness.fixtures import browser, page  # noqa: F401  (registers the fixtures)
from tests.bots.contract import Posted
from tests.bots.contract_telegram import TelegramDriver
from tests.webforms.test_inbox_http import person_key

pytestmark = pytest.mark.asyncio(loop_scope="session")

PUBLIC = "http://127.0.0.1:8080"
# The bound for a card to appear or go; generous waits elsewhere, this one is the product's promise.
LIVE_WITHIN = 1.0


class Inbox:
    """The real app on a loopback port and the agent's and operator's HTTP side of it."""

    def __init__(self, base: str, http: ClientSession, app: Any) -> None:
        self.base, self.http, self.app = base, http, app

    async def ask(self, **body: Any) -> dict[str, Any]:
        payload = {"unique_id": f"i-{secrets.token_hex(6)}", "message_for_user": "Which size should I order?",
                   **body}
        async with self.http.post(f"{self.base}/v1/requests", json=payload,
                                  headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            assert resp.status == 201, await resp.text()
            return await resp.json()

    async def signin_url(self, name: str = "Alice", key: str = OPERATOR_KEY, *, person: str | None = None) -> str:
        """An operator's sign-in (``name``), or one of the tenant's people's, minted by their own key."""
        if person is not None:
            key = person_key(person)["key"]
        async with self.http.post(f"{self.base}/v1/inbox/links",
                                  json={"person": person} if person is not None else {"name": name},
                                  headers={"Authorization": f"Bearer {key}"}) as resp:
            assert resp.status == 201, await resp.text()
            return self.base + (await resp.json())["url"][len(PUBLIC):]

    async def submit(self, unique_id: str, response: Any) -> None:
        async with self.http.post(f"{self.base}/api/human-feedback/submit",
                                  json={"unique_id": unique_id, "response": response},
                                  headers={"Authorization": f"Bearer {OPERATOR_KEY}"}) as resp:
            assert resp.status == 200, await resp.text()

    async def wait(self, request_id: str) -> dict[str, Any]:
        async with self.http.get(f"{self.base}/v1/requests/{request_id}/wait", params={"timeout": "20"},
                                 headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            assert resp.status == 200
            return await resp.json()


@contextlib.asynccontextmanager
async def inbox(tmp_path: Path, *, connectors: list[Any] | None = None,
                extra: dict[str, Any] | None = None, people: list[dict[str, Any]] | None = None) -> AsyncIterator[Inbox]:
    config = base_config(f"sqlite:///{tmp_path / 'inbox.db'}", server={"public_url": PUBLIC}, **(extra or {}))
    if people is not None:
        config["tenants"][0]["people"] = people
    # Each person signs in through a link their own key mints (a link naming a person goes only to them).
    config["tenants"] = [dict(t) for t in config["tenants"]]  # PEOPLE's tenants are shared by every test
    acme = config["tenants"][0]
    acme["keys"] = [*acme["keys"], *(person_key(p["id"]) for p in acme.get("people", []))]
    acme["name"] = "Acme Ops"
    acme["keys"][0] = {**acme["keys"][0], "name": "Deploy bot"}
    app = await create_app(settings_from(config), connector_classes=[WebFormsChannel, *(connectors or [])])
    # A page's live stream stays open until the browser goes: stop as handraise serve does (5 s grace),
    # not after aiohttp's default 60.
    runner = web.AppRunner(app, shutdown_timeout=2)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        async with ClientSession() as http:
            yield Inbox(f"http://{host}:{port}", http, app)
    finally:
        await runner.cleanup()


def watch(page: Any) -> list[str]:
    """Console errors (a CSP violation is one) and page errors."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" and "status of 4" not in m.text
            else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    return problems


async def sign_in(page: Any, hosted: Inbox, name: str = "Alice", *, person: str | None = None) -> None:
    await page.goto(await hosted.signin_url(name, person=person))
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{hosted.base}/inbox")
    await page.wait_for_function("window.handraiseInbox !== undefined")


async def card_appears(page: Any, request_id: str, *, within: float = LIVE_WITHIN) -> float:
    started = time.monotonic()
    await page.wait_for_selector(f'li.card[data-id="{request_id}"]', timeout=10_000)
    elapsed = time.monotonic() - started
    assert elapsed < within, f"the card took {elapsed:.2f} s"
    return elapsed


async def card_goes(page: Any, request_id: str, *, within: float = LIVE_WITHIN) -> float:
    started = time.monotonic()
    await page.wait_for_selector(f'li.card[data-id="{request_id}"]', state="detached", timeout=10_000)
    elapsed = time.monotonic() - started
    assert elapsed < within, f"the card stayed {elapsed:.2f} s"
    return elapsed


async def test_live_cards_answer_in_place_and_a_second_tab(tmp_path: Path, page: Any) -> None:
    async with inbox(tmp_path) as hosted:
        problems = watch(page)
        await page.set_viewport_size({"width": 1280, "height": 800})
        await sign_in(page, hosted)
        assert await page.locator("#empty").is_visible()
        await screenshot(page, "inbox-empty")

        second = await page.context.new_page()
        watch(second)
        await second.goto(f"{hosted.base}/inbox")
        await second.wait_for_function("window.handraiseInbox !== undefined")

        req = await hosted.ask(schema={"type": "string", "enum": ["S", "M", "L"]}, run_id="run-42")
        await card_appears(page, req["id"])
        await card_appears(second, req["id"])
        card = page.locator(f'li.card[data-id="{req["id"]}"]')
        assert "Which size should I order?" in await card.inner_text()
        assert "Deploy bot" in await card.inner_text() and "run run-42" in await card.inner_text()
        assert await page.title() == "(1) Inbox · Handraise"
        assert (await page.get_attribute("#favicon", "href")).endswith("/inbox/favicon/1.svg")
        approval = await hosted.ask(kind="approval", message_for_user="Deploy v2.3 to production?")
        secret = await hosted.ask(sensitive=True, message_for_user="Enter the 6-digit code",
                                  schema={"type": "string", "pattern": "^[0-9]{6}$"})
        await card_appears(page, secret["id"])
        await card_appears(page, approval["id"])
        await screenshot(page, "inbox-list")

        # Answer in place on the first tab: the same form as the hosted link, same validation.
        await card.locator("a.open").click()
        await page.wait_for_url(f"{hosted.base}/inbox/r/{req['id']}")
        await screenshot(page, "inbox-answer")
        await page.get_by_label("L", exact=True).check()
        await page.get_by_role("button", name="Send answer").click()
        await page.wait_for_url(f"{hosted.base}/inbox?sent=1")
        await card_goes(second, req["id"])
        done = await hosted.wait(req["id"])
        assert done["response"] == "L" and done["answered_by"] == "operator:Alice" and done["answered_via"] == "inbox"

        # An approval: Reject with a reason.
        await page.goto(f"{hosted.base}/inbox/r/{approval['id']}")
        await page.get_by_label("Reason").fill("Not during the freeze")
        await page.get_by_role("button", name="Reject").click()
        await page.wait_for_url(f"{hosted.base}/inbox?sent=1")
        assert (await hosted.wait(approval["id"]))["response"]["decision"] == "reject"
        await card_goes(second, approval["id"])

        # A sensitive answer: gone from the DOM once sent, and never in storage (a refused one is
        # never echoed back: test_inbox_http.py).
        await page.goto(f"{hosted.base}/inbox/r/{secret['id']}")
        await page.locator("input[name=answer]").fill("424242")
        await page.get_by_role("button", name="Send answer").click()
        await page.wait_for_url(f"{hosted.base}/inbox?sent=1")
        await card_goes(second, secret["id"])
        for tab in (page, second):
            assert "424242" not in await tab.content()
            stored = await tab.evaluate("JSON.stringify([Object.entries(localStorage), "
                                        "Object.entries(sessionStorage)])")
            assert stored == "[[],[]]"
        await page.goto(f"{hosted.base}/inbox/history")
        assert "424242" not in await page.content()
        await screenshot(page, "inbox-history")
        await page.goto(f"{hosted.base}/inbox/r/{req['id']}")
        await screenshot(page, "inbox-detail")
        await page.goto(f"{hosted.base}/inbox/runs/run-42")
        await screenshot(page, "inbox-run")
        assert problems == [], problems


async def test_an_answer_from_telegram_closes_the_card(tmp_path: Path, page: Any) -> None:
    driver = TelegramDriver()
    await driver.start()
    try:
        async with inbox(tmp_path, connectors=[TelegramConnector], extra=driver.config()) as hosted:
            await driver.ready(None)  # type: ignore[arg-type]
            await sign_in(page, hosted)
            req = await hosted.ask(schema={"type": "string", "enum": ["yes", "no"]},
                                   message_for_user="Ship it?", channels=["telegram"])
            await card_appears(page, req["id"])
            await driver.tg.wait_for_call("sendMessage")
            deliveries = hosted.app[DELIVERIES]
            delivery = next(d for d in await deliveries.of_request(tenant_id="acme", request_id=req["id"])
                            if d.channel == "telegram")
            for _ in range(200):
                if delivery.status == "sent":
                    break
                await asyncio.sleep(0.05)
                delivery = (await deliveries.of_request(tenant_id="acme", request_id=req["id"]))[0]
            await driver.press(Posted(request_id=req["id"], target=delivery.target, ref=delivery.ref), "yes")
            done = await hosted.wait(req["id"])
            assert done["answered_via"] == "telegram"
            await card_goes(page, req["id"], within=5.0)
    finally:
        await driver.stop()


async def test_a_dropped_stream_catches_up(tmp_path: Path, page: Any) -> None:
    async with inbox(tmp_path) as hosted:
        await sign_in(page, hosted)
        before = await hosted.ask(message_for_user="Before the drop")
        await card_appears(page, before["id"])
        await page.evaluate("window.handraiseInbox.drop()")
        # While the page hears nothing: one new question, and the old one answered through the API.
        during = await hosted.ask(message_for_user="Asked while away")
        await hosted.submit(before["unique_id"], "done")
        await asyncio.sleep(0)  # nothing to wait for: the page is deaf by design here
        assert await page.locator(f'li.card[data-id="{during["id"]}"]').count() == 0
        await page.evaluate("window.handraiseInbox.resume()")
        await card_appears(page, during["id"], within=5.0)
        await card_goes(page, before["id"], within=5.0)
        assert int(await page.evaluate("window.handraiseInbox.lastId()")) > 0


async def test_notifications_say_only_that_a_question_waits(tmp_path: Path, browser: Any) -> None:
    async with inbox(tmp_path) as hosted:
        context = await browser.new_context()
        try:
            await context.grant_permissions(["notifications"], origin=hosted.base)
            await context.add_init_script("""
                window.__shown = [];
                window.Notification = class { constructor(t, o) { window.__shown.push([t, o || {}]); } };
                window.Notification.permission = 'granted';
                window.Notification.requestPermission = () => Promise.resolve('granted');
                Object.defineProperty(document, 'visibilityState', {get: () => 'hidden'});
            """)
            page = await context.new_page()
            await sign_in(page, hosted)
            req = await hosted.ask(message_for_user="The launch code is 0000, confirm?", sensitive=True)
            await card_appears(page, req["id"])
            shown = await page.evaluate("window.__shown")
            assert shown == [["A question is waiting", {"tag": "handraise-inbox"}]]
        finally:
            await context.close()


async def test_keyboard_and_accessibility(tmp_path: Path, browser: Any) -> None:
    async with inbox(tmp_path) as hosted:
        context = await browser.new_context(bypass_csp=True)
        try:
            page = await context.new_page()
            await sign_in(page, hosted)
            first = await hosted.ask(message_for_user="First question")
            second = await hosted.ask(message_for_user="Second question", kind="approval", run_id="run-1")
            await card_appears(page, first["id"], within=5.0)
            await card_appears(page, second["id"], within=5.0)
            for theme in ("light", "dark"):
                await page.emulate_media(color_scheme=theme)
                await assert_no_serious_violations(page)
            await page.keyboard.press("j")
            assert await page.evaluate("document.activeElement.closest('li.card').dataset.id") == second["id"]
            await page.keyboard.press("j")
            assert await page.evaluate("document.activeElement.closest('li.card').dataset.id") == first["id"]
            await page.keyboard.press("k")
            await page.keyboard.press("Enter")
            await page.wait_for_url(f"{hosted.base}/inbox/r/{second['id']}")
            await assert_no_serious_violations(page)
            await page.keyboard.press("Escape")
            await page.wait_for_url(f"{hosted.base}/inbox")
            for path in ("/inbox/history", "/inbox/runs/run-1"):
                await page.goto(hosted.base + path)
                await assert_no_serious_violations(page)
            await page.context.clear_cookies()
            await page.goto(hosted.base + "/inbox")
            await assert_no_serious_violations(page)
        finally:
            await context.close()


async def test_sign_in_refusals_in_the_browser(tmp_path: Path, page: Any) -> None:
    async with inbox(tmp_path) as hosted:
        url = await hosted.signin_url()
        await page.goto(url)
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url(f"{hosted.base}/inbox")
        # The same link again, in a fresh browser: used.
        other = await page.context.browser.new_context()
        try:
            again = await other.new_page()
            response = await again.goto(url)
            assert response.status == 410
            assert "used already" in await again.inner_text("h1")
            response = await again.goto(hosted.base + "/inbox/signin/" + "x" * 43)
            assert response.status == 404
            response = await again.goto(hosted.base + "/inbox")
            assert response.status == 401
            await screenshot(again, "inbox-signin-needed")
            # Another tenant's operator sees none of acme's questions.
            globex = await hosted.signin_url("Gina", key=OTHER_OPERATOR_KEY)
            await again.goto(globex)
            await again.get_by_role("button", name="Sign in").click()
            await again.wait_for_url(f"{hosted.base}/inbox")
            req = await hosted.ask(message_for_user="acme only")
            await card_appears(page, req["id"])
            assert await again.locator(f'li.card[data-id="{req["id"]}"]').count() == 0
            response = await again.goto(f"{hosted.base}/inbox/r/{req['id']}")
            assert response.status == 404
        finally:
            await other.close()


# Acme lists Alice and Bob as its people (assignment and escalation name them).
PEOPLE = {"tenants": [{**base_config("sqlite://")["tenants"][0],
                       "people": [{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}]},
                      base_config("sqlite://")["tenants"][1]]}


async def test_a_live_list_adds_no_card_for_a_request_assigned_to_others(tmp_path: Path, page: Any) -> None:
    async with inbox(tmp_path, extra=PEOPLE) as hosted:
        problems = watch(page)
        await sign_in(page, hosted, person="alice")
        async with page.expect_response(lambda r: "/inbox/api/requests/" in r.url) as fetched:
            bobs = await hosted.ask(kind="approval", assign_to=["bob"])
        response = await fetched.value
        assert bobs["id"] in response.url and (await response.json())["may_answer"] is False
        hers = await hosted.ask(kind="approval", assign_to=["alice"])
        await card_appears(page, hers["id"])
        assert await page.locator(f'li.card[data-id="{bobs["id"]}"]').count() == 0
        assert await page.title() == "(1) Inbox · Handraise"
        assert problems == []


async def test_an_escalation_step_adds_the_card_for_the_people_it_reaches(tmp_path: Path, page: Any) -> None:
    async with inbox(tmp_path, extra=PEOPLE) as hosted:
        problems = watch(page)
        await sign_in(page, hosted, person="bob")
        async with page.expect_response(lambda r: "/inbox/api/requests/" in r.url) as fetched:
            req = await hosted.ask(kind="approval", timeout_seconds=600, assign_to=["alice"],
                                   escalation=[{"after_seconds": 60, "to": ["bob"]}])
        assert (await (await fetched.value).json())["may_answer"] is False
        assert await page.locator(f'li.card[data-id="{req["id"]}"]').count() == 0
        service = hosted.app[SERVICE]
        service.clock = lambda: time.time() + 61
        await service.sweep()
        await card_appears(page, req["id"])
        assert await page.title() == "(1) Inbox · Handraise"
        assert problems == []

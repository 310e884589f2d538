"""End-to-end: Debian's Chromium (headless, via Playwright) fills the hosted form; the agent's wait gets the answer.

Runs on the session event loop with the session-wide browser (see tests/harness/browser.py).
Screenshots at phone and desktop widths land in test-artifacts/.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.browser import screenshot
from harness.fixtures import browser, page  # noqa: F401  (registers the fixtures)

from .hosting import expect_text, hosted, submit, watch

pytestmark = pytest.mark.asyncio(loop_scope="session")

EVERY_FIELD = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40, "title": "Your name", "description": "As on your badge"},
        "notes": {"type": "string", "maxLength": 1000, "title": "Notes"},
        "count": {"type": "integer", "minimum": 0, "maximum": 100, "title": "Guests"},
        "price": {"type": "number", "minimum": 0, "title": "Budget"},
        "agree": {"type": "boolean", "title": "Send me a copy"},
        "sure": {"type": "boolean", "title": "Are you sure?"},
        "size": {"type": "string", "enum": ["S", "M", "L"], "title": "Size"},
        "country": {"type": "string", "enum": ["de", "fr", "it", "es", "pt", "nl"], "title": "Country"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}, "title": "Tags"},
        "trip": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2,
                 "title": "Trip"},
        "day": {"type": "string", "format": "date", "title": "Day"},
        "at": {"type": "string", "format": "time", "title": "Time"},
        "when": {"type": "string", "format": "date-time", "title": "Meeting"},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "site": {"type": "string", "format": "uri", "title": "Website"},
        "pin": {"type": "string", "writeOnly": True, "title": "PIN"},
    },
    "required": ["name", "sure", "email"],
}


async def fill_every_field(page: Any, *, email: str, trip: tuple[str, str]) -> None:
    await page.fill('input[name="name"]', "Ann")
    await page.fill('textarea[name="notes"]', "line one\nline two")
    await page.fill('input[name="count"]', "7")
    await page.fill('input[name="price"]', "2.5")
    await page.check('input[name="agree"]')
    await page.check('input[name="sure"][value="false"]')
    await page.check('input[name="size"][value="L"]')
    await page.select_option('select[name="country"]', "pt")
    await page.check('input[name="tags"][value="x"]')
    await page.check('input[name="tags"][value="z"]')
    await page.locator('input[name="trip"]').nth(0).fill(trip[0])
    await page.locator('input[name="trip"]').nth(1).fill(trip[1])
    await page.fill('input[name="day"]', "2026-01-02")
    await page.fill('input[name="at"]', "09:15")
    await page.fill('input[name="when"]', "2026-01-02T14:30")
    await page.fill('input[name="email"]', email)
    await page.fill('input[name="site"]', "https://example.com/a?b=c")
    await page.fill('input[name="pin"]', "0000-9")


async def test_every_field_type_invalid_then_valid_and_the_agent_gets_the_typed_answer(
        browser: Any, tmp_path: Path) -> None:  # noqa: F811
    # A zone with an offset in January shows that a date-time carries the browser's zone.
    context = await browser.new_context(timezone_id="Europe/Berlin")
    try:
        page = await context.new_page()
        async with hosted(tmp_path) as app:
            problems = watch(page, app)
            request = await app.ask(EVERY_FIELD, message_for_user="Book the team trip.\nAll fields, please.")
            await page.goto(await app.link(request["id"], recipient="Ann"))
            assert await page.title() == "Question from Acme Corp · Handraise"
            assert await page.text_content("[data-tz-hint]") == "Your local time (Europe/Berlin)"
            await screenshot(page, "webform-every-field")

            # Chromium accepts "ann@localhost" and lets reversed dates through; the page's script, like
            # core's validator, does not: the problems show before anything is sent, in the server's words.
            await fill_every_field(page, email="ann@localhost", trip=("2026-05-09", "2026-05-01"))
            url = page.url
            await page.click("button[type=submit]")
            await expect_text(page, "#errors", "2 answers need a change")
            assert page.url == url and (await app.get(request["id"]))["status"] == "pending"
            assert await page.get_attribute('input[name="email"]', "aria-invalid") == "true"
            email_error = await page.text_content('[data-field="email"] .error')
            assert email_error == "Enter an email address like name@example.com."
            assert await page.text_content('[data-field="trip"] .error') == (
                "Put the start date on or before the end date.")
            assert await page.locator("#errors li").all_text_contents() == [
                "Trip: Put the start date on or before the end date.",
                "Email: Enter an email address like name@example.com."]
            # Nothing the human typed is lost.
            assert await page.input_value('input[name="name"]') == "Ann"
            assert await page.input_value('textarea[name="notes"]') == "line one\nline two"
            assert await page.is_checked('input[name="tags"][value="z"]')
            assert await page.input_value('select[name="country"]') == "pt"
            assert await page.input_value('input[name="when"]') == "2026-01-02T14:30"
            # The first invalid field has the focus.
            assert await page.evaluate(
                "document.activeElement === document.querySelector('[aria-invalid=true]')")
            assert await page.evaluate("document.activeElement.name") == "trip"
            await screenshot(page, "webform-every-field-invalid")

            # Fixing a field clears its message as the person types.
            await page.fill('input[name="email"]', "ann@example.com")
            assert await page.locator('[data-field="email"] .error').count() == 0
            assert await page.locator("#errors li").all_text_contents() == [
                "Trip: Put the start date on or before the end date."]
            await page.fill('input[name="email"]', "ann@example.com")
            await page.locator('input[name="trip"]').nth(0).fill("2026-05-01")
            await page.locator('input[name="trip"]').nth(1).fill("2026-05-09")
            assert await submit(page) == 200
            assert "You can close this tab" in await page.text_content("main")
            await screenshot(page, "webform-confirmation")

            result = await app.wait(request["id"])
            assert result["status"] == "answered" and result["answered_via"] == "web"
            assert result["response"] == {
                "name": "Ann", "notes": "line one\nline two", "count": 7, "price": 2.5, "agree": True,
                "sure": False, "size": "L", "country": "pt", "tags": ["x", "z"],
                "trip": ["2026-05-01", "2026-05-09"], "day": "2026-01-02", "at": "09:15",
                "when": "2026-01-02T14:30:00+01:00", "email": "ann@example.com",
                "site": "https://example.com/a?b=c", "pin": "0000-9",
            }
            assert problems == []
            assert app.requests_seen and all(url.startswith(app.base + "/") for url in app.requests_seen)
    finally:
        await context.close()


async def test_an_approval_is_a_button_press(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        problems = watch(page, app)
        request = await app.ask(kind="approval", message_for_user="Drop table `orders` in production?")
        await page.goto(await app.link(request["id"]))
        await screenshot(page, "webform-approval")
        await page.fill('textarea[name="reason"]', "Not without a backup")
        assert await submit(page, 'button[name="decision"][value="reject"]') == 200
        result = await app.wait(request["id"])
        assert result["response"] == {"decision": "reject", "reason": "Not without a backup"}
        assert problems == []


async def test_a_sensitive_answer_is_typed_masked_and_never_shown(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        request = await app.ask({"type": "string", "pattern": "^[0-9]{6}$", "title": "Code"}, sensitive=True,
                                message_for_user="Enter the six-digit code sent to your phone.")
        await page.goto(await app.link(request["id"]))
        control = page.locator('input[name="answer"]')
        assert await control.get_attribute("type") == "password"
        assert await control.get_attribute("autocomplete") == "one-time-code"
        assert await control.get_attribute("inputmode") == "numeric"
        await control.fill("12345x")
        # The page's script stops this one before it is sent, in the server's words.
        await page.click("button[type=submit]")
        assert await page.evaluate("document.querySelector('input[name=answer]').validity.patternMismatch")
        await expect_text(page, "#errors", "Code: Enter the 6-digit code.")
        assert "12345x" not in await page.text_content("main")
        await control.fill("424242")
        await screenshot(page, "webform-sensitive")
        assert await submit(page) == 200
        assert "424242" not in await page.content()
        result = await app.wait(request["id"])
        assert result["response"] == "424242"


async def test_the_form_works_with_javascript_off(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    context = await browser.new_context(java_script_enabled=False, timezone_id="Asia/Kolkata")
    try:
        page = await context.new_page()
        async with hosted(tmp_path) as app:
            schema = {"type": "object", "properties": {
                "when": {"type": "string", "format": "date-time"},
                "note": {"type": "string", "maxLength": 500},
            }, "required": ["when", "note"]}
            request = await app.ask(schema)
            await page.goto(await app.link(request["id"]))
            # Without the script the time is read as UTC, and the page says so.
            assert await page.text_content("[data-tz-hint]") == "Time in UTC"
            shown = await page.text_content("#countdown")
            await page.fill('input[name="when"]', "2026-03-04T05:06")
            await page.fill('textarea[name="note"]', "no scripts here")
            assert await page.text_content("#countdown") == shown
            assert await submit(page) == 200
            assert "You can close this tab" in await page.text_content("main")
            result = await app.wait(request["id"])
            assert result["response"] == {"when": "2026-03-04T05:06:00Z", "note": "no scripts here"}
    finally:
        await context.close()


async def test_the_countdown_runs_to_zero_and_a_late_answer_is_410(page: Any, tmp_path: Path) -> None:  # noqa: F811
    from playwright.async_api import expect

    async with hosted(tmp_path) as app:
        # Long enough that a loaded machine still opens the page before the deadline.
        request = await app.ask(timeout_seconds=8, message_for_user="Quick!")
        await page.goto(await app.link(request["id"]))
        first = await page.text_content("#countdown")
        assert re.fullmatch(r"[1-8] s", first or ""), first
        # expect() polls from Playwright's own injected script: wait_for_function would need eval,
        # which the page's Content-Security-Policy rightly refuses.
        await expect(page.locator("#countdown")).to_have_text("none, the time is up", timeout=30_000)
        assert (await app.wait(request["id"]))["status"] == "expired"
        await page.fill('textarea[name="answer"]', "too late")
        assert await submit(page) == 410
        assert "This question expired" in await page.text_content("main")
        await screenshot(page, "webform-expired")


async def test_dark_mode(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        request = await app.ask({"type": "object", "properties": {
            "size": {"type": "string", "enum": ["S", "M", "L"]}, "ok": {"type": "boolean"}}})
        await page.goto(await app.link(request["id"]))
        background = "getComputedStyle(document.querySelector('main')).backgroundColor"
        light = await page.evaluate(background)
        await page.emulate_media(color_scheme="dark")
        dark = await page.evaluate(background)
        assert light != dark
        await screenshot(page, "webform-dark")
        # The phone width lays the form out without sideways scrolling.
        await page.set_viewport_size({"width": 390, "height": 844})
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


async def test_a_used_link_shows_a_plain_page(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        request = await app.ask({"type": "integer", "minimum": 1})
        url = await app.link(request["id"])
        await page.goto(url)
        await page.fill('input[name="answer"]', "3")
        assert await submit(page) == 200
        response = await page.goto(url)
        assert response is not None and response.status == 410
        assert "This link was used already" in await page.text_content("main")
        assert json.dumps((await app.wait(request["id"]))["response"]) == "3"


async def test_a_second_click_while_sending_sends_nothing_more(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        request = await app.ask({"type": "string"})
        url = await app.link(request["id"])
        posts: list[str] = []
        first_post_held = asyncio.Event()
        release = asyncio.Event()

        async def slow_network(route: Any) -> None:
            # Hold the first POST, as a slow connection would, while the human clicks again.
            if route.request.method == "POST":
                posts.append(route.request.url)
                first_post_held.set()
                await release.wait()
            await route.continue_()

        await page.route(url, slow_network)
        await page.goto(url)
        await page.fill('textarea[name="answer"]', "once")
        box = await page.locator("button[type=submit]").bounding_box()
        assert box is not None
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        await page.mouse.click(x, y)
        await asyncio.wait_for(first_post_held.wait(), timeout=5)
        # The raw mouse, not page.click: a human's second click does not wait for the navigation.
        await asyncio.wait_for(page.mouse.click(x, y), timeout=5)
        # Waiting for something that must not happen (a second POST) has no event to await:
        # a short bound gives an unguarded form time to send it before the first answer returns.
        await asyncio.sleep(0.3)
        release.set()
        await expect_text(page, "main", "Thank you, your answer was sent")
        assert posts == [url]
        assert (await app.wait(request["id"]))["response"] == "once"


# --------------------------------------------------------------------------- the script checks as the server does

EVERY_PROBLEM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 3, "maxLength": 10},
        "ticket": {"type": "string", "title": "Ticket", "pattern": "^[A-Z]{2}-[0-9]{3}$",
                   "errorMessage": "Use the ticket's id, like AB-123."},
        "office": {"type": "string", "title": "Office", "pattern": "^[a-z]+$", "description": "Lower-case letters"},
        "code": {"type": "string", "title": "Code", "pattern": "^[0-9]{6}$"},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 40},
        "budget": {"type": "number", "title": "Budget", "exclusiveMinimum": 0, "multipleOf": 0.5},
        "size": {"type": "string", "title": "Size", "oneOf": [{"const": "s", "title": "Small"},
                                                              {"const": "l", "title": "Large"}]},
        "tags": {"type": "array", "title": "Tags", "minItems": 2,
                 "items": {"type": "string", "anyOf": [{"const": "x", "title": "Ex"}, {"const": "y", "title": "Why"},
                                                       {"const": "z", "title": "Zed"}]}},
        "trip": {"type": "array", "title": "Trip", "items": {"type": "string", "format": "date"},
                 "minItems": 2, "maxItems": 2},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "site": {"type": "string", "format": "uri", "title": "Website"},
        "sure": {"type": "boolean", "title": "Sure?"},
        "notes": {"type": "string", "title": "Notes", "maxLength": 1000},
    },
    "required": ["name", "size", "sure", "notes", "tags"],
}


async def fill_every_problem(page: Any) -> None:
    await page.fill('input[name="name"]', "Al")
    await page.fill('input[name="ticket"]', "ab-12")
    await page.fill('input[name="office"]', "Berlin")
    await page.fill('input[name="code"]', "12 34")
    await page.fill('input[name="guests"]', "0")
    await page.fill('input[name="budget"]', "1.25")
    await page.check('input[name="tags"][value="y"]')
    await page.locator('input[name="trip"]').nth(0).fill("2026-05-09")
    await page.fill('input[name="email"]', "ann@localhost")
    await page.fill('input[name="site"]', "example.com")


async def shown_problems(page: Any) -> dict[str, Any]:
    """What the person reads: the summary, each field's message, which controls are marked invalid."""
    return {
        "heading": (await page.text_content("#errors h2") or "").strip(),
        "summary": await page.locator("#errors li").all_text_contents(),
        "fields": await page.locator(".field .error").all_text_contents(),
        "invalid": [await e.get_attribute("name") for e in await page.locator("[aria-invalid=true]").all()],
    }


async def test_the_script_shows_exactly_what_the_server_shows(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    scripted = await browser.new_context()
    plain = await browser.new_context(java_script_enabled=False)
    try:
        async with hosted(tmp_path) as app:
            request = await app.ask(EVERY_PROBLEM)
            url = await app.link(request["id"])
            by_script = await scripted.new_page()
            await by_script.goto(url)
            await fill_every_problem(by_script)
            await by_script.click("button[type=submit]")
            await expect_text(by_script, "#errors h2", "answers need a change")
            assert (await app.get(request["id"]))["status"] == "pending"

            by_server = await plain.new_page()
            await by_server.goto(url)
            await fill_every_problem(by_server)
            # Without the script the browser's own checks would stop some of these one bubble at a time;
            # the test lets them all through to the server (page scripts stay off).
            await by_server.evaluate("document.querySelector('form').noValidate = true")
            status = await submit(by_server)
            script_view, server_view = await shown_problems(by_script), await shown_problems(by_server)
            assert status == 422
            assert script_view == server_view
            assert script_view["summary"] == [
                "Name: Use at least 3 characters.",
                "Ticket: Use the ticket's id, like AB-123.",
                "Office: This doesn't have the expected format: Lower-case letters",
                "Code: Enter the 6-digit code.",
                "Guests: Enter a whole number from 1 to 40.",
                "Budget: Enter a multiple of 0.5.",
                "Size: Choose an answer.",
                "Tags: Choose at least 2.",
                "Trip: Enter two dates: a start and an end.",
                "Email: Enter an email address like name@example.com.",
                "Website: Enter a web address like https://example.com/page.",
                "Sure?: Choose an answer.",
                "Notes: Enter an answer.",
            ]
            assert script_view["heading"] == "13 answers need a change"
    finally:
        await scripted.close()
        await plain.close()


async def test_a_field_is_checked_when_left_not_before(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        request = await app.ask({"type": "object", "properties": {
            "name": {"type": "string", "minLength": 3, "title": "Name"},
            "age": {"type": "integer", "minimum": 18, "title": "Age"}}, "required": ["name", "age"]})
        await page.goto(await app.link(request["id"]))
        # Passing through an empty field blames nobody.
        await page.focus('input[name="name"]')
        await page.focus('input[name="age"]')
        assert await page.locator(".error").count() == 0
        await page.fill('input[name="name"]', "Al")
        await page.focus('input[name="age"]')
        await expect_text(page, '[data-field="name"] .error', "Use at least 3 characters.")
        assert await page.get_attribute('input[name="name"]', "aria-invalid") == "true"
        assert "f0-error" in (await page.get_attribute('input[name="name"]', "aria-describedby")).split()
        # The summary waits for a send.
        assert await page.is_hidden("#errors")
        await page.fill('input[name="name"]', "Alice")
        assert await page.locator('[data-field="name"] .error').count() == 0
        assert await page.get_attribute('input[name="name"]', "aria-invalid") is None

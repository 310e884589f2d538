"""The form as people see and use it: screenshots against baselines, an axe scan, keyboard-only answers.

Four screens (a one-time code, an approval, a labelled-choice form, an error state), each at
phone and desktop width in light and dark, compared with tests/webforms/baselines/ (see
harness/visual.py; ``UPDATE_BASELINES=1`` rewrites them). The countdown and the moments on a
page change every run, so they are masked. Each screen, and each receipt, is scanned with
axe-core: no serious or critical violation. Each form is answered with the keyboard alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from harness.a11y import assert_no_serious_violations
from harness.browser import screenshot
from harness.fixtures import browser  # noqa: F401  (registers the fixture)
from harness.visual import compare_screens

from .hosting import Hosted, expect_text, hosted, submit, watch

pytestmark = pytest.mark.asyncio(loop_scope="session")

CODE = {"type": "string", "pattern": "^[0-9]{6}$", "title": "Code",
        "description": "From the text message we sent to your phone"}
CHOICE = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "title": "Office", "description": "Where you will work from next week",
                 "oneOf": [{"const": "berlin", "title": "Berlin, Torstraße"}, {"const": "lisbon", "title": "Lisbon"},
                           {"const": "remote", "title": "From home"}]},
        "extras": {"type": "array", "title": "Equipment", "uniqueItems": True,
                   "items": {"type": "string", "anyOf": [{"const": "desk", "title": "A desk"},
                                                         {"const": "monitor", "title": "A second monitor"},
                                                         {"const": "headset", "title": "A headset"}]}},
        "note": {"type": "string", "title": "Anything else?", "maxLength": 500},
    },
    "required": ["city"],
}
ERRORS = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Work email"},
        "guests": {"type": "integer", "minimum": 1, "maximum": 40, "title": "Guests"},
        "code": {"type": "string", "pattern": "^[0-9]{6}$", "title": "Invite code"},
    },
    "required": ["email", "guests"],
}
SCREENS = {
    "code": ({"schema": CODE, "sensitive": True, "message_for_user": "Enter the six-digit code sent to your phone."}),
    "approval": ({"kind": "approval",
                  "message_for_user": "Deploy release 2026.11.3 to production?\n"
                                      "It restarts the API: about 30 s of errors."}),
    "choice": ({"schema": CHOICE, "message_for_user": "Where will you be next week?"}),
    "error": ({"schema": ERRORS, "message_for_user": "Register for the team day."}),
}


@pytest_asyncio.fixture(loop_scope="session")
async def pages(browser: Any) -> AsyncIterator[tuple[Any, Any]]:  # noqa: F811
    """A normal context and one that lets the axe script in (the page's CSP refuses inline scripts)."""
    options = {"timezone_id": "UTC", "locale": "en-US"}
    plain = await browser.new_context(**options)
    scanned = await browser.new_context(bypass_csp=True, **options)
    try:
        yield await plain.new_page(), await scanned.new_page()
    finally:
        await plain.close()
        await scanned.close()


async def open_screen(app: Hosted, page: Any, name: str) -> str:
    body = dict(SCREENS[name])
    schema = body.pop("schema", None)
    request = await app.ask(schema, **body)
    url = await app.link(request["id"], recipient="Ann" if name == "choice" else None)
    await page.goto(url)
    if name == "error":
        await page.fill('input[name="email"]', "ann@localhost")
        await page.fill('input[name="guests"]', "0")
        await page.fill('input[name="code"]', "12345")
        # The page's script shows the server's own sentences (test_browser.py proves them equal).
        await page.click("button[type=submit]")
        await expect_text(page, "#errors h2", "3 answers need a change")
    return request["id"]


def moving_parts(page: Any) -> list[Any]:
    return [page.locator(".left"), page.locator(".when")]


@pytest.mark.parametrize("name", list(SCREENS))
async def test_each_screen_matches_its_baseline(pages: tuple[Any, Any], tmp_path: Path, name: str) -> None:
    page, _ = pages
    async with hosted(tmp_path) as app:
        problems = watch(page, app)
        await open_screen(app, page, name)
        differences = await compare_screens(page, f"form-{name}", mask=moving_parts(page))
        assert not differences, "\n".join(f"{d.name}: {d.reason}" for d in differences)
        assert problems == []


@pytest.mark.parametrize("name", list(SCREENS))
async def test_each_screen_has_no_serious_accessibility_violation(pages: tuple[Any, Any], tmp_path: Path,
                                                                   name: str) -> None:
    _, page = pages
    async with hosted(tmp_path) as app:
        await open_screen(app, page, name)
        await page.set_viewport_size({"width": 390, "height": 844})
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await assert_no_serious_violations(page)
        await page.emulate_media(color_scheme="light")


async def test_receipts_and_dead_links_have_no_serious_accessibility_violation(pages: tuple[Any, Any],
                                                                              tmp_path: Path) -> None:
    _, page = pages
    async with hosted(tmp_path) as app:
        request = await app.ask(CHOICE, message_for_user="Where?")
        url = await app.link(request["id"])
        await page.goto(url)
        await page.check('input[name="city"][value="lisbon"]')
        await page.check('input[name="extras"][value="monitor"]')
        assert await submit(page) == 200
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await assert_no_serious_violations(page)
        await page.emulate_media(color_scheme="light")
        # The recap reads as the form did: labels, not the values the agent gets.
        assert await page.locator("dd").all_text_contents() == ["Lisbon", "A second monitor"]
        assert (await app.wait(request["id"]))["response"] == {"city": "lisbon", "extras": ["monitor"]}
        await screenshot(page, "receipt-choice")
        await page.goto(url)
        assert "This link was used already" in await page.text_content("main")
        await assert_no_serious_violations(page)
        await screenshot(page, "link-used")
        rejected = await app.ask(kind="approval", message_for_user="Ship it?")
        await page.goto(await app.link(rejected["id"]))
        await page.fill('textarea[name="reason"]', "The load test is still red")
        assert await submit(page, 'button[value="reject"]') == 200
        assert (await page.text_content("h1")).strip() == "Rejected: The load test is still red"
        await assert_no_serious_violations(page)
        await screenshot(page, "receipt-rejected")


# --------------------------------------------------------------------------- the keyboard alone


async def focused(page: Any) -> str:
    """The focused control as ``tag name=value`` (a button's value, an input's name)."""
    return await page.evaluate(
        "(() => { const e = document.activeElement;"
        " return e.tagName.toLowerCase() + ' ' + (e.name || '') + (e.tagName === 'BUTTON' ? '=' + e.value : ''); })()")


async def tab_to(page: Any, target: str, *, limit: int = 20) -> None:
    for _ in range(limit):
        await page.keyboard.press("Tab")
        if await focused(page) == target:
            return
    raise AssertionError(f"Tab never reached {target!r}; stopped at {await focused(page)!r}")


async def press_and_wait(page: Any, key: str) -> int:
    async with page.expect_navigation() as navigation:
        await page.keyboard.press(key)
    return (await navigation.value).status


async def test_a_code_is_answered_with_the_keyboard(pages: tuple[Any, Any], tmp_path: Path) -> None:
    page, _ = pages
    async with hosted(tmp_path) as app:
        request_id = await open_screen(app, page, "code")
        await tab_to(page, "input answer")
        await page.keyboard.type("123 456")
        assert await press_and_wait(page, "Enter") == 200
        assert (await app.wait(request_id))["response"] == "123456"


async def test_an_approval_is_answered_with_the_keyboard(pages: tuple[Any, Any], tmp_path: Path) -> None:
    page, _ = pages
    async with hosted(tmp_path) as app:
        request_id = await open_screen(app, page, "approval")
        await tab_to(page, "textarea reason")
        await page.keyboard.type("Not during the sale")
        await tab_to(page, "button decision=reject")
        assert await press_and_wait(page, "Enter") == 200
        assert (await page.text_content("h1")).strip() == "Rejected: Not during the sale"
        assert (await app.wait(request_id))["response"] == {"decision": "reject", "reason": "Not during the sale"}


async def test_a_choice_form_is_answered_with_the_keyboard(pages: tuple[Any, Any], tmp_path: Path) -> None:
    page, _ = pages
    async with hosted(tmp_path) as app:
        request_id = await open_screen(app, page, "choice")
        await tab_to(page, "input city")
        # Arrow keys move through a radio group and pick as they go: berlin → lisbon.
        await page.keyboard.press("ArrowDown")
        await tab_to(page, "input extras")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Space")  # the second box: monitor
        await tab_to(page, "textarea note")
        await page.keyboard.type("Standing desk if possible")
        await tab_to(page, "button =")
        assert await press_and_wait(page, "Enter") == 200
        result = await app.wait(request_id)
        assert result["response"] == {"city": "lisbon", "extras": ["monitor"], "note": "Standing desk if possible"}


async def test_a_mistake_is_found_and_fixed_with_the_keyboard(pages: tuple[Any, Any], tmp_path: Path) -> None:
    page, _ = pages
    async with hosted(tmp_path) as app:
        request = await app.ask(ERRORS, message_for_user="Register for the team day.")
        await page.goto(await app.link(request["id"]))
        await tab_to(page, "input email")
        await page.keyboard.type("ann@localhost")
        await page.keyboard.press("Tab")
        # Leaving the field after typing in it says what is wrong, before anything is sent.
        await expect_text(page, '[data-field="email"] .error', "Enter an email address like name@example.com.")
        await page.keyboard.type("0")
        await page.keyboard.press("Enter")
        await expect_text(page, "#errors h2", "2 answers need a change")
        # The first field to fix has the focus; fixing it as typed clears its message.
        assert await focused(page) == "input email"
        await page.keyboard.press("Control+A")
        await page.keyboard.type("ann@example.com")
        assert await page.locator('[data-field="email"] .error').count() == 0
        await tab_to(page, "input guests")
        await page.keyboard.press("Control+A")
        await page.keyboard.type("12")
        await tab_to(page, "input code")
        await page.keyboard.type("123-456")
        assert await press_and_wait(page, "Enter") == 200
        assert (await app.wait(request["id"]))["response"] == {"email": "ann@example.com", "guests": 12,
                                                               "code": "123456"}

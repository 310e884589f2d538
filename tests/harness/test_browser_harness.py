"""Smoke test of the browser harness: Chromium fills and submits a form served by aiohttp."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from aiohttp import web

from harness.browser import ARTIFACTS_DIR, VIEWPORTS, screenshot, serve_app
from harness.fixtures import browser, page  # noqa: F401  (registers the fixtures)

pytestmark = pytest.mark.asyncio(loop_scope="session")

FORM = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Smoke form</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><form method="post" action="/answer">
<label for="answer">Answer</label>
<input id="answer" name="answer" required>
<button type="submit">Send</button>
</form></body></html>"""


def _png_size(path: Path) -> tuple[int, int]:
    # A PNG starts with its 8-byte signature, then the IHDR chunk: width, height.
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def _form_app(received: asyncio.Queue[str]) -> web.Application:
    async def show_form(request: web.Request) -> web.Response:
        return web.Response(text=FORM, content_type="text/html")

    async def take_answer(request: web.Request) -> web.Response:
        data = await request.post()
        received.put_nowait(str(data["answer"]))
        return web.Response(text="<p id=done>Thank you</p>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", show_form)
    app.router.add_post("/answer", take_answer)
    return app


async def test_fill_and_submit_form(page) -> None:  # noqa: F811
    received: asyncio.Queue[str] = asyncio.Queue()
    async with serve_app(_form_app(received)) as base_url:
        await page.goto(f"{base_url}/")
        paths = await screenshot(page, "harness-smoke-form")
        await page.fill("#answer", "blue, déjà vu")
        await page.click("button[type=submit]")
        await page.wait_for_selector("#done")
        answer = await asyncio.wait_for(received.get(), timeout=5)

    assert answer == "blue, déjà vu"
    assert await page.text_content("#done") == "Thank you"
    assert paths == [
        ARTIFACTS_DIR / "harness-smoke-form-phone.png",
        ARTIFACTS_DIR / "harness-smoke-form-desktop.png",
    ]
    for path, size in zip(paths, VIEWPORTS.values(), strict=True):
        width, height = _png_size(path)
        assert width == size["width"]
        assert height >= size["height"]

"""The hosted form in a real browser: the real app on a loopback port, an agent's HTTP client, page helpers.

Shared by the browser tests (test_browser.py, test_looks.py); they run on the session loop.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientSession

from conftest import AGENT_KEY, OPERATOR_KEY, base_config, settings_from
from handraise.core.app import create_app
from handraise.webforms.connector import WebFormsChannel
from harness.browser import serve_app

PUBLIC_URL = "http://127.0.0.1:8080"


@dataclass
class Hosted:
    """The real app on a loopback port, and an HTTP client for the agent's side of it."""

    base: str
    http: ClientSession
    requests_seen: list[str] = field(default_factory=list)

    async def ask(self, schema: dict | None = None, **body: Any) -> dict[str, Any]:
        payload = {"unique_id": f"b-{secrets.token_hex(6)}", "message_for_user": "Please fill this in.", **body}
        if schema is not None:
            payload["schema"] = schema
        async with self.http.post(f"{self.base}/v1/requests", json=payload,
                                  headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            assert resp.status == 201, await resp.text()
            return await resp.json()

    async def link(self, request_id: str, recipient: str | None = None) -> str:
        async with self.http.post(f"{self.base}/v1/requests/{request_id}/links",
                                  json={"recipient": recipient} if recipient else {},
                                  headers={"Authorization": f"Bearer {OPERATOR_KEY}"}) as resp:
            assert resp.status == 201, await resp.text()
            url = (await resp.json())["url"]
        assert url.startswith(PUBLIC_URL)
        return self.base + url[len(PUBLIC_URL):]

    async def get(self, request_id: str) -> dict[str, Any]:
        async with self.http.get(f"{self.base}/v1/requests/{request_id}",
                                 headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            assert resp.status == 200
            return await resp.json()

    async def wait(self, request_id: str, timeout: float = 10) -> dict[str, Any]:
        async with self.http.get(f"{self.base}/v1/requests/{request_id}/wait", params={"timeout": str(timeout)},
                                 headers={"Authorization": f"Bearer {AGENT_KEY}"}) as resp:
            assert resp.status == 200
            return await resp.json()


@asynccontextmanager
async def hosted(tmp_path: Path, **extra: Any) -> AsyncIterator[Hosted]:
    """The app with tenant acme named "Acme Corp" and its agent key "Deploy bot"; ``extra`` config tables."""
    config = base_config(f"sqlite:///{tmp_path / 'h.db'}", server={"public_url": PUBLIC_URL}, **extra)
    config["tenants"][0]["name"] = "Acme Corp"
    config["tenants"][0]["keys"][0]["name"] = "Deploy bot"
    app = await create_app(settings_from(config), connector_classes=[WebFormsChannel])
    async with serve_app(app) as base, ClientSession() as http:
        yield Hosted(base=base, http=http)


# Chromium logs every 4xx document as a console error; a 422 or 410 page is expected here.
_HTTP_STATUS_NOTE = "Failed to load resource: the server responded with a status of 4"


def watch(page: Any, hosted_app: Hosted) -> list[str]:
    """Collect console errors (a CSP violation is one) and remember every URL the page requests."""
    problems: list[str] = []

    def on_console(msg: Any) -> None:
        if msg.type == "error" and not msg.text.startswith(_HTTP_STATUS_NOTE):
            problems.append(msg.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("request", lambda req: hosted_app.requests_seen.append(req.url))
    return problems


async def submit(page: Any, selector: str = "button[type=submit]") -> int:
    async with page.expect_navigation() as navigation:
        await page.click(selector)
    response = await navigation.value
    return response.status



async def expect_text(page: Any, selector: str, text: str) -> None:
    from playwright.async_api import expect

    await expect(page.locator(selector)).to_contain_text(text, timeout=5000)

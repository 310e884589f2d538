"""Signing in to the inbox through a real OpenID Connect provider, in Debian's Chromium: the signed-out inbox's
"Sign in with …" button, the provider's own login page, back to the inbox signed in as Alice, who then
approves a request assigned to her as herself.

The provider (node-oidc-provider, tests/harness/oidc.py) is at http://localhost:<port>, another site
than the app at 127.0.0.1, as a real provider is: the inbox's SameSite=Strict cookie must still reach
the inbox after the provider sent the browser back. Runs on the session event loop with the
session-wide browser (tests/harness/browser.py).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web

from conftest import AGENT_KEY, base_config, settings_from
from handraise.core.app import create_app
from handraise.core.oidc.provider import CALLBACK_PATH
from handraise.webforms.connector import WebFormsChannel
from harness.a11y import assert_no_serious_violations
from harness.browser import screenshot
from harness.fixtures import browser, oidc_provider, page  # noqa: F401  (registers the fixtures)
from harness.oidc import OidcProviderServer

pytestmark = pytest.mark.asyncio(loop_scope="session")


@contextlib.asynccontextmanager
async def inbox_with_sso(tmp_path: Path, provider: OidcProviderServer) -> AsyncIterator[str]:
    """The real app on a loopback port known before it starts (its public_url is the redirect URI's base,
    registered at the provider first); yields that base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    client = provider.register_client(base + CALLBACK_PATH)
    config = base_config(f"sqlite:///{tmp_path / 'sso.db'}", server={"public_url": base})
    config["tenants"][0].update(name="Acme Ops", people=[
        {"id": "alice", "name": "Alice Example", "email": "alice@example.org"}])
    config["oidc"] = {"issuer": provider.issuer, "client_id": client["client_id"],
                      "client_secret": client["client_secret"], "button_label": "Sign in with Acme SSO"}
    app = await create_app(settings_from(config), connector_classes=[WebFormsChannel])
    # A page's live stream stays open until the browser goes: stop within 2 s, as test_inbox_browser does.
    runner = web.AppRunner(app, shutdown_timeout=2)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield base
    finally:
        await runner.cleanup()


async def test_alice_signs_in_with_the_provider_and_approves_as_herself(
        tmp_path: Path, page: Any, browser: Any, oidc_provider: OidcProviderServer) -> None:
    async with inbox_with_sso(tmp_path, oidc_provider) as base, ClientSession() as http:
        # The signed-out page at phone and desktop width, and an axe scan (its script needs the CSP bypassed,
        # so in a context of its own).
        scan = await browser.new_context(bypass_csp=True)
        try:
            signed_out = await scan.new_page()
            await signed_out.goto(f"{base}/inbox")
            await screenshot(signed_out, "inbox-signin-sso")
            await assert_no_serious_violations(signed_out)
        finally:
            await scan.close()

        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" and "status of 4" not in m.text
                else None)
        await page.goto(f"{base}/inbox")
        button = page.get_by_role("link", name="Sign in with Acme SSO")
        assert await button.is_visible()

        await button.click()
        await page.wait_for_url(f"{oidc_provider.issuer}/interaction/**")
        await page.get_by_label("Login").fill("alice")
        await page.get_by_label("Password").fill("any")
        await page.get_by_role("button", name="Sign in at the provider").click()
        # Back through the callback, which moves on to the inbox by itself, signed in.
        await page.wait_for_url(f"{base}/inbox")
        assert "Alice Example · Acme Ops" in await page.locator("header.bar").inner_text(timeout=5_000)
        await page.wait_for_function("window.handraiseInbox !== undefined")

        async with http.post(f"{base}/v1/requests", headers={"Authorization": f"Bearer {AGENT_KEY}"},
                             json={"unique_id": f"sso-{secrets.token_hex(4)}", "kind": "approval",
                                   "message_for_user": "Deploy v2.4 to production?", "assign_to": ["alice"],
                                   "timeout_seconds": 300}) as r:
            assert r.status == 201, await r.text()
            created = await r.json()
        await page.wait_for_selector(f'li.card[data-id="{created["id"]}"]', timeout=10_000)
        await page.locator(f'li.card[data-id="{created["id"]}"] a.open').click()
        await page.get_by_role("button", name="Approve").click()
        await page.wait_for_url(f"{base}/inbox?sent=1")
        async with http.get(f"{base}/v1/requests/{created['id']}/wait", params={"timeout": "10"},
                            headers={"Authorization": f"Bearer {AGENT_KEY}"}) as r:
            done = await r.json()
        assert (done["status"], done["answered_by"], done["answered_via"]) == ("answered", "person:alice", "inbox")
        assert done["answered_by_person"] == {"id": "alice", "name": "Alice Example"}
        assert done["response"]["decision"] == "approve"
        assert problems == [], problems

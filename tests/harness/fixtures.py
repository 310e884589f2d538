"""Session-wide fixtures for the heavy test services: a real Synapse, headless Chromium and a real OpenID
Connect provider (node-oidc-provider).

Register them from a conftest: ``from harness.fixtures import browser, oidc_provider, page, synapse``.
When a service is missing the fixture skips with the install command, or
fails when the environment says CI (``CI=true``) so a CI run cannot go green
by skipping. Browser tests need ``pytestmark =
pytest.mark.asyncio(loop_scope="session")``: see ``harness/browser.py``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest
import pytest_asyncio

from harness.browser import chromium_missing_reason, launch_chromium

if TYPE_CHECKING:
    from harness.oidc import OidcProviderServer
    from harness.synapse import SynapseServer
    from playwright.async_api import Browser, Page, Playwright

log = logging.getLogger(__name__)


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def skip_or_fail(reason: str) -> NoReturn:
    """Skip a test whose service is missing, but fail in CI."""
    if running_in_ci():
        pytest.fail(f"{reason} (CI=true: required here, not skipped)", pytrace=False)
    pytest.skip(reason)


# Importing these fixtures into several modules or conftests makes pytest hold
# one definition per place, each with its own session cache; counting users
# here keeps it at one Synapse and one Chromium per session all the same.
_synapse_users = 0
_synapse_server: SynapseServer | None = None
_browser_users = 0
_browser_shared: tuple[Playwright, Browser] | None = None
_oidc_users = 0
_oidc_server: OidcProviderServer | None = None


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SynapseServer]:
    """One real Synapse for the whole session; register unique users per test."""
    global _synapse_users, _synapse_server
    # Imported here, not at the top: Telegram and Slack tests collect without Synapse's dependencies.
    from harness.synapse import SynapseServer, synapse_missing_reason

    reason = synapse_missing_reason()
    if reason is not None:
        skip_or_fail(reason)
    if _synapse_server is None:
        server = SynapseServer(workdir=tmp_path_factory.mktemp("synapse"))
        server.start()
        _synapse_server = server
    _synapse_users += 1
    try:
        yield _synapse_server
    finally:
        _synapse_users -= 1
        if _synapse_users == 0:
            _synapse_server.stop()
            _synapse_server = None


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OidcProviderServer]:
    """One node-oidc-provider for the whole session; each test registers a client of its own."""
    global _oidc_users, _oidc_server
    from harness.oidc import OidcProviderServer, oidc_provider_missing_reason

    reason = oidc_provider_missing_reason()
    if reason is not None:
        skip_or_fail(reason)
    if _oidc_server is None:
        server = OidcProviderServer()
        server.start()
        _oidc_server = server
    _oidc_users += 1
    try:
        yield _oidc_server
    finally:
        _oidc_users -= 1
        if _oidc_users == 0:
            _oidc_server.stop()
            _oidc_server = None


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One headless Chromium for the whole session, on the session event loop."""
    global _browser_users, _browser_shared
    reason = chromium_missing_reason()
    if reason is not None:
        skip_or_fail(reason)
    if _browser_shared is None:
        from playwright.async_api import async_playwright

        playwright = await async_playwright().start()
        try:
            _browser_shared = (playwright, await launch_chromium(playwright))
        except BaseException:
            await playwright.stop()
            raise
    _browser_users += 1
    try:
        yield _browser_shared[1]
    finally:
        _browser_users -= 1
        if _browser_users == 0:
            playwright, chromium = _browser_shared
            _browser_shared = None
            try:
                await chromium.close()
            finally:
                await playwright.stop()


def _test_loop_scope(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("asyncio")
    if marker is None:
        return None
    return (
        marker.kwargs.get("loop_scope")
        or marker.kwargs.get("scope")
        or item.config.getini("asyncio_default_test_loop_scope")
    )


@pytest_asyncio.fixture(loop_scope="session")
async def page(request: pytest.FixtureRequest, browser: Browser) -> AsyncIterator[Page]:
    """A page in a fresh browser context (own cookies and storage), closed after the test."""
    loop_scope = _test_loop_scope(request.node)
    if loop_scope != "session":
        pytest.fail(
            f"{request.node.nodeid} runs on the {loop_scope or 'no'} event loop, but the "
            "browser lives on the session loop: add "
            'pytestmark = pytest.mark.asyncio(loop_scope="session") to the module',
            pytrace=False,
        )
    context = await browser.new_context()
    try:
        yield await context.new_page()
    finally:
        await context.close()

"""Playwright driving Debian's Chromium for tests, a loopback aiohttp server and screenshots.

How browser tests must be written (measured with pytest-asyncio 1.5,
pytest-aiohttp 1.1, playwright 1.65, asyncio_mode=auto):

- Playwright's async objects belong to the event loop that created them. The
  ``browser`` fixture (``harness/fixtures.py``) is session-scoped and lives on
  pytest-asyncio's *session* loop, so every test using it runs there too::

      pytestmark = pytest.mark.asyncio(loop_scope="session")

  A test on the default function loop fails with "attached to a different
  loop"; the ``page`` fixture checks this first and fails with a clear message.
- Every async fixture such a test uses must also run on the session loop
  (``@pytest_asyncio.fixture(loop_scope="session")``, any ``scope``).
  pytest-aiohttp's ``aiohttp_server`` / ``aiohttp_client`` run on the function
  loop and break at teardown; serve the app with ``serve_app`` instead::

      async with serve_app(create_app(settings)) as base_url:
          await page.goto(f"{base_url}/f/...")

- Prefer the function-scoped ``page`` fixture (a fresh browser context, so
  no cookies leak between tests) over ``browser.new_page()``.
- ``await screenshot(page, "name")`` saves ``test-artifacts/name-phone.png``
  (390x844) and ``name-desktop.png`` (1280x800) at the repo root.

Launching costs about 0.2 s once per session; the per-test cost is a context.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, Playwright

log = logging.getLogger(__name__)

CHROMIUM_PATH = Path("/usr/lib/chromium/chromium")
CHROMIUM_INSTALL_COMMAND = "sudo apt-get update && sudo apt-get install -y chromium"
# /usr/bin/chromium is a shell wrapper adding its own flags; the real binary
# takes exactly these. Background networking would try to reach the internet.
LAUNCH_ARGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
VIEWPORTS: dict[str, dict[str, int]] = {
    "phone": {"width": 390, "height": 844},
    "desktop": {"width": 1280, "height": 800},
}
ARTIFACTS_DIR = Path(__file__).resolve().parents[2] / "test-artifacts"


def chromium_missing_reason() -> str | None:
    """Why the browser cannot run here, or None when Playwright and Chromium are present."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return (
            "playwright is not installed; install the test extras with "
            "`python3 -m pip install -e '.[test]'` (never `playwright install`)"
        )
    if not CHROMIUM_PATH.is_file():
        return (
            f"Chromium is not installed at {CHROMIUM_PATH}; "
            f"install it with: {CHROMIUM_INSTALL_COMMAND}"
        )
    return None


async def launch_chromium(playwright: Playwright) -> Browser:
    """Launch headless Debian Chromium through an already started Playwright."""
    browser = await playwright.chromium.launch(
        executable_path=str(CHROMIUM_PATH), headless=True, args=list(LAUNCH_ARGS)
    )
    log.info("chromium %s launched", browser.version)
    return browser


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on an ephemeral 127.0.0.1 port in the running loop; yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _artifact_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    if not stem:
        raise ValueError(f"screenshot name {name!r} has no usable characters")
    return stem


async def screenshot(page: Page, name: str) -> list[Path]:
    """Save full-page screenshots at phone and desktop widths under ``test-artifacts/``.

    Returns the written paths; the page's viewport is restored afterwards.
    """
    stem = _artifact_stem(name)
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    original = page.viewport_size
    paths: list[Path] = []
    try:
        for label, size in VIEWPORTS.items():
            await page.set_viewport_size(size)
            path = ARTIFACTS_DIR / f"{stem}-{label}.png"
            await page.screenshot(path=str(path), full_page=True)
            paths.append(path)
    finally:
        if original is not None:
            await page.set_viewport_size(original)
    return paths

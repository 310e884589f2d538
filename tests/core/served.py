"""The real app served from a background thread, for clients that are not asyncio (Hypothesis, schemathesis)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from handraise.core.app import create_app
from handraise.core.config import Settings


@contextlib.contextmanager
def served(settings: Settings, **kwargs: Any) -> Iterator[str]:
    """Serve ``create_app(settings)`` on an ephemeral loopback port; yields its base URL."""
    kwargs.setdefault("connector_classes", [])
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    async def start() -> None:
        app = await create_app(settings, **kwargs)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        started["runner"] = runner
        started["port"] = runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as e:  # handed to the test thread below
            started["error"] = e
            ready.set()
            return
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="served-app", daemon=True)
    thread.start()
    if not ready.wait(60):
        raise TimeoutError("the app did not start within 60 s")
    if "error" in started:
        raise started["error"]
    try:
        yield f"http://127.0.0.1:{started['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(started["runner"].cleanup(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()

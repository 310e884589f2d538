"""Reading ``GET /v1/events`` in tests: a live Server-Sent Events stream, ready once subscribed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import ClientSession

from conftest import Api


class SseReader:
    """Reads ``GET /v1/events``; ``ready`` once the ``: subscribed`` comment says the subscription is live."""

    def __init__(self, api: Api, key: str, **params: str) -> None:
        self.api, self.key, self.params = api, key, params
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.raw: list[str] = []
        self.ready = asyncio.Event()

    async def run(self) -> None:
        async with ClientSession() as session, session.get(
            self.api.url("/v1/events"), params=self.params, headers={"Authorization": f"Bearer {self.key}"}
        ) as resp:
            assert resp.status == 200
            event = None
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                self.raw.append(line)
                if line.startswith(": subscribed"):
                    self.ready.set()
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event:
                    await self.events.put((event, json.loads(line[6:])))
                    event = None

    async def next(self, timeout: float = 5) -> tuple[str, dict[str, Any]]:
        return await asyncio.wait_for(self.events.get(), timeout)


@contextlib.asynccontextmanager
async def streams() -> AsyncIterator[Any]:
    """``start(api, key, **params)`` opens a live stream; all close on exit, before the app they read stops."""
    tasks: list[asyncio.Task[None]] = []

    async def start(api: Api, key: str, **params: str) -> SseReader:
        reader = SseReader(api, key, **params)
        task = asyncio.create_task(reader.run())
        tasks.append(task)
        ready = asyncio.create_task(reader.ready.wait())
        await asyncio.wait({task, ready}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        assert reader.ready.is_set(), "the event stream never said it was subscribed"
        return reader

    try:
        yield start
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

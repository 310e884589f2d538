"""A real HTTP receiver on loopback for outgoing POSTs ([[webhooks]], request callbacks): it records each
POST and answers from a script (default 200)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from handraise.core.signedpost import EVENT_HEADER


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP endpoint that records every POST and answers from a script (default 200)."""

    server: TestServer | None = None
    hits: list[Hit] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str = "/hook") -> str:
        assert self.server is not None
        return str(self.server.make_url(path))

    async def handle(self, request: web.Request) -> web.Response:
        self.hits.append(Hit(request.path_qs, dict(request.headers), await request.read(), time.monotonic()))
        self.changed.set()
        status, headers = self.script.pop(0) if self.script else (200, {})
        return web.Response(status=status, headers=headers, text="ok")

    async def wait_for(self, event: str, *, count: int = 1, timeout: float = 5) -> list[Hit]:
        async def enough() -> list[Hit]:
            while True:
                hits = [h for h in self.hits if h.headers.get(EVENT_HEADER) == event]
                if len(hits) >= count:
                    return hits
                self.changed.clear()
                await self.changed.wait()

        return await asyncio.wait_for(enough(), timeout)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", rec.handle)
    rec.server = TestServer(app, host="127.0.0.1", port=0)
    await rec.server.start_server()
    yield rec
    await rec.server.close()

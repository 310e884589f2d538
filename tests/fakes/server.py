"""What every wire-level fake shares: an aiohttp server on 127.0.0.1 at an ephemeral port (never a fixed one),
started and stopped as an async context, that records the calls made to it and lets a test await one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic, Protocol, Self, TypeVar

from aiohttp import web

log = logging.getLogger(__name__)

T = TypeVar("T")


class RecordedCall(Protocol):
    method: str


CallT = TypeVar("CallT", bound=RecordedCall)


class FakeServer(Generic[CallT]):
    """A fake cloud service on loopback. A subclass adds its routes (``routes``), may close what holds a
    connection open before the server stops (``closing``), and records each call with ``record``."""

    # Named in messages ("FakeSlack is not started").
    name = "fake server"
    # Methods left out of "calls seen" when a wait fails (a long poll repeats without saying anything).
    quiet_methods: frozenset[str] = frozenset()
    # web.AppRunner's options beyond access_log (which is always off).
    runner_options: dict[str, Any] = {}

    def __init__(self) -> None:
        self.calls: list[CallT] = []
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._waiters: list[asyncio.Future[None]] = []

    # -- lifecycle ------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def closing(self) -> None:
        """Called as ``stop`` begins: release long polls and sockets, so shutdown does not wait on them."""

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError(f"{self.name} already started")
        app = web.Application()
        self.routes(app)
        runner = web.AppRunner(app, access_log=None, **self.runner_options)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self._port = runner.addresses[0][1]
        log.debug("%s listening on port %s", self.name, self._port)

    async def stop(self) -> None:
        if self._runner is None:
            return
        await self.closing()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._port

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    # -- recorded calls -----------------------------------------------------------------

    def method_name(self, method: str) -> str:
        """The name calls are recorded under (a service that ignores case says so here)."""
        return method

    def record(self, call: CallT) -> None:
        self.calls.append(call)
        self.notify()

    def calls_of(self, method: str) -> list[CallT]:
        method = self.method_name(method)
        return [call for call in self.calls if call.method == method]

    async def wait_for_call(self, method: str, predicate: Callable[[CallT], bool] | None = None, *,
                            timeout: float = 5.0) -> CallT:
        """The first call of ``method`` matching ``predicate``, already made or to come; TimeoutError
        listing the calls seen when none comes within ``timeout``."""
        method = self.method_name(method)

        def find() -> CallT | None:
            return next((c for c in self.calls if c.method == method and (predicate is None or predicate(c))), None)

        try:
            async with asyncio.timeout(timeout):
                return await self.wait_until(find)
        except TimeoutError:
            seen = [c.method for c in self.calls if c.method not in self.quiet_methods]
            raise TimeoutError(f"no matching {method} call within {timeout}s; calls seen: {seen}") from None

    def notify(self) -> None:
        """Something changed: every ``wait_until`` checks again."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_until(self, find: Callable[[], T | None]) -> T:
        """Re-check ``find`` after every change; callers bound it with a timeout."""
        while (found := find()) is None:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return found

"""A TCP proxy in front of PostgreSQL that can stall: every byte held in both directions, then let go.

The network stall of issue 19's faults (tests/core/test_faults.py, bench/faults.py): connections stay
open and nothing is dropped, so a client sees a database that stops answering for a while.
"""

from __future__ import annotations

import asyncio
import contextlib


class StallableProxy:
    """A TCP proxy to PostgreSQL that can hold every byte in both directions (``stall``) and let them go."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        # Local ports of the connections to PostgreSQL: pg_stat_activity.client_port names this proxy's.
        self.upstream_ports: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """As a restarting server: every connection dropped, new ones refused until ``restore``."""
        server, self.server = self.server, None
        if server is not None:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def restore(self) -> None:
        """Listen again, on the same port."""
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        port = up_writer.get_extra_info("sockname")[1]
        self.upstream_ports.add(port)
        pumps = [asyncio.ensure_future(self._pump(reader, up_writer)),
                 asyncio.ensure_future(self._pump(up_reader, writer))]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pumps:
                p.cancel()
            for w in (writer, up_writer):
                w.close()
            self._tasks.difference_update(pumps)
            self.upstream_ports.discard(port)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                await self.flowing.wait()
                writer.write(chunk)
                await writer.drain()

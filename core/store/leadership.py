"""Leader election among instances sharing one PostgreSQL: a session advisory lock per name, held on
a connection of its own for as long as the instance leads. SQLite is one process: it always leads.

A standby keeps its connection between tries: a follower polling every few seconds must not open
(and have the server fork a backend for) a new connection each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections import defaultdict
from typing import Any


def lock_key(name: str) -> int:
    # Advisory locks take a bigint; crc32 of the name keeps keys stable across instances.
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


class LeaderLocks:
    def __init__(self, *, dsn: str | None) -> None:
        """``dsn``: an asyncpg DSN, or None on SQLite."""
        self._dsn = dsn
        self._locks: dict[str, Any] = {}  # name -> the connection holding its lock
        self._standby: dict[str, Any] = {}  # name -> the connection that tries again next time
        # One operation per name at a time: two tries at once would each open a connection and keep one.
        self._guards: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def take(self, name: str) -> bool:
        """Take the named lock; held until ``release`` (or the connection dies)."""
        if self._dsn is None:
            return True
        async with self._guards[name]:
            if name in self._locks:
                return True
            conn = self._standby.pop(name, None)
            if conn is None or conn.is_closed():
                import asyncpg

                conn = await asyncpg.connect(self._dsn, timeout=10)
            try:
                got = await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key("leader:" + name))
            except BaseException:
                await _close(conn)
                raise
            (self._locks if got else self._standby)[name] = conn
            return bool(got)

    async def alive(self, name: str) -> bool:
        if self._dsn is None:
            return True
        async with self._guards[name]:
            conn = self._locks.get(name)
            if conn is None or conn.is_closed():
                self._locks.pop(name, None)
                return False
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when the
                # query ends as the caller is cancelled, and a loop being stopped would lead on.
                async with asyncio.timeout(5):
                    await conn.fetchval("SELECT 1")
                return True
            except Exception:
                self._locks.pop(name, None)
                await _close(conn)
                return False

    async def release(self, name: str) -> None:
        async with self._guards[name]:
            for held in (self._locks, self._standby):
                conn = held.pop(name, None)
                if conn is not None:
                    await _close(conn)

    async def release_all(self) -> None:
        for name in {*self._locks, *self._standby}:
            await self.release(name)


async def _close(conn: Any) -> None:
    """Close politely, or drop the socket: a lock must not outlive its release by a hung close."""
    try:
        await conn.close(timeout=5)
    except Exception:
        with contextlib.suppress(Exception):
            conn.terminate()

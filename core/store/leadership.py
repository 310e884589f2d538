"""Leader election among instances sharing one PostgreSQL: a session advisory lock per name, held on
a connection of its own for as long as the instance leads. SQLite is one process: it always leads."""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from typing import Any


def lock_key(name: str) -> int:
    # Advisory locks take a bigint; crc32 of the name keeps keys stable across instances.
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


class Leadership:
    def __init__(self, *, dsn: str | None) -> None:
        """``dsn``: an asyncpg DSN, or None on SQLite."""
        self._dsn = dsn
        self._locks: dict[str, Any] = {}

    async def take(self, name: str) -> bool:
        """Take the named lock; held until ``release`` (or the connection dies)."""
        if self._dsn is None:
            return True
        if name in self._locks:
            return True
        import asyncpg

        conn = await asyncpg.connect(self._dsn)
        try:
            got = await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key("leader:" + name))
        except BaseException:
            await conn.close()
            raise
        if not got:
            await conn.close()
            return False
        self._locks[name] = conn
        return True

    async def alive(self, name: str) -> bool:
        if self._dsn is None:
            return True
        conn = self._locks.get(name)
        if conn is None or conn.is_closed():
            self._locks.pop(name, None)
            return False
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=5)
            return True
        except Exception:
            self._locks.pop(name, None)
            with contextlib.suppress(Exception):
                await conn.close()
            return False

    async def release(self, name: str) -> None:
        conn = self._locks.pop(name, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def release_all(self) -> None:
        for name in list(self._locks):
            await self.release(name)

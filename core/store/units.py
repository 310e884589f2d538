"""Units of work: what a store connection runs (a synchronous function of a SQLAlchemy ``Connection``
returning plain data), and the one place storage errors become the core error tree."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from handraise.core.errors import ConflictError, UnavailableError

T = TypeVar("T")


class StoreConnection(ABC):
    """What ``Store.transaction()`` and ``Store.reader()`` yield: units of work run on it, in order."""

    @abstractmethod
    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(sync_connection, *args)`` in this transaction; ``fn`` must return plain data."""


class PgConnection(StoreConnection):
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await self._conn.run_sync(fn, *args)
        except DBAPIError as e:
            raise_translated(e)
            raise


def raise_translated(e: DBAPIError) -> None:
    """SQLAlchemy's exceptions stop at the store: a broken uniqueness rule is a conflict, a lost or
    locked server is unavailable. Any other (a programming error) returns, and the caller re-raises it."""
    if isinstance(e, IntegrityError):
        raise ConflictError("a stored row with the same key exists") from None
    if isinstance(e, OperationalError) or e.connection_invalidated:
        raise UnavailableError("the store does not answer") from e


def first(c: Connection, stmt: Any, params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    row = c.execute(stmt, params).mappings().first()
    return None if row is None else dict(row)


def all_rows(c: Connection, stmt: Any, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return [dict(r) for r in c.execute(stmt, params).mappings()]


def scalar(c: Connection, stmt: Any, params: Mapping[str, Any] | None = None) -> Any:
    return c.execute(stmt, params).scalar()


def rowcount(c: Connection, stmt: Any, params: Any = None) -> int:
    return c.execute(stmt, params).rowcount


def inserted_pk(c: Connection, stmt: Any, params: Mapping[str, Any]) -> Any:
    return c.execute(stmt, params).inserted_primary_key[0]

"""Units of work: what a store connection runs (a synchronous function of a SQLAlchemy ``Connection``
returning plain data), and the one place storage errors become the core error tree."""

from __future__ import annotations

import contextlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager as AsyncContextManager
from typing import Any, TypeVar

import asyncpg
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

    def commit_alone(self) -> bool:
        """Whether the next unit may run as a transaction of its own, committed at once (nothing ran in
        this one yet, and nothing may run after it). Only PostgreSQL's hot units ask (core/store/pgunits.py)."""
        return False


class PgConnection(StoreConnection):
    """A PostgreSQL transaction (or an autocommit reader) that begins with its first unit: a transaction
    whose only unit is a hot one never sends BEGIN and COMMIT (the unit is one statement, atomic alone).
    Its own async context manager (``async with PgConnection(...) as conn``), with no generator around
    it: ending one that never began costs nothing, and the hot path's writes are two of these a cycle."""

    def __init__(self, opening: Callable[[], AsyncContextManager[AsyncConnection]]) -> None:
        """``opening()``: the connection's context (begun, translated), entered at the first unit."""
        self._opening = opening
        self._conn: AsyncConnection | None = None
        self._alone = False
        # Ends the connection (COMMIT, or ROLLBACK when the body raised) once it was begun.
        self.exits: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> PgConnection:
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        if self.exits is None:  # nothing began
            return None
        return await self.exits.__aexit__(*exc)

    def commit_alone(self) -> bool:
        if self._conn is not None or self._alone:
            return False
        self._alone = True
        return True

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._alone:
            raise RuntimeError("a unit that commits alone must be the last of its transaction")
        if self._conn is None:
            self.exits = contextlib.AsyncExitStack()
            self._conn = await self.exits.enter_async_context(self._opening())
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
    if isinstance(e, OperationalError) or e.connection_invalidated or server_lost(e.orig):
        raise UnavailableError("the store does not answer") from e


def raise_translated_sqlite(e: sqlite3.Error) -> None:
    """The same for the raw sqlite3 connection's errors (core/store/sqliteunits.py): SQLAlchemy wraps
    sqlite3's IntegrityError and OperationalError (a lock not had in time, a disk that fails) alike."""
    if isinstance(e, sqlite3.IntegrityError):
        raise ConflictError("a stored row with the same key exists") from None
    if isinstance(e, sqlite3.OperationalError):
        raise UnavailableError("the store does not answer") from e


# SQLSTATE classes of a server that is gone for now: 08 connection exception, 57 operator
# intervention (an administrator's shutdown, "the database system is shutting down", "… starting up").
_LOST_SQLSTATE_CLASSES = ("08", "57")


def server_lost(error: BaseException | None) -> bool:
    """Whether ``error``, or what caused it, says the server went away or refuses connections for now
    (a restart, a shutdown, a reset or refused connection): the store is unavailable, not broken."""
    for _ in range(8):  # the driver's exception, SQLAlchemy's adaptation of it, its wrapper
        if error is None:
            return False
        if isinstance(error, OSError):  # ConnectionError (reset, refused, lost), TimeoutError
            return True
        sqlstate = getattr(error, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _LOST_SQLSTATE_CLASSES:
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """Around what opens, begins or ends a PostgreSQL connection: a server that is gone is 503
    ``unavailable`` (clients retry it), never a driver's exception surfacing as a 500."""
    try:
        yield
    except DBAPIError as e:
        raise_translated(e)
        raise
    except OSError as e:
        raise UnavailableError("the store does not answer") from e
    except asyncpg.IntegrityConstraintViolationError:  # the hot units' raw statements (core/store/pgunits.py)
        raise ConflictError("a stored row with the same key exists") from None
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        if isinstance(e, asyncpg.InterfaceError) or server_lost(e):
            raise UnavailableError("the store does not answer") from e
        raise


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

"""Small durable key/value state (a connector's sync position, the journal head): statements and units.

State about one request names it (``request_id``): the sweeper prunes it with the request's other
spent rows (``core/store/pruning.py``)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from handraise.core.models import StateRow
from handraise.core.store.units import scalar

state_t = StateRow.__table__

GET_STATE = select(state_t.c.value).where(state_t.c.namespace == bindparam("namespace"),
                                          state_t.c.key == bindparam("key"))


def _upsert(make: Any) -> Any:
    # One statement: two writers of a new key (two instances) cannot both miss an UPDATE and then
    # collide on INSERT; the later one's value stands.
    stmt = make(state_t)
    return stmt.on_conflict_do_update(index_elements=[state_t.c.namespace, state_t.c.key],
                                      set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at,
                                            "request_id": stmt.excluded.request_id})


_PUT_STATE = {"postgresql": _upsert(pg_insert), "sqlite": _upsert(sqlite_insert)}
# A new key's INSERT that leaves an existing one alone (first writer wins).
_INSERT_NEW = {"postgresql": pg_insert(state_t).on_conflict_do_nothing(),
               "sqlite": sqlite_insert(state_t).on_conflict_do_nothing()}

_REPLACE_STATE = update(state_t).where(
    state_t.c.namespace == bindparam("w_namespace"), state_t.c.key == bindparam("w_key"),
    state_t.c.value == bindparam("w_expected"))


def put_state(c: Connection, namespace: str, key: str, value: str, now: float, request_id: str | None) -> None:
    c.execute(_PUT_STATE[c.dialect.name], {"namespace": namespace, "key": key, "value": value, "updated_at": now,
                                           "request_id": request_id})


def set_state_if_absent(c: Connection, insert_stmt: Any, namespace: str, key: str, value: str,
                        request_id: str | None) -> str:
    current = c.execute(GET_STATE, {"namespace": namespace, "key": key}).scalar()
    if current is not None:
        return current
    c.execute(insert_stmt, {"namespace": namespace, "key": key, "value": value, "updated_at": time.time(),
                            "request_id": request_id})
    # A concurrent first writer (another instance) may have won: what is stored is the answer.
    return c.execute(GET_STATE, {"namespace": namespace, "key": key}).scalar_one()


def replace_state(c: Connection, insert_stmt: Any, namespace: str, key: str, expected: str | None, value: str,
                  now: float, request_id: str | None) -> bool:
    """Compare-and-set: store ``value`` only if what is stored is still ``expected`` (None: nothing)."""
    if expected is None:
        row = {"namespace": namespace, "key": key, "value": value, "updated_at": now, "request_id": request_id}
        return c.execute(insert_stmt, row).rowcount == 1
    params = {"value": value, "updated_at": now, "w_namespace": namespace, "w_key": key, "w_expected": expected}
    return c.execute(_REPLACE_STATE, params).rowcount == 1


Run = Callable[..., Awaitable[Any]]


class StateRecords:
    """The state table, each call a unit of work of its own (``core.state.StateStore`` over it)."""

    def __init__(self, *, read: Run, write: Run, dialect: str) -> None:
        self._read = read
        self._write = write
        self._insert_new = _INSERT_NEW[dialect]

    async def get(self, namespace: str, key: str) -> str | None:
        return await self._read(scalar, GET_STATE, {"namespace": namespace, "key": key})

    async def set(self, namespace: str, key: str, value: str, *, request_id: str | None = None) -> None:
        """Store ``value``; ``request_id``: the state is about that request and is pruned with it."""
        await self._write(put_state, namespace, key, value, time.time(), request_id)

    async def set_if_absent(self, namespace: str, key: str, value: str, *, request_id: str | None = None) -> str:
        """Store ``value`` unless a value is there already; return what is stored (first writer wins)."""
        return await self._write(set_state_if_absent, self._insert_new, namespace, key, value, request_id)

    async def update(self, namespace: str, key: str, change: Callable[[str | None], str], *,
                     request_id: str | None = None) -> str:
        """Read-modify-write without losing a concurrent writer's change: ``change(current)`` is applied
        with a compare-and-set and applied again to the newer value when another writer (a task here,
        another instance) got in between. ``change`` must be pure. Returns what was stored."""
        while True:
            current = await self.get(namespace, key)
            value = change(current)
            if await self._write(replace_state, self._insert_new, namespace, key, current, value, time.time(),
                                 request_id):
                return value

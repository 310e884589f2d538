"""Small durable key/value state (a connector's sync position, the journal head): statements and units."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from handraise.core.models import StateRow

state_t = StateRow.__table__

GET_STATE = select(state_t.c.value).where(state_t.c.namespace == bindparam("namespace"),
                                          state_t.c.key == bindparam("key"))
_UPDATE_STATE = update(state_t).where(state_t.c.namespace == bindparam("w_namespace"),
                                      state_t.c.key == bindparam("w_key"))
_INSERT_STATE = insert(state_t)


def put_state(c: Connection, namespace: str, key: str, value: str, now: float) -> None:
    params = {"value": value, "updated_at": now, "w_namespace": namespace, "w_key": key}
    if c.execute(_UPDATE_STATE, params).rowcount == 0:
        c.execute(_INSERT_STATE, {"namespace": namespace, "key": key, "value": value, "updated_at": now})


def set_state_if_absent(c: Connection, insert_stmt: Any, namespace: str, key: str, value: str) -> str:
    current = c.execute(GET_STATE, {"namespace": namespace, "key": key}).scalar()
    if current is not None:
        return current
    c.execute(insert_stmt, {"namespace": namespace, "key": key, "value": value, "updated_at": time.time()})
    # A concurrent first writer (another instance) may have won: what is stored is the answer.
    return c.execute(GET_STATE, {"namespace": namespace, "key": key}).scalar_one()

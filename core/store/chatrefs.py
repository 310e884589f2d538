"""What chat messages stand for: button tokens (a token → a request and a value) and the messages posted
about requests (a messenger's message key → a request), both pruned with their request's spent rows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from handraise.core.models import ChatActionRow, MessageRefRow
from handraise.core.store.units import first, rowcount

chat_actions_t = ChatActionRow.__table__
message_refs_t = MessageRefRow.__table__

_INSERT_CHAT_ACTION = insert(chat_actions_t)
_GET_CHAT_ACTION = select(chat_actions_t).where(chat_actions_t.c.token == bindparam("token"),
                                                chat_actions_t.c.channel == bindparam("channel"))
_GET_MESSAGE_REF = select(message_refs_t).where(message_refs_t.c.channel == bindparam("channel"),
                                                message_refs_t.c.message_key == bindparam("message_key"))
# ON CONFLICT DO NOTHING: the same message remembered twice (a retried delivery) keeps the first.
_INSERT_MESSAGE_REF = {"postgresql": pg_insert(message_refs_t).on_conflict_do_nothing(),
                       "sqlite": sqlite_insert(message_refs_t).on_conflict_do_nothing()}

Run = Callable[..., Awaitable[Any]]


class ChatRefRecords:
    """Each call a unit of work of its own (``core.chatrefs.ChatRefs`` over it)."""

    def __init__(self, *, read: Run, write: Run, dialect: str) -> None:
        self._read = read
        self._write = write
        self._insert_message_ref = _INSERT_MESSAGE_REF[dialect]

    async def insert_actions(self, rows: list[Mapping[str, Any]]) -> None:
        if not rows:
            return
        await self._write(rowcount, _INSERT_CHAT_ACTION, [dict(r) for r in rows])

    async def action(self, token: str, *, channel: str) -> dict[str, Any] | None:
        return await self._read(first, _GET_CHAT_ACTION, {"token": token, "channel": channel})

    async def insert_message(self, row: Mapping[str, Any]) -> None:
        await self._write(rowcount, self._insert_message_ref, dict(row))

    async def message(self, *, channel: str, message_key: str) -> dict[str, Any] | None:
        return await self._read(first, _GET_MESSAGE_REF, {"channel": channel, "message_key": message_key})

"""Chat references: short random tokens behind chat buttons (a token stands for a request and a value,
never the request's id), and the messages a bot posted about requests (a reply to one names its request).

A token is 16 characters of ``secrets.token_urlsafe``: unguessable, and short enough for Telegram's
64-byte callback data. Both kinds are pruned with their request's spent rows.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from handraise.core.canonical import canonical_json
from handraise.core.store.chatrefs import ChatRefRecords

Clock = Callable[[], float]
# A token as chat_actions hold it is at most this long: anything longer is forged.
_MAX_TOKEN = 32


class ChatRefs:
    def __init__(self, *, records: ChatRefRecords, clock: Clock) -> None:
        self._records = records
        self._clock = clock

    async def create_actions(self, *, tenant_id: str, request_id: str, channel: str, values: Iterable[Any],
                             kept: Sequence[str] | None = None) -> list[str]:
        """One token per value, in order, for buttons of this channel.

        ``kept``: the tokens of the message being rendered again (a quorum tally edit), as its delivery
        kept them; they are the answer when there is one per value. A message keeps its buttons while its
        request is pending: a re-rendering mints nothing, and a tap on what a person sees still works.
        """
        values = list(values)
        if isinstance(kept, (list, tuple)) and len(kept) == len(values) and all(isinstance(t, str) for t in kept):
            return list(kept)
        now = self._clock()
        rows = [{"token": secrets.token_urlsafe(12), "tenant_id": tenant_id, "request_id": request_id,
                 "channel": channel, "value_json": canonical_json(v), "created_at": now} for v in values]
        await self._records.insert_actions(rows)
        return [r["token"] for r in rows]

    async def resolve_action(self, *, token: str, channel: str) -> tuple[str, str, Any] | None:
        """(tenant_id, request_id, value) for a button token of this channel, or None (forged/unknown)."""
        if not token or len(token) > _MAX_TOKEN:
            return None
        row = await self._records.action(token, channel=channel)
        if row is None:
            return None
        return row["tenant_id"], row["request_id"], json.loads(row["value_json"])

    async def remember_message(self, *, channel: str, message_key: str, tenant_id: str, request_id: str) -> None:
        """Record that a posted chat message (e.g. ``"<chat id>:<message id>"``) is about this request;
        the first record of a message stands."""
        await self._records.insert_message({"channel": channel, "message_key": message_key, "tenant_id": tenant_id,
                                            "request_id": request_id, "created_at": self._clock()})

    async def lookup_message(self, *, channel: str, message_key: str) -> tuple[str, str] | None:
        """(tenant_id, request_id) of a remembered chat message, or None."""
        row = await self._records.message(channel=channel, message_key=message_key)
        return None if row is None else (row["tenant_id"], row["request_id"])

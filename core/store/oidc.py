"""Sign-ins through the identity provider under way: rows keyed by their state's sha256, never the state.

Taking a login is one unit of work: read the row, then a compare-and-set (``used_at IS NULL AND
expires_at > now``), so a callback replayed, or raced by a second tab, finds it used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from handraise.core.models import OidcLoginRow
from handraise.core.store.units import rowcount

logins_t = OidcLoginRow.__table__

_b = bindparam
_INSERT = insert(logins_t)
_GET = select(logins_t).where(logins_t.c.state_sha256 == _b("state_sha256"))
_USE = update(logins_t).where(
    logins_t.c.id == _b("w_id"), logins_t.c.used_at.is_(None), logins_t.c.expires_at > _b("w_now"),
).values(used_at=_b("w_now"))

Run = Callable[..., Awaitable[Any]]


def _take(c: Connection, state_sha256: str, now: float) -> tuple[dict[str, Any] | None, bool]:
    row = c.execute(_GET, {"state_sha256": state_sha256}).mappings().first()
    if row is None:
        return None, False
    won = c.execute(_USE, {"w_id": row["id"], "w_now": now}).rowcount == 1
    return dict(row), won


class OidcLoginRecords:
    """The ``oidc_logins`` table, each call a unit of work of its own."""

    def __init__(self, *, write: Run) -> None:
        self._write = write

    async def insert(self, row: Mapping[str, Any]) -> None:
        await self._write(rowcount, _INSERT, dict(row))

    async def take(self, state_sha256: str, *, now: float) -> tuple[dict[str, Any] | None, bool]:
        """The login the state names (None: no such login) and whether this call used it: False when it
        was used already or is past its end (the row says which)."""
        return await self._write(_take, state_sha256, now)

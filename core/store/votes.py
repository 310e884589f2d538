"""A quorum request's votes: each vote is one compare-and-set on the request's ``votes_version``.

The update names the version its caller read, and the request still pending and unexpired; it
writes the votes with the new one (and, for the deciding vote, the answer and ``answered`` status)
and its journal entries in the same unit of work. Two votes racing on any instances read the same
version: one update wins, the other changes nothing and its caller reads again (core/quorum.py),
so every vote is counted once and exactly one vote resolves the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.engine import Connection

from handraise.core.models import RequestRow
from handraise.core.store.journal import Journal, JournalEntry, entry_row
from handraise.core.store.sealed import Pair, carrying, insert_in, split
from handraise.core.store.units import StoreConnection

requests_t = RequestRow.__table__

_b = bindparam
# The SET columns come from the parameters (votes, version, and for the deciding vote the answer).
_CAST = update(requests_t).where(
    requests_t.c.id == _b("w_id"), requests_t.c.tenant_id == _b("w_tenant_id"), requests_t.c.status == "pending",
    requests_t.c.expires_at > _b("w_now"), requests_t.c.votes_version == _b("w_version"),
).returning(*requests_t.c)

Notice = tuple[str, Mapping[str, Any]] | None


@dataclass(frozen=True)
class Cast:
    """A vote that won its compare-and-set: the row as updated and its journal entries, in order."""

    row: dict[str, Any]
    entries: list[JournalEntry]


class VoteRecords:
    def __init__(self, *, journal: Journal, notice: Callable[[Mapping[str, Any] | None], Notice]) -> None:
        self._journal = journal
        self._notice = notice

    async def cast(self, conn: StoreConnection, *, request_id: str, tenant_id: str, version: int, now: float,
                   values: Mapping[str, Any], journal: list[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Cast | None:
        """Write ``values`` if the request is still pending at ``version``; None when another vote (or the
        deadline, or a cancel) got there first. ``journal``: each entry's fields but its run id, with the
        NOTIFY that goes with it (its seq added) to other instances. A sensitive answer's sealed parts
        go to their own table (core/store/sealed.py)."""
        columns, pair = split(values)
        params = {**columns, "votes_version": version + 1, "w_id": request_id, "w_tenant_id": tenant_id,
                  "w_now": now, "w_version": version}
        return await conn.run(self._cast_unit, params, [(dict(e), self._notice(n)) for e, n in journal], pair)

    def _cast_unit(self, c: Connection, params: dict[str, Any],
                   journal: list[tuple[dict[str, Any], Notice]], pair: Pair | None) -> Cast | None:
        changed = c.execute(_CAST, params).mappings().first()
        if changed is None:
            return None
        row = carrying(dict(changed), pair)
        if pair is not None:
            insert_in(c, row, pair)
        entries = [self._journal.append_in(c, entry_row(**entry, run_id=row["run_id"]),
                                           None if notify is None else (notify[0], {**notify[1], "run_id": row["run_id"]}))
                   for entry, notify in journal]
        return Cast(row, entries)

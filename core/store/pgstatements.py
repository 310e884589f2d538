"""The statements of PostgreSQL's hot units (core/store/pgunits.py): written with ``:name`` placeholders,
numbered once for asyncpg, built once per shape; the chain's head and entry follow each change in the same
statement."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from handraise.core.models import RequestRow

DELIVERY_COLUMNS = ("channel", "target", "status", "attempts", "last_error", "updated_at")
_ENTRY_COLUMNS = ("tenant_id", "seq", "request_id", "run_id", "event", "principal", "channel", "data_json", "at",
                  "prev_hash", "hash")
# What an insert leaves to a column the row does not name (SQLAlchemy's scalar defaults, as its INSERT would).
REQUEST_DEFAULTS = {c.name: c.default.arg for c in RequestRow.__table__.c
                    if c.default is not None and not callable(c.default.arg)}


def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """``:name`` placeholders → asyncpg's ``$n``, and the names in order (``::type`` casts are left alone)."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"(?<!:):([a-z_][a-z0-9_]*)", number, sql), tuple(names)


class Statement:
    """A statement written with ``:name`` placeholders, numbered once; asyncpg prepares and caches it per
    connection (its statement cache, keyed by the text)."""

    __slots__ = ("sql", "names")

    def __init__(self, sql: str) -> None:
        self.sql, self.names = _numbered(sql)

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[n] for n in self.names]


# The head follows the change (moved only for the change's row, and only from the seq before the entry's;
# a head that is not there yet is made), the entry follows the head. The same order of locks as the
# locked path (the request's row, the head, the journal's key), so the two never deadlock.
_TYPES = {"seq": "int", "data_json": "text", "at": "float8"}  # a parameter used twice must be deduced alike
_ENTRY_VALUES = ", ".join(f":e_{c}::{_TYPES.get(c, 'varchar')}" for c in _ENTRY_COLUMNS)
_ENTRY_INSERT = f"INSERT INTO journal ({', '.join(_ENTRY_COLUMNS)})"


def _chain(source: str) -> str:
    """The head and entry CTEs for one row of ``source`` (a CTE, with its condition)."""
    return (
        "head AS (INSERT INTO journal_heads (tenant_id, seq, hash) "
        f"SELECT :e_tenant_id::varchar, :e_seq::int, :e_hash::varchar FROM {source} "
        "ON CONFLICT (tenant_id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash "
        "WHERE journal_heads.seq = EXCLUDED.seq - 1 RETURNING 1), "
        f"entry AS ({_ENTRY_INSERT} SELECT {_ENTRY_VALUES} FROM head RETURNING 1) ")


# The guard, and the entry's seq: a batch's rows say which of its units were applied.
_GUARD = "1 / (SELECT count(*)::int FROM head) AS chained, :e_seq::int AS entry_seq"
_NOTIFY = ", pg_notify(:n_channel, :n_payload)"

READ_HEAD = Statement("SELECT seq, hash FROM journal_heads WHERE tenant_id = :tenant_id")
# The head read in a transaction that holds it until its commit (pgunits: batches while another instance writes).
LOCK_HEAD = Statement("SELECT seq, hash FROM journal_heads WHERE tenant_id = :tenant_id FOR UPDATE")

ANALYZED = ("requests", "deliveries", "journal")
NEVER_ANALYZED = Statement("SELECT count(*) AS n FROM pg_stat_user_tables WHERE relname = ANY(:tables::text[]) "
                           "AND last_analyze IS NULL AND last_autoanalyze IS NULL")
ANALYZE = Statement(f"ANALYZE {', '.join(ANALYZED)}")

_JOINED_READ = (
    "SELECT r.*, " + ", ".join(f"d.{c} AS delivery_{c}" for c in DELIVERY_COLUMNS) + ", d.id AS delivery_id "
    "FROM requests r LEFT JOIN deliveries d ON d.request_id = r.id AND d.tenant_id = r.tenant_id ")
GET_JOINED = {"id": Statement(_JOINED_READ + "WHERE r.id = :id AND r.tenant_id = :tenant_id ORDER BY d.id"),
              "unique_id": Statement(_JOINED_READ + "WHERE r.tenant_id = :tenant_id AND r.unique_id = :unique_id "
                                     "ORDER BY d.id")}
# A held sensitive answer, read only for a request that holds one (core/store/sealed.py): no other read
# touches its table, so the table's rewrite never holds up anything but sensitive answers.
GET_SEALED = Statement("SELECT sealed, wrapped_key FROM sealed_answers WHERE request_id = :id AND tenant_id = :tenant_id")
_DELIVERIES_JSON = (
    "(SELECT coalesce(json_agg(json_build_object(" + ", ".join(f"'{c}', d.{c}" for c in DELIVERY_COLUMNS)
    + ") ORDER BY d.id), '[]') FROM deliveries d WHERE d.request_id = changed.id "
    "AND d.tenant_id = changed.tenant_id)::text AS deliveries_json")


class _StatementCache:
    """Statements whose text depends on which columns a call sets, built once per shape."""

    def __init__(self, build: Callable[..., Statement]) -> None:
        self._build = build
        self._built: dict[Any, Statement] = {}

    def get(self, *shape: Any) -> Statement:
        statement = self._built.get(shape)
        if statement is None:
            statement = self._built[shape] = self._build(*shape)
        return statement


def _create_statement(columns: tuple[str, ...], notify: bool) -> Statement:
    return Statement(
        f"WITH req AS (INSERT INTO requests ({', '.join(columns)}) VALUES ({', '.join(':r_' + c for c in columns)}) "
        "ON CONFLICT DO NOTHING RETURNING 1), "
        # A run named by use is made with its first request (tenant-scoped, unregistered), as runs.ensure_in.
        "run AS (INSERT INTO runs (tenant_id, run_id, status, registered, created_by, created_at, updated_at) "
        "SELECT :r_tenant_id, :run_id::varchar, 'running', false, :r_created_by, :r_created_at, :r_created_at "
        "FROM req WHERE :run_id::varchar IS NOT NULL ON CONFLICT (tenant_id, run_id) DO NOTHING RETURNING 1), "
        # The run before the head (the scalar subquery runs it first), as on the locked path.
        f"{_chain('req WHERE (SELECT count(*) FROM run) >= 0')}"
        f"SELECT {_GUARD}{_NOTIFY if notify else ''} FROM req")


def _change_statement(sets: tuple[str, ...], condition: str, notify: bool, with_deliveries: bool,
                      sealed: bool) -> Statement:
    """A compare-and-set on a pending request, journaled: the entry's run id is the one its HMAC was
    computed over, so a row whose run id differs gets no entry, and the guard undoes the change. ``sealed``:
    a sensitive answer's sealed parts go to their own table in the same statement (core/store/sealed.py)."""
    assignments = ", ".join(f"{c} = :s_{c}" for c in sets)
    held = ("held AS (INSERT INTO sealed_answers (request_id, tenant_id, sealed, wrapped_key) "
            "SELECT changed.id, changed.tenant_id, :k_sealed::text, :k_key::text FROM changed RETURNING 1), ")
    return Statement(
        f"WITH changed AS (UPDATE requests SET {assignments} WHERE id = :w_id AND tenant_id = :w_tenant_id "
        f"AND status = 'pending'{condition} RETURNING *), {held if sealed else ''}"
        f"{_chain('changed WHERE changed.run_id IS NOT DISTINCT FROM :e_run_id::varchar')}"
        f"SELECT changed.*, {_GUARD}{_NOTIFY if notify else ''}"
        f"{', ' + _DELIVERIES_JSON if with_deliveries else ''} FROM changed")


CREATES = _StatementCache(_create_statement)
CHANGES = _StatementCache(_change_statement)
CONDITIONS = {True: " AND expires_at > :w_now", False: " AND expires_at <= :w_now", None: ""}


__all__: Sequence[str] = ("Statement", "DELIVERY_COLUMNS", "REQUEST_DEFAULTS", "READ_HEAD", "LOCK_HEAD", "GET_JOINED",
                          "GET_SEALED",
                          "CREATES", "CHANGES", "CONDITIONS", "ANALYZED", "NEVER_ANALYZED", "ANALYZE")

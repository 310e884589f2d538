"""keyed journal chains per tenant, sealed sensitive answers, keyed answer digests

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

- journal: one HMAC chain per tenant (primary key tenant_id, seq) with a head row per tenant
  (journal_heads), and an index on (tenant_id, run_id) for run bundles.
- requests: response_sha256 (an unsalted sha256: six-digit answers fall to a dictionary) becomes
  response_digest, an HMAC salted by the request; a held sensitive answer moves from response_json
  to response_sealed + response_key (core/sealing.py); response_delivered_at starts its grace; a
  partial index holds only the rows that still hold a sensitive answer (the sweeper's query).

An existing journal (one global sha256 chain) is re-chained: each tenant's entries keep their order,
numbered 1, 2, 3 … in the tenant's chain, hashed with the key; answer sha256s are dropped from the
entries (digests are recomputed where the answer is still stored) and each tenant's chain ends with a
``journal_upgraded`` entry naming the old chain's head and how many breaks the old chain had. The
keys come from the server secret, which the store hands to this migration.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
import sqlmodel
from alembic import context, op

from handraise.core.canonical import canonical_json
from handraise.core.sealing import Sealer
from handraise.core.store.journal import GENESIS_HASH, chain_hash

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_HELD = sa.text("response_sealed IS NOT NULL")


def _journal_columns() -> list[Any]:
    return [
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("event", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("principal", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True),
        sa.Column("channel", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("prev_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "seq"),
    ]


def _legacy_breaks(rows: list[Any]) -> int:
    """Breaks in the old global sha256 chain, counted before it is replaced."""
    breaks, prev = 0, GENESIS_HASH
    for expected, r in enumerate(rows, start=1):
        body = canonical_json({"seq": r.seq, "tenant_id": r.tenant_id, "request_id": r.request_id,
                               "run_id": r.run_id, "event": r.event, "principal": r.principal,
                               "channel": r.channel, "data": r.data_json, "at": repr(r.at)})
        digest = hashlib.sha256((prev + body).encode()).hexdigest()
        breaks += (r.seq != expected) + (r.prev_hash != prev) + (digest != r.hash)
        prev = r.hash
    return breaks


def upgrade() -> None:
    bind = op.get_bind()
    secret = context.config.attributes.get("server_secret")
    legacy = bind.execute(sa.text("SELECT * FROM journal ORDER BY seq")).all()
    answered = bind.execute(sa.text(
        "SELECT id, tenant_id, sensitive, response_json FROM requests "
        "WHERE status = 'answered' AND response_json IS NOT NULL")).all()
    if (legacy or answered) and secret is None:
        raise RuntimeError("migration 0004 re-chains the journal with the server secret: run it through "
                           "handraise (serve or any command that opens the store), not alembic alone")

    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("response_digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.add_column(sa.Column("response_sealed", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("response_key", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("response_delivered_at", sa.Float(), nullable=True))

    digests: dict[str, str] = {}
    if answered:
        sealer = Sealer(secret)
        for r in answered:
            digest = sealer.digest(tenant_id=r.tenant_id, request_id=r.id, canonical=r.response_json)
            digests[r.id] = digest
            values: dict[str, Any] = {"id": r.id, "digest": digest}
            if r.sensitive:
                values["sealed"], values["key"] = sealer.seal(tenant_id=r.tenant_id, request_id=r.id,
                                                              canonical=r.response_json)
                bind.execute(sa.text("UPDATE requests SET response_json = NULL, response_sealed = :sealed, "
                                     "response_key = :key, response_digest = :digest WHERE id = :id"), values)
            else:
                bind.execute(sa.text("UPDATE requests SET response_digest = :digest WHERE id = :id"), values)

    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_column("response_sha256")
        batch_op.create_index("ix_requests_sealed_held", ["resolved_at"], unique=False,
                              sqlite_where=_HELD, postgresql_where=_HELD)

    op.drop_table("journal")
    op.create_table("journal", *_journal_columns())
    with op.batch_alter_table("journal", schema=None) as batch_op:
        batch_op.create_index("ix_journal_tenant_request", ["tenant_id", "request_id"], unique=False)
        batch_op.create_index("ix_journal_tenant_run", ["tenant_id", "run_id"], unique=False)
    heads = op.create_table(
        "journal_heads",
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    bind.execute(sa.text("DELETE FROM kv_state WHERE namespace = 'journal' AND key = 'head'"))
    if legacy:
        _rechain(bind, secret.key("journal chain"), legacy, digests, heads)


def _rechain(bind: Any, key: bytes, legacy: list[Any], digests: dict[str, str], heads: Any) -> None:
    journal = sa.table("journal", *[sa.column(c.name) for c in _journal_columns() if isinstance(c, sa.Column)])
    chains: dict[str, tuple[int, str]] = defaultdict(lambda: (0, GENESIS_HASH))
    rows: list[dict[str, Any]] = []

    def add(row: dict[str, Any]) -> None:
        seq, prev = chains[row["tenant_id"]]
        seq += 1
        digest = chain_hash(key, prev_hash=prev, seq=seq, **row)
        rows.append({**row, "seq": seq, "prev_hash": prev, "hash": digest})
        chains[row["tenant_id"]] = (seq, digest)

    for r in legacy:
        data = json.loads(r.data_json)
        data.pop("response_sha256", None)
        if r.event == "answered" and r.request_id in digests:
            data["response_digest"] = digests[r.request_id]
        add({"tenant_id": r.tenant_id, "request_id": r.request_id, "run_id": r.run_id, "event": r.event,
             "principal": r.principal, "channel": r.channel, "data_json": canonical_json(data), "at": r.at})
    note = {"legacy_entries": len(legacy), "legacy_head": {"seq": legacy[-1].seq, "hash": legacy[-1].hash},
            "legacy_breaks": _legacy_breaks(legacy)}
    now = time.time()
    for tenant in sorted(chains):
        add({"tenant_id": tenant, "request_id": None, "run_id": None, "event": "journal_upgraded",
             "principal": None, "channel": None, "data_json": canonical_json(note), "at": now})
    for start in range(0, len(rows), 1000):
        bind.execute(journal.insert(), rows[start:start + 1000])
    bind.execute(heads.insert(), [{"tenant_id": t, "seq": s, "hash": h} for t, (s, h) in sorted(chains.items())])


def downgrade() -> None:
    raise NotImplementedError("the keyed journal cannot be turned back into the old chain; restore a backup")

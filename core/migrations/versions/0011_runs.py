"""runs: agent runs as a resource, registered or made by first use; existing run ids backfilled

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

Requests and annotations have named runs by ``run_id`` since 0001; each (tenant, run id) they
name becomes a ``running``, unregistered run, created when its first request or annotation was.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_str = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", _str(length=64), nullable=False),
        sa.Column("run_id", _str(length=200), nullable=False),
        sa.Column("status", _str(length=16), nullable=False),
        sa.Column("registered", sa.Boolean(), nullable=False),
        sa.Column("name", _str(length=200), nullable=True),
        sa.Column("workflow_id", _str(length=200), nullable=True),
        sa.Column("inputs_json", sa.Text(), nullable=True),
        sa.Column("body_sha256", _str(length=64), nullable=True),
        sa.Column("created_by", _str(length=300), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("completed_by", _str(length=300), nullable=True),
        sa.Column("completed_at", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.UniqueConstraint("tenant_id", "run_id", name="uq_runs_tenant_run"),
    )
    # Oldest first, so the backfilled runs list in the order they began.
    op.execute(sa.text(
        "INSERT INTO runs (tenant_id, run_id, status, registered, created_by, created_at, updated_at) "
        "SELECT tenant_id, run_id, 'running', false, 'handraise:migration', MIN(created_at), MIN(created_at) FROM ("
        " SELECT tenant_id, run_id, created_at FROM requests WHERE run_id IS NOT NULL"
        " UNION ALL SELECT tenant_id, run_id, created_at FROM annotations"
        ") AS named GROUP BY tenant_id, run_id ORDER BY MIN(created_at)"))


def downgrade() -> None:
    op.drop_table("runs")

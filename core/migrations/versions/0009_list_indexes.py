"""requests and journal: indexes that hand each list over in its order, flat at a million rows

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

``GET /v1/requests`` and the inbox list a tenant's requests oldest first, all or by status; a run
bundle lists a run's requests (by creation) and journal entries (by seq); a request's journal is
read by seq. Each now has an index whose range is already in that order. Before, the first page
of pending sorted every row of the tenant, and SQLite (no planner statistics) read a run's journal
by walking the tenant's whole chain in seq order and filtering: 9.2 times slower at 20,000
requests, growing with the table (issue 19). The (tenant, run) and (tenant, request) indexes
become prefixes of the new ones and are dropped. The sweeper's look for held sensitive answers
that are due gets a second partial index (by hand-over time) beside 0004's (by answer time), so
each of its two conditions is a range rather than a walk over every answer still held.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

_HELD = sa.text("response_sealed IS NOT NULL")

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.create_index("ix_requests_tenant_created", ["tenant_id", "created_at"], unique=False)
        batch_op.create_index("ix_requests_tenant_status_created", ["tenant_id", "status", "created_at"],
                              unique=False)
        batch_op.create_index("ix_requests_tenant_run_created", ["tenant_id", "run_id", "created_at"], unique=False)
        batch_op.drop_index("ix_requests_tenant_run")
        batch_op.create_index("ix_requests_sealed_delivered", ["response_delivered_at"], unique=False,
                              sqlite_where=_HELD, postgresql_where=_HELD)
    with op.batch_alter_table("journal", schema=None) as batch_op:
        batch_op.create_index("ix_journal_tenant_request_seq", ["tenant_id", "request_id", "seq"], unique=False)
        batch_op.create_index("ix_journal_tenant_run_seq", ["tenant_id", "run_id", "seq"], unique=False)
        batch_op.drop_index("ix_journal_tenant_request")
        batch_op.drop_index("ix_journal_tenant_run")


def downgrade() -> None:
    with op.batch_alter_table("journal", schema=None) as batch_op:
        batch_op.create_index("ix_journal_tenant_run", ["tenant_id", "run_id"], unique=False)
        batch_op.create_index("ix_journal_tenant_request", ["tenant_id", "request_id"], unique=False)
        batch_op.drop_index("ix_journal_tenant_run_seq")
        batch_op.drop_index("ix_journal_tenant_request_seq")
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index("ix_requests_sealed_delivered")
        batch_op.create_index("ix_requests_tenant_run", ["tenant_id", "run_id"], unique=False)
        batch_op.drop_index("ix_requests_tenant_run_created")
        batch_op.drop_index("ix_requests_tenant_status_created")
        batch_op.drop_index("ix_requests_tenant_created")

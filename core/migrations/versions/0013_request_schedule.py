"""requests: escalation steps and reminders, and when the next of them is due

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

``schedule_json`` holds a request's escalation steps and reminders with the times the clock reached
them (core/schedule.py); ``next_due_at`` is when the next one is due, NULL when nothing is left. The
sweeper looks for pending requests whose ``next_due_at`` has passed: a range of a partial index that
holds only requests with a schedule.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

_SCHEDULED = sa.text("next_due_at IS NOT NULL")

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("schedule_json", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("next_due_at", sa.Float(), nullable=True))
        batch_op.create_index("ix_requests_status_next_due", ["status", "next_due_at"], unique=False,
                              sqlite_where=_SCHEDULED, postgresql_where=_SCHEDULED)


def downgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index("ix_requests_status_next_due")
        batch_op.drop_column("next_due_at")
        batch_op.drop_column("schedule_json")

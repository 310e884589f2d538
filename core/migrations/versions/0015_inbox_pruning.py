"""inbox: sign-in links and sessions indexed by their absolute end, for pruning

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

The sweeper deletes the operator inbox's sign-in links and sessions once their absolute end is older
than ``limits.spent_retention_seconds`` (core/store/pruning.py); these indexes let each pass read only
the rows it deletes.
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_inbox_signins_expires", "inbox_signins", ["expires_at"])
    op.create_index("ix_inbox_sessions_expires", "inbox_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_inbox_sessions_expires", table_name="inbox_sessions")
    op.drop_index("ix_inbox_signins_expires", table_name="inbox_signins")

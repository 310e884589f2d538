"""deliveries: a partial index of those being withdrawn, for the recovery pass

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01

A delivery left ``withdrawing`` by an instance that died mid-withdrawal is finished by the recovery
pass (core/recovery.py), which looks for such rows untouched for a while; only they are in this index,
so the look costs the same however many deliveries are stored.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_WITHDRAWING = sa.text("status = 'withdrawing'")


def upgrade() -> None:
    op.create_index("ix_deliveries_withdrawing", "deliveries", ["updated_at"], sqlite_where=_WITHDRAWING,
                    postgresql_where=_WITHDRAWING)


def downgrade() -> None:
    op.drop_index("ix_deliveries_withdrawing", table_name="deliveries")

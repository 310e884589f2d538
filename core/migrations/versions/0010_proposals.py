"""requests: an approval's proposal and proposal_schema (approve with edits)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("proposal_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("proposal_schema_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("proposal_schema_json")
        batch.drop_column("proposal_json")

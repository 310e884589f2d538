"""requests: on_timeout (what the deadline does) and callback_url (where the result is POSTed)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Both are null for a request that has none, which is what every existing row means:
it expires at its deadline and nobody is called back.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("on_timeout_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("callback_url", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("callback_url")
        batch.drop_column("on_timeout_json")

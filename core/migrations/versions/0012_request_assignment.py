"""requests: who a request is assigned to, and on whose behalf it asks

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

``assign_to`` (people and ``group:`` names, JSON) limits who may answer; ``on_behalf_of`` names
the person the agent acts for, who may never approve it (four eyes). Both NULL for requests
that name neither, as every request before this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("assign_to_json", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("on_behalf_of", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_column("on_behalf_of")
        batch_op.drop_column("assign_to_json")

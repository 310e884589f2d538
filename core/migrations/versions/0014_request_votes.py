"""requests: quorum approvals and their votes

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

``approvals_required`` (N distinct people must approve) and ``reject_policy`` (``any`` or ``quorum``)
say how an approval is decided; ``votes_json`` holds the votes cast so far (person, decision, channel,
time) and ``votes_version`` the compare-and-set counter every vote increments (core/quorum.py). NULL
and 0 for every request before this revision: one answer decides it, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("approvals_required", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("reject_policy", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True))
        batch_op.add_column(sa.Column("votes_json", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("votes_version", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_column("votes_version")
        batch_op.drop_column("votes_json")
        batch_op.drop_column("reject_policy")
        batch_op.drop_column("approvals_required")

"""links: the person a link was minted for

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

A link handed out through a shared chat must be usable only by the person it
was given to, and their answer must be recorded as theirs (``telegram:42``),
not as ``link:<id>``. Links minted without a person keep NULL here.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("links", schema=None) as batch_op:
        batch_op.add_column(sa.Column("principal", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("links", schema=None) as batch_op:
        batch_op.drop_column("principal")

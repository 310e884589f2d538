"""people proven, not asserted: keys, sign-ins and sessions bound to a person; the deciding person

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04

A stored key may be bound to one of its tenant's people (``api_keys.person``): only such a key acts as
that person (``person:<id>``). An inbox sign-in link and the session it opens may be bound to a person
too (``inbox_signins.person``, ``inbox_sessions.person``), minted by that person's own key, delivered to
that person's own channel, or made by a sign-in through the identity provider. ``requests.
resolved_person_json`` keeps who decided in human terms (``{"id", "name"}``) as it stood when they did.
NULL for every row before this revision: nobody was proven then.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("person", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    with op.batch_alter_table("inbox_signins", schema=None) as batch_op:
        batch_op.add_column(sa.Column("person", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    with op.batch_alter_table("inbox_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("person", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resolved_person_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_column("resolved_person_json")
    with op.batch_alter_table("inbox_sessions", schema=None) as batch_op:
        batch_op.drop_column("person")
    with op.batch_alter_table("inbox_signins", schema=None) as batch_op:
        batch_op.drop_column("person")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("person")

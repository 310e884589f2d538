"""hitl: when a request's form was first opened and first tried, and HITL-protocol cases

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

``requests.opened_at`` is set when a person first opens the request's hosted form
(journaled as ``opened``), ``requests.interacted_at`` when a person first tries to
answer and is refused (an ``invalid_attempt``): the HITL protocol's ``opened`` and
``in_progress`` states, shown on the request. ``hitl_cases`` keeps, per request
created through the HITL-protocol endpoints, what the protocol needs back: the
review type and the declared default action.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_str = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("opened_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("interacted_at", sa.Float(), nullable=True))
    op.create_table(
        "hitl_cases",
        sa.Column("request_id", _str(length=64), primary_key=True),
        sa.Column("tenant_id", _str(length=64), nullable=False),
        sa.Column("review_type", _str(length=16), nullable=False),
        sa.Column("default_action", _str(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hitl_cases")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("interacted_at")
        batch.drop_column("opened_at")

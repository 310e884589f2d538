"""inbox: one-time sign-in links and browser sessions, both stored as token hashes

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

The operator inbox signs people in without accounts: a short-lived, single-use
link (``handraise inbox-link``, ``POST /v1/inbox/links``) becomes a server-side
session. Neither table holds a token, only its sha256.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_str = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "inbox_signins",
        sa.Column("id", _str(length=64), primary_key=True),
        sa.Column("tenant_id", _str(length=64), nullable=False),
        sa.Column("name", _str(length=64), nullable=False),
        sa.Column("token_sha256", _str(length=64), nullable=False, unique=True),
        sa.Column("scopes", _str(length=200), nullable=False),
        sa.Column("created_by", _str(length=300), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
    )
    op.create_table(
        "inbox_sessions",
        sa.Column("id", _str(length=64), primary_key=True),
        sa.Column("tenant_id", _str(length=64), nullable=False),
        sa.Column("name", _str(length=64), nullable=False),
        sa.Column("token_sha256", _str(length=64), nullable=False, unique=True),
        sa.Column("signin_id", _str(length=64), nullable=False),
        sa.Column("scopes", _str(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_seen_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("inbox_sessions")
    op.drop_table("inbox_signins")

"""oidc: sign-ins through the identity provider under way (state, nonce, PKCE verifier), used once

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05

``GET /inbox/login`` stores what its callback must match: the state (by its sha256), the browser that
started it (by the sha256 of a cookie), the nonce and the PKCE code verifier. The callback uses the row
once (``used_at``); the sweeper deletes rows past their end (``ix_oidc_logins_expires``).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_str = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "oidc_logins",
        sa.Column("id", _str(length=64), primary_key=True),
        sa.Column("state_sha256", _str(length=64), nullable=False, unique=True),
        sa.Column("browser_sha256", _str(length=64), nullable=False),
        sa.Column("nonce", _str(length=64), nullable=False),
        sa.Column("code_verifier", _str(length=128), nullable=False),
        sa.Column("tenant_id", _str(length=64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_oidc_logins_expires", "oidc_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_oidc_logins_expires", table_name="oidc_logins")
    op.drop_table("oidc_logins")

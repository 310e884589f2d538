"""prune: indexes for the sweeper's pruning of spent rows, and per-request kv state

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

The sweeper deletes what a finished request leaves behind once ``limits.spent_retention_seconds``
have passed: its chat button tokens, its chat message refs, its one-time links and the
connectors' state about it. Each is found by its age through an index, so a pass over a
large table reads only the rows it deletes. Connector state kept per request
(``kv_state``) names its request in the new ``request_id`` column; state that is not about
one request (a sync position, the server secret, display names) leaves it NULL and is
never pruned.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kv_state") as batch:
        batch.add_column(sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    op.create_index("ix_kv_state_request_updated", "kv_state", ["updated_at"],
                    sqlite_where=sa.text("request_id IS NOT NULL"), postgresql_where=sa.text("request_id IS NOT NULL"))
    op.create_index("ix_chat_actions_created", "chat_actions", ["created_at"])
    op.create_index("ix_message_refs_created", "message_refs", ["created_at"])
    op.create_index("ix_links_created", "links", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_links_created", table_name="links")
    op.drop_index("ix_message_refs_created", table_name="message_refs")
    op.drop_index("ix_chat_actions_created", table_name="chat_actions")
    op.drop_index("ix_kv_state_request_updated", table_name="kv_state")
    with op.batch_alter_table("kv_state") as batch:
        batch.drop_column("request_id")

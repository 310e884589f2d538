"""annotations: at most one successor per annotation

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

A change to an annotation is a new annotation naming the one it supersedes
(RFC 0056 open question 1). A unique index keeps each chain linear, so two
racing edits of one rating cannot both become current. NULLs (annotations that
supersede nothing) are distinct under a unique index on SQLite and PostgreSQL.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("annotations", schema=None) as batch_op:
        batch_op.create_index("uq_annotations_supersedes", ["supersedes"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("annotations", schema=None) as batch_op:
        batch_op.drop_index("uq_annotations_supersedes")

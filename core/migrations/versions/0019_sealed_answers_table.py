"""sealed_answers: held sensitive answers in a table of their own

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01

A sensitive answer and its wrapped key move from ``requests.response_sealed`` / ``response_key`` to
``sealed_answers``, whose rows are inserted once and deleted once. On PostgreSQL an UPDATE or DELETE
leaves the old row version in the table's file, so every answer shredded from ``requests`` stayed there,
still opening with the server secret; a small table of live answers alone is cheap to rewrite after
deletions (core/store/sealed.py), which leaves nothing of a deleted one in any file. The sweeper's two
partial indexes on ``requests.response_sealed`` go with the columns; two on the flags that say an answer is
held (sensitive, answered: it has a digest, not shredded) take their place, so its look stays a range of the rows that are due
and never touches the new table (whose rewrite then never holds the sweeper up).

What earlier versions shredded on PostgreSQL is still in the old row versions of ``requests``: only a
rewrite of that table removes it (``VACUUM FULL requests``, once, at a quiet moment: it locks the table
while it runs), which a migration cannot do (it runs in a transaction) and should not (it would hold the
busiest table locked for as long as the rewrite takes).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_HELD = sa.text("response_sealed IS NOT NULL")
# As core/models.py's HELD_ANSWER, written out: a migration stays what it was when the models change.
_HELD_ANSWER = sa.text("sensitive AND NOT response_purged AND response_digest IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "sealed_answers",
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("wrapped_key", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("request_id"),
    )
    bind = op.get_bind()
    bind.execute(sa.text(
        "INSERT INTO sealed_answers (request_id, tenant_id, sealed, wrapped_key) SELECT id, tenant_id, "
        "response_sealed, response_key FROM requests WHERE response_sealed IS NOT NULL AND response_key IS NOT NULL"))
    # PostgreSQL's DROP COLUMN leaves a live row's bytes where they are: clearing them first leaves them
    # only in dead row versions, which VACUUM may reuse (SQLite's secure_delete zeroes them).
    bind.execute(sa.text("UPDATE requests SET response_sealed = NULL, response_key = NULL "
                         "WHERE response_sealed IS NOT NULL OR response_key IS NOT NULL"))
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index("ix_requests_sealed_held")
        batch_op.drop_index("ix_requests_sealed_delivered")
        batch_op.drop_column("response_key")
        batch_op.drop_column("response_sealed")
        batch_op.create_index("ix_requests_held_resolved", ["resolved_at"], unique=False,
                              sqlite_where=_HELD_ANSWER, postgresql_where=_HELD_ANSWER)
        batch_op.create_index("ix_requests_held_delivered", ["response_delivered_at"], unique=False,
                              sqlite_where=_HELD_ANSWER, postgresql_where=_HELD_ANSWER)


def downgrade() -> None:
    with op.batch_alter_table("requests", schema=None) as batch_op:
        batch_op.drop_index("ix_requests_held_delivered")
        batch_op.drop_index("ix_requests_held_resolved")
        batch_op.add_column(sa.Column("response_sealed", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("response_key", sa.Text(), nullable=True))
        batch_op.create_index("ix_requests_sealed_held", ["resolved_at"], unique=False,
                              sqlite_where=_HELD, postgresql_where=_HELD)
        batch_op.create_index("ix_requests_sealed_delivered", ["response_delivered_at"], unique=False,
                              sqlite_where=_HELD, postgresql_where=_HELD)
    op.get_bind().execute(sa.text(
        "UPDATE requests SET response_sealed = (SELECT s.sealed FROM sealed_answers s WHERE s.request_id = requests.id), "
        "response_key = (SELECT s.wrapped_key FROM sealed_answers s WHERE s.request_id = requests.id) "
        "WHERE id IN (SELECT request_id FROM sealed_answers)"))
    op.drop_table("sealed_answers")

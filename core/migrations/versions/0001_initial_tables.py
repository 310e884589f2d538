"""initial tables

Revision ID: 0001
Revises: 
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('annotations',
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('annotation_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('event_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('node_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('rating', sa.Integer(), nullable=True),
    sa.Column('label', sa.Text(), nullable=True),
    sa.Column('correction', sa.Text(), nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('principal', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('supersedes', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('seq'),
    sa.UniqueConstraint('annotation_id')
    )
    with op.batch_alter_table('annotations', schema=None) as batch_op:
        batch_op.create_index('ix_annotations_tenant_run_seq', ['tenant_id', 'run_id', 'seq'], unique=False)

    op.create_table('api_keys',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('key_sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('scopes', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('revoked_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key_sha256')
    )
    op.create_table('chat_actions',
    sa.Column('token', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('value_json', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('token')
    )
    with op.batch_alter_table('chat_actions', schema=None) as batch_op:
        batch_op.create_index('ix_chat_actions_request', ['request_id'], unique=False)

    op.create_table('deliveries',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('target', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('ref_json', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.Column('reminded_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('request_id', 'channel', 'target', name='uq_deliveries_target')
    )
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_deliveries_tenant_request', ['tenant_id', 'request_id'], unique=False)

    op.create_table('journal',
    sa.Column('seq', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('event', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('principal', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
    sa.Column('data_json', sa.Text(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('prev_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.PrimaryKeyConstraint('seq')
    )
    with op.batch_alter_table('journal', schema=None) as batch_op:
        batch_op.create_index('ix_journal_tenant_request', ['tenant_id', 'request_id'], unique=False)

    op.create_table('kv_state',
    sa.Column('namespace', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('key', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('namespace', 'key')
    )
    op.create_table('links',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('token_sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('recipient', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('created_by', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('used_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_sha256')
    )
    with op.batch_alter_table('links', schema=None) as batch_op:
        batch_op.create_index('ix_links_request', ['request_id'], unique=False)

    op.create_table('message_refs',
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('message_key', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('request_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('channel', 'message_key')
    )
    with op.batch_alter_table('message_refs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_message_refs_request_id'), ['request_id'], unique=False)

    op.create_table('requests',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tenant_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('unique_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('body_sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('message_for_user', sa.Text(), nullable=False),
    sa.Column('form_schema_json', sa.Text(), nullable=True),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('sensitive', sa.Boolean(), nullable=False),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('channels_json', sa.Text(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('created_by', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.Column('response_json', sa.Text(), nullable=True),
    sa.Column('response_sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('response_purged', sa.Boolean(), nullable=False),
    sa.Column('resolved_by', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True),
    sa.Column('resolved_via', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
    sa.Column('resolved_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'unique_id', name='uq_requests_tenant_unique_id')
    )
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.create_index('ix_requests_status_expires', ['status', 'expires_at'], unique=False)
        batch_op.create_index('ix_requests_tenant_run', ['tenant_id', 'run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.drop_index('ix_requests_tenant_run')
        batch_op.drop_index('ix_requests_status_expires')

    op.drop_table('requests')
    with op.batch_alter_table('message_refs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_message_refs_request_id'))

    op.drop_table('message_refs')
    with op.batch_alter_table('links', schema=None) as batch_op:
        batch_op.drop_index('ix_links_request')

    op.drop_table('links')
    op.drop_table('kv_state')
    with op.batch_alter_table('journal', schema=None) as batch_op:
        batch_op.drop_index('ix_journal_tenant_request')

    op.drop_table('journal')
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_tenant_request')

    op.drop_table('deliveries')
    with op.batch_alter_table('chat_actions', schema=None) as batch_op:
        batch_op.drop_index('ix_chat_actions_request')

    op.drop_table('chat_actions')
    op.drop_table('api_keys')
    with op.batch_alter_table('annotations', schema=None) as batch_op:
        batch_op.drop_index('ix_annotations_tenant_run_seq')

    op.drop_table('annotations')

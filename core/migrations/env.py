"""Alembic environment: migrations run on a connection the store hands over (async engines via run_sync)."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import handraise.core.models  # noqa: F401  (registers the tables on SQLModel.metadata)

target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine

        engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
        with engine.begin() as conn:
            context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()

"""The Alembic migrations build exactly the tables core/models.py declares, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import handraise.core.models  # noqa: F401  (registers the tables)
from handraise.core.store import Store


async def test_migrations_match_the_models(storage_url: str) -> None:
    store = Store(url=storage_url)
    await store.open()  # applies the migrations
    try:
        def diff(sync_conn: object) -> list[object]:
            return compare_metadata(MigrationContext.configure(sync_conn), SQLModel.metadata)

        async with store.reader() as conn:
            assert await conn.run(diff) == []
    finally:
        await store.close()

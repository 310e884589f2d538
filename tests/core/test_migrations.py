"""The Alembic migrations build exactly the tables core/models.py declares, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import handraise.core.migrations
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


def test_migrations_form_one_numbered_chain() -> None:
    """Each file NNNN_*.py is revision NNNN and revises NNNN-1: two branches that both add a migration
    must renumber one of them on rebase, and this names the clash before any store fails to open."""
    versions = Path(handraise.core.migrations.__file__).parent / "versions"
    files = sorted(p for p in versions.glob("[0-9][0-9][0-9][0-9]_*.py"))
    numbers = [p.name[:4] for p in files]
    assert len(numbers) == len(set(numbers)), f"two migrations share a number: {numbers}"
    for position, path in enumerate(files, start=1):
        text = path.read_text()
        revision = re.search(r"^revision = ['\"](\w+)['\"]", text, re.M)
        down = re.search(r"^down_revision = (None|['\"](\w+)['\"])", text, re.M)
        assert revision and down, path.name
        assert revision.group(1) == f"{position:04d}" == path.name[:4], path.name
        expected_down = None if position == 1 else f"{position - 1:04d}"
        assert down.group(2) == expected_down, path.name

"""A migrated SQLite template per test process: a test's new database starts as a copy of it.

Running every Alembic migration on a new file costs ~0.2 s, paid by thousands of tests. The template
is built once per migration head by the real ``Store.open`` (so by the real migration code), and each
new database is a copy made with SQLite's backup API; ``Store.open`` then finds it at head and runs
nothing. Tests of the migrations themselves open their stores directly and keep migrating for real.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
from contextlib import closing, suppress
from pathlib import Path

from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from handraise.core.store import Store


def migration_head() -> str:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", "handraise.core:migrations")
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None, "the migrations have no head"
    return head


class SqliteTemplates:
    """Migrated template files in one temporary folder, one per migration head."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._built: dict[str, Path] = {}

    async def template(self) -> Path:
        head = migration_head()
        path = self._built.get(head)
        if path is None:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="handraise-template-"))
                atexit.register(shutil.rmtree, self._folder, True)
            path = self._folder / f"migrated-{head}.db"
            store = Store(url=f"sqlite:///{path}")  # no secret: the copy's first open records its own
            await store.open()
            await store.close()
            self._built[head] = path
        return path

    async def seed(self, url: str) -> None:
        """Start the SQLite database at ``url`` as a copy of the template, unless it already exists.

        Anything else (PostgreSQL, in-memory, a file already there, a folder that cannot be written)
        is left to the store, which reports it as it would without the template.
        """
        target = sqlite_file(url)
        if target is None or target.exists():
            return
        template = await self.template()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(target)) as copy:
                source.backup(copy)
        except (OSError, sqlite3.Error):
            with suppress(OSError):
                target.unlink(missing_ok=True)


def sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite://`` URL names, or None for any other URL or an in-memory database."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return None
    database = parsed.database
    return Path(database) if database and database != ":memory:" else None


# One per test process (each xdist worker has its own): the templates outlive every test.
templates = SqliteTemplates()

"""``handraise doctor``: check a configuration end to end, one finding per line, each with its fix.

It changes nothing: it opens no store for writing (no migration runs), joins no
room and sends no message. Checks: the config and every enabled connector's
section; the store is reachable, new enough and migrated to the head; each
enabled connector's credentials work (its ``check``); ``public_url`` reaches a
Handraise server; the server secret lives apart from the database and only its owner
reads it (a warning otherwise); every tenant has an ``ask`` and an ``answer`` key.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from handraise.core.config import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, whether it passed, and (when not) the fix. A warning
    passes (the deployment works) but says what to change."""

    ok: bool
    subject: str
    message: str
    warning: bool = False

    def line(self) -> str:
        return f"{'WARN' if self.warning else 'ok  ' if self.ok else 'FAIL'}  {self.subject}: {self.message}"


def passed(subject: str, message: str) -> Finding:
    return Finding(True, subject, message)


def failed(subject: str, message: str) -> Finding:
    return Finding(False, subject, message)


def warned(subject: str, message: str) -> Finding:
    return Finding(True, subject, message, warning=True)


def migrations_head() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", "handraise.core:migrations")
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert head is not None
    return head


async def check_store(settings: Settings) -> tuple[list[Finding], list[dict[str, Any]] | None]:
    """The store's findings, and its stored API keys when it could be read (for the key check)."""
    from handraise.core.app import check_postgres_version
    from handraise.core.commands.base import store_description
    from handraise.core.errors import UnavailableError
    from handraise.core.store import Store

    store = Store(url=settings.storage.url)
    where = store_description(settings)
    head = migrations_head()
    if store.is_postgres:
        import asyncpg

        try:
            major, minor = await check_postgres_version(store.asyncpg_dsn())
        except UnavailableError as e:
            return [failed("store", f"{e.message}; upgrade the server or point [storage] url elsewhere")], None
        except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as e:
            return [failed("store", f"{where}: cannot connect ({_reason(e)}); check [storage] url "
                                    "(HANDRAISE_STORAGE__URL) and that PostgreSQL runs")], None
        conn = await asyncpg.connect(store.asyncpg_dsn(), timeout=10)
        try:
            try:
                revision = await conn.fetchval("SELECT version_num FROM alembic_version")
            except asyncpg.UndefinedTableError:
                revision = None
            keys = [dict(r) for r in await conn.fetch("SELECT * FROM api_keys")] if revision else None
            budget = await check_connection_budget(conn, settings)
        finally:
            await conn.close()
        version = f"PostgreSQL {major}.{minor} (13+ needed)"
    else:
        path = store.sqlite_path
        if path is None or not path.exists():
            return [failed("store", f"{where} does not exist yet; handraise serve creates it (and every "
                                    "command uses the same file)")], None
        try:
            revision, keys = await asyncio.to_thread(_sqlite_revision_and_keys, path)
        except sqlite3.Error as e:
            return [failed("store", f"{where}: cannot be read ({e}); check [storage] url and the file")], None
        version = f"SQLite {sqlite3.sqlite_version}"
    if revision is None:
        return [failed("store", f"{where} has no tables yet; start handraise serve once to migrate it")], None
    if revision != head:
        return [failed("store", f"{where} is at migration {revision}, this version needs {head}; start handraise "
                                "serve once (it migrates) or check that every instance runs the same version")], keys
    findings = [passed("store", f"{where} ({version}, migrated to {head})")]
    return (findings + [budget] if store.is_postgres else findings), keys


async def check_connection_budget(conn: Any, settings: Settings) -> Finding:
    """Instances running now (at least this one to come) × the connections each may open, against what
    the server allows ordinary roles: past it, connections are refused under load."""
    from handraise.core.store.store import APPLICATION_NAME, connection_budget

    allowed = int(await conn.fetchval("SHOW max_connections")) - int(
        await conn.fetchval("SHOW superuser_reserved_connections"))
    running = await conn.fetchval("SELECT count(DISTINCT application_name) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND application_name LIKE $1", APPLICATION_NAME + "/%")
    instances = max(int(running), 1)
    each = connection_budget(settings.storage.pool_size)
    if instances * each > allowed:
        return failed("connections", f"{instances} instance(s) × up to {each} connections each ([storage] "
                                     f"pool_size = {settings.storage.pool_size}) exceed the {allowed} the server "
                                     "allows; lower pool_size or raise PostgreSQL's max_connections")
    return passed("connections", f"{instances} instance(s) × up to {each} connections each fit the {allowed} the "
                                 f"server allows (room for {allowed // each} instances)")


def _sqlite_revision_and_keys(path: Path) -> tuple[str | None, list[dict[str, Any]] | None]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError:
            return None, None
        revision = row[0] if row else None
        keys = [dict(r) for r in conn.execute("SELECT * FROM api_keys")] if revision else None
        return revision, keys
    finally:
        conn.close()


def check_keys(settings: Settings, stored: list[dict[str, Any]] | None) -> list[Finding]:
    findings = []
    for tenant in settings.tenants:
        scopes: set[str] = {s for key in tenant.keys for s in key.scopes}
        for row in stored or []:
            if row["tenant_id"] == tenant.id and not row["revoked_at"]:
                scopes.update(row["scopes"].split(","))
        flag = "" if len(settings.tenants) == 1 else f" --tenant {tenant.id}"
        missing = [s for s in ("ask", "answer") if s not in scopes]
        if missing:
            fixes = " and ".join(f"handraise keys create{flag} --scopes {'answer,read' if s == 'answer' else s}"
                                 for s in missing)
            findings.append(failed(f"tenant {tenant.id}", f"no {' and no '.join(missing)} key; make one: {fixes}"))
        else:
            findings.append(passed(f"tenant {tenant.id}", "has an ask key and an answer key"))
    return findings


def check_secret(settings: Settings) -> list[Finding]:
    """Where the server secret lives: a warning when its file sits beside the SQLite file (whoever copies that
    folder can check guesses of sensitive answers against their digests) or others may read it."""
    from handraise.core.serversecret import default_secret_path, secret_location, shares_folder_with_database

    location = secret_location(settings)
    if location is None:
        where = "HANDRAISE_SECURITY__SECRET" if "HANDRAISE_SECURITY__SECRET" in os.environ else "[security] secret"
        return [passed("server secret", f"given by {where}")]
    path = location.path
    if not path.exists():
        return [passed("server secret", f"{path} does not exist yet; handraise serve creates it (0600)")]
    findings = []
    if shares_folder_with_database(path, settings):
        target = default_secret_path()
        fix = (f"move it: mkdir -p -m 700 {target.parent} && mv {path} {target}" if location.legacy
               and not target.exists() else "move it to a folder of its own and set [security] secret_file to it")
        findings.append(warned("server secret", f"{path} sits beside the database: whoever copies that folder "
                                                f"can check guesses of sensitive answers against their digests; {fix}"))
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        findings.append(warned("server secret", f"{path} is readable by group or others (mode {mode:04o}); "
                                                f"chmod 600 {path}"))
    return findings or [passed("server secret", f"{path} (mode {mode:04o}, apart from the database)")]


async def check_public_url(settings: Settings, http: aiohttp.ClientSession) -> Finding:
    server = settings.server.model_copy()
    server.served_at(server.host, server.port)
    url = server.public_url
    fix = ("start handraise serve, or set [server] public_url to the address humans reach"
           if not settings.server.public_url_set else "check [server] public_url and the proxy in front")
    try:
        async with http.get(f"{url}/openapi.json", timeout=aiohttp.ClientTimeout(total=10)) as resp:
            title = (await resp.json(content_type=None)).get("info", {}).get("title") if resp.status == 200 else None
            if title != "Handraise":
                return failed("public_url", f"{url} answers, but not as Handraise (HTTP {resp.status}); {fix}")
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError) as e:
        return failed("public_url", f"{url} does not answer ({_reason(e)}); {fix}")
    return passed("public_url", f"{url} reaches a Handraise server")


async def check_connectors(settings: Settings, http: aiohttp.ClientSession) -> list[Finding]:
    from handraise.core.channels import load_enabled
    from handraise.core.connectors import Connector
    from handraise.core.errors import ConfigError

    try:
        classes = load_enabled(settings)
    except ConfigError as e:
        return [failed("connectors", e.message)]
    findings = []
    for cls in classes:
        if not issubclass(cls, Connector):
            continue  # a channel that posts nowhere (the hosted forms) has no credentials to try
        try:
            connector_settings = cls.load_settings(settings)
        except ConfigError as e:
            findings.append(failed(cls.name, e.message))
            continue
        try:
            problems = await cls.check(connector_settings, app_settings=settings, http=http)
        except Exception as e:  # a check must report, never crash the report
            problems = [f"the check itself failed ({_reason(e)})"]
        if problems is None:
            findings.append(passed(cls.name, "configured (this connector has no live check)"))
        elif problems:
            findings.extend(failed(cls.name, p) for p in problems)
        else:
            findings.append(passed(cls.name, "credentials accepted, targets reachable"))
    return findings


async def run(settings: Settings) -> list[Finding]:
    findings = [passed("config", "loads, every section valid" if settings.source is None
                       else f"{settings.source} loads, every section valid")]
    async with aiohttp.ClientSession() as http:
        store_findings, keys = await check_store(settings)
        findings += store_findings
        findings += await check_connectors(settings, http)
        findings.append(await check_public_url(settings, http))
    findings += check_secret(settings)
    # Keys may live in the config alone; a store that could not be read has failed above already.
    findings += check_keys(settings, keys or [])
    return findings


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__

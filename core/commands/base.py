"""What every subcommand shares: its settings, its one-line messages, the exit codes, the store it opens."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from handraise.core.config import Settings, load_settings
from handraise.core.errors import ConfigError

EXIT_ANSWERED, EXIT_ERROR, EXIT_EXPIRED, EXIT_CANCELLED, EXIT_USAGE = 0, 1, 2, 3, 64


def settings_of(args: argparse.Namespace) -> Settings:
    path = args.config or os.environ.get("HANDRAISE_CONFIG")
    return load_settings(path)


def say(line: str) -> None:
    print(f"handraise: {line}", file=sys.stderr, flush=True)


def store_description(settings: Settings) -> str:
    """The store as printed by every command: the SQLite file's absolute path, or the URL without its password."""
    url = settings.storage.url
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///"):].partition("?")[0]
    return _safe_url(url)


def _safe_url(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]+@", r"//\1:***@", url)


def tenant_arg(settings: Settings, given: str | None) -> str:
    """``--tenant``, or the only tenant configured; ConfigError naming the choices otherwise."""
    known = [t.id for t in settings.tenants]
    tenant = given if given is not None else known[0] if len(known) == 1 else None
    if tenant is None:
        raise ConfigError(f"--tenant: name the tenant, several are configured ({', '.join(known)})")
    if settings.tenant(tenant) is None:
        raise ConfigError(f"--tenant {tenant!r} is not configured (tenants: {', '.join(known)})")
    return tenant


def duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


async def with_store(settings: Settings, fn: Any) -> Any:
    from handraise.core.app import open_store

    store = await open_store(settings)
    try:
        return await fn(store)
    finally:
        await store.close()

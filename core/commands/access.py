"""Access made on the store itself, no server needed: API keys (create, list, revoke) and inbox sign-in links."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from typing import Any

from handraise.core.commands.base import (
    EXIT_ERROR,
    duration,
    say,
    settings_of,
    store_description,
    tenant_arg,
    with_store,
)
from handraise.core.config import ALL_SCOPES, hash_key, scopes_problem
from handraise.core.errors import ConfigError, HandraiseError


def cmd_inbox_link(args: argparse.Namespace) -> int:
    """A one-time sign-in link to the operator inbox, made on the server's own store (no server needed)."""
    from handraise.core.inbox import InboxAccess

    settings = settings_of(args)
    tenant = tenant_arg(settings, args.tenant)
    # The link names the server as humans reach it: public_url, else the host and port served.
    settings.server.served_at(settings.server.host, settings.server.port)
    try:
        from handraise.core.inbox import check_name

        name = check_name(args.name)
    except HandraiseError as e:
        raise ConfigError(f"--name: {e.fields[0]['message'] if e.fields else e.message}") from None

    async def mint(store: Any) -> Any:
        return await InboxAccess(settings=settings, store=store).mint(tenant_id=tenant, name=name,
                                                                     created_by="cli:inbox-link")

    minted = asyncio.run(with_store(settings, mint))
    print(minted.url)
    say(f"a sign-in link to the inbox of {tenant} as operator:{name}: it works once, within "
         f"{duration(settings.inbox.signin_link_seconds)}")
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    tenant = tenant_arg(settings, args.tenant)
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    bad = [s for s in scopes if s not in ALL_SCOPES]
    if bad or not scopes:
        raise ConfigError(f"--scopes must be among {', '.join(ALL_SCOPES)} (got {args.scopes!r})")
    problem = scopes_problem(scopes)
    if problem:
        raise ConfigError(f"--scopes: {problem}")
    key_id = args.id or f"key-{secrets.token_hex(4)}"
    key = f"hr_{secrets.token_urlsafe(32)}"

    async def insert(store: Any) -> None:
        if any(row["id"] == key_id for row in await store.list_api_keys()):
            raise ConfigError(f"--id {key_id!r}: a stored key has this id already; choose another")
        await store.insert_api_key({"id": key_id, "tenant_id": tenant, "key_sha256": hash_key(key),
                                    "scopes": ",".join(scopes), "created_at": time.time(), "revoked_at": None})

    asyncio.run(with_store(settings, insert))
    print(f"key id:  {key_id}\ntenant:  {tenant}\nscopes:  {','.join(scopes)}\nkey:     {key}")
    say(f"store: {store_description(settings)}; the key is shown once, only its sha256 is kept")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    for tenant in settings.tenants:
        for key in tenant.keys:
            print(f"{key.id}\t{tenant.id}\t{','.join(key.scopes)}\tconfig")
    rows = asyncio.run(with_store(settings, lambda s: s.list_api_keys()))
    say(f"store: {store_description(settings)}")
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']}\t{row['tenant_id']}\t{row['scopes']}\t{state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    done = asyncio.run(with_store(settings, lambda s: s.revoke_api_key(args.id, now=time.time())))
    if not done:
        say(f"no active stored key {args.id!r} in {store_description(settings)} (handraise keys list shows them)")
        return EXIT_ERROR
    print(f"revoked {args.id}")
    return 0

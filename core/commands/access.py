"""Access made on the store itself, no server needed: API keys (create, list, revoke) and inbox sign-in links."""

from __future__ import annotations

import argparse
import asyncio
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
from handraise.core.errors import ConfigError, HandraiseError, PersonNotBoundError


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

    try:
        minted = asyncio.run(with_store(settings, mint))
    except PersonNotBoundError:
        raise ConfigError(f"--name {name!r}: that is one of {tenant}'s people, and the CLI's sign-in is an "
                          "operator's, nobody in particular; give another name, or have them signed in with their "
                          "own key or on their own channel (POST /v1/inbox/links with person and deliver)") from None
    print(minted.url)
    say(f"a sign-in link to the inbox of {tenant} as operator:{name}: it works once, within "
         f"{duration(settings.inbox.signin_link_seconds)}")
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    from handraise.core.apikeys import make_key

    settings = settings_of(args)
    tenant = tenant_arg(settings, args.tenant)
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]

    async def insert(store: Any) -> Any:
        return await make_key(store, settings, tenant_id=tenant, scopes=scopes, key_id=args.id, person=args.person,
                              made_by="cli:keys-create", now=time.time())

    try:
        made = asyncio.run(with_store(settings, insert))
    except HandraiseError as e:
        field = e.fields[0]["field"] if e.fields else "id"
        raise ConfigError(f"--{field}: {e.fields[0]['message'] if e.fields else e.message}") from None
    print(f"key id:  {made.id}\ntenant:  {tenant}\nscopes:  {','.join(made.scopes)}"
          + (f"\nperson:  {made.person} (the key acts as person:{made.person}; hand it to them alone)"
             if made.person else "") + f"\nkey:     {made.key}")
    say(f"store: {store_description(settings)}; the key is shown once, only its sha256 is kept")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    for tenant in settings.tenants:
        for key in tenant.keys:
            print(f"{key.id}\t{tenant.id}\t{','.join(key.scopes)}\tconfig\t{key.person or '-'}")
    rows = asyncio.run(with_store(settings, lambda s: s.list_api_keys()))
    say(f"store: {store_description(settings)}")
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']}\t{row['tenant_id']}\t{row['scopes']}\t{state}\t{row.get('person') or '-'}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    done = asyncio.run(with_store(settings, lambda s: s.revoke_api_key(args.id, now=time.time())))
    if not done:
        say(f"no active stored key {args.id!r} in {store_description(settings)} (handraise keys list shows them)")
        return EXIT_ERROR
    print(f"revoked {args.id}")
    return 0

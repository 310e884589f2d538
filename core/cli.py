"""The ``handraise`` command: serve, ask, keys, journal. The only place that prints and exits."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from handraise.core.config import ALL_SCOPES, Settings, hash_key, load_settings, scopes_problem
from handraise.core.errors import ConfigError, HandraiseError

EXIT_ANSWERED, EXIT_ERROR, EXIT_EXPIRED, EXIT_CANCELLED, EXIT_USAGE = 0, 1, 2, 3, 64


def _settings(args: argparse.Namespace) -> Settings:
    path = args.config or os.environ.get("HANDRAISE_CONFIG")
    return load_settings(path)


# -- serve ---------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web
    from aiohttp.web_log import AccessLogger

    from handraise.core.app import create_app
    from handraise.core.logs import configure_logging

    settings = _settings(args)
    if args.host:
        settings.server.host = args.host
    if args.port is not None:
        settings.server.port = args.port
    configure_logging(settings.logging)

    class TokenSafeAccessLogger(AccessLogger):
        # One-time link tokens travel in paths: never write them to the access log.
        def log(self, request: Any, response: Any, time: float) -> None:  # noqa: A002
            if request is not None and request.path.startswith(("/f/", "/bots/")):
                request = request.clone(rel_url=re.sub(r"^/f/[^/?]+", "/f/<token>", request.rel_url.path))
            super().log(request, response, time)

    async def run() -> None:
        from handraise.core.appkeys import KEYRING, STORE

        app = await create_app(settings)
        runner = web.AppRunner(app, access_log_class=TokenSafeAccessLogger, shutdown_timeout=5)
        await runner.setup()  # runs the cleanup contexts' start: store, listener, sweeper, connectors
        try:
            site = web.TCPSite(runner, settings.server.host, settings.server.port)
            await site.start()
            # Announced only once the socket listens, so "serving" is true when read.
            stored = await app[STORE].list_api_keys()
            host, port = runner.addresses[0][:2] if runner.addresses else (settings.server.host, settings.server.port)
            where = f"http://{host}:{port}"
            print(f"handraise: serving on {where} (storage: {_safe_url(settings.storage.url)})", flush=True)
            if app[KEYRING].empty and not stored:
                tenant = settings.tenants[0].id
                print("handraise: no API keys yet. Create one for an agent and one for a human operator:\n"
                      f"  handraise keys create --tenant {tenant} --scopes ask\n"
                      f"  handraise keys create --tenant {tenant} --scopes answer,read", flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(run())
    return 0


def _safe_url(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]+@", r"//\1:***@", url)


# -- keys ----------------------------------------------------------------------


async def _with_store(settings: Settings, fn: Any) -> Any:
    from handraise.core.store import Store

    store = Store(url=settings.storage.url)
    await store.open()
    try:
        return await fn(store)
    finally:
        await store.close()


def cmd_keys_create(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.tenant(args.tenant) is None:
        known = ", ".join(t.id for t in settings.tenants)
        raise ConfigError(f"--tenant {args.tenant!r} is not configured (tenants: {known})")
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
        await store.insert_api_key({"id": key_id, "tenant_id": args.tenant, "key_sha256": hash_key(key),
                                    "scopes": ",".join(scopes), "created_at": time.time(), "revoked_at": None})

    asyncio.run(_with_store(settings, insert))
    print(f"key id:  {key_id}\ntenant:  {args.tenant}\nscopes:  {','.join(scopes)}\nkey:     {key}")
    print("The key is shown once; only its sha256 is stored.", file=sys.stderr)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    for tenant in settings.tenants:
        for key in tenant.keys:
            print(f"{key.id}\t{tenant.id}\t{','.join(key.scopes)}\tconfig")
    rows = asyncio.run(_with_store(settings, lambda s: s.list_api_keys()))
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']}\t{row['tenant_id']}\t{row['scopes']}\t{state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = _settings(args)
    done = asyncio.run(_with_store(settings, lambda s: s.revoke_api_key(args.id, now=time.time())))
    if not done:
        print(f"handraise: no active stored key {args.id!r}", file=sys.stderr)
        return EXIT_ERROR
    print(f"revoked {args.id}")
    return 0


# -- journal -------------------------------------------------------------------


def cmd_journal_verify(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def verify(store: Any) -> tuple[list[str], int]:
        problems = await store.verify_journal()
        head = await store.get_state("journal", "head")
        return problems, json.loads(head)["seq"] if head else 0

    problems, count = asyncio.run(_with_store(settings, verify))
    if problems:
        for problem in problems[:50]:
            print(f"journal: {problem}", file=sys.stderr)
        print(f"journal: BROKEN ({len(problems)} problem(s))", file=sys.stderr)
        return EXIT_ERROR
    print(f"journal: intact ({count} entries)")
    return 0


# -- ask -----------------------------------------------------------------------


def cmd_ask(args: argparse.Namespace) -> int:
    import aiohttp

    key = args.key or os.environ.get("HANDRAISE_KEY")
    if not key:
        raise ConfigError("ask needs a key with the ask scope: --key or HANDRAISE_KEY")
    body: dict[str, Any] = {
        "unique_id": args.unique_id or f"cli-{uuid.uuid4()}",
        "message_for_user": args.message,
        "timeout_seconds": args.timeout,
        "sensitive": args.sensitive,
    }
    if args.approval:
        body["kind"] = "approval"
    if args.schema:
        try:
            body["schema"] = json.loads(Path(args.schema).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"--schema {args.schema}: {e}") from None
    if args.run_id:
        body["run_id"] = args.run_id
    if args.channel:
        body["channels"] = args.channel
    url = (args.url or os.environ.get("HANDRAISE_URL") or "http://127.0.0.1:8080").rstrip("/")

    async def ask() -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with aiohttp.ClientSession(timeout=timeout, headers={"Authorization": f"Bearer {key}"}) as http:
            async with http.post(f"{url}/v1/requests", json=body) as resp:
                data = await resp.json(content_type=None)
                if resp.status >= 400:
                    raise _ApiError(data)
            while data["status"] == "pending":
                async with http.get(f"{url}/v1/requests/{data['id']}/wait", params={"timeout": "60"}) as resp:
                    data = await resp.json(content_type=None)
                    if resp.status >= 400:
                        raise _ApiError(data)
            return data

    try:
        result = asyncio.run(ask())
    except _ApiError as e:
        print(json.dumps(e.body), file=sys.stderr)
        return EXIT_ERROR
    except aiohttp.ClientError as e:
        print(f"handraise: cannot reach {url}: {e}", file=sys.stderr)
        return EXIT_ERROR
    if result["status"] == "answered":
        print(json.dumps(result.get("response"), ensure_ascii=False))
        return EXIT_ANSWERED
    print(json.dumps({"status": result["status"], "id": result["id"]}), file=sys.stderr)
    return EXIT_EXPIRED if result["status"] == "expired" else EXIT_CANCELLED


class _ApiError(Exception):
    def __init__(self, body: Any) -> None:
        super().__init__("api error")
        self.body = body


# -- mcp -----------------------------------------------------------------------


def cmd_mcp(args: argparse.Namespace) -> int:
    from handraise.core.mcp.stdio import serve_stdio

    if not 0 < args.progress_interval <= 15:
        raise ConfigError("--progress-interval must be more than 0 and at most 15 seconds")
    try:
        asyncio.run(serve_stdio(url=args.url, key=args.key, interval=args.progress_interval))
    except ValueError as e:  # no key
        raise ConfigError(str(e)) from None
    return 0


# -- entry point ---------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="handraise", description="Ask a human; wait for a validated answer.")
    parser.add_argument("--config", help="TOML config file (default: $HANDRAISE_CONFIG, else the embedded default)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP API and every enabled connector")
    serve.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(fn=cmd_serve)

    ask = sub.add_parser("ask", help="ask a human and print the answer as JSON (exit 0 answered, 2 expired, 3 cancelled)")
    ask.add_argument("message")
    ask.add_argument("--schema", help="JSON schema file for the answer")
    ask.add_argument("--timeout", type=int, default=300, help="seconds (default 300)")
    ask.add_argument("--sensitive", action="store_true")
    ask.add_argument("--approval", action="store_true", help="ask for approve/reject")
    ask.add_argument("--unique-id")
    ask.add_argument("--run-id")
    ask.add_argument("--channel", action="append")
    ask.add_argument("--url", help="server base URL (default $HANDRAISE_URL or http://127.0.0.1:8080)")
    ask.add_argument("--key", help="API key with the ask scope (default $HANDRAISE_KEY)")
    ask.set_defaults(fn=cmd_ask)

    keys = sub.add_parser("keys", help="manage stored API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="create a key; prints it once, stores only its hash")
    create.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    create.add_argument("--tenant", required=True)
    create.add_argument("--scopes", required=True, help="comma-separated: ask, answer, read, annotate, forward")
    create.add_argument("--id", help="key id (default: generated)")
    create.set_defaults(fn=cmd_keys_create)
    listing = keys.add_parser("list", help="list key ids and scopes")
    listing.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    listing.set_defaults(fn=cmd_keys_list)
    revoke = keys.add_parser("revoke", help="revoke a stored key")
    revoke.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    revoke.add_argument("id")
    revoke.set_defaults(fn=cmd_keys_revoke)

    mcp = sub.add_parser("mcp", help="serve the MCP tools over stdio, reaching the server at $HANDRAISE_URL")
    mcp.add_argument("--url", help="server base URL (default $HANDRAISE_URL or http://127.0.0.1:8080)")
    mcp.add_argument("--key", help="API key with the ask scope (default $HANDRAISE_KEY)")
    mcp.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress notes")
    mcp.set_defaults(fn=cmd_mcp)

    journal = sub.add_parser("journal", help="the audit journal").add_subparsers(dest="journal_command", required=True)
    verify = journal.add_parser("verify", help="check the hash chain; exit 1 when broken")
    verify.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    verify.set_defaults(fn=cmd_journal_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except ConfigError as e:
        print(f"handraise: config error: {e.message}", file=sys.stderr)
        return EXIT_USAGE
    except HandraiseError as e:
        print(f"handraise: {e.message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``handraise`` command: serve, ask, answer, link, inbox-link, keys, journal, doctor. The only place that prints and exits."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import re
import secrets
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from handraise import __version__
from handraise.core.config import ALL_SCOPES, Settings, hash_key, load_settings, scopes_problem
from handraise.core.errors import ConfigError, HandraiseError

EXIT_ANSWERED, EXIT_ERROR, EXIT_EXPIRED, EXIT_CANCELLED, EXIT_USAGE = 0, 1, 2, 3, 64


def _settings(args: argparse.Namespace) -> Settings:
    path = args.config or os.environ.get("HANDRAISE_CONFIG")
    return load_settings(path)


def _say(line: str) -> None:
    print(f"handraise: {line}", file=sys.stderr, flush=True)


def store_description(settings: Settings) -> str:
    """The store as printed by every command: the SQLite file's absolute path, or the URL without its password."""
    url = settings.storage.url
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///"):].partition("?")[0]
    return _safe_url(url)


def _safe_url(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]+@", r"//\1:***@", url)


# -- serve ---------------------------------------------------------------------


def _bind(settings: Settings) -> socket.socket:
    """Listen before anything opens: a busy port is one line, not a half-started server."""
    host, port = settings.server.host, settings.server.port
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"server.host {host!r}: not an address of this machine ({e.strerror}); "
                          "set --host or [server] host (HANDRAISE_SERVER__HOST)") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(1024)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"server.port {port} on {host} is in use (another handraise serve?); "
                              "choose another with --port or [server] port (HANDRAISE_SERVER__PORT)") from None
        if e.errno == errno.EACCES:
            raise ConfigError(f"server.port {port}: not allowed for this user; use a port above 1023 "
                              "with --port or [server] port (HANDRAISE_SERVER__PORT)") from None
        raise ConfigError(f"server.host {host!r}, port {port}: cannot listen there ({e.strerror}); "
                          "set --host/--port or [server] host/port") from None
    sock.setblocking(False)
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from handraise.core.app import create_app
    from handraise.core.logs import AccessLog, configure_logging

    settings = _settings(args)
    if args.host:
        settings.server.host = args.host
    if args.port is not None:
        settings.server.port = args.port
    configure_logging(settings.logging)
    sock = _bind(settings)
    host, port = sock.getsockname()[:2]
    settings.server.served_at(settings.server.host, port)

    async def run() -> None:
        from handraise.core.appkeys import INBOX, KEYRING, STORE

        app = await create_app(settings)
        runner = web.AppRunner(app, access_log_class=AccessLog, shutdown_timeout=5)
        try:
            await runner.setup()  # runs the cleanup contexts' start: store, listener, sweeper, connectors
            await web.SockSite(runner, sock).start()
            # Announced only once the socket listens, so "serving" is true when read.
            stored = await app[STORE].list_api_keys()
            where = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
            print(f"handraise {__version__}: serving on {where}", flush=True)
            print(f"  store:      {store_description(settings)}", flush=True)
            print(f"  public_url: {settings.server.public_url}"
                  + ("" if settings.server.public_url_set else
                     "  (the address served; set [server] public_url to the one humans reach)"), flush=True)
            if settings.source is None:
                # The embedded default: a sign-in link for its one tenant, so a first question shows up there.
                minted = await app[INBOX].mint(tenant_id=settings.tenants[0].id, name="operator",
                                               created_by="cli:serve")
                print(f"  inbox:      {minted.url}", flush=True)
                print(f"              (sign-in link: works once, within {_duration(settings.inbox.signin_link_seconds)}; "
                      "handraise inbox-link makes more)", flush=True)
            if app[KEYRING].empty and not stored:
                for line in first_run_hint(settings):
                    print(line, flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(run())
    finally:
        sock.close()
    return 0


def first_run_hint(settings: Settings) -> list[str]:
    """What a new user does next: keys, a first question, and where it shows up (the inbox)."""
    tenant = settings.tenants[0].id
    flag = "" if len(settings.tenants) == 1 else f" --tenant {tenant}"
    return ["handraise: no API keys yet. Create one for an agent and one for a human operator:",
            f"  handraise keys create{flag} --scopes ask",
            f"  handraise keys create{flag} --scopes answer,read",
            "then ask a question: HANDRAISE_KEY=<the ask key> handraise ask \"Your question?\"",
            "and answer it in the inbox: open the sign-in link above, or make one with "
            f"handraise inbox-link --tenant {tenant} --name <your name>"]


def _tenant_arg(settings: Settings, given: str | None) -> str:
    """``--tenant``, or the only tenant configured; ConfigError naming the choices otherwise."""
    known = [t.id for t in settings.tenants]
    tenant = given if given is not None else known[0] if len(known) == 1 else None
    if tenant is None:
        raise ConfigError(f"--tenant: name the tenant, several are configured ({', '.join(known)})")
    if settings.tenant(tenant) is None:
        raise ConfigError(f"--tenant {tenant!r} is not configured (tenants: {', '.join(known)})")
    return tenant


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def cmd_inbox_link(args: argparse.Namespace) -> int:
    """A one-time sign-in link to the operator inbox, made on the server's own store (no server needed)."""
    from handraise.core.inbox import InboxAccess

    settings = _settings(args)
    tenant = _tenant_arg(settings, args.tenant)
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

    minted = asyncio.run(_with_store(settings, mint))
    print(minted.url)
    _say(f"a sign-in link to the inbox of {tenant} as operator:{name}: it works once, within "
         f"{_duration(settings.inbox.signin_link_seconds)}")
    return 0


# -- keys ----------------------------------------------------------------------


async def _with_store(settings: Settings, fn: Any) -> Any:
    from handraise.core.app import open_store

    store = await open_store(settings)
    try:
        return await fn(store)
    finally:
        await store.close()


def cmd_keys_create(args: argparse.Namespace) -> int:
    settings = _settings(args)
    tenant = _tenant_arg(settings, args.tenant)
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

    asyncio.run(_with_store(settings, insert))
    print(f"key id:  {key_id}\ntenant:  {tenant}\nscopes:  {','.join(scopes)}\nkey:     {key}")
    _say(f"store: {store_description(settings)}; the key is shown once, only its sha256 is kept")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    for tenant in settings.tenants:
        for key in tenant.keys:
            print(f"{key.id}\t{tenant.id}\t{','.join(key.scopes)}\tconfig")
    rows = asyncio.run(_with_store(settings, lambda s: s.list_api_keys()))
    _say(f"store: {store_description(settings)}")
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']}\t{row['tenant_id']}\t{row['scopes']}\t{state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    settings = _settings(args)
    done = asyncio.run(_with_store(settings, lambda s: s.revoke_api_key(args.id, now=time.time())))
    if not done:
        _say(f"no active stored key {args.id!r} in {store_description(settings)} (handraise keys list shows them)")
        return EXIT_ERROR
    print(f"revoked {args.id}")
    return 0


# -- journal -------------------------------------------------------------------


ANCHOR_FORMAT = "handraise.journal-anchor/1"


def cmd_journal_anchor(args: argparse.Namespace) -> int:
    """Print every tenant's chain head as one JSON line: keep it off this machine, verify against it later."""
    settings = _settings(args)
    heads = asyncio.run(_with_store(settings, lambda s: s.journal.anchor()))
    print(json.dumps({"format": ANCHOR_FORMAT, "at": int(time.time()), "heads": heads}, sort_keys=True))
    return 0


def _read_anchor(value: str) -> dict[str, Any]:
    """``--anchor``: the JSON line ``journal anchor`` printed, or a file holding it."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"--anchor {value}: {e}") from None
    try:
        anchor = json.loads(text)
        heads = anchor["heads"]
        if anchor.get("format") != ANCHOR_FORMAT or not all(
                isinstance(h, dict) and isinstance(h.get("seq"), int) and isinstance(h.get("hash"), str)
                for h in heads.values()):
            raise ValueError("not an anchor")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError("--anchor: not what 'handraise journal anchor' prints") from None
    return heads


def cmd_journal_verify(args: argparse.Namespace) -> int:
    settings = _settings(args)
    anchor = _read_anchor(args.anchor) if args.anchor else None

    async def verify(store: Any) -> tuple[list[str], dict[str, Any]]:
        return await store.verify_journal(anchor=anchor), await store.journal.anchor()

    problems, heads = asyncio.run(_with_store(settings, verify))
    if problems:
        for problem in problems[:50]:
            print(f"journal: {problem}", file=sys.stderr)
        print(f"journal: BROKEN ({len(problems)} problem(s))", file=sys.stderr)
        return EXIT_ERROR
    count = sum(h["seq"] for h in heads.values())
    against = " and reaches the anchor" if anchor is not None else ""
    print(f"journal: intact ({count} entries in {len(heads)} tenant chain(s), matching the requests table{against})")
    return 0


# -- doctor --------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from handraise.core import doctor

    try:
        settings = _settings(args)
    except ConfigError as e:
        print(doctor.failed("config", e.message).line())
        return EXIT_ERROR
    findings = asyncio.run(doctor.run(settings))
    for finding in findings:
        print(finding.line(), flush=True)
    problems = sum(not f.ok for f in findings)
    _say(f"{problems} problem(s); each FAIL line says how to fix it" if problems else "every check passed")
    return EXIT_ERROR if problems else 0


# -- the HTTP client side: ask, answer, link -------------------------------------


def server_url(args: argparse.Namespace, settings: Settings | None) -> str:
    """--url, else HANDRAISE_URL, else the server this config describes (its public_url, or host and port)."""
    explicit = getattr(args, "url", None) or os.environ.get("HANDRAISE_URL")
    if explicit:
        return explicit.rstrip("/")
    if settings is None:
        return "http://127.0.0.1:8080"
    server = settings.server.model_copy()
    server.served_at(server.host, server.port)
    return server.public_url


def _client_settings(args: argparse.Namespace) -> Settings | None:
    # The client needs the config only to find the server; without --url or HANDRAISE_URL it reads it.
    if getattr(args, "url", None) or os.environ.get("HANDRAISE_URL"):
        return None
    return _settings(args)


def _key(args: argparse.Namespace, scope: str) -> str:
    key = args.key or os.environ.get("HANDRAISE_KEY")
    if not key:
        raise ConfigError(f"a key with the {scope} scope is needed: --key or HANDRAISE_KEY "
                          f"(make one with: handraise keys create --scopes {scope})")
    return key


class ApiError(HandraiseError):
    """The server refused a call: printed as one line with its code and any per-field problems."""

    def __init__(self, status: int, body: Any) -> None:
        body = body if isinstance(body, dict) else {}
        code, message = body.get("error", f"http_{status}"), body.get("message", "")
        fields = (body.get("details") or {}).get("fields") or []
        text = f"{code}: {message}"
        extra = [f"{f.get('field')}: {f.get('message')}" for f in fields
                 if f.get("field") and f"{f.get('field')}: {f.get('message')}" not in message]
        if extra:
            text += " (" + "; ".join(extra) + ")"
        if status == 401:
            text += "; check HANDRAISE_KEY or --key"
        super().__init__(text)
        self.status = status


async def _call(http: Any, method: str, url: str, **kwargs: Any) -> Any:
    async with http.request(method, url, **kwargs) as resp:
        data = await resp.json(content_type=None) if resp.content_length != 0 else None
        if resp.status >= 400:
            raise ApiError(resp.status, data)
        return data


def _run_client(url: str, key: str, fn: Any) -> Any:
    import aiohttp

    async def go() -> Any:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        async with aiohttp.ClientSession(timeout=timeout, headers={"Authorization": f"Bearer {key}"}) as http:
            return await fn(http)

    try:
        return asyncio.run(go())
    except aiohttp.ClientError as e:
        raise HandraiseError(f"cannot reach {url} ({e}); is handraise serve running there? "
                             "set --url or HANDRAISE_URL") from None


def _schema_argument(value: str) -> Any:
    """``--schema '<json>'`` inline, or ``--schema @file.json``."""
    text, where = value, "--schema"
    if value.startswith("@"):
        path = Path(value[1:])
        where = f"--schema {value}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{where}: cannot read the file ({getattr(e, 'strerror', None) or e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                          "give a JSON schema inline or @file.json") from None


def where_to_answer(view: dict[str, Any], url: str | None = None) -> list[str]:
    """How a human answers this request, printed by ``ask``: the operator inbox first."""
    inbox = [f"answer it in the operator inbox: {url}/inbox/r/{view['id']}"] if url else []
    return inbox + [f"answer it with a key that has the answer scope: handraise answer {view['unique_id']} "
            + ("--approve (or --reject)" if view.get("kind") == "approval" else "VALUE"),
            f"or open a one-time form for a human: handraise link {view['id']}"]


def _left(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def cmd_ask(args: argparse.Namespace) -> int:
    key = _key(args, "ask")
    body: dict[str, Any] = {
        "unique_id": args.unique_id or f"cli-{uuid.uuid4()}",
        "message_for_user": args.message,
        "timeout_seconds": args.timeout,
        "sensitive": args.sensitive,
    }
    if sum(map(bool, (args.approval, args.schema, args.choices))) > 1:
        raise ConfigError("give one of --approval, --schema or --choices")
    if args.approval:
        body["kind"] = "approval"
    if args.schema:
        body["schema"] = _schema_argument(args.schema)
    if args.choices:
        choices = [c.strip() for c in args.choices.split(",") if c.strip()]
        if not choices:
            raise ConfigError("--choices: give the choices separated by commas, e.g. --choices red,green,blue")
        body["schema"] = {"type": "string", "enum": list(dict.fromkeys(choices))}
    if args.run_id:
        body["run_id"] = args.run_id
    if args.channel:
        body["channels"] = args.channel
    url = server_url(args, _client_settings(args))
    live = sys.stderr.isatty()

    async def ask(http: Any) -> dict[str, Any]:
        data = await _call(http, "POST", f"{url}/v1/requests", json=body)
        expires = time.time() + args.timeout
        _say(f"asked {data['id']} (unique_id {data['unique_id']}) at {url}; {_left(expires - time.time())} left")
        for line in where_to_answer(data, url):
            _say(line)
        while data["status"] == "pending":
            ticker = asyncio.create_task(_countdown(expires)) if live else None
            try:
                data = await _call(http, "GET", f"{url}/v1/requests/{data['id']}/wait", params={"timeout": "60"})
            finally:
                if ticker is not None:
                    ticker.cancel()
                    print("\r\x1b[K", end="", file=sys.stderr, flush=True)
            if data["status"] == "pending" and not live:
                _say(f"waiting for {data['id']}, {_left(expires - time.time())} left")
        if data.get("sensitive") and "response" in data:
            # In hand: the server deletes it now rather than keep it for a retry.
            await _call(http, "POST", f"{url}/v1/requests/{data['id']}/ack")
        return data

    result = _run_client(url, key, ask)
    if result["status"] == "answered":
        print(json.dumps(result.get("response"), ensure_ascii=False), flush=True)
        return EXIT_ANSWERED
    print(json.dumps({"status": result["status"], "id": result["id"]}), file=sys.stderr)
    return EXIT_EXPIRED if result["status"] == "expired" else EXIT_CANCELLED


async def _countdown(expires: float) -> None:
    while True:
        print(f"\rhandraise: waiting, {_left(expires - time.time())} left ", end="", file=sys.stderr, flush=True)
        await asyncio.sleep(1)


def cmd_answer(args: argparse.Namespace) -> int:
    key = _key(args, "answer")
    if sum(map(bool, (args.approve, args.reject, args.json is not None, args.value is not None))) != 1:
        raise ConfigError("give the answer once: VALUE (text), --json VALUE, --approve or --reject")
    if args.approve or args.reject:
        response: Any = {"decision": "approve" if args.approve else "reject"}
        if args.reason:
            response["reason"] = args.reason
    elif args.json is not None:
        try:
            response = json.loads(args.json)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--json: not valid JSON ({e.msg}); for plain text give it without --json") from None
    else:
        response = args.value
    url = server_url(args, _client_settings(args))
    _run_client(url, key, lambda http: _call(http, "POST", f"{url}/api/human-feedback/submit",
                                             json={"unique_id": args.unique_id, "response": response}))
    _say(f"answered {args.unique_id}")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    key = _key(args, "answer")
    url = server_url(args, _client_settings(args))
    body = {"recipient": args.recipient} if args.recipient else {}
    link = _run_client(url, key, lambda http: _call(http, "POST", f"{url}/v1/requests/{args.id}/links", json=body))
    print(link["url"])
    _say("a one-time link: it takes one answer and dies when the question is answered, expires or is cancelled")
    return 0


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
    parser.add_argument("--version", action="version", version=f"handraise {__version__}")
    config_help = "TOML config file (default: $HANDRAISE_CONFIG, else the embedded default)"
    parser.add_argument("--config", help=config_help)
    # Every command takes --config after its name too, and shows it in its --help.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help=config_help, default=argparse.SUPPRESS)
    client = argparse.ArgumentParser(add_help=False, parents=[common])
    client.add_argument("--url", help="server base URL (default: $HANDRAISE_URL, else the config's server)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the HTTP API and every enabled connector")
    serve.add_argument("--host", help="interface to listen on (default: [server] host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: [server] port, 8080; 0: any free port)")
    serve.set_defaults(fn=cmd_serve)

    ask = sub.add_parser("ask", parents=[client],
                         help="ask a human and print the answer as JSON (exit 0 answered, 2 expired, 3 cancelled)")
    ask.add_argument("message", help="the question, as the human reads it")
    ask.add_argument("--schema", help="JSON schema of the answer: inline JSON, or @file.json")
    ask.add_argument("--choices", help="comma-separated choices, e.g. red,green,blue")
    ask.add_argument("--approval", action="store_true", help="ask for approve/reject")
    ask.add_argument("--timeout", type=int, default=300, help="seconds (default 300)")
    ask.add_argument("--sensitive", action="store_true", help="a secret: masked input, deleted once you have it")
    ask.add_argument("--unique-id", help="your id for this question (default: generated); retries reuse it")
    ask.add_argument("--run-id")
    ask.add_argument("--channel", action="append", help="deliver through this channel (repeatable)")
    ask.add_argument("--key", help="API key with the ask scope (default: $HANDRAISE_KEY)")
    ask.set_defaults(fn=cmd_ask)

    answer = sub.add_parser("answer", parents=[client], help="answer a pending question by its unique_id")
    answer.add_argument("unique_id")
    answer.add_argument("value", nargs="?", help="the answer as text")
    answer.add_argument("--json", metavar="VALUE", help="the answer as JSON, e.g. 42 or '{\"size\": \"L\"}'")
    answer.add_argument("--approve", action="store_true", help="approve an approval request")
    answer.add_argument("--reject", action="store_true", help="reject an approval request")
    answer.add_argument("--reason", help="with --approve or --reject")
    answer.add_argument("--key", help="API key with the answer scope (default: $HANDRAISE_KEY)")
    answer.set_defaults(fn=cmd_answer)

    link = sub.add_parser("link", parents=[client], help="mint a one-time form link for a pending request")
    link.add_argument("id", help="the request id (req_...) that ask printed")
    link.add_argument("--recipient", help="who the link is for (shown on the form, journaled)")
    link.add_argument("--key", help="API key with the answer scope (default: $HANDRAISE_KEY)")
    link.set_defaults(fn=cmd_link)

    inbox = sub.add_parser("inbox-link", parents=[common],
                           help="print a one-time sign-in link to the operator inbox (made on the store)")
    inbox.add_argument("--tenant", help="tenant id (default: the only one configured)")
    inbox.add_argument("--name", required=True, help="who signs in: answers are recorded as operator:<name>")
    inbox.set_defaults(fn=cmd_inbox_link)

    doctor = sub.add_parser("doctor", parents=[common], help="check the config, store, connectors, public_url "
                            "and keys; one line per finding with its fix (exit 0 only when all pass)")
    doctor.set_defaults(fn=cmd_doctor)

    keys = sub.add_parser("keys", help="manage stored API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", parents=[common], help="create a key; prints it once, stores only its hash")
    create.add_argument("--tenant", help="tenant id (default: the only one configured)")
    create.add_argument("--scopes", required=True, help=f"comma-separated: {', '.join(ALL_SCOPES)}")
    create.add_argument("--id", help="key id (default: generated)")
    create.set_defaults(fn=cmd_keys_create)
    listing = keys.add_parser("list", parents=[common], help="list key ids and scopes")
    listing.set_defaults(fn=cmd_keys_list)
    revoke = keys.add_parser("revoke", parents=[common], help="revoke a stored key")
    revoke.add_argument("id")
    revoke.set_defaults(fn=cmd_keys_revoke)

    mcp = sub.add_parser("mcp", help="serve the MCP tools over stdio, reaching the server at $HANDRAISE_URL")
    mcp.add_argument("--url", help="server base URL (default $HANDRAISE_URL or http://127.0.0.1:8080)")
    mcp.add_argument("--key", help="API key with the ask scope (default $HANDRAISE_KEY)")
    mcp.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress notes")
    mcp.set_defaults(fn=cmd_mcp)

    journal = sub.add_parser("journal", help="the audit journal").add_subparsers(dest="journal_command", required=True)
    verify = journal.add_parser("verify", help="check every tenant's chain and the requests table; exit 1 when broken")
    verify.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    verify.add_argument("--anchor", help="an anchor printed earlier by 'journal anchor' (the JSON, or a file)")
    verify.set_defaults(fn=cmd_journal_verify)
    anchor = journal.add_parser("anchor", help="print the chains' heads as one JSON line, to keep off-site")
    anchor.add_argument("--config", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    anchor.set_defaults(fn=cmd_journal_anchor)
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
    except Exception as e:
        # A bug, not an operator mistake: still one line, with the traceback on request.
        if os.environ.get("HANDRAISE_DEBUG"):
            raise
        print(f"handraise: unexpected {type(e).__name__}: {e} (HANDRAISE_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())

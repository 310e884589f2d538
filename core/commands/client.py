"""The HTTP client side of the command: ``ask``, ``answer`` and ``link`` against a running server, and ``mcp``
(the MCP tools over stdio, reaching the server by URL)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from handraise.core.commands.base import EXIT_ANSWERED, EXIT_CANCELLED, EXIT_EXPIRED, say, settings_of
from handraise.core.config import Settings
from handraise.core.errors import ConfigError, HandraiseError


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
    return settings_of(args)


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
        say(f"asked {data['id']} (unique_id {data['unique_id']}) at {url}; {_left(expires - time.time())} left")
        for line in where_to_answer(data, url):
            say(line)
        while data["status"] == "pending":
            ticker = asyncio.create_task(_countdown(expires)) if live else None
            try:
                data = await _call(http, "GET", f"{url}/v1/requests/{data['id']}/wait", params={"timeout": "60"})
            finally:
                if ticker is not None:
                    ticker.cancel()
                    print("\r\x1b[K", end="", file=sys.stderr, flush=True)
            if data["status"] == "pending" and not live:
                say(f"waiting for {data['id']}, {_left(expires - time.time())} left")
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
    say(f"answered {args.unique_id}")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    key = _key(args, "answer")
    url = server_url(args, _client_settings(args))
    body = {"recipient": args.recipient} if args.recipient else {}
    link = _run_client(url, key, lambda http: _call(http, "POST", f"{url}/v1/requests/{args.id}/links", json=body))
    print(link["url"])
    say("a one-time link: it takes one answer and dies when the question is answered, expires or is cancelled")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from handraise.core.mcp.stdio import serve_stdio

    if not 0 < args.progress_interval <= 15:
        raise ConfigError("--progress-interval must be more than 0 and at most 15 seconds")
    try:
        asyncio.run(serve_stdio(url=args.url, key=args.key, interval=args.progress_interval))
    except ValueError as e:  # no key
        raise ConfigError(str(e)) from None
    return 0

"""What both clients share about HTTP: defaults from the environment, headers, reading a reply."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import httpx

from handraise.client._protocol import Call, Reply, TransportFailure
from handraise.client.errors import ServerUnavailable, error_from_reply

DEFAULT_URL = "http://127.0.0.1:8080"


def resolve(url: str | None, key: str | None) -> tuple[str, str]:
    url = (url or os.environ.get("HANDRAISE_URL") or DEFAULT_URL).rstrip("/")
    key = key or os.environ.get("HANDRAISE_KEY")
    if not key:
        raise ValueError("a Handraise client needs a key: pass key= or set HANDRAISE_KEY")
    return url, key


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Accept": "application/json"}


def request_args(call: Call, *, base: str, key: str, timeout: float) -> dict[str, Any]:
    args: dict[str, Any] = {"method": call.method, "url": base + call.path, "headers": headers(key),
                            "timeout": httpx.Timeout(timeout, read=call.read_timeout or timeout)}
    if call.params:
        args["params"] = call.params
    if call.json is not None:
        args["content"] = json.dumps(call.json, ensure_ascii=False).encode()
        args["headers"]["Content-Type"] = "application/json"
    return args


def reply(response: httpx.Response) -> Reply:
    content = response.content
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = content.decode("utf-8", "replace")
    return Reply(response.status_code, body, {"retry-after": response.headers.get("retry-after", "")}
                 if "retry-after" in response.headers else {})


def failure(error: httpx.TransportError) -> TransportFailure:
    # A refused or timed-out connect never reached the server; anything later may have.
    return TransportFailure(f"{type(error).__name__}: {error}",
                            maybe_sent=not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)))


def stream_error(status: int, content: bytes) -> Exception:
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    return error_from_reply(status, body)


def broken_stream(error: httpx.TransportError) -> ServerUnavailable:
    return ServerUnavailable(f"the event stream broke: {failure(error)}", status=None, code="unreachable")


def event_params(run_id: str | None, types: Sequence[str] | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if run_id is not None:
        params["run_id"] = run_id
    if types:
        params["types"] = ",".join(types)
    return params

"""A transcript of HTTP exchanges with the real server, normalised so two runs (and two stores) read alike.

What changes from run to run is replaced by a stable placeholder: ids, tokens and ETags by a name
numbered in order of first appearance (so a value that recurs is still seen to recur), times by
``<time>``, the keys by their role. Everything else is kept as the server wrote it: the status and
its reason, every response header in its order but ``Date`` and ``Server`` (``Content-Length`` is
checked against the body, then shown as a placeholder), and each JSON body with its members in the
server's order. A placeholder is only put where the value has the exact shape the server writes:
a time in another format or an id of another length shows up as itself, and fails the comparison.
Header names are spelled as aiohttp's client interns them (``Etag`` for the wire's ``ETag``): their
case is no part of HTTP.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession

__all__ = ["Exchange", "Transcript"]

# Header values of the transport, not of the API: the date, and the aiohttp release in Server.
_DROPPED = frozenset({"date", "server"})

# Opaque values the server makes, most specific first. Each is replaced by <kind:n>, n counting distinct
# values of that kind in order of first appearance across the transcript.
_OPAQUE: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # A list cursor (core/cursors.py): a position in base64, then its 16-byte tag.
    (re.compile(r"(?<![A-Za-z0-9_.-])[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{22}(?![A-Za-z0-9_.-])"), "cursor"),
    # A one-time link or sign-in token (secrets.token_urlsafe(32)).
    (re.compile(r"(?<=/f/)[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"), "link-token"),
    (re.compile(r"(?<=/inbox/signin/)[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"), "signin-token"),
    # A server-made id: a lower-case prefix, then secrets.token_urlsafe(16).
    (re.compile(r"(?<![A-Za-z0-9_-])([a-z]{2,8})([_-])[A-Za-z0-9_-]{22}(?![A-Za-z0-9_-])"),
     lambda m: m.group(1)),
    # A body's tag (a truncated sha256), and a full sha256 (answer and journal digests).
    (re.compile(r'(?<=")[0-9a-f]{32}(?=")'), "etag"),
    (re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])"), "sha256"),
]
# What iso() writes (core/api.py): UTC, milliseconds, "Z"; and a JSON member's value that is a time in
# seconds since 1970 (journal data), between 2020 and 2033. Both are replaced after the opaque values, so
# digits inside an ETag or an id are never read as a time.
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_EPOCH = re.compile(r'(?:(?<=":)|(?<=": ))1[6-9]\d{8}(?:\.\d+)?(?=[,}\n])')


@dataclass
class Exchange:
    """One call and its answer, as sent and as received."""

    title: str
    method: str
    path: str
    role: str | None
    sent_headers: dict[str, str]
    sent: str | None
    status: int
    reason: str
    headers: list[tuple[str, str]]
    raw: bytes
    body: Any = None
    # How the response body is shown instead of as itself (a large document, a page): a summary made by the caller.
    shown: str | None = None
    notes: list[str] = field(default_factory=list)

    def header(self, name: str) -> str:
        """A response header's value, by its name in any case (as HTTP reads it)."""
        [value] = [v for k, v in self.headers if k.lower() == name.lower()]
        return value


class Transcript:
    """Calls the server and keeps every exchange; ``render()`` is the normalised text to compare."""

    def __init__(self, *, session: ClientSession, base: str, keys: dict[str, str]) -> None:
        self.session = session
        self.base = base
        self.keys = keys
        self.exchanges: list[Exchange | None] = []

    async def call(self, title: str, method: str, path: str, *, role: str | None = None, json_body: Any = None,
                   data: bytes | str | None = None, headers: dict[str, str] | None = None,
                   frames: int | None = None, first_frame: asyncio.Event | None = None,
                   show: Callable[[bytes], str] | None = None) -> Exchange:
        """One call. ``json_body`` is sent as JSON; ``data`` as it is (with ``headers``); ``frames``
        reads only that many blank-line-ended frames of the answer (an event stream), then drops
        the connection, setting ``first_frame`` once the first has come (a stream's "subscribed")."""
        # The exchange keeps the place of its call, not of its answer: a blocking call answered after a
        # later one still reads first, whichever finishes first.
        slot = len(self.exchanges)
        self.exchanges.append(None)
        sent_headers = dict(headers or {})
        if json_body is not None:
            data = json.dumps(json_body)
            sent_headers.setdefault("Content-Type", "application/json")
        wire_headers = dict(sent_headers)
        if role is not None:
            wire_headers["Authorization"] = f"Bearer {self.keys[role]}"
        async with self.session.request(method, self.base + path, data=data, headers=wire_headers,
                                        allow_redirects=False) as resp:
            if frames is None:
                raw = await resp.read()
            else:
                raw = b""
                while raw.count(b"\n\n") < frames:
                    raw += await resp.content.readline()
                    if first_frame is not None and b"\n\n" in raw:
                        first_frame.set()
            exchange = Exchange(title=title, method=method, path=path, role=role, sent_headers=sent_headers,
                                sent=_shown_sent(data, sent_headers), status=resp.status, reason=resp.reason or "",
                                headers=list(resp.headers.items()), raw=raw)
            if frames is not None:
                resp.close()
        if show is not None:
            exchange.shown = show(raw)
        elif "json" in resp.headers.get("Content-Type", "") and raw:
            exchange.body = json.loads(raw)
        self.exchanges[slot] = exchange
        return exchange

    def render(self) -> str:
        assert None not in self.exchanges, "a call of the script is still running"
        return _Normaliser().text("\n".join(_render(n, e) for n, e in enumerate(self.exchanges, 1) if e))


def _shown_sent(data: bytes | str | None, headers: dict[str, str]) -> str | None:
    if data is None:
        return None
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    if len(text) > 400:
        return f"<{len(text.encode())} bytes>"
    if "json" in headers.get("Content-Type", ""):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return repr(text)


def _render(n: int, e: Exchange) -> str:
    lines = [f"### {n:03d} {e.title}", f"{e.method} {e.path}"]
    if e.role is not None:
        lines.append(f"Authorization: Bearer <{e.role} key>")
    lines += [f"{k}: {v}" for k, v in e.sent_headers.items()]
    if e.sent is not None:
        lines.append(e.sent)
    lines.append(f"--> {e.status} {e.reason}")
    for name, value in e.headers:
        if name.lower() in _DROPPED:
            continue
        if name.lower() == "content-length" and value == str(len(e.raw)):
            value = "<length of the body>"
        lines.append(f"{name}: {value}")
    if e.shown is not None:
        lines.append(e.shown)
    elif e.body is not None:
        # Whether the bytes are json.dumps's own spelling of the value (as core/jsontext.py and aiohttp
        # write them): a change of separators, escaping or number format shows here.
        spelling = "json.dumps" if e.raw == json.dumps(e.body).encode() else "other: " + e.raw.decode()
        lines.append(f"[spelled as {spelling}]")
        lines.append(json.dumps(e.body, indent=2, ensure_ascii=False))
    elif e.raw:
        lines.append(repr(e.raw.decode("utf-8", "replace")))
    lines += e.notes
    return "\n".join(lines) + "\n"


class _Normaliser:
    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], int] = {}
        self.counts: dict[str, int] = {}

    def number(self, kind: str, value: str) -> int:
        key = (kind, value)
        if key not in self.seen:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.seen[key] = self.counts[kind]
        return self.seen[key]

    def text(self, text: str) -> str:
        for pattern, kind in _OPAQUE:
            if callable(kind):
                # An id keeps its own prefix and separator, numbered per prefix: req_<1>, run-<2>.
                text = pattern.sub(lambda m, f=kind: f"{f(m)}{m.group(2)}<{self.number(f(m), m.group(0))}>", text)
            else:
                text = pattern.sub(lambda m, k=kind: f"<{k}:{self.number(k, m.group(0))}>", text)
        return _EPOCH.sub("<epoch>", _TIME.sub("<time>", text))

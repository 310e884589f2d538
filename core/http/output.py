"""Writing a JSON response: the bytes ``web.json_response`` writes (``json.dumps``'s defaults, UTF-8), for less."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web

from handraise.core.jsontext import dumps

__all__ = ["json_response", "resource_path", "naming"]


def json_response(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """``web.json_response(body, status=status, headers=headers)``: the same status, headers (in the same
    order) and body, from an encoder built once."""
    return web.Response(body=dumps(body).encode(), status=status, headers=headers, content_type="application/json",
                        charset="utf-8")


def resource_path(*segments: str) -> str:
    """The server-relative path of a resource, each segment percent-encoded (a run id may hold a slash,
    a space or non-ASCII text, none of which may stand bare in a header or a path segment)."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


def naming(path: str, *, created: bool) -> dict[str, str]:
    """The header that names the resource a create answered with: ``Location`` on a 201 (RFC 9110 §15.3.2),
    ``Content-Location`` on the 200 of a replay, whose body is that existing resource's representation
    (§8.7); ``Location`` on a 200 means nothing to a client."""
    return {"Location": path} if created else {"Content-Location": path}

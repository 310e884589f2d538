"""``GET /``: a small page that says what this server is and where to go; ``GET /docs``: the API reference.

The reference is rendered on the server from the same OpenAPI document as
``/openapi.json``, with templates from the package: no script, no CDN.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from typing import Any

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, select_autoescape

from handraise import __version__
from handraise.core.http.openapi import document

routes = web.RouteTableDef()

# Inline styles only, nothing else: the pages load no script, image or font.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_METHODS = ("get", "post", "put", "patch", "delete")


@functools.cache
def _templates() -> Environment:
    folder = str(importlib.resources.files("handraise.templates"))
    return Environment(loader=FileSystemLoader(folder), autoescape=select_autoescape(default=True))


def _render(name: str, **context: Any) -> web.Response:
    html = _templates().get_template(name).render(version=__version__, **context)
    return web.Response(text=html, content_type="text/html", headers=_HEADERS)


def extra_links(_app: web.Application) -> list[dict[str, str]]:
    """More places to list on the home page: the operator inbox (it asks for a sign-in link when needed)."""
    return [{"href": "/inbox", "text": "Operator inbox"}]


@routes.get("/")
async def home(request: web.Request) -> web.Response:
    return _render("home.html", extra_links=extra_links(request.app))


@routes.get("/docs")
async def reference(_request: web.Request) -> web.Response:
    doc = document()
    return _render("reference.html", doc=doc, operations=operations(doc),
                   schemas=[(name, json.dumps(schema, indent=2, ensure_ascii=False))
                            for name, schema in doc.get("components", {}).get("schemas", {}).items()])


def operations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each operation of an OpenAPI document, flattened for the template."""
    out = []
    for path, item in doc.get("paths", {}).items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            scopes = sorted({s for req in op.get("security", []) for names in req.values() for s in names})
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            out.append({
                "method": method, "path": path, "summary": op.get("summary", ""), "scopes": scopes,
                "anchor": f"{method}-{path}".replace("/", "-").replace("{", "").replace("}", "").replace(".", "-"),
                "parameters": [{"name": p.get("name"), "in": p.get("in"), "required": p.get("required", False),
                                "type": _type_of(p.get("schema", {}))} for p in op.get("parameters", [])],
                "body": _type_of(body) if body else None,
                "responses": [{"status": status, "description": r.get("description", ""),
                               "schema": _type_of(r.get("content", {}).get("application/json", {}).get("schema"))}
                              for status, r in op.get("responses", {}).items()],
            })
    return out


def _type_of(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    kind = schema.get("type", "")
    if kind == "object" and schema.get("properties"):
        return "object: " + ", ".join(schema["properties"])
    return str(kind)

"""The hosted form's pages: Jinja2 templates (autoescaped), their static assets, and the headers every page carries.

CSS and the countdown script are files served by the app, so the
Content-Security-Policy needs no ``'unsafe-inline'`` and the page makes no
request to another origin.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
import importlib.resources
from pathlib import Path

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from handraise.webforms.render import CSRF_FIELD, FieldView

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "OUTCOMES",
    "PAGE_HEADERS",
    "STATIC_DIR",
    "STATIC_ROUTE",
    "TEMPLATES_DIR",
    "Asset",
    "Outcome",
    "Pages",
    "page_response",
    "time_left_text",
]

TEMPLATES_DIR = Path(str(importlib.resources.files("handraise.templates")))
STATIC_DIR = TEMPLATES_DIR / "static"
# "-" is never a link token (tokens are 43 URL-safe characters), so this cannot shadow /f/{token}.
STATIC_ROUTE = "/f/-/static/"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    # The page holds a one-time link's form: no shared or back-button cache may keep it.
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-Robots-Tag": "noindex, nofollow",
}
_ASSET_TYPES = {"form.css": "text/css", "form.js": "text/javascript", "icon.svg": "image/svg+xml"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@dataclass(frozen=True)
class Outcome:
    """A plain page that says what happened to a link or a submission."""

    status: int
    title: str
    text: str


OUTCOMES: dict[str, Outcome] = {
    "not_found": Outcome(404, "This link is not valid",
                         "Check that you opened the whole link. If someone sent it to you, ask them for a new one."),
    "link_used": Outcome(410, "This link was used already",
                         "An answer was sent with this link, and each link takes one answer. You can close this tab."),
    "already_answered": Outcome(410, "This question was answered already",
                                "Someone answered it another way; nothing more is needed from you."),
    "expired": Outcome(410, "This question expired",
                       "The time to answer ran out, so your answer can no longer be taken."),
    "cancelled": Outcome(410, "This question was cancelled",
                         "It is no longer needed. You can close this tab."),
    "forbidden": Outcome(403, "This form could not be verified",
                         "Open the link again and send your answer from the fresh page."),
    "too_large": Outcome(413, "Your answer is too large",
                         "Go back, shorten it and send it again."),
    "bad_request": Outcome(400, "Your answer could not be read",
                           "Open the link again and send your answer from the fresh page."),
    "answered": Outcome(200, "Thank you, your answer was sent", "You can close this tab."),
}


def time_left_text(seconds: float) -> str:
    """``4 min 59 s``: the same wording the live countdown (form.js) uses."""
    left = max(0, math.ceil(seconds))
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def load_assets(folder: Path) -> dict[str, Asset]:
    assets = {}
    for name, content_type in _ASSET_TYPES.items():
        body = (folder / name).read_bytes()
        assets[name] = Asset(body=body, content_type=content_type, etag=hashlib.sha256(body).hexdigest()[:16])
    return assets


class Pages:
    """Renders the form and the outcome pages; the templates are read once."""

    def __init__(self, *, templates_dir: Path = TEMPLATES_DIR) -> None:
        self.env = Environment(
            loader=FileSystemLoader(str(templates_dir)),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,
        )
        self.assets = load_assets(templates_dir / "static")
        self.env.globals["asset"] = self.asset_url

    def asset_url(self, name: str) -> str:
        # The version query lets browsers cache an asset until its content changes.
        return f"{STATIC_ROUTE}{name}?v={self.assets[name].etag}"

    def form(self, *, question: str, asker: str, created_by: str, recipient: str | None, seconds_left: float,
             fields: Sequence[FieldView], general_errors: Sequence[str] = (), csrf: str, approval: bool,
             sensitive: bool, chosen: str | None = None) -> str:
        error_count = sum(1 for f in fields if f.error) + len(general_errors)
        return self.env.get_template("form.html").render(
            question=question, asker=asker, created_by=created_by, recipient=recipient,
            seconds_left=max(0, math.ceil(seconds_left)), time_left=time_left_text(seconds_left),
            fields=list(fields), general_errors=list(general_errors), error_count=error_count,
            csrf_field=CSRF_FIELD, csrf=csrf, approval=approval, sensitive=sensitive, chosen=chosen,
            any_required=any(f.required for f in fields if f.control != "approval"),
        )

    def outcome(self, key: str) -> tuple[int, str]:
        outcome = OUTCOMES[key]
        html = self.env.get_template("outcome.html").render(
            title=outcome.title, text=outcome.text, status=outcome.status, key=key)
        return outcome.status, html


def page_response(html: str, *, status: int) -> web.Response:
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS)

"""The hosted form's pages: Jinja2 templates (autoescaped, gettext), their static assets, and every page's headers.

CSS and the script are files served by the app, so the Content-Security-Policy needs no
``'unsafe-inline'`` and the page makes no request to another origin. Every sentence goes
through the catalogue (core/i18n.py): one Jinja environment per locale, each with its
translations installed.

:class:`FormPage` is everything a form shows; the hosted form fills it from a link, and an
inbox page can fill it from a signed-in operator and post to its own ``action``.
"""

from __future__ import annotations

import datetime as dt
import gettext
import importlib.resources
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from babel.dates import format_date, format_time
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from handraise.core.i18n import DEFAULT_LOCALE, Catalogue, N_
from handraise.webforms.looks import Asset, Theme
from handraise.webforms.render import CSRF_FIELD, FieldView

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "OUTCOMES",
    "PAGE_HEADERS",
    "STATIC_DIR",
    "STATIC_ROUTE",
    "TEMPLATES_DIR",
    "Asset",
    "FormPage",
    "Outcome",
    "Pages",
    "Receipt",
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
    # The page's words depend on the browser's languages.
    "Vary": "Accept-Language",
}
_ASSET_TYPES = {"form.css": "text/css", "form.js": "text/javascript", "icon.svg": "image/svg+xml"}

ENGLISH = gettext.NullTranslations()


@dataclass(frozen=True)
class Outcome:
    """A plain page that says what happened to a link or a submission (English msgids, translated when shown)."""

    status: int
    title: str
    text: str


OUTCOMES: dict[str, Outcome] = {
    "not_found": Outcome(404, N_("This link is not valid"),
                         N_("Check that you opened the whole link. If someone sent it to you, ask them for a new "
                            "one.")),
    "link_used": Outcome(410, N_("This link was used already"),
                         N_("Each link takes one answer. Nothing more is needed from you; you can close this tab.")),
    "already_answered": Outcome(410, N_("This question was answered already"),
                                N_("Nothing more is needed from you; you can close this tab.")),
    "expired": Outcome(410, N_("This question expired"),
                       N_("The time to answer ran out, so your answer can no longer be taken.")),
    "cancelled": Outcome(410, N_("This question was cancelled"),
                         N_("It is no longer needed. You can close this tab.")),
    "rate_limited": Outcome(429, N_("Too many attempts"),
                            N_("This link refused several answers in a row. Wait a few minutes, then open it "
                               "again.")),
    "forbidden": Outcome(403, N_("This form could not be verified"),
                         N_("Open the link again and send your answer from the fresh page.")),
    "too_large": Outcome(413, N_("Your answer is too large"),
                         N_("Go back, shorten it and send it again.")),
    "bad_request": Outcome(400, N_("Your answer could not be read"),
                           N_("Open the link again and send your answer from the fresh page.")),
    "not_utf8": Outcome(400, N_("Your answer could not be read"),
                        N_("The form must be sent as UTF-8 text. Open the link again and send your answer from "
                           "the fresh page.")),
    "answered": Outcome(200, N_("Thank you, your answer was sent"), N_("You can close this tab.")),
    "not_assigned": Outcome(403, N_("This question is assigned to other people"),
                            N_("Only the people it is assigned to may answer it. Nothing was changed.")),
    "voted": Outcome(200, N_("Thank you, your vote was counted"),
                     N_("The question needs more votes before it is decided. You can close this tab.")),
    "already_voted": Outcome(409, N_("You voted already"),
                             N_("Your first vote counts, once; votes cannot be changed. Nothing was changed.")),
    "four_eyes": Outcome(403, N_("Someone else must approve this"),
                         N_("It was asked on your behalf, so you may not approve it yourself; you may still "
                            "reject it. Nothing was changed.")),
}


@dataclass(frozen=True)
class Receipt:
    """What a finished page recaps: the outcome in words, the answer's lines, who and when.

    ``headline`` is already in the page's language ("Approved", "Rejected: too risky", "Sent");
    ``lines`` are (field title, value) in schema order, empty for a sensitive answer.
    """

    headline: str = ""
    lines: tuple[tuple[str, str], ...] = ()
    # "Answered by Alice via Telegram" (translated), and the moment it happened.
    who: str = ""
    at: float | None = None
    private: bool = False
    # The page's colour and mark: "ok", "rejected", or "" (from the status: ok below 400, else gone).
    tone: str = ""


@dataclass(frozen=True)
class FormPage:
    """Everything a form page shows. ``action`` empty posts back to the page's own URL."""

    question: str
    fields: Sequence[FieldView]
    csrf: str
    seconds_left: float
    expires_at: float
    approval: bool = False
    sensitive: bool = False
    # The tenant's and the asking key's display names (core/names.py); None when not configured.
    tenant_name: str | None = None
    asker_name: str | None = None
    recipient: str | None = None
    general_errors: Sequence[str] = ()
    chosen: str | None = None
    # A quorum request's votes so far ("1 of 2 approved: Alice. Still expected: Bob."), core.quorum.
    tally: str = ""
    # A proposal the approver may not edit (several approve it as proposed), as lines to read.
    proposal: Sequence[str] = ()
    action: str = ""
    theme: Theme = field(default_factory=Theme)


def time_left_text(seconds: float, t: gettext.NullTranslations = ENGLISH) -> str:
    """``4 min 59 s``: the same wording the live countdown (form.js) uses, from ``countdown_formats``."""
    left = max(0, math.ceil(seconds))
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    formats = countdown_formats(t)
    if days:
        key = "d"
    elif hours:
        key = "h"
    elif minutes:
        key = "m"
    else:
        key = "s"
    return formats[key].format(d=days, h=hours, m=minutes, s=secs)


def countdown_formats(t: gettext.NullTranslations = ENGLISH) -> dict[str, str]:
    """The countdown's wording by largest unit; form.js fills the same ``{d}``/``{h}``/``{m}``/``{s}``."""
    return {
        "d": t.gettext("{d} d {h} h"),
        "h": t.gettext("{h} h {m} min"),
        "m": t.gettext("{m} min {s} s"),
        "s": t.gettext("{s} s"),
        "zero": t.gettext("none, the time is up"),
    }


def error_headings(t: gettext.NullTranslations = ENGLISH, *, most: int = 24) -> list[str]:
    """The error summary's heading for 1, 2, … problems; the script picks from the same list."""
    return [t.ngettext("One answer needs a change", "%(num)d answers need a change", n) % {"num": n}
            for n in range(1, most + 1)]


def load_assets(folder: Path) -> dict[str, Asset]:
    return {name: Asset.of((folder / name).read_bytes(), content_type) for name, content_type in _ASSET_TYPES.items()}


class Pages:
    """Renders the form and the outcome pages in any catalogued locale; templates are read once."""

    def __init__(self, *, templates_dir: Path = TEMPLATES_DIR, catalogue: Catalogue | None = None) -> None:
        self.catalogue = catalogue or Catalogue()
        self.templates_dir = templates_dir
        self.assets = load_assets(templates_dir / "static")
        self._envs: dict[str, Environment] = {}

    def add_assets(self, assets: dict[str, Asset]) -> None:
        """Serve more assets (a tenant's theme and logo) under the static route."""
        self.assets.update(assets)

    def asset_url(self, name: str) -> str:
        # The version query lets browsers cache an asset until its content changes.
        return f"{STATIC_ROUTE}{name}?v={self.assets[name].etag}"

    def translations(self, locale: str) -> gettext.NullTranslations:
        return self.catalogue.translations(locale)

    def _env(self, locale: str) -> Environment:
        """One environment per locale: templates compile with their translations' newstyle gettext."""
        env = self._envs.get(locale)
        if env is None:
            env = Environment(
                loader=FileSystemLoader(str(self.templates_dir)),
                autoescape=True,
                undefined=StrictUndefined,
                trim_blocks=True,
                lstrip_blocks=True,
                auto_reload=False,
                extensions=["jinja2.ext.i18n"],
            )
            t = self.translations(locale)
            env.globals["asset"] = self.asset_url
            # The error summary's headings, for the page and for its script (any page that draws _form.html).
            env.globals["error_heading"] = lambda count: error_headings(t, most=count)[count - 1]
            env.globals["error_headings"] = lambda most: json.dumps(error_headings(t, most=most))
            env.install_gettext_translations(t, newstyle=True)  # type: ignore[attr-defined]
            self._envs[locale] = env
        return env

    def moment(self, ts: float, *, locale: str, zone: dt.tzinfo) -> str:
        """A moment in the tenant's zone, as the page shows it before form.js puts it in the reader's own."""
        when = dt.datetime.fromtimestamp(ts, zone)
        babel_locale = self.catalogue.babel_locale(locale)
        return (f"{format_date(when, 'medium', locale=babel_locale)}, "
                f"{format_time(when, 'short', locale=babel_locale)} {when.tzname() or 'UTC'}")

    def _common(self, locale: str, zone: dt.tzinfo, theme: Theme) -> dict[str, object]:
        return {
            "lang": locale.replace("_", "-"),
            "theme": theme,
            "moment": lambda ts: self.moment(ts, locale=locale, zone=zone),
            "iso": lambda ts: dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace(
                "+00:00", "Z"),
        }

    def form(self, page: FormPage, *, locale: str = DEFAULT_LOCALE, zone: dt.tzinfo = dt.UTC) -> str:
        fields = list(page.fields)
        t = self.translations(locale)
        error_count = sum(1 for f in fields if f.error) + len(page.general_errors)
        return self._env(locale).get_template("form.html").render(
            page=page, fields=fields, general_errors=list(page.general_errors), error_count=error_count,
            seconds_left=max(0, math.ceil(page.seconds_left)), time_left=time_left_text(page.seconds_left, t),
            countdown=countdown_formats(t), csrf_field=CSRF_FIELD,
            any_required=any(f.required for f in fields if f.control != "approval"),
            **self._common(locale, zone, page.theme),
        )

    def render(self, template: str, *, locale: str = DEFAULT_LOCALE, zone: dt.tzinfo = dt.UTC,
               theme: Theme | None = None, **context: object) -> str:
        """Any other page of the web channel (the operator inbox's), with the same globals as the form."""
        t = self.translations(locale)
        return self._env(locale).get_template(template).render(
            countdown=countdown_formats(t), **context, **self._common(locale, zone, theme or Theme()))

    def outcome(self, key: str, *, locale: str = DEFAULT_LOCALE, zone: dt.tzinfo = dt.UTC,
                receipt: Receipt | None = None, theme: Theme | None = None,
                tenant_name: str | None = None) -> tuple[int, str]:
        outcome = OUTCOMES[key]
        t = self.translations(locale)
        html = self._env(locale).get_template("outcome.html").render(
            title=t.gettext(outcome.title), text=t.gettext(outcome.text), status=outcome.status, key=key,
            receipt=receipt or Receipt(), tenant_name=tenant_name, **self._common(locale, zone, theme or Theme()),
        )
        return outcome.status, html


def page_response(html: str, *, status: int) -> web.Response:
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS)

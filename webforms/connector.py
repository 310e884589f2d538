"""The web channel: hosted forms at ``/f/{token}``, one question per one-time link, no account needed.

GET only renders, so link scanners and chat previews decide nothing. POST
carries a CSRF token bound to the link and submits through the lifecycle
service, whose validator is the API's. Links are minted on demand
(``POST /v1/requests/{id}/links``): this channel posts nowhere by itself.
"""

from __future__ import annotations

import datetime as dt
import gettext
import logging
from dataclasses import replace
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from handraise.core import proposals, quorum, wording
from handraise.core.api import LinkView, RequestView
from handraise.core.chat import NAMES
from handraise.core.channels import Channel
from handraise.core.config import Settings
from handraise.core.errors import (
    BadRequestError,
    ConfigError,
    HandraiseError,
    InvalidAnswerError,
    NotUtf8Error,
    PayloadTooLargeError,
    RateLimitedError,
)
from handraise.core.i18n import DEFAULT_LOCALE, parse_accept_language
from handraise.core.names import display_name
from handraise.core.schema import FieldError
from handraise.webforms.csrf import csrf_token, csrf_valid, origin_allowed
from handraise.webforms.formbody import read_form
from handraise.webforms.looks import TenantLooks, Theme, build_theme
from handraise.webforms.pages import STATIC_ROUTE, FormPage, Pages, Receipt, page_response
from handraise.webforms.previews import is_preview
from handraise.webforms.render import (
    CSRF_FIELD,
    ENGLISH,
    ParsedForm,
    answer_schema,
    field_views,
    form_specs,
    parse_form,
    read_only_proposal,
    split_errors,
)

__all__ = ["WebFormsChannel", "WebFormsConnector", "WebFormsSettings"]

log = logging.getLogger(__name__)

# Error codes of a dead or unknown link, and the page that explains each.
_OUTCOME_BY_CODE = {
    "not_found": "not_found",
    "link_used": "link_used",
    # AlreadyAnsweredGone (410): the question was answered through another link or channel.
    "already_answered": "already_answered",
    "expired": "expired",
    "cancelled": "cancelled",
    "rate_limited": "rate_limited",
    # 403s of assignment and four eyes: the request is still pending, so no receipt.
    "not_assigned": "not_assigned",
    "four_eyes": "four_eyes",
    # A second, different vote by the same person on a quorum request (core/quorum.py).
    "already_voted": "already_voted",
}
_STATIC_HEADERS = {
    "Cache-Control": "public, max-age=86400",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'",
}


class WebFormsSettings(BaseModel):
    """``[web]``: the web channel is always on; its only keys are each tenant's looks. A typo is reported."""

    model_config = ConfigDict(extra="forbid")

    # ``[web.tenants.<tenant id>]``: accent colour and logo of that tenant's forms.
    tenants: dict[str, TenantLooks] = Field(default_factory=dict)


class WebFormsChannel(Channel[WebFormsSettings]):
    """Serves the hosted forms (and the inbox). A channel, not a connector: it posts nowhere, so it is
    never asked to deliver; every tenant reaches its humans through it by link, and a link dies with
    its request by itself."""

    name = "web"
    settings_model = WebFormsSettings
    mount_prefix = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pages = Pages()
        self.themes: dict[str, Theme] = {}
        for tenant_id, tenant_looks in self.settings.tenants.items():
            if self.app_settings.tenant(tenant_id) is None:
                raise ConfigError(f"web.tenants.{tenant_id}: no such tenant")
            theme, assets = build_theme(tenant_looks)
            self.pages.add_assets(assets)
            self.themes[tenant_id] = theme

    @classmethod
    def is_enabled(cls, app_settings: Settings) -> bool:
        # Always on: the links the API mints and the inbox lead here.
        return True

    def routes(self) -> list[web.AbstractRouteDef]:
        from handraise.webforms.inbox import Inbox

        return [
            web.get(STATIC_ROUTE + "{name}", self.serve_asset),
            web.get("/f/{token}", self.show_form),
            web.post("/f/{token}", self.take_answer),
            # The operator inbox shares this channel's pages, looks and assets.
            *Inbox(forms=self).routes(),
        ]

    # -- handlers ------------------------------------------------------------------

    async def show_form(self, request: web.Request) -> web.StreamResponse:
        """Render the form. Never decides anything: scanners and previews fetch links too.

        ``?decision=approve|reject`` (the Approve/Reject links of a mail) only preselects: the page
        asks the person to confirm with the button.
        """
        token = request.match_info["token"]
        try:
            link, view = await self.service.open_link(token)
        except HandraiseError as e:
            return await self._outcome_for(e, request, token)
        if not is_preview(request):  # an unfurler's fetch is not a person opening the form
            await self.service.link_opened(link=link, view=view)
        if not self.service.may_answer(view, link.answers_as):
            # Assigned to other people: say so before anyone fills anything in (submit refuses too).
            return self._outcome("not_assigned", request, view=view)
        chosen = request.query.get("decision")
        return await self._form_page(request, link, view, chosen=chosen if view.kind == "approval" and chosen in (
            "approve", "reject") else None)

    async def take_answer(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        if not origin_allowed(request.headers.get("Origin"), public_url=self.app_settings.server.public_url,
                              host=request.host):
            self.log.info("form refused: posted from another origin")
            return self._outcome("forbidden", request)
        limit = self.app_settings.server.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._outcome("too_large", request)
        try:
            link, view = await self.service.open_link(token)
            # A link that refused many answers lately is turned away before anything is read or journaled.
            self.service.attempts.check(link.answers_as)
        except HandraiseError as e:
            return await self._outcome_for(e, request, token)
        try:
            form = await read_form(request, limit=limit)
        except PayloadTooLargeError:
            return self._outcome("too_large", request, view=view)
        except NotUtf8Error:
            return self._outcome("not_utf8", request, view=view)
        except BadRequestError as e:
            # Broken multipart, a part without a name, a file, a body cut short: nothing is read or journaled.
            self.log.info("form refused: %s", e.message, extra={"link_id": link.id, "request_id": view.id})
            return self._outcome("bad_request", request, view=view)
        if not csrf_valid(await self.signing_key.get(), link.id, form.get(CSRF_FIELD)):
            self.log.info("form refused: missing or wrong CSRF token",
                          extra={"link_id": link.id, "request_id": view.id})
            return self._outcome("forbidden", request, view=view)

        approval = view.kind == "approval"
        specs = form_specs(answer_schema(view), sensitive=view.sensitive)
        parsed, errors = await self._check(view, specs, form, approval=approval)
        if errors:
            # The attempt is journaled (in English) and counted, as the service does for its own
            # refusals; the person reads it in their page's language.
            await self.service.invalid_attempt(view, principal=link.answers_as, channel=self.name,
                                               errors=[e.to_json() for e in errors])
            if self._locale(request, view.tenant_id) != DEFAULT_LOCALE:
                parsed, errors = await self._check(view, specs, form, approval=approval,
                                                   t=self._translations(request, view))
            return await self._form_page(request, link, view, posted=parsed.posted, errors=errors, status=422)
        try:
            answered = await self.service.submit_link(token=token, response=parsed.value)
        except InvalidAnswerError as e:
            errors = [FieldError(str(d.get("field", "")), str(d.get("message", ""))) for d in (e.fields)]
            return await self._form_page(request, link, view, posted=parsed.posted, errors=errors, status=422)
        except HandraiseError as e:
            return await self._outcome_for(e, request, token)
        self.log.info("form answered", extra={"link_id": link.id, "request_id": view.id})
        if answered.status == "pending":  # a vote on a quorum request, which more votes decide
            return self._outcome("voted", request, view=answered,
                                 receipt=Receipt(headline=quorum.tally_text(self.app_settings, answered)))
        return self._outcome("answered", request, view=answered,
                             receipt=self._receipt(answered, self._translations(request, answered)))

    async def serve_asset(self, request: web.Request) -> web.StreamResponse:
        asset = self.pages.assets.get(request.match_info["name"])
        if asset is None:
            raise web.HTTPNotFound()
        etag = f'"{asset.etag}"'
        headers = {**_STATIC_HEADERS, "ETag": etag}
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        charset = "utf-8" if asset.content_type.startswith("text/") else None
        return web.Response(body=asset.body, content_type=asset.content_type, charset=charset, headers=headers)

    async def _check(self, view: RequestView, specs: list[Any], form: Any, *, approval: bool,
                     t: gettext.NullTranslations = ENGLISH) -> tuple[ParsedForm, list[FieldError]]:
        """The posted answer and its problems, worded in ``t``. The service checks again on submit,
        so nothing here decides what is valid: it only lets the person read why in their language."""
        parsed = parse_form(specs, form, approval=approval, schema=answer_schema(view), translations=t)
        # An approval's edited proposal arrives as proposal.<name> fields: nested as the service takes it.
        parsed = replace(parsed, value=proposals.from_form(parsed.value, proposal=view.proposal,
                                                              posted=parsed.posted))
        return parsed, parsed.errors or await proposals.answer_errors(
            schema=view.schema, proposal_schema=view.proposal_schema, response=parsed.value, t=t)

    # -- pages ---------------------------------------------------------------------

    def _locale(self, request: web.Request, tenant_id: str | None) -> str:
        """The browser's first language we have a catalogue for, else the tenant's, else English."""
        tenant = self.app_settings.tenant(tenant_id) if tenant_id else None
        return self.pages.catalogue.negotiate(parse_accept_language(request.headers.get("Accept-Language")),
                                              tenant.locale if tenant is not None else None)

    def _zone(self, tenant_id: str | None) -> dt.tzinfo:
        tenant = self.app_settings.tenant(tenant_id) if tenant_id else None
        return wording.zone(tenant.timezone if tenant is not None else None)

    def _translations(self, request: web.Request, view: RequestView) -> gettext.NullTranslations:
        return self.pages.translations(self._locale(request, view.tenant_id))

    async def _form_page(self, request: web.Request, link: LinkView, view: RequestView, *,
                         posted: dict[str, list[str]] | None = None, errors: list[FieldError] | None = None,
                         status: int = 200, chosen: str | None = None) -> web.Response:
        approval = view.kind == "approval"
        locale = self._locale(request, view.tenant_id)
        schema = answer_schema(view)
        specs = form_specs(schema, sensitive=view.sensitive)
        by_field, general = split_errors(specs, errors or [])
        # A sensitive answer is never echoed back, not even the parts that are not masked.
        fields = field_views(specs, posted=posted, errors=by_field, keep_values=not view.sensitive,
                             approval=approval, translations=self.pages.translations(locale), schema=schema)
        page = FormPage(
            question=view.message_for_user,
            fields=fields,
            csrf=csrf_token(await self.signing_key.get(), link.id),
            seconds_left=view.expires_at - self.service.clock(),
            expires_at=view.expires_at,
            approval=approval,
            sensitive=view.sensitive,
            tenant_name=display_name(self.app_settings, view.tenant_id),
            asker_name=display_name(self.app_settings, view.tenant_id, view.created_by),
            recipient=link.recipient,
            general_errors=general,
            chosen=chosen,
            tally=quorum.tally_text(self.app_settings, view),
            proposal=read_only_proposal(view),
            theme=self.themes.get(view.tenant_id, Theme()),
        )
        html = self.pages.form(page, locale=locale, zone=self._zone(view.tenant_id))
        return page_response(html, status=status)

    def _outcome(self, key: str, request: web.Request, *, view: RequestView | None = None,
                 receipt: Receipt | None = None) -> web.Response:
        tenant_id = view.tenant_id if view is not None else None
        status, html = self.pages.outcome(key, locale=self._locale(request, tenant_id), zone=self._zone(tenant_id),
                                          receipt=receipt, theme=self.themes.get(tenant_id or "", Theme()),
                                          tenant_name=display_name(self.app_settings, tenant_id) if tenant_id else None)
        return page_response(html, status=status)

    async def _outcome_for(self, error: HandraiseError, request: web.Request, token: str) -> web.Response:
        key = _OUTCOME_BY_CODE.get(error.code)
        if key is None:
            raise error
        if isinstance(error, RateLimitedError):
            response = self._outcome(key, request)
            response.headers["Retry-After"] = str(error.retry_after)
            return response
        if key == "not_found":
            return self._outcome(key, request)
        if error.status == 403:
            return self._outcome(key, request, view=(await self.service.find_link(token))[1])
        # A dead link still names its request: say who answered (or cancelled) and when.
        try:
            link, view = await self.service.find_link(token)
        except HandraiseError:
            return self._outcome(key, request)
        t = self._translations(request, view)
        receipt = Receipt(who=await self._who(view, link, t), at=view.resolved_at or view.expires_at)
        return self._outcome(key, request, view=view, receipt=receipt)

    def _receipt(self, view: RequestView, t: gettext.NullTranslations) -> Receipt:
        """What the person just did, in words, and their answer recapped (never a sensitive one)."""
        response = view.response if view.has_response and not view.sensitive else None
        if view.kind == "approval" and isinstance(response, dict):
            reason = str(response.get("reason") or "").strip()
            if response.get("decision") == "approve":
                lines = ((t.gettext("Reason"), reason),) if reason else ()
                return Receipt(headline=t.gettext("Approved"), lines=lines, at=view.resolved_at)
            headline = t.gettext("Rejected: %(reason)s") % {"reason": reason} if reason else t.gettext("Rejected")
            return Receipt(headline=headline, at=view.resolved_at, tone="rejected")
        if response is None:
            return Receipt(headline=t.gettext("Sent"), at=view.resolved_at, private=view.sensitive)
        return Receipt(headline=t.gettext("Sent"), lines=tuple(wording.answer_lines(view)), at=view.resolved_at)

    async def _who(self, view: RequestView, link: LinkView, t: gettext.NullTranslations) -> str:
        """Who ended the request, in a sentence, by the names people read (never an id)."""
        if view.timed_out:  # expired, or ended by its on_timeout policy
            return t.gettext("The time ran out")
        principal = view.resolved_by or ""
        if view.status == "cancelled":
            name = display_name(self.app_settings, view.tenant_id, principal)
            return t.gettext("Cancelled by %(name)s") % {"name": name} if name else t.gettext("Cancelled")
        if view.status != "answered":
            return ""
        if link.used_at is not None and principal == link.answers_as:
            if link.recipient:
                return t.gettext("Answered with this link by %(name)s") % {"name": link.recipient}
            return t.gettext("Answered with this link")
        name = display_name(self.app_settings, view.tenant_id, principal)
        if name is None and principal and not principal.startswith(("link:", "agent:", "operator:")):
            # A chat's people are named as their messenger last showed them.
            name = await self.state.get(NAMES, principal[:200])
        channel = wording.CHANNEL_NAMES.get(view.resolved_channel or "")
        via = t.gettext(channel) if channel else ""
        if name and via:
            return t.gettext("Answered by %(name)s via %(via)s") % {"name": name, "via": via}
        if via:
            return t.gettext("Answered via %(via)s") % {"via": via}
        return t.gettext("Answered")


# The name that installs made before the channel split hold in their ``handraise.connectors`` entry
# point (their entry_points.txt is written at install time): it keeps them loading the web channel.
WebFormsConnector = WebFormsChannel

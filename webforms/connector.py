"""The web channel: hosted forms at ``/f/{token}``, one question per one-time link, no account needed.

GET only renders, so link scanners and chat previews decide nothing. POST
carries a CSRF token bound to the link and submits through the lifecycle
service, whose validator is the API's. Links are minted on demand
(``POST /v1/requests/{id}/links``): this channel posts nowhere by itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import ClientSession, web
from pydantic import BaseModel, ConfigDict

from handraise.core.api import LinkView, RequestView
from handraise.core.config import Settings
from handraise.core.connectors import Connector
from handraise.core.errors import ConnectorError, HandraiseError, InvalidAnswerError
from handraise.core.schema import FieldError
from handraise.webforms.csrf import csrf_token, csrf_valid, origin_allowed
from handraise.webforms.pages import STATIC_ROUTE, Pages, page_response
from handraise.webforms.render import CSRF_FIELD, field_views, form_specs, parse_form, split_errors

if TYPE_CHECKING:
    from handraise.core.service import RequestService

__all__ = ["WebFormsConnector", "WebFormsSettings"]

log = logging.getLogger(__name__)

# Error codes of a dead or unknown link, and the page that explains each.
_OUTCOME_BY_CODE = {
    "not_found": "not_found",
    "link_used": "link_used",
    # AlreadyAnsweredGone (410): the question was answered through another link or channel.
    "already_answered": "already_answered",
    "expired": "expired",
    "cancelled": "cancelled",
}
_STATIC_HEADERS = {
    "Cache-Control": "public, max-age=86400",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'",
}


class WebFormsSettings(BaseModel):
    """``[web]``: the web channel is always on and has no keys; a typo here is reported, not ignored."""

    model_config = ConfigDict(extra="forbid")


class WebFormsConnector(Connector):
    """Serves the hosted forms; ``deliver``/``withdraw`` exist only because every connector has them."""

    name = "web"
    settings_model = WebFormsSettings
    mount_prefix = ""

    def __init__(self, *, settings: Any, service: RequestService, http: ClientSession, log: logging.Logger,
                 app_settings: Settings) -> None:
        super().__init__(settings=settings, service=service, http=http, log=log, app_settings=app_settings)
        self.pages = Pages()

    # -- the connector interface -------------------------------------------------

    def targets(self, tenant_id: str) -> list[str]:
        return []

    def serves(self, tenant_id: str) -> bool:
        # Every tenant may reach a human through a link, though the channel posts nowhere itself.
        return True

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        raise ConnectorError("the web channel has no targets", permanent=True)

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        # Nothing was posted anywhere; a link dies with its request by itself.
        return None

    def routes(self) -> list[web.AbstractRouteDef]:
        return [
            web.get(STATIC_ROUTE + "{name}", self.serve_asset),
            web.get("/f/{token}", self.show_form),
            web.post("/f/{token}", self.take_answer),
        ]

    # -- handlers ------------------------------------------------------------------

    async def show_form(self, request: web.Request) -> web.StreamResponse:
        """Render the form. Never decides anything: scanners and previews fetch links too.

        ``?decision=approve|reject`` (the Approve/Reject links of a mail) only preselects: the page
        asks the person to confirm with the button.
        """
        try:
            link, view = await self.service.open_link(request.match_info["token"])
        except HandraiseError as e:
            return self._outcome_for(e)
        chosen = request.query.get("decision")
        return await self._form_page(link, view, chosen=chosen if view.kind == "approval" and chosen in (
            "approve", "reject") else None)

    async def take_answer(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        if not origin_allowed(request.headers.get("Origin"), public_url=self.app_settings.server.public_url,
                              host=request.host):
            self.log.info("form refused: posted from another origin")
            return self._outcome("forbidden")
        limit = self.app_settings.server.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._outcome("too_large")
        try:
            link, view = await self.service.open_link(token)
        except HandraiseError as e:
            return self._outcome_for(e)
        try:
            form = await request.post()
        except web.HTTPRequestEntityTooLarge:
            return self._outcome("too_large")
        except (ValueError, LookupError, AssertionError):
            # Broken multipart, a charset Python does not know, bytes that are not in it.
            return self._outcome("bad_request")
        if not csrf_valid(await self.service.server_secret(), link.id, form.get(CSRF_FIELD)):
            self.log.info("form refused: missing or wrong CSRF token",
                          extra={"link_id": link.id, "request_id": view.id})
            return self._outcome("forbidden")

        approval = view.kind == "approval"
        specs = form_specs(view.schema, sensitive=view.sensitive)
        parsed = parse_form(specs, form, approval=approval)
        if parsed.errors:
            # Core's validator has no word for "nothing was entered" on a one-value answer;
            # the attempt is journaled all the same, as the service does for its own refusals.
            await self.service.journal(tenant_id=view.tenant_id, event="invalid_attempt", request_id=view.id,
                                       run_id=view.run_id, principal=link.answers_as, channel=self.name,
                                       data={"errors": [e.to_json() for e in parsed.errors]})
            return await self._form_page(link, view, posted=parsed.posted, errors=parsed.errors, status=422)
        try:
            await self.service.submit_link(token=token, response=parsed.value)
        except InvalidAnswerError as e:
            errors = [FieldError(str(d.get("field", "")), str(d.get("message", ""))) for d in (e.fields)]
            return await self._form_page(link, view, posted=parsed.posted, errors=errors, status=422)
        except HandraiseError as e:
            return self._outcome_for(e)
        self.log.info("form answered", extra={"link_id": link.id, "request_id": view.id})
        return self._outcome("answered")

    async def serve_asset(self, request: web.Request) -> web.StreamResponse:
        asset = self.pages.assets.get(request.match_info["name"])
        if asset is None:
            raise web.HTTPNotFound()
        etag = f'"{asset.etag}"'
        headers = {**_STATIC_HEADERS, "ETag": etag}
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=asset.body, content_type=asset.content_type, charset="utf-8", headers=headers)

    # -- pages ---------------------------------------------------------------------

    async def _form_page(self, link: LinkView, view: RequestView, *, posted: dict[str, list[str]] | None = None,
                         errors: list[FieldError] | None = None, status: int = 200,
                         chosen: str | None = None) -> web.Response:
        approval = view.kind == "approval"
        specs = form_specs(view.schema, sensitive=view.sensitive)
        by_field, general = split_errors(specs, errors or [])
        # A sensitive answer is never echoed back, not even the parts that are not masked.
        fields = field_views(specs, posted=posted, errors=by_field, keep_values=not view.sensitive,
                             approval=approval)
        tenant = self.app_settings.tenant(view.tenant_id)
        html = self.pages.form(
            question=view.message_for_user,
            asker=(tenant.name if tenant is not None and tenant.name else view.tenant_id),
            created_by=view.created_by,
            recipient=link.recipient,
            seconds_left=view.expires_at - self.service.clock(),
            fields=fields,
            general_errors=general,
            csrf=csrf_token(await self.service.server_secret(), link.id),
            approval=approval,
            sensitive=view.sensitive,
            chosen=chosen,
        )
        return page_response(html, status=status)

    def _outcome(self, key: str) -> web.Response:
        status, html = self.pages.outcome(key)
        return page_response(html, status=status)

    def _outcome_for(self, error: HandraiseError) -> web.Response:
        key = _OUTCOME_BY_CODE.get(error.code)
        if key is None:
            raise error
        return self._outcome(key)

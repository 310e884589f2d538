"""The operator inbox's routes: sign-in, the live list, answering in place, history, a request's detail, runs.

Every page is server-rendered and works without script; ``inbox.js`` adds the live list
(the tenant's SSE stream, resumed with ``Last-Event-ID``), countdowns, the pending count
in the title and favicon, keyboard use and opt-in notifications with generic text.
Answers go through the lifecycle service as ``operator:<name>`` via ``inbox``, with the
hosted form's renderer and validation (``webforms/render.py``, ``templates/_form.html``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from handraise.core import proposals, quorum, wording
from handraise.core.api import RequestView, iso
from handraise.core.appkeys import ANNOTATIONS, INBOX
from handraise.core.errors import (
    AlreadyAnsweredError,
    AlreadyVotedError,
    BadRequestError,
    ExpiredError,
    ForbiddenError,
    FourEyesError,
    HandraiseError,
    InvalidAnswerError,
    LinkUsedError,
    NotAssignedError,
    NotFoundError,
    RequestCancelledError,
    UnauthorizedError,
)
from handraise.core.cursors import MAX_CURSOR_CHARS
from handraise.core.events import REQUEST_CREATED, REQUEST_RESOLVED, REQUEST_SCHEDULED, REQUEST_VOTED
from handraise.core.http.events import resume_point, serve_stream
from handraise.core.inbox import InboxSession
from handraise.core.names import display_name
from handraise.core.schema import FieldError
from handraise.core.people import expand, names
from handraise.webforms.csrf import origin_allowed
from handraise.webforms.formbody import read_form
from handraise.webforms.inbox.session import (
    COOKIE,
    CSRF_HEADER,
    INBOX_HEADERS,
    clear_cookie,
    csrf_for,
    csrf_matches,
    is_https,
    set_cookie,
)
from handraise.webforms.looks import Asset, Theme
from handraise.webforms.pages import FormPage
from handraise.webforms.render import (
    CSRF_FIELD,
    answer_schema,
    field_views,
    form_specs,
    parse_form,
    read_only_proposal,
    split_errors,
)

if TYPE_CHECKING:
    from handraise.core.signingkey import SigningKey
    from handraise.webforms.connector import WebFormsChannel

__all__ = ["Inbox"]

log = logging.getLogger(__name__)

_ASSETS = {"inbox.js": "text/javascript", "inbox.css": "text/css"}
_TERMINAL = ("answered", "expired", "cancelled")
_PAGE = 25
# The history's keyset cursors (core/cursors.py): the page just older, or just newer, than a position.
_CURSORS = ("older", "newer")
_CHANNEL_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_MAX_ID = 200
_ANNOTATION_KINDS = ("rating", "flag", "label", "correction")


def _json(data: Any, *, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers={"Cache-Control": "no-store"})


class Inbox:
    """Routes of ``/inbox``, mounted by the web channel; pages share the hosted form's Pages and looks."""

    def __init__(self, *, forms: WebFormsChannel) -> None:
        self.forms = forms
        folder = forms.pages.templates_dir / "inbox" / "static"
        forms.pages.add_assets({name: Asset.of((folder / name).read_bytes(), kind) for name, kind in _ASSETS.items()})

    @property
    def service(self) -> Any:
        return self.forms.service

    @property
    def signing_key(self) -> SigningKey:
        return self.forms.signing_key

    @property
    def settings(self) -> Any:
        return self.forms.app_settings

    def routes(self) -> list[web.AbstractRouteDef]:
        return [
            web.get("/inbox", self.show_list),
            web.get("/inbox/signin/{token}", self.show_signin),
            web.post("/inbox/signin/{token}", self.sign_in),
            web.post("/inbox/signout", self.sign_out),
            web.get("/inbox/events", self.events),
            web.get("/inbox/api/pending", self.api_pending),
            web.get("/inbox/api/requests/{id}", self.api_request),
            web.get("/inbox/r/{id}", self.show_request),
            web.post("/inbox/r/{id}", self.answer),
            web.get("/inbox/history", self.show_history),
            web.get("/inbox/runs/{run_id}", self.show_run),
            web.post("/inbox/runs/{run_id}/annotations", self.annotate),
            web.get("/inbox/favicon/{count}.svg", self.favicon),
        ]

    # -- sessions ----------------------------------------------------------------------

    async def _session(self, request: web.Request) -> InboxSession | None:
        return await request.app[INBOX].session(request.cookies.get(COOKIE))

    async def _required(self, request: web.Request) -> InboxSession:
        """The session for a JSON or stream endpoint: 401 in the API's envelope without one."""
        session = await self._session(request)
        if session is None:
            raise UnauthorizedError("sign in to the inbox first (a sign-in link from handraise inbox-link)")
        return session

    async def _checked_post(self, request: web.Request, session: InboxSession) -> Any:
        """The posted form of a state-changing request, after its Origin and CSRF token are checked."""
        if not origin_allowed(request.headers.get("Origin"), public_url=self.settings.server.public_url,
                              host=request.host):
            raise ForbiddenError("posted from another site")
        # The hosted form's reader: 413 past the limit, 400 for a form that cannot be read or is not UTF-8 (in the
        # error envelope), before the CSRF token is looked at.
        form = await read_form(request, limit=self.settings.server.max_body_bytes)
        presented = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
        if not csrf_matches(await self.signing_key.get(), session.id, presented):
            log.info("inbox post refused: missing or wrong CSRF token", extra={"session_id": session.id})
            raise ForbiddenError("missing or wrong CSRF token; reload the page and try again")
        return form

    # -- rendering ---------------------------------------------------------------------

    def _zone(self, tenant_id: str) -> dt.tzinfo:
        tenant = self.settings.tenant(tenant_id)
        return wording.zone(tenant.timezone if tenant is not None else None)

    async def _page(self, request: web.Request, template: str, *, session: InboxSession | None,
                    status: int = 200, title: str = "", **context: Any) -> web.Response:
        pages = self.forms.pages
        tenant_id = session.tenant_id if session is not None else None
        locale = self.forms._locale(request, tenant_id)
        zone = self._zone(tenant_id) if tenant_id else dt.UTC
        theme = self.forms.themes.get(tenant_id or "", Theme())
        html = pages.render(template, locale=locale, zone=zone, theme=theme, title=title, session=session,
                            tenant_name=self._tenant_name(tenant_id) if tenant_id else None,
                            csrf=csrf_for(await self.signing_key.get(), session.id) if session else "",
                            csrf_field=CSRF_FIELD, **context)
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8",
                            headers=INBOX_HEADERS)

    def _tenant_name(self, tenant_id: str) -> str:
        # Display names (issue 15) where configured; the id otherwise.
        return display_name(self.settings, tenant_id) or tenant_id

    def asker(self, view: RequestView) -> str:
        """Who asked, by the name people read: the key's display name, else its id."""
        return display_name(self.settings, view.tenant_id, view.created_by) or wording.principal_label(
            view.created_by) or view.created_by

    def card(self, view: RequestView) -> dict[str, Any]:
        """One pending request as the list shows it (the template and inbox.js draw the same fields)."""
        return {
            "id": view.id, "question": view.message_for_user, "asker": self.asker(view), "run_id": view.run_id,
            "kind": view.kind, "sensitive": view.sensitive, "status": view.status,
            "channels": list(view.channels),
            "deliveries": [{"channel": d.channel, "status": d.status} for d in view.deliveries],
            "created_at": iso(view.created_at), "expires_at": iso(view.expires_at),
            "seconds_left": max(0, int(view.expires_at - self.service.clock())),
            "href": f"/inbox/r/{view.id}",
            # A quorum request's votes so far (core/quorum.py); "" for any other.
            "tally": quorum.tally_text(self.settings, view),
        }

    def _signed_out(self, request: web.Request, *, status: int = 401) -> Awaitable[web.Response]:
        return self._page(request, "inbox/signin.html", session=None, status=status, title="Sign in",
                          state="needed", who=None)

    # -- sign-in -----------------------------------------------------------------------

    async def show_signin(self, request: web.Request) -> web.Response:
        """Says who the link signs in; a button posts it. A GET never uses the link (scanners fetch links)."""
        try:
            who = await request.app[INBOX].pending_signin(request.match_info["token"])
        except HandraiseError as e:
            return await self._signin_refused(request, e)
        return await self._page(request, "inbox/signin.html", session=None, title="Sign in", state="confirm",
                                who={"name": who["name"], "tenant": self._tenant_name(who["tenant_id"])})

    async def sign_in(self, request: web.Request) -> web.Response:
        if not origin_allowed(request.headers.get("Origin"), public_url=self.settings.server.public_url,
                              host=request.host):
            return await self._page(request, "inbox/signin.html", session=None, status=403, title="Sign in",
                                    state="forbidden", who=None)
        try:
            token, session = await request.app[INBOX].redeem(request.match_info["token"])
        except HandraiseError as e:
            return await self._signin_refused(request, e)
        response = web.HTTPSeeOther("/inbox", headers=INBOX_HEADERS)
        set_cookie(response, token, secure=is_https(request, self.settings.server.public_url),
                   max_age=int(session.expires_at - session.created_at))
        raise response

    async def _signin_refused(self, request: web.Request, error: HandraiseError) -> web.Response:
        state = {NotFoundError: "invalid", LinkUsedError: "used", ExpiredError: "expired"}.get(type(error))
        if state is None:
            raise error
        return await self._page(request, "inbox/signin.html", session=None, status=error.status, title="Sign in",
                                state=state, who=None)

    async def sign_out(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        await self._checked_post(request, session)
        await request.app[INBOX].sign_out(session)
        response = web.HTTPSeeOther("/inbox", headers=INBOX_HEADERS)
        clear_cookie(response, secure=is_https(request, self.settings.server.public_url))
        raise response

    # -- the list ----------------------------------------------------------------------

    async def _pending(self, request: web.Request, session: InboxSession) -> tuple[int, list[dict[str, Any]]]:
        # The stream resumes after this id: read before the list, so nothing falls between the two.
        after = await request.app[INBOX].last_event_id(session.tenant_id)
        views = await request.app[INBOX].requests(session, statuses=("pending",), limit=200)
        # Waiting for *you*: a request assigned to other people is theirs (its page says so; history lists it).
        return after, [self.card(v) for v in views if self.service.may_answer(v, session.principal)]

    async def show_list(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        after, cards = await self._pending(request, session)
        return await self._page(request, "inbox/list.html", session=session, title="Inbox", cards=cards,
                                after=after, notice=request.query.get("sent") == "1")

    async def api_pending(self, request: web.Request) -> web.Response:
        session = await self._required(request)
        after, cards = await self._pending(request, session)
        return _json({"requests": cards, "last_event_id": after})

    async def api_request(self, request: web.Request) -> web.Response:
        session = await self._required(request)
        view = await self._view(session, request.match_info["id"])
        # The list adds a card live only for a request this session may answer (as ``_pending`` lists them).
        return _json({**self.card(view), "may_answer": self.service.may_answer(view, session.principal)})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The tenant's request events, as ``GET /v1/events`` streams them, for this session; and
        ``request.scheduled``: an escalation step may have added this session's person to who answers."""
        session = await self._required(request)
        return await serve_stream(request, tenant_id=session.tenant_id,
                                  types={REQUEST_CREATED, REQUEST_RESOLVED, REQUEST_SCHEDULED, REQUEST_VOTED},
                                  after=resume_point(request))

    async def favicon(self, request: web.Request) -> web.Response:
        raw = request.match_info["count"]
        if not raw.isdigit() or len(raw) > 4:
            raise web.HTTPNotFound()
        count = int(raw)
        text = "99+" if count > 99 else str(count)
        body = self.forms.pages.render("inbox/favicon.svg", locale="en", zone=dt.UTC, theme=Theme(), text=text,
                                       count=count)
        return web.Response(text=body, content_type="image/svg+xml",
                            headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff",
                                     "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"})

    # -- one request -------------------------------------------------------------------

    async def _view(self, session: InboxSession, request_id: str) -> RequestView:
        if not request_id or len(request_id) > _MAX_ID:
            raise NotFoundError("no such request")
        # Another tenant's request reads exactly like a missing one.
        return await self.service.get(tenant_id=session.tenant_id, request_id=request_id)

    async def show_request(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        try:
            view = await self._view(session, request.match_info["id"])
        except NotFoundError:
            return await self._page(request, "inbox/missing.html", session=session, status=404, title="Not found")
        return await self._request_page(request, session, view)

    async def answer(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        form = await self._checked_post(request, session)
        try:
            view = await self._view(session, request.match_info["id"])
        except NotFoundError:
            return await self._page(request, "inbox/missing.html", session=session, status=404, title="Not found")
        if "answer" not in session.scopes:
            raise ForbiddenError("this session may not answer")
        approval = view.kind == "approval"
        specs = form_specs(answer_schema(view), sensitive=view.sensitive)
        if view.status != "pending":
            return await self._request_page(request, session, view, status=409, conflict=True)
        parsed = parse_form(specs, form, approval=approval)
        errors = parsed.errors
        if not errors:
            try:
                # An approval's edited proposal arrives as proposal.<name> fields; the service checks it.
                response = proposals.from_form(parsed.value, proposal=view.proposal, posted=parsed.posted)
                await self.service.submit(tenant_id=session.tenant_id, request_id=view.id, response=response,
                                          principal=session.principal, channel="inbox")
            except (NotAssignedError, FourEyesError, AlreadyVotedError) as e:
                return await self._request_page(request, session, view, status=403, refusal=e.code)
            except InvalidAnswerError as e:
                errors = [FieldError(str(d.get("field", "")), str(d.get("message", ""))) for d in e.fields]
            except (AlreadyAnsweredError, ExpiredError, RequestCancelledError):
                current = await self._view(session, view.id)
                return await self._request_page(request, session, current, status=409, conflict=True)
            else:
                log.info("inbox answered", extra={"request_id": view.id, "session_id": session.id})
                raise web.HTTPSeeOther("/inbox?sent=1", headers=INBOX_HEADERS)
        else:
            await self.service.journal(tenant_id=view.tenant_id, event="invalid_attempt", request_id=view.id,
                                       run_id=view.run_id, principal=session.principal, channel="inbox",
                                       data={"errors": [e.to_json() for e in errors]})
        return await self._request_page(request, session, view, posted=parsed.posted, errors=errors, status=422)

    async def _request_page(self, request: web.Request, session: InboxSession, view: RequestView, *,
                            posted: dict[str, list[str]] | None = None, errors: list[FieldError] | None = None,
                            status: int = 200, conflict: bool = False, refusal: str | None = None) -> web.Response:
        form = None
        # Assigned to other people: the page says who may answer, and shows no form to this session.
        assigned = (names(self.settings, view.tenant_id, expand(self.settings, view.tenant_id, view.assign_to).people)
                    if view.assign_to is not None and view.status == "pending" else [])
        may_answer = self.service.may_answer(view, session.principal)
        if view.status == "pending" and "answer" in session.scopes and may_answer:
            locale = self.forms._locale(request, view.tenant_id)
            schema = answer_schema(view)
            specs = form_specs(schema, sensitive=view.sensitive)
            by_field, general = split_errors(specs, errors or [])
            fields = field_views(specs, posted=posted, errors=by_field, keep_values=not view.sensitive,
                                 approval=view.kind == "approval",
                                 translations=self.forms.pages.translations(locale), schema=schema)
            form = FormPage(question=view.message_for_user, fields=fields,
                            csrf=csrf_for(await self.signing_key.get(), session.id),
                            seconds_left=view.expires_at - self.service.clock(), expires_at=view.expires_at,
                            approval=view.kind == "approval", sensitive=view.sensitive,
                            general_errors=general, action=f"/inbox/r/{view.id}",
                            proposal=read_only_proposal(view))
        entries = await self.service.journal_entries(tenant_id=session.tenant_id, request_id=view.id)
        fields = list(form.fields) if form else []
        return await self._page(
            request, "inbox/request.html", session=session, status=status, title="Question", view=view,
            card=self.card(view), form=form, fields=fields, general_errors=list(form.general_errors) if form else [],
            error_count=sum(1 for f in fields if f.error) + (len(form.general_errors) if form else 0),
            any_required=any(f.required for f in fields if f.control != "approval"),
            outcome=wording.headline(view, who=self._who(view), tz=self._zone(view.tenant_id)),
            answer_lines=wording.answer_lines(view) if view.has_response and not view.sensitive else [],
            journal=[self._entry(e, tenant_id=session.tenant_id) for e in entries], conflict=conflict,
            refusal=refusal or (None if may_answer else "not_assigned"), assigned=", ".join(assigned),
            tally=quorum.tally_text(self.settings, view))

    def _who(self, view: RequestView) -> str | None:
        principal = view.resolved_by or ""
        if principal.startswith("operator:"):
            return display_name(self.settings, view.tenant_id, principal) or principal.partition(":")[2]
        return display_name(self.settings, view.tenant_id, principal)

    def _entry(self, entry: dict[str, Any], *, tenant_id: str) -> dict[str, Any]:
        """A journal entry as the detail page lists it: what, who (a person by name, whatever channel),
        when, channel (never an answer's value)."""
        principal = entry.get("principal") or ""
        return {"event": entry["event"].replace("_", " "),
                "principal": display_name(self.settings, tenant_id, principal) or principal if principal else "",
                "channel": wording.CHANNEL_NAMES.get(entry.get("channel") or "", entry.get("channel") or ""),
                "at": entry["at"]}

    # -- history -----------------------------------------------------------------------

    async def show_history(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        filters, problems = _history_filters(request.query)
        page = None
        if not problems:
            try:
                page = await request.app[INBOX].history(session, limit=_PAGE, **filters)
            except BadRequestError as e:  # a cursor altered, forged, or given out for another list
                problems.append(str(e))
        rows = [{"card": self.card(v), "outcome": wording.headline(v, who=self._who(v)),
                 "answer": wording.answer_lines(v) if v.has_response and not v.sensitive else [],
                 "resolved_at": iso(v.resolved_at)} for v in (page.views if page else [])]
        query = {k: v for k, v in request.query.items() if k not in _CURSORS and v}
        return await self._page(request, "inbox/history.html", session=session, status=400 if problems else 200,
                                title="History", rows=rows, problems=problems, query=query,
                                older=page.older if page else None, newer=page.newer if page else None,
                                channels=sorted(wording.CHANNEL_NAMES), link=_query_link)

    # -- runs --------------------------------------------------------------------------

    async def show_run(self, request: web.Request, *, status: int = 200,
                       problems: list[str] | None = None) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        run_id = request.match_info["run_id"]
        if not run_id or len(run_id) > _MAX_ID:
            return await self._page(request, "inbox/missing.html", session=session, status=404, title="Not found")
        views = await request.app[INBOX].requests(session, statuses=("pending", *_TERMINAL), run_id=run_id,
                                                  limit=200)
        annotations = request.app[ANNOTATIONS]
        notes: list[dict[str, Any]] = []
        summary = None
        if annotations.enabled:
            notes = await annotations.all_for_run(tenant_id=session.tenant_id, run_id=run_id)
            summary = await annotations.summary(tenant_id=session.tenant_id, run_id=run_id)
        if not views and not notes:
            # A run this tenant never named reads as missing (another tenant's too).
            return await self._page(request, "inbox/missing.html", session=session, status=404, title="Not found")
        rows = [{"card": self.card(v), "outcome": wording.headline(v, who=self._who(v))} for v in views]
        return await self._page(request, "inbox/run.html", session=session, status=status, title="Run",
                                run_id=run_id, rows=rows, notes=notes, summary=summary,
                                may_annotate=annotations.enabled and "annotate" in session.scopes,
                                problems=problems or [], kinds=_ANNOTATION_KINDS)

    async def annotate(self, request: web.Request) -> web.Response:
        session = await self._session(request)
        if session is None:
            return await self._signed_out(request)
        form = await self._checked_post(request, session)
        if "annotate" not in session.scopes:
            raise ForbiddenError("this session may not annotate runs")
        run_id = request.match_info["run_id"]
        kind = form.get("kind")
        signal: dict[str, Any] = {"kind": kind}
        value = str(form.get("value") or "").strip()
        if kind == "rating":
            signal["rating"] = int(value) if value.isdigit() and len(value) == 1 else value
        elif kind == "label":
            signal["label"] = value
        elif kind == "correction":
            signal["correction"] = value
        body: dict[str, Any] = {"signal": signal}
        note = str(form.get("note") or "").strip()
        if note:
            body["note"] = note
        annotations = request.app[ANNOTATIONS]
        try:
            visible = await request.app[INBOX].requests(session, statuses=("pending", *_TERMINAL), run_id=run_id,
                                                        limit=1)
            if not visible and not await annotations.all_for_run(tenant_id=session.tenant_id, run_id=run_id):
                raise NotFoundError("no such run")
            await annotations.record(tenant_id=session.tenant_id, run_id=run_id, principal=session.principal,
                                     body=body, channel="inbox")
        except NotFoundError:
            return await self._page(request, "inbox/missing.html", session=session, status=404, title="Not found")
        except HandraiseError as e:
            if e.status != 422:
                raise
            problems = [f"{f.get('field')}: {f.get('message')}" for f in e.fields] or [e.message]
            return await self.show_run(request, status=422, problems=problems)
        raise web.HTTPSeeOther(f"/inbox/runs/{run_id}", headers=INBOX_HEADERS)


def _history_filters(query: Any) -> tuple[dict[str, Any], list[str]]:
    """The history page's filters from its query string, and what is wrong with them."""
    problems: list[str] = []
    status = query.get("status") or ""
    statuses: tuple[str, ...] = _TERMINAL
    if status:
        if status not in _TERMINAL:
            problems.append("status must be answered, expired or cancelled")
        else:
            statuses = (status,)
    channel = query.get("channel") or None
    if channel is not None and not _CHANNEL_RE.match(channel):
        problems.append("channel is not a channel name")
    run_id = query.get("run") or None
    agent = query.get("agent") or None
    for name, value in (("run", run_id), ("agent", agent)):
        if value is not None and len(value) > _MAX_ID:
            problems.append(f"{name} is too long")
    times: dict[str, float | None] = {}
    for name in ("since", "until"):
        raw = query.get(name) or ""
        times[name] = None
        if raw:
            try:
                times[name] = dt.datetime.fromisoformat(raw).replace(tzinfo=dt.UTC).timestamp() \
                    if len(raw) <= 10 else dt.datetime.fromisoformat(raw).timestamp()
            except ValueError:
                problems.append(f"{name} must be a date (YYYY-MM-DD)")
    cursors = {name: query.get(name) or None for name in _CURSORS}
    for name, value in cursors.items():
        if value is not None and len(value) > MAX_CURSOR_CHARS:
            problems.append(f"{name} is not a page this server gave out")
    if agent is not None and ":" not in agent:
        agent = f"agent:{agent}"
    return {"statuses": statuses, "channel": channel, "run_id": run_id, "created_by": agent, "since": times["since"],
            "until": times["until"], **cursors}, problems


def _query_link(query: dict[str, str], **changes: Any) -> str:
    from urllib.parse import urlencode

    merged = {**query, **{k: str(v) for k, v in changes.items()}}
    return "/inbox/history?" + urlencode(merged)

"""``POST /v1/inbox/links``: a one-time sign-in link to the operator inbox, minted with an ``answer`` key.

A link that names a person (``person``) is handed only to a key bound to that same person, or sent to
that person's own channel (``deliver``) and never returned; a name that is a person's is refused to a key
bound to nobody (DESIGN invariant 10). Each refusal is a 403 with its own code, journaled.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from handraise.core import wording
from handraise.core.api import PersonId, iso, parse_body
from handraise.core.appkeys import INBOX, KEYRING, PRIVATE, SERVICE, SETTINGS
from handraise.core.errors import ForbiddenError, NotDeliveredError
from handraise.core.http.input import read_json
from handraise.core.inbox import check_name
from handraise.core.people import naming_refusal, require_person
from handraise.core.personal import PrivateNote

routes = web.RouteTableDef()


class InboxLinkBody(BaseModel):
    """Who signs in with the link: an operator by ``name`` (``operator:<name>``, nobody in particular), or
    one of the tenant's people (``person:<id>``)."""

    model_config = ConfigDict(extra="forbid", strict=True, title="InboxLinkRequest")

    name: Any = Field(default=None, description="An operator's name: 1 to 64 printable characters without "
                                                "':', '<' or '>', and not one of the tenant's people")
    person: PersonId | None = Field(default=None, description="One of the tenant's people: the session acts as "
                                                              "them. Needs a key bound to that person, or deliver")
    deliver: bool = Field(default=False, description="Send the link to the person's own channel (their DM, their "
                                                     "address) instead of returning it: 202 with delivered_to")


class DeliveredRecord(BaseModel):
    """A sign-in or link sent to a person's own channel: where it went, never the link itself."""

    model_config = ConfigDict(title="Delivered")

    delivered_to: str = Field(description="The channel that took it (telegram, slack, matrix, email)")
    person: str
    expires_at: str


@routes.post("/v1/inbox/links")
async def mint_inbox_link(request: web.Request) -> web.StreamResponse:
    app = request.app
    principal = await app[KEYRING].authenticate(request)
    principal.require("answer")
    body = parse_body(InboxLinkBody, await read_json(request), what="inbox link request")
    # A key bound to a person signs in only as that person: its links are theirs unless it names another.
    person = body.person if body.person is not None else principal.person
    if person is not None:
        require_person(app[SETTINGS], principal.tenant_id, person)  # 422 before any refusal: nothing journaled
    # An operator needs a name (422 without one); a person's session is named after them unless told.
    name = None if body.name is None and person is not None else check_name(body.name)
    inbox, private = app[INBOX], app[PRIVATE]
    if person is not None and body.deliver:
        channels = private.check(principal.tenant_id, person)
        minted = await inbox.mint(tenant_id=principal.tenant_id, person=person, created_by=principal.name,
                                  scopes=principal.scopes, private=True)
        note = PrivateNote(text=wording.text("signin_note"), url=minted.url, button=wording.text("signin_button"),
                           title=wording.text("signin_title"))
        sent = await private.send(tenant_id=principal.tenant_id, person_id=person, note=note, channels=channels,
                                  principal=principal.name, about={"signin_id": minted.id})
        if sent is None:
            raise NotDeliveredError(f"the sign-in link could not be sent to {person}: none of their channels "
                                          f"({', '.join(channels)}) took it; nothing usable was handed out")
        return web.json_response({"delivered_to": sent, "person": person, "expires_at": iso(minted.expires_at)},
                                 status=202)
    if person is not None:
        refusal = naming_refusal(principal.person, person)
        if refusal is not None:
            await _refused(request, principal.tenant_id, principal.name, refusal, person)
    try:
        minted = await inbox.mint(tenant_id=principal.tenant_id, name=name, person=person,
                                  created_by=principal.name, scopes=principal.scopes)
    except ForbiddenError as refusal:  # a name that is a person's
        await _refused(request, principal.tenant_id, principal.name, refusal, person)
    out = {"url": minted.url, "expires_at": iso(minted.expires_at), "name": minted.name}
    return web.json_response(out | ({"person": person} if person is not None else {}), status=201)


async def _refused(request: web.Request, tenant_id: str, principal: str, refusal: ForbiddenError,
                   person: str | None) -> None:
    await request.app[SERVICE].journal(tenant_id=tenant_id, event="access_refused", principal=principal,
                                       channel="api", data={"reason": refusal.code, "route": "inbox_link",
                                                            **({"for": f"person:{person}"} if person else {})})
    raise refusal

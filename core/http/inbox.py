"""``POST /v1/inbox/links``: a one-time sign-in link to the operator inbox, minted with an ``answer`` key."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from handraise.core.api import iso, parse_body
from handraise.core.appkeys import INBOX, KEYRING
from handraise.core.http.input import read_json
from handraise.core.inbox import check_name

routes = web.RouteTableDef()


class InboxLinkBody(BaseModel):
    """Who signs in with the link; the session acts as ``operator:<name>`` in the key's tenant."""

    model_config = ConfigDict(extra="forbid", strict=True, title="InboxLinkRequest")

    name: Any


@routes.post("/v1/inbox/links")
async def mint_inbox_link(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authenticate(request)
    principal.require("answer")
    body = parse_body(InboxLinkBody, await read_json(request), what="inbox link request")
    minted = await request.app[INBOX].mint(tenant_id=principal.tenant_id, name=check_name(body.name),
                                           created_by=principal.name, scopes=principal.scopes)
    return web.json_response({"url": minted.url, "expires_at": iso(minted.expires_at), "name": minted.name},
                             status=201)

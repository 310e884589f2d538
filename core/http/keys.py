"""``/v1/keys``: an ``admin`` key makes, lists and revokes its tenant's stored keys (as ``handraise keys``)."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from handraise.core.api import Id, PersonId, iso, parse_body
from handraise.core.apikeys import list_keys, make_key, revoke_key
from handraise.core.appkeys import KEYRING, SERVICE, SETTINGS, STORE
from handraise.core.http.input import read_json
from handraise.core.http.output import json_response
from handraise.core.scopes import Scope

routes = web.RouteTableDef()


class KeyBody(BaseModel):
    """``POST /v1/keys``: a new stored key of the caller's tenant."""

    model_config = ConfigDict(extra="forbid", strict=True, title="KeyRequest")

    scopes: list[Scope] = Field(min_length=1, max_length=7, description="What the key may do")
    id: Id | None = Field(default=None, description="The key's id (default: generated)")
    person: PersonId | None = Field(default=None, description="Bind the key to one of the tenant's people: it "
                                                              "acts only as them (person:<id>); never with ask")


class MadeKeyRecord(BaseModel):
    """``POST /v1/keys``: the key made, with its secret, shown this once."""

    model_config = ConfigDict(title="MadeKey")

    id: str
    tenant_id: str
    scopes: list[str]
    person: str | None = None
    created_at: str
    key: str = Field(description="The secret: shown once, only its sha256 is kept")


def _shown(row: dict) -> dict:
    out = dict(row)
    for field in ("created_at", "revoked_at"):
        if out.get(field) is not None:
            out[field] = iso(out[field])
    return out


@routes.post("/v1/keys")
async def create_key(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "admin")
    body = parse_body(KeyBody, await read_json(request), what="key request")
    service = request.app[SERVICE]
    made = await make_key(request.app[STORE], request.app[SETTINGS], tenant_id=principal.tenant_id,
                          scopes=list(body.scopes), key_id=body.id, person=body.person, made_by=principal.name,
                          now=service.clock())
    return json_response(_shown(made.to_json()), status=201)


@routes.get("/v1/keys")
async def get_keys(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "admin")
    keys = await list_keys(request.app[STORE], request.app[SETTINGS], tenant_id=principal.tenant_id)
    return json_response({"keys": [_shown(k) for k in keys]})


@routes.post("/v1/keys/{key_id}/revoke")
async def revoke(request: web.Request) -> web.StreamResponse:
    principal = await request.app[KEYRING].authorize(request, "admin")
    await revoke_key(request.app[STORE], tenant_id=principal.tenant_id, key_id=request.match_info["key_id"],
                     revoked_by=principal.name, now=request.app[SERVICE].clock())
    return json_response({"id": request.match_info["key_id"], "revoked": True})

"""One error handler: HandraiseError and aiohttp's HTTP errors become OpenWOP's flat error envelope."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from handraise.core.appkeys import SETTINGS
from handraise.core.errors import BadRequestError, HandraiseError, PayloadTooLargeError, error_body
from handraise.core.logs import mask_tokens

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}


def error_response(err: HandraiseError) -> web.Response:
    return web.json_response(err.to_json(), status=err.status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HandraiseError as e:
        if e.status >= 500:
            log.error("request failed", extra={"path": mask_tokens(request.path), "code": e.code})
        return error_response(e)
    except web.HTTPException as e:
        if e.status < 400 or e.content_type == "text/html":
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        body = error_body(code, e.reason)
        return web.json_response(body, status=e.status, headers={k: v for k, v in e.headers.items()
                                                                  if k.lower() == "allow"})
    except (ConnectionResetError, web.HTTPClientError):
        raise
    except Exception:
        log.exception("unhandled error", extra={"path": mask_tokens(request.path)})
        return web.json_response(error_body("internal", "internal error"), status=500)


async def read_json(request: web.Request) -> Any:
    """The JSON body, or 400 (malformed) / 413 (over the limit)."""
    limit = request.config_dict[SETTINGS].server.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLargeError(f"the body is larger than {limit} bytes")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLargeError(f"the body is larger than {limit} bytes") from None
    if not raw:
        raise BadRequestError("the body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequestError(f"malformed JSON: {e}") from None

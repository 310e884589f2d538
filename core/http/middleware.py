"""One error handler: HandraiseError and aiohttp's HTTP errors become OpenWOP's flat error envelope.

It also refuses a malformed request line or key header before any handler sees it
(``core/http/input.py``), so no handler meets a NUL in a path or a key that is not text; and, on the
main application, admits each bounded write (``core/http/admission.py``) in the same await, so a
request passes one middleware rather than a stack of them. ``forbid_storing`` beside it is the one place
that says which responses no cache may keep; ``every_response`` the headers every response carries.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from handraise.core.errors import (
    BadRequestError,
    HandraiseError,
    MethodNotAllowedError,
    NotFoundError,
    OverloadedError,
    RetryLaterError,
    ShuttingDownError,
    UnauthorizedError,
    error_body,
)
from handraise.core.http.admission import WriteAdmission
from handraise.core.http.input import read_json, refuse_malformed
from handraise.core.http.output import json_response
from handraise.core.logs import mask_tokens

__all__ = ["api_middleware", "error_middleware", "error_response", "every_response", "forbid_storing", "read_json"]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]

# The API's codes for aiohttp's other HTTP errors, which no path of ours raises today (the router's 404 and
# 405 become the error tree's own, below).
_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 413: "payload_too_large",
               415: "unsupported_media_type"}


# Every response under these carries a tenant's data (a request and its answer, a run, its annotations, a
# summary; over MCP, a tool's result with the human's answer) or may: no cache, shared or private, keeps it.
_TENANT_PREFIXES = ("/v1/", "/api/", "/mcp")
# Under /v1 but the same for every caller and without a key: a discovery document, left cacheable like
# /.well-known/openwop, which carries the same feedback block.
_PUBLIC = frozenset({"/v1/capabilities"})
# The response a handler prepared itself (an event stream): what the client got, should it go away mid-way.
_PREPARED: web.RequestKey[web.StreamResponse] = web.RequestKey("prepared")
# nginx's word for a client that closed the connection before any response was sent: for the access line
# and the HTTP metrics, as nothing reaches the client.
CLIENT_CLOSED = 499


async def every_response(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: what every response says, however written (JSON, pages, event streams, the
    MCP SDK's): ``nosniff``, so a browser never reads an API's JSON or a stream as a page or a script. And the
    request keeps the response it got, for the access line should its client go away mid-way."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    request[_PREPARED] = response


async def forbid_storing(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: ``Cache-Control: no-store`` on a tenant's data and on every error (an error
    may echo a request's fields), beside whatever Cache-Control the response gives itself.

    A signal rather than a step of the middleware: a handler that prepares its own response (a sensitive
    answer written before it is shredded, an event stream) has its headers on the wire before the middleware
    gets the response back; this runs for every response, however written, just before its headers go.
    """
    path = request.path
    if response.status >= 400 or (path.startswith(_TENANT_PREFIXES) and path not in _PUBLIC):
        # A directive of the handler's own stays (the MCP SDK's streams say no-transform), but "no-cache"
        # only asks a cache to revalidate what it keeps: no-store is added beside it.
        given = response.headers.get("Cache-Control")
        if given is None:
            response.headers["Cache-Control"] = "no-store"
        elif "no-store" not in given:
            response.headers["Cache-Control"] = f"no-store, {given}"


def error_response(err: HandraiseError) -> web.Response:
    headers = None
    if isinstance(err, RetryLaterError):
        headers = {"Retry-After": str(err.retry_after)}
    elif isinstance(err, UnauthorizedError) and err.challenge is not None:
        headers = {"WWW-Authenticate": err.challenge}
    elif isinstance(err, MethodNotAllowedError):
        headers = {"Allow": ",".join(err.allowed)}
    return json_response(err.to_json(), status=err.status, headers=headers)


def api_middleware(admission: WriteAdmission | None = None) -> Middleware:
    """The error handler; with ``admission``, which it consults first (a refusal is an error like any
    other), also the bound on writes in flight."""

    @web.middleware
    async def api(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            refuse_malformed(request)
            if admission is None or not admission.bounds(request.method, request.path):
                return await handler(request)
            admitted = admission.enter()
            try:
                return await handler(request)
            finally:
                admission.leave(admitted)
        except HandraiseError as e:
            if e.status >= 500 and not isinstance(e, (OverloadedError, ShuttingDownError)):  # nor are these
                log.error("request failed", extra={"path": mask_tokens(request.path), "code": e.code})
            return error_response(e)
        except web.HTTPException as e:
            if e.status < 400 or e.content_type == "text/html":
                raise
            if isinstance(e, web.HTTPMethodNotAllowed):
                allowed = sorted(e.allowed_methods)
                return error_response(MethodNotAllowedError(
                    f"this path takes {', '.join(allowed)}, not {request.method}", allowed=allowed))
            if isinstance(e, web.HTTPNotFound):  # the router's, or an asset or page that is not there
                return error_response(NotFoundError("no such path"))
            code = _HTTP_CODES.get(e.status, "http_error")
            return json_response(error_body(code, code.replace("_", " ")), status=e.status)
        except (web.RequestPayloadError, HttpProcessingError):
            # A body aiohttp's parser refused on the way in (broken chunks, gzip that is not): the client's.
            return error_response(BadRequestError("the request body could not be read"))
        except ConnectionError:
            transport = request.transport
            if transport is not None and not transport.is_closing():
                log.exception("unhandled error", extra={"path": mask_tokens(request.path)})  # not our client's
                return json_response(error_body("internal", "internal error"), status=500)
            # The client went away (a closed event stream, a dropped long-poll, a body cut short): normal, and
            # nothing is left to answer. The response it had, or 499, is what the access line counts.
            log.debug("client went away", extra={"path": request.path})
            prepared = request.get(_PREPARED)
            return prepared if prepared is not None else web.Response(status=CLIENT_CLOSED)
        except Exception:
            log.exception("unhandled error", extra={"path": mask_tokens(request.path)})
            return json_response(error_body("internal", "internal error"), status=500)

    return api


# A sub-application's own error handler (a connector's webhook routes); the main application's middleware,
# the write bound included, runs around it.
error_middleware = api_middleware()

"""The OpenAPI 3.1 document served at ``/openapi.json``; a test keeps it in step with the routes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from handraise.core.api import RequestRecord

routes = web.RouteTableDef()

_ERROR = {"$ref": "#/components/schemas/Error"}
_REQUEST = {"$ref": "#/components/schemas/Request"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    words = {400: "Malformed JSON or query", 401: "No or unknown key", 403: "Wrong scope",
             404: "Not found (or another tenant's)", 409: "Conflict", 410: "Gone", 413: "Body too large",
             422: "Invalid body, schema or answer", 501: "Capability not provided"}
    return {str(s): _json(_ERROR, words[s]) for s in statuses}


def _op(summary: str, *, scopes: list[str] | None, ok: dict[str, Any], errors: tuple[int, ...] = (),
        body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {**ok, **_errors(*errors)}}
    op["security"] = [{"bearer": scopes}] if scopes else []
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_RUN = {"name": "runId", "in": "path", "required": True, "schema": {"type": "string"}}
_CREATE = {"$ref": "#/components/schemas/CreateRequest"}
_ANNOTATION = {"$ref": "#/components/schemas/Annotation"}

PATHS: dict[str, dict[str, Any]] = {
    "/healthz": {"get": _op("Liveness and store check", scopes=None,
                            ok={"200": {"description": "Serving"}, "503": {"description": "Store unavailable"}})},
    "/openapi.json": {"get": _op("This document", scopes=None, ok={"200": {"description": "OpenAPI 3.1"}})},
    "/": {"get": _op("A small HTML page: name, version, where to go", scopes=None,
                     ok={"200": {"description": "HTML"}})},
    "/docs": {"get": _op("This document rendered as HTML (served from the package, no script)", scopes=None,
                         ok={"200": {"description": "HTML"}})},
    "/metrics": {"get": _op("Prometheus metrics of this instance (text format; no tenant labels)",
                            scopes=["metrics"], ok={"200": {"description": "Prometheus text format 0.0.4"}},
                            errors=(401, 403))},
    "/v1/requests": {
        "post": _op("Create a request (idempotent on unique_id)", scopes=["ask"], body=_CREATE,
                    ok={"201": _json(_REQUEST, "Created"), "200": _json(_REQUEST, "Same unique_id, same body")},
                    errors=(400, 401, 403, 409, 413, 422)),
        "get": _op("List this tenant's requests", scopes=["read", "ask"],
                   params=[{"name": "status", "in": "query", "schema": {"type": "string"}},
                           {"name": "run_id", "in": "query", "schema": {"type": "string"}},
                           {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                   ok={"200": _json({"type": "object"}, "Requests")}, errors=(400, 401, 403)),
    },
    "/v1/requests/{id}": {"get": _op("A request as it stands", scopes=["ask", "read"], params=[_ID],
                                     ok={"200": _json(_REQUEST, "The request")}, errors=(401, 403, 404))},
    "/v1/requests/{id}/wait": {"get": _op(
        "Long-poll until terminal (timeout capped at limits.max_wait_seconds)", scopes=["ask"],
        params=[_ID, {"name": "timeout", "in": "query", "schema": {"type": "number", "minimum": 0}}],
        ok={"200": _json(_REQUEST, "The request, terminal or as it stands at the timeout")},
        errors=(400, 401, 403, 404))},
    "/v1/requests/{id}/cancel": {"post": _op("Cancel a pending request", scopes=["ask"], params=[_ID],
                                             ok={"200": _json(_REQUEST, "Cancelled")}, errors=(401, 403, 404, 409))},
    "/v1/requests/{id}/links": {"post": _op(
        "Mint a one-time form link (forward: only for a request the key created itself)",
        scopes=["answer", "forward"], params=[_ID],
        body={"type": "object", "properties": {"recipient": {"type": "string"}}, "additionalProperties": False},
        ok={"201": _json({"type": "object", "properties": {"url": {"type": "string"},
                                                            "expires_at": {"type": "string"}}}, "Link")},
        errors=(400, 401, 403, 404, 409, 410, 413, 422))},
    "/v1/human-feedback": {"post": _op(
        "Create and wait until terminal (the blocking human_feedback tool)", scopes=["ask"], body=_CREATE,
        ok={"200": _json(_REQUEST, "Terminal: answered, expired or cancelled")},
        errors=(400, 401, 403, 409, 413, 422))},
    "/mcp": {
        "post": _op("MCP over streamable HTTP: JSON-RPC messages (tools ask_human, request_approval, human_feedback)",
                    scopes=["ask"], ok={"200": {"description": "JSON or an SSE stream of JSON-RPC messages"}},
                    errors=(401, 403, 404, 413)),
        "get": _op("MCP over streamable HTTP: the session's server-to-client event stream", scopes=["ask"],
                   ok={"200": {"description": "SSE stream"}}, errors=(401, 403, 404)),
        "delete": _op("MCP over streamable HTTP: end the session", scopes=["ask"],
                      ok={"200": {"description": "Ended"}}, errors=(401, 403, 404)),
    },
    "/api/human-feedback/submit": {"post": _op(
        "Submit an answer by unique_id", scopes=["answer"],
        body={"type": "object", "required": ["unique_id", "response"],
              "properties": {"unique_id": {"type": "string"}, "response": {}}},
        ok={"200": _json({"type": "object"}, "Accepted")}, errors=(400, 401, 403, 404, 409, 410, 413, 422))},
    "/v1/events": {"get": _op(
        "Server-Sent Events: request.created, request.resolved, run.annotated", scopes=["read"],
        params=[{"name": "run_id", "in": "query", "schema": {"type": "string"}},
                {"name": "types", "in": "query", "schema": {"type": "string"}}],
        ok={"200": {"description": "text/event-stream", "content": {"text/event-stream": {"schema": {"type": "string"}}}}},
        errors=(400, 401, 403))},
    "/v1/capabilities": {"get": _op(
        "Capabilities: host.feedback (RFC 0056 §A)", scopes=None,
        ok={"200": _json({"type": "object", "properties": {"host": {"type": "object", "properties": {
            "feedback": {"$ref": "#/components/schemas/FeedbackCapability"}}}}}, "Capabilities")})},
    "/.well-known/openwop": {"get": _op(
        "OpenWOP discovery: capability families at the document root (RFC 0073)", scopes=None,
        ok={"200": _json({"type": "object", "properties": {
            "feedback": {"$ref": "#/components/schemas/FeedbackCapability"}}}, "Discovery document")})},
    "/v1/runs/{runId}/annotations": {
        "post": _op("Record an annotation on a run (RFC 0056); accepted on any run, finished or not",
                    scopes=["annotate"], params=[_RUN], body={"$ref": "#/components/schemas/AnnotationInput"},
                    ok={"201": _json(_ANNOTATION, "The persisted Annotation")},
                    errors=(400, 401, 403, 409, 413, 422, 501)),
        "get": _op("This tenant's annotations of a run, oldest first", scopes=["read", "annotate"],
                   params=[_RUN, {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                           {"name": "limit", "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}}],
                   ok={"200": _json({"type": "object", "required": ["annotations", "next_cursor"], "properties": {
                       "annotations": {"type": "array", "items": _ANNOTATION},
                       "next_cursor": {"type": ["string", "null"]}}}, "A page of annotations")},
                   errors=(400, 401, 403, 422, 501)),
    },
    "/v1/feedback/summary": {"get": _op(
        "Feedback summary over a run or a time window (current annotations; rates per annotated run)",
        scopes=["read", "annotate"],
        params=[{"name": "run_id", "in": "query", "schema": {"type": "string"}},
                {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}}],
        ok={"200": _json({"type": "object"}, "Counts per signal, mean rating, correction and flag rates")},
        errors=(400, 401, 403, 422, 501))},
    "/v1/runs/{runId}/bundle": {"get": _op(
        "Debug bundle of a run: annotations, requests and journal entries, redacted", scopes=["read"],
        params=[_RUN], ok={"200": _json({"type": "object"}, "The bundle")}, errors=(401, 403, 422))},
}


def _public_shapes() -> dict[str, Any]:
    # The request as returned has one definition, the pydantic model the Python client reads it with.
    schema = RequestRecord.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    return {**schema.pop("$defs", {}), "Request": schema}


COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "schemas": {
        "Error": {
            "type": "object", "required": ["error", "message"],
            "description": "OpenWOP's flat error envelope; per-field problems in details.fields",
            "properties": {
                "error": {"type": "string", "description": "a stable code, e.g. invalid_answer"},
                "message": {"type": "string"},
                "details": {"type": "object", "properties": {"fields": {"type": "array", "items": {
                    "type": "object", "required": ["field", "message"],
                    "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}}}},
            },
        },
        "CreateRequest": {
            "type": "object", "required": ["unique_id", "message_for_user"], "additionalProperties": False,
            "properties": {
                "unique_id": {"type": "string", "maxLength": 200},
                "message_for_user": {"type": "string"},
                "timeout_seconds": {"type": "integer", "minimum": 1},
                "schema": {"type": "object", "description": "A JSON schema in the supported form subset"},
                "kind": {"type": "string", "enum": ["input", "approval", "choice"]},
                "sensitive": {"type": "boolean"},
                "run_id": {"type": "string"},
                "channels": {"type": "array", "items": {"type": "string"}},
            },
        },
        "FeedbackCapability": {
            "type": "object", "required": ["supported"], "additionalProperties": False,
            "properties": {
                "supported": {"type": "boolean"},
                "targets": {"type": "array", "items": {"type": "string", "enum": ["run", "event", "node"]}},
                "signals": {"type": "array",
                            "items": {"type": "string", "enum": ["rating", "correction", "label", "flag"]}},
            },
        },
        "AnnotationTarget": {
            "type": "object", "additionalProperties": False,
            "properties": {"runId": {"type": "string"}, "eventId": {"type": "string"}, "nodeId": {"type": "string"}},
        },
        "AnnotationSignal": {
            "type": "object", "required": ["kind"], "additionalProperties": False,
            "description": "rating iff kind=rating, label iff kind=label, correction iff kind=correction",
            "properties": {
                "kind": {"type": "string", "enum": ["rating", "correction", "label", "flag"]},
                "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                "label": {"type": "string", "minLength": 1, "maxLength": 500},
                "correction": {"type": "string", "maxLength": 10000},
            },
        },
        "AnnotationInput": {
            "type": "object", "required": ["signal"], "additionalProperties": False,
            "description": "An Annotation without annotationId, actor and createdAt (the server assigns them); "
                           "target.runId defaults to the path and must match it",
            "properties": {
                "target": {"$ref": "#/components/schemas/AnnotationTarget"},
                "signal": {"$ref": "#/components/schemas/AnnotationSignal"},
                "note": {"type": "string", "maxLength": 10000},
                "supersedes": {"type": "string", "description": "An earlier annotation of the same run, "
                                                                "recorded by the same actor, that this one replaces"},
            },
        },
        "Annotation": {
            "type": "object", "required": ["annotationId", "target", "signal", "actor", "createdAt"],
            "additionalProperties": False,
            "properties": {
                "annotationId": {"type": "string"},
                "target": {"allOf": [{"$ref": "#/components/schemas/AnnotationTarget"}], "required": ["runId"]},
                "signal": {"$ref": "#/components/schemas/AnnotationSignal"},
                "actor": {"type": "object", "required": ["principalRef"],
                          "properties": {"principalRef": {"type": "string"}}},
                "note": {"type": "string"},
                "createdAt": {"type": "string", "format": "date-time"},
                "supersedes": {"type": "string"},
            },
        },
        **_public_shapes(),
    },
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Handraise", "version": "1", "description":
                 "Ask a human over HTTP and wait, for a bounded time, for a validated answer."},
        "paths": PATHS,
        "components": COMPONENTS,
    }


@routes.get("/openapi.json")
async def openapi_json(_request: web.Request) -> web.Response:
    return web.json_response(document())

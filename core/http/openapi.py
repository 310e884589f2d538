"""The OpenAPI 3.1 document served at ``/openapi.json``, built from the pydantic models the handlers use.

Bodies and query strings are documented from the very models that parse them
(``parse_body``, ``parse_query``), so the document cannot drift from the server;
a test keeps it in step with the routes, and a bounded schemathesis run
(tests/core/test_openapi_conformance.py) holds the rest together.

Adding an endpoint: give ``_op`` its body model (``body=``), its query model
(``query=``), its path parameters and its response models (``_json(Model, …)``);
every model named there lands in ``components.schemas`` by itself.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from handraise.core.annotations import AnnotationBody
from handraise.core.api import (
    MAX_ID_CHARS,
    CreateRequestBody,
    LinkBody,
    LinkRecord,
    RequestRecord,
    SubmitBody,
    optional_not_null,
)
from handraise.core.hitl import CreateReviewBody, ReviewAccepted, ReviewStatus
from handraise.core.http.annotations import ListAnnotationsQuery, SummaryQuery
from handraise.core.http.inbox import DeliveredRecord, InboxLinkBody
from handraise.core.http.keys import KeyBody, MadeKeyRecord
from handraise.core.http.requests import ListRequestsQuery, WaitQuery
from handraise.core.http.runs import ListRunsQuery
from handraise.core.runs import CompleteRunBody, RegisterRunBody, RunRecord
from handraise.core.text import LABEL_PATTERN

routes = web.RouteTableDef()

_REF = "#/components/schemas/{model}"
_ERROR = {"$ref": _REF.format(model="Error")}
# Models the document names, with the side each describes: what a client sends or what it gets.
_MODELS: dict[type[BaseModel], str] = {}


def _ref(model: type[BaseModel], mode: str) -> dict[str, Any]:
    _MODELS[model] = mode
    return {"$ref": _REF.format(model=model.__name__)}


def _json(schema: dict[str, Any] | type[BaseModel], description: str) -> dict[str, Any]:
    if isinstance(schema, type):
        schema = _ref(schema, "serialization")
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _naming(response: dict[str, Any], header: str) -> dict[str, Any]:
    """A create's response with the header that names the resource: Location on the 201, Content-Location on
    the 200 of a replay (core/http/output.py: naming)."""
    return {**response, "headers": {header: {"description": "The resource's path, as its GET route reads it",
                                             "schema": {"type": "string"}}}}


def _errors(*statuses: int) -> dict[str, Any]:
    words = {400: "Malformed request: JSON, query, path or key header", 401: "No or unknown key",
             403: "Wrong scope; for an answer, not_assigned (the request is assigned to other people), "
                  "four_eyes (its on_behalf_of person may not approve it) or person_required (only a proven "
                  "person's approval or vote counts); for what names a person, person_not_bound (the key is "
                  "bound to no person) or person_mismatch (it is bound to another)",
             404: "Not found (or another tenant's)",
             409: "Conflict; for an answer, already_answered, or already_voted (the person voted otherwise "
                  "already on this quorum request: votes are final)", 410: "Gone",
             413: "Body too large", 422: "Invalid body, schema or answer",
             429: "Too many invalid answers by this key (Retry-After says when to try again)",
             501: "Capability not provided",
             502: "not_delivered: none of the person's own channels took the link (nothing was handed out)"}
    return {str(s): _json(_ERROR, words[s]) for s in statuses}


def _query(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    optional_not_null(schema)  # a query string has no null: a parameter is there or not
    required = set(schema.get("required", []))
    return [{"name": name, "in": "query", "required": name in required, "schema": prop}
            for name, prop in schema["properties"].items()]


def _op(summary: str, *, scopes: list[str] | None, ok: dict[str, Any], errors: tuple[int, ...] = (),
        body: type[BaseModel] | dict[str, Any] | None = None, body_required: bool = True,
        query: type[BaseModel] | None = None, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    # Any request can be malformed before its handler runs (a control character in the path or
    # query, an Authorization header that is not ASCII): 400 is on every operation.
    op: dict[str, Any] = {"summary": summary, "responses": {**ok, **_errors(*sorted({400, *errors}))}}
    op["security"] = [{"bearer": scopes}] if scopes else []
    if body is not None:
        schema = _ref(body, "validation") if isinstance(body, type) else body
        op["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": schema}}}
    parameters = [*(params or []), *(_query(query) if query is not None else [])]
    if parameters:
        op["parameters"] = parameters
    return op


def _path_id(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS, "pattern": LABEL_PATTERN}}


_ID = _path_id("id")
_RUN = _path_id("runId")
# One server-sent event as a client reads it off the stream (each event's data is a JSON text).
_SSE_EVENT = {"type": "object", "properties": {"id": {"type": "string"}, "event": {"type": "string"},
                                               "data": {"type": "string"}, "retry": {"type": "integer"}}}
_ANNOTATION = {"$ref": _REF.format(model="Annotation")}
_REQUEST = {"$ref": _REF.format(model="RequestRecord")}

PATHS: dict[str, dict[str, Any]] = {
    "/healthz": {"get": _op("Liveness and store check", scopes=None,
                            ok={"200": _json({"type": "object", "required": ["status"],
                                                    "properties": {"status": {"const": "ok"}}}, "Serving"),
                                "503": _json(_ERROR, "unavailable: the store does not answer (Retry-After says when "
                                                     "to look again)")})},
    "/openapi.json": {"get": _op("This document", scopes=None, ok={"200": {"description": "OpenAPI 3.1"}})},
    "/": {"get": _op("A small HTML page: name, version, where to go", scopes=None,
                     ok={"200": {"description": "HTML"}})},
    "/docs": {"get": _op("This document rendered as HTML (served from the package, no script)", scopes=None,
                         ok={"200": {"description": "HTML"}})},
    "/metrics": {"get": _op("Prometheus metrics of this instance (text format; no tenant labels)",
                            scopes=["metrics"], ok={"200": {"description": "Prometheus text format 0.0.4"}},
                            errors=(401, 403))},
    "/v1/requests": {
        "post": _op("Create a request (idempotent on unique_id)", scopes=["ask"], body=CreateRequestBody,
                    ok={"201": _naming(_json(RequestRecord, "Created"), "Location"),
                        "200": _naming(_json(RequestRecord, "Same unique_id, same body"), "Content-Location")},
                    errors=(400, 401, 403, 409, 413, 422)),
        "get": _op("List this tenant's requests, oldest first, a page at a time (next_cursor: the next page)",
                   scopes=["read", "ask"], query=ListRequestsQuery,
                   ok={"200": _json({"type": "object", "required": ["requests", "next_cursor"], "properties": {
                       "requests": {"type": "array", "items": _REQUEST},
                       "next_cursor": {"type": ["string", "null"]}}}, "A page of requests")},
                   errors=(400, 401, 403)),
    },
    "/v1/requests/{id}": {"get": _op("A request as it stands", scopes=["ask", "read"], params=[_ID],
                                     ok={"200": _json(_REQUEST, "The request")}, errors=(401, 403, 404))},
    "/v1/requests/{id}/wait": {"get": _op(
        "Long-poll until terminal (timeout capped at limits.max_wait_seconds)", scopes=["ask"],
        params=[_ID], query=WaitQuery,
        ok={"200": _json(_REQUEST, "The request, terminal or as it stands at the timeout")},
        errors=(400, 401, 403, 404))},
    "/v1/requests/{id}/cancel": {"post": _op("Cancel a pending request", scopes=["ask"], params=[_ID],
                                             ok={"200": _json(_REQUEST, "Cancelled")}, errors=(401, 403, 404, 409))},
    "/v1/requests/{id}/ack": {"post": _op(
        "Acknowledge a sensitive answer: it is deleted now rather than after its grace", scopes=["ask"],
        params=[_ID], ok={"200": _json(_REQUEST, "The request, its sensitive answer deleted")},
        errors=(401, 403, 404, 409))},
    "/v1/requests/{id}/links": {"post": _op(
        "Mint a one-time form link (forward: only for a request the key created itself). With person, the "
        "link answers as that person: returned only to a key bound to them, or sent to their own channel "
        "(deliver) and never returned", scopes=["answer", "forward"], params=[_ID],
        body=LinkBody, body_required=False,
        ok={"201": _json(LinkRecord, "Link"), "202": _json(DeliveredRecord, "Sent to the person's own channel")},
        errors=(400, 401, 403, 404, 409, 410, 413, 422, 502))},
    "/v1/human-feedback": {"post": _op(
        "Create and wait until terminal (the blocking human_feedback tool)", scopes=["ask"], body=CreateRequestBody,
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
        "Submit an answer by unique_id; on a request with approvals_required, one person's vote (the request "
        "stays pending until the votes decide it; the same vote again changes nothing)", scopes=["answer"],
        body=SubmitBody,
        ok={"200": _json({"type": "object", "required": ["accepted", "request"], "properties": {
            "accepted": {"const": True}, "request": _REQUEST}}, "Accepted")}, errors=(400, 401, 403, 404, 409, 410, 413, 422, 429))},
    "/v1/events": {"get": _op(
        "Server-Sent Events: request.created, request.voted (a vote on a quorum request), request.resolved, "
        "run.annotated", scopes=["read"],
        params=[{"name": "run_id", "in": "query", "schema": {"type": "string"}},
                {"name": "types", "in": "query", "schema": {"type": "string"}},
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"},
                 "description": "Resume: first every event recorded after this id (ids are journal seqs)"},
                {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0},
                 "description": "Resume point for a first connection (Last-Event-ID wins)"}],
        ok={"200": {"description": "text/event-stream",
                    "content": {"text/event-stream": {"schema": _SSE_EVENT}}}},
        errors=(400, 401, 403))},
    "/v1/inbox/links": {"post": _op(
        "Mint a one-time sign-in link to the operator inbox: for an operator (name; the session acts as "
        "operator:{name}, nobody in particular) or one of the tenant's people (person; the session acts as "
        "person:{id}), returned only to a key bound to that person, or sent to their own channel (deliver)",
        scopes=["answer"], body=InboxLinkBody,
        ok={"201": _json({"type": "object", "properties": {"url": {"type": "string"},
                                                            "expires_at": {"type": "string"},
                                                            "name": {"type": "string"},
                                                            "person": {"type": "string"}}}, "Sign-in link"),
            "202": _json(DeliveredRecord, "Sent to the person's own channel")},
        errors=(400, 401, 403, 413, 422, 502))},
    "/v1/keys": {
        "post": _op("Make a stored key of the caller's tenant (shown once); person binds it to one of the "
                    "tenant's people", scopes=["admin"], body=KeyBody,
                    ok={"201": _json(MadeKeyRecord, "The key, shown this once")}, errors=(400, 401, 403, 409, 413, 422)),
        "get": _op("The tenant's keys, from the config and the store, never their secrets", scopes=["admin"],
                   ok={"200": _json({"type": "object", "properties": {"keys": {"type": "array", "items": {
                       "type": "object"}}}}, "Keys")}, errors=(401, 403)),
    },
    "/v1/keys/{key_id}/revoke": {"post": _op(
        "Revoke a stored key of the caller's tenant (effective within seconds)", scopes=["admin"],
        params=[_path_id("key_id")], ok={"200": _json({"type": "object"}, "Revoked")}, errors=(401, 403, 404))},
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
                    scopes=["annotate"], params=[_RUN], body=AnnotationBody,
                    ok={"201": _json(_ANNOTATION, "The persisted Annotation")},
                    errors=(400, 401, 403, 409, 413, 422, 501)),
        "get": _op("This tenant's annotations of a run, oldest first", scopes=["read", "annotate"],
                   params=[_RUN], query=ListAnnotationsQuery,
                   ok={"200": _json({"type": "object", "required": ["annotations", "next_cursor"], "properties": {
                       "annotations": {"type": "array", "items": _ANNOTATION},
                       "next_cursor": {"type": ["string", "null"]}}}, "A page of annotations")},
                   errors=(400, 401, 403, 404, 422, 501)),
    },
    "/v1/runs": {
        "post": _op("Register a run (idempotent on run_id; conformance-noop completes at once when the "
                    "fixtures are on)", scopes=["ask"], body=RegisterRunBody,
                    ok={"201": _naming(_json(RunRecord, "Registered"), "Location"),
                        "200": _naming(_json(RunRecord, "Same run_id, same body"), "Content-Location")},
                    errors=(401, 403, 409, 413, 422)),
        "get": _op("This tenant's runs, newest first", scopes=["read", "ask"], query=ListRunsQuery,
                   ok={"200": _json({"type": "object", "required": ["runs", "next_cursor"], "properties": {
                       "runs": {"type": "array", "items": _ref(RunRecord, "serialization")},
                       "next_cursor": {"type": ["string", "null"]}}}, "A page of runs")},
                   errors=(401, 403)),
    },
    "/v1/runs/{runId}": {"get": _op(
        "A run: status, times, its requests by status and its annotations summarised", scopes=["read", "ask"],
        params=[_RUN], ok={"200": _json(RunRecord, "The run")}, errors=(401, 403, 404, 422))},
    "/v1/runs/{runId}/complete": {"post": _op(
        "Finish a run: completed, failed or cancelled; a finished run stays as it ended (409 for another status)",
        scopes=["ask"], params=[_RUN], body=CompleteRunBody, ok={"200": _json(RunRecord, "The finished run")},
        errors=(401, 403, 404, 409, 413, 422))},
    "/v1/feedback/summary": {"get": _op(
        "Feedback summary over a run or a time window (current annotations; rates per annotated run)",
        scopes=["read", "annotate"],
        query=SummaryQuery,
        ok={"200": _json({"type": "object"}, "Counts per signal, mean rating, correction and flag rates")},
        errors=(400, 401, 403, 422, 501))},
    "/.well-known/hitl.json": {"get": _op(
        "HITL-protocol discovery (v0.8, Appendix D): review types, transports, the review endpoints",
        scopes=None, ok={"200": _json({"type": "object", "required": ["hitl_protocol"]}, "Discovery document")})},
    "/v1/hitl/reviews": {"post": _op(
        "HITL protocol: create a review case (a request with the review type's schema); review_url only for a "
        "key that also has forward", scopes=["ask"], body=CreateReviewBody,
        ok={"202": _json(ReviewAccepted, "human_input_required, with the hitl object")},
        errors=(400, 401, 403, 409, 413, 422))},
    "/v1/hitl/reviews/{case_id}/status": {"get": _op(
        "HITL protocol: poll a case (pending, opened, in_progress, completed, expired, cancelled)",
        scopes=["ask", "read"],
        params=[_path_id("case_id"), {"name": "If-None-Match", "in": "header", "schema": {"type": "string"},
                                      "description": "The ETag of an earlier poll: 304 while nothing changed"}],
        ok={"200": _json(ReviewStatus, "The case as it stands (ETag; Retry-After while open)"),
            "304": {"description": "Unchanged since the If-None-Match ETag"}}, errors=(401, 403, 404))},
    "/v1/hitl/reviews/{case_id}/events": {"get": _op(
        "HITL protocol: the case's events (review.opened, review.in_progress, review.completed, review.expired, "
        "review.cancelled); ends after the terminal one", scopes=["ask", "read"],
        params=[_path_id("case_id"), {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"},
                                      "description": "Resume: only events newer than this id"}],
        ok={"200": {"description": "text/event-stream",
                    "content": {"text/event-stream": {"schema": _SSE_EVENT}}}},
        errors=(400, 401, 403, 404))},
    "/v1/runs/{runId}/bundle": {"get": _op(
        "Debug bundle of a run: annotations, requests and journal entries, redacted", scopes=["read"],
        params=[_RUN], ok={"200": _json({"type": "object"}, "The bundle")}, errors=(401, 403, 404, 422))},
}


# What no model describes: the error envelope, the capability block and the RFC's Annotation as
# ``annotation_json`` writes it (its target and signal are the input models' own schemas).
_HAND_WRITTEN: dict[str, Any] = {
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
    "FeedbackCapability": {
        "type": "object", "required": ["supported"], "additionalProperties": False,
        "properties": {
            "supported": {"type": "boolean"},
            "targets": {"type": "array", "items": {"type": "string", "enum": ["run", "event", "node"]}},
            "signals": {"type": "array",
                        "items": {"type": "string", "enum": ["rating", "correction", "label", "flag"]}},
        },
    },
    "Annotation": {
        "type": "object", "required": ["annotationId", "target", "signal", "actor", "createdAt"],
        "additionalProperties": False,
        "properties": {
            "annotationId": {"type": "string"},
            "target": {"allOf": [{"$ref": _REF.format(model="AnnotationTarget")}], "required": ["runId"]},
            "signal": {"$ref": _REF.format(model="AnnotationSignal")},
            "actor": {"type": "object", "required": ["principalRef"],
                      "properties": {"principalRef": {"type": "string"}}},
            "note": {"type": "string"},
            "createdAt": {"type": "string", "format": "date-time"},
            "supersedes": {"type": "string"},
        },
    },
}


def _components() -> dict[str, Any]:
    _, schemas = models_json_schema([(model, mode) for model, mode in _MODELS.items()],  # type: ignore[misc]
                                    by_alias=True, ref_template=_REF)
    generated = schemas.get("$defs", {})
    missing = [m.__name__ for m in _MODELS if m.__name__ not in generated]
    if missing:  # pragma: no cover - two models of one name would shadow each other
        raise RuntimeError(f"OpenAPI components missing for {missing}")
    return {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {**generated, **_HAND_WRITTEN}}


COMPONENTS: dict[str, Any] = _components()


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Handraise", "version": "1", "description":
                 "Ask a human over HTTP and wait, for a bounded time, for a validated answer. Every response "
                 "under /v1, /api and /mcp, and every error, is sent with Cache-Control: no-store."},
        "paths": PATHS,
        "components": COMPONENTS,
    }


@routes.get("/openapi.json")
async def openapi_json(_request: web.Request) -> web.Response:
    return web.json_response(document())

"""The MCP tools: their schemas and descriptions (written for models), and one call from arguments to result."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from jsonschema import Draft202012Validator

from handraise.core.api import RequestRecord
from handraise.core.mcp.backends import Backend, ToolError

log = logging.getLogger(__name__)

MAX_TIMEOUT_SECONDS = 86400
DEFAULT_TIMEOUT_SECONDS = 300

_TIMEOUT = {
    "type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECONDS,
    "description": "Seconds to wait for the human. Use the expiry of the thing you ask about when there is one "
                   "(an OTP valid for 120 s: 120); otherwise the shortest realistic time. Default 300.",
}
_UNIQUE_ID = {
    "type": "string", "minLength": 1, "maxLength": 200,
    "description": "Idempotency key. Calling again with the same unique_id and the same arguments re-attaches "
                   "to the same question (and gets its answer) instead of asking twice; use a fresh one for "
                   "every new question.",
}
_RUN_ID = {"type": "string", "minLength": 1, "maxLength": 200,
           "description": "Optional id of your agent run, to group requests and annotations."}
_ANSWERED = {
    "status": {"const": "answered"},
    "request_id": {"type": "string"}, "unique_id": {"type": "string"},
    "answered_by": {"type": ["string", "null"], "description": "who answered on their channel, e.g. "
                                                                "telegram:4242 or person:alice"},
    "answered_by_person": {"type": ["object", "null"], "description": "the proven person who decided, "
                                                                      "{id, name}; null when nobody proven did",
                           "properties": {"id": {"type": "string"}, "name": {"type": "string"}}},
    "answered_at": {"type": ["string", "null"], "format": "date-time"},
}


def _annotations(title: str) -> types.ToolAnnotations:
    # Idempotent with a unique_id; open world: it reaches people.
    return types.ToolAnnotations(title=title, read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                 open_world_hint=True)


ASK_HUMAN = types.Tool(
    name="ask_human",
    title="Ask a human",
    description=(
        "Ask a human for something only a human can give (a one-time code, a CAPTCHA, a private value, a "
        "decision) and wait for the answer. The question reaches them on their messenger or a web form. "
        "Blocks until answered or until timeout_seconds pass. Ask in plain words a person can answer "
        "without your context; never put secrets in the question. Set sensitive=true for secrets: the "
        "human answers in a masked form, never in chat. Do not use it for questions you can answer "
        "yourself. If the result is an error saying the request expired or was cancelled, there is NO "
        "answer: never assume consent or a default."),
    input_schema={
        "type": "object", "additionalProperties": False, "required": ["question"],
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": 8000,
                         "description": "The question, as the human will read it."},
            "schema": {"type": "object", "description": (
                "Optional JSON Schema the answer must satisfy; omit for free text. Supported: a primitive "
                "({\"type\": \"string\"|\"integer\"|\"number\"|\"boolean\"}, a string enum, pattern, bounds, "
                "formats date, time, date-time, email, uri) or a flat object form of at most 20 such fields "
                "(arrays only as a multi-select of a string enum).")},
            "timeout_seconds": _TIMEOUT,
            "sensitive": {"type": "boolean", "description": (
                "True for secrets (codes, passwords, private values): answered in a masked form behind a "
                "one-time link, never shown in chat, deleted once handed to you. Default false.")},
            "unique_id": _UNIQUE_ID,
            "run_id": _RUN_ID,
        },
    },
    output_schema={"type": "object", "required": ["status", "answer", "request_id", "unique_id"],
                   "properties": {**_ANSWERED,
                                  "answer": {"description": "The validated answer (text without schema)"}}},
    annotations=_annotations("Ask a human"),
)

REQUEST_APPROVAL = types.Tool(
    name="request_approval",
    title="Request a human's approval",
    description=(
        "Ask a human to approve or reject an action before you take it (an irreversible change, a payment, "
        "a message sent in someone's name), and wait for the decision. Describe exactly what will happen "
        "in action, with the specifics in details. Proceed only if approved is true. An expired or "
        "cancelled request comes back as an error: that is NOT an approval, do not take the action."),
    input_schema={
        "type": "object", "additionalProperties": False, "required": ["action"],
        "properties": {
            "action": {"type": "string", "minLength": 1, "maxLength": 2000,
                       "description": "What you will do if approved, in one sentence "
                                      "(\"Delete 3 files in /srv/old\")."},
            "details": {"description": "Optional specifics the human needs to decide: text, or an object whose "
                                       "keys and values are shown as lines.",
                        "anyOf": [{"type": "string", "maxLength": 6000}, {"type": "object"}]},
            "timeout_seconds": _TIMEOUT,
            "unique_id": _UNIQUE_ID,
            "run_id": _RUN_ID,
            "approvals_required": {"type": "integer", "minimum": 1, "maximum": 50,
                                   "description": "How many distinct people must approve (default 1); one "
                                                  "rejection rejects unless reject_policy is \"quorum\"."},
            "reject_policy": {"enum": ["any", "quorum"],
                              "description": "With approvals_required: \"any\" (default) rejection rejects, or "
                                             "\"quorum\": as many rejections as approvals are needed."},
        },
    },
    output_schema={"type": "object", "required": ["status", "approved", "decision", "request_id", "unique_id"],
                   "properties": {**_ANSWERED, "approved": {"type": "boolean"},
                                  "decision": {"enum": ["approve", "reject"]},
                                  "reason": {"type": ["string", "null"]},
                                  "votes": {"type": "array", "items": {"type": "object"},
                                            "description": "With approvals_required: each person's vote "
                                                           "(person, name, decision, channel, at)"}}},
    annotations=_annotations("Request approval"),
)

HUMAN_FEEDBACK = types.Tool(
    name="human_feedback",
    title="Human feedback (blocking)",
    description=(
        "Short-lived, blocking request for input only a human can provide: an OTP or 2FA code, a CAPTCHA, "
        "an explicit approval before an irreversible action, a private value or a subjective decision. "
        "Generate a fresh unique_id for every request. Use the expiry given by the external service as "
        "timeout_seconds when there is one, else the shortest realistic timeout. Do not put OTPs or private "
        "values in message_for_user. Not for questions an agent can answer, nor for ones that may be "
        "answered days later. An expiry comes back as an error: handle it, never assume approval."),
    input_schema={
        "type": "object", "additionalProperties": False,
        "required": ["message_for_user", "unique_id", "timeout_seconds"],
        "properties": {
            "message_for_user": {"type": "string", "minLength": 1, "maxLength": 8000,
                                 "description": "What the human reads, e.g. \"Enter the six-digit code sent to "
                                                "your phone.\""},
            "unique_id": _UNIQUE_ID,
            "timeout_seconds": _TIMEOUT,
        },
    },
    output_schema=ASK_HUMAN.output_schema,
    annotations=_annotations("Human feedback"),
)

TOOLS: dict[str, types.Tool] = {t.name: t for t in (ASK_HUMAN, REQUEST_APPROVAL, HUMAN_FEEDBACK)}
_VALIDATORS = {name: Draft202012Validator(tool.input_schema) for name, tool in TOOLS.items()}

Progress = Callable[[float, float | None, str | None], Awaitable[None]]
# Offer the human a link (URL-mode elicitation) for a sensitive request; None when the client cannot.
OfferLink = Callable[[RequestRecord, Backend], Awaitable[Callable[[], Awaitable[None]] | None]]


@dataclass(frozen=True)
class Call:
    """One tool call as Handraise sees it: the create body, and how to read the answer."""

    body: dict[str, Any]
    approval: bool


def parse(name: str, arguments: dict[str, Any] | None) -> Call:
    """The create body for a call, or ``ToolError`` naming every bad argument."""
    args = arguments or {}
    problems = sorted(_VALIDATORS[name].iter_errors(args), key=lambda e: list(e.absolute_path))
    if problems:
        said = "; ".join(f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
                         for e in problems[:10])
        raise ToolError(f"invalid arguments: {said}")
    body: dict[str, Any] = {"unique_id": args.get("unique_id") or f"mcp-{uuid.uuid4()}",
                            "timeout_seconds": args.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)}
    if name == "request_approval":
        details = args.get("details")
        if isinstance(details, dict):
            details = "\n".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in details.items())
        body["message_for_user"] = f"{args['action']}\n\n{details}" if details else args["action"]
        body["kind"] = "approval"
        for quorum_field in ("approvals_required", "reject_policy"):
            if quorum_field in args:
                body[quorum_field] = args[quorum_field]
    elif name == "ask_human":
        body["message_for_user"] = args["question"]
        body["sensitive"] = bool(args.get("sensitive", False))
        if "schema" in args:
            body["schema"] = args["schema"]
    else:
        body["message_for_user"] = args["message_for_user"]
    if args.get("run_id"):
        body["run_id"] = args["run_id"]
    return Call(body=body, approval=name == "request_approval")


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def result(call: Call, record: RequestRecord) -> types.CallToolResult:
    """Answered: structured content plus a short text. Expired or cancelled: an error that says so plainly."""
    if record.status == "expired":
        return error_result(
            f"No answer: the request {record.unique_id!r} expired after {call.body['timeout_seconds']} s "
            "without a human answering. This is not consent and not a default: do not proceed as if answered.")
    if record.status == "cancelled":
        who = f" by {record.cancelled_by}" if record.cancelled_by else ""
        return error_result(f"No answer: the request {record.unique_id!r} was cancelled{who} before a human "
                            "answered. Treat it as no answer.")
    if not record.has_response:
        return error_result(f"The request {record.unique_id!r} was answered, but its sensitive answer was "
                            "already handed over once and is deleted; ask again with a fresh unique_id.")
    person = record.answered_by_person
    out: dict[str, Any] = {"status": "answered", "request_id": record.id, "unique_id": record.unique_id,
                           "answered_by": record.answered_by,
                           "answered_by_person": person.model_dump() if person is not None else None,
                           "answered_at": record.answered_at.isoformat() if record.answered_at else None}
    if call.approval:
        answer = record.response if isinstance(record.response, dict) else {}
        out |= {"approved": answer.get("decision") == "approve", "decision": answer.get("decision"),
                "reason": answer.get("reason")}
        if "votes" in answer:  # a quorum: who voted how, through which channel, when
            out["votes"] = answer["votes"]
        if "proposal" in answer:  # approve with edits: the proposal as approved, and whether it was changed
            out |= {"proposal": answer["proposal"], "edited": answer.get("edited", False)}
        text = ("Approved" if out["approved"] else "Rejected") + (f": {out['reason']}" if out["reason"] else "")
    else:
        out["answer"] = record.response
        text = record.response if isinstance(record.response, str) else json.dumps(record.response,
                                                                                  ensure_ascii=False)
    if record.timed_out:
        # Nobody answered: the request's on_timeout policy gave this result at the deadline.
        out["timed_out"] = True
        text = f"No human answered in time; on_timeout applied: {text}"
    who = (f" (by {person.name}, {record.answered_by})" if person is not None
           else f" (by {record.answered_by})" if record.answered_by else "")
    return types.CallToolResult(content=[types.TextContent(text=f"{text}{who}")], structured_content=out)


async def run(name: str, arguments: dict[str, Any] | None, *, backend: Backend, progress: Progress,
              interval: float, offer_link: OfferLink | None = None) -> types.CallToolResult:
    """Run one tool call: create (idempotently), wait with progress, and cancel the request if the call is cancelled."""
    if name not in TOOLS:
        raise LookupError(name)
    try:
        call = parse(name, arguments)
        record = await backend.create(call.body)
    except ToolError as e:
        return error_result(str(e))
    complete: Callable[[], Awaitable[None]] | None = None
    started = time.monotonic()
    waiter = asyncio.ensure_future(backend.settle(record))
    try:
        if record.sensitive and offer_link is not None and not record.terminal:
            complete = await offer_link(record, backend)
        while True:
            done, _ = await asyncio.wait({waiter}, timeout=interval)
            if done:
                try:
                    settled = waiter.result()
                except ToolError as e:
                    return error_result(str(e))
                break
            await progress(round(time.monotonic() - started, 3), float(call.body["timeout_seconds"]),
                           "waiting for a human to answer")
    except BaseException:
        waiter.cancel()
        # The client cancelled the call (or the session ended): withdraw the question, journaled as a cancel.
        with anyio.CancelScope(shield=True):
            await backend.cancel(record)
        log.info("mcp tool call cancelled; request cancelled", extra={"request_id": record.id})
        raise
    if complete is not None:
        await complete()
    return result(call, settled)

"""The HITL protocol (v0.8, github.com/rotorstar/hitl-protocol): Handraise requests as review cases.

A HITL-protocol client creates a case of one review type (approval, selection, input,
confirmation). It becomes a Handraise request whose JSON schema is the type's, delivered
to the tenant's people through its channels; the client gets the protocol's ``hitl``
object, polls the case, or follows its events. The case id is the request id.

Where Handraise is stricter than the protocol, on purpose:

* ``review_url`` (a one-time link that can answer) goes only to keys with the ``forward``
  scope (DESIGN.md); without it the object has no ``review_url`` and people are reached
  through the tenant's channels.
* Expiry is never consent: ``default_action: approve`` is refused at create; an expired
  case says ``expired`` with the action the agent declared, and Handraise acts on none.
* No inline submit (``submit_url``): an asking key can never answer its own question.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, field_validator

from handraise.core.api import CreateRequestBody, Id, RequestView, UniqueId, iso, parse_body
from handraise.core.config import Settings
from handraise.core.errors import HandraiseError, InvalidSchemaError, ValidationFailedError
from handraise.core.people import person_of
from handraise.core.text import label, prose

if TYPE_CHECKING:
    from handraise.core.service import RequestService

SPEC_VERSION = "0.8"
ReviewType = Literal["approval", "selection", "input", "confirmation"]
REVIEW_TYPES: tuple[str, ...] = ("approval", "selection", "input", "confirmation")
# The protocol's case states, in the order a case moves through them.
CaseStatus = Literal["pending", "opened", "in_progress", "completed", "expired", "cancelled"]
PROGRESS_RANK = {"pending": 0, "opened": 1, "in_progress": 2, "completed": 3, "expired": 3, "cancelled": 3}
# How often a polling agent should come back (the discovery document says so too).
POLL_INTERVAL_SECONDS = 30

# Handraise's error codes that the protocol names otherwise (its OpenAPI ``Error`` examples);
# the status stays Handraise's, every other code passes through unchanged.
PROTOCOL_CODES = {
    "unauthorized": "invalid_token",
    "expired": "case_expired",
    "already_answered": "duplicate_submission",
}


def protocol_error(error: HandraiseError) -> HandraiseError:
    """The same error under the protocol's code (the instance keeps its class, status and details)."""
    code = PROTOCOL_CODES.get(error.code)
    if code is not None:
        error.code = code
    return error


# -- the create body -----------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid", strict=True)
_KEY = r"^[a-zA-Z][a-zA-Z0-9_]*$"
FieldType = Literal["text", "textarea", "number", "date", "email", "url", "boolean", "select", "multiselect",
                    "range"]
# The review page's text widget becomes a textarea past this many characters (core/schema/shapes.py).
_TEXTAREA_CHARS = 5000


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


class FormOption(BaseModel):
    """One choice of a ``select``/``multiselect`` field, or of a selection review."""

    model_config = ConfigDict(**_STRICT, title="HitlOption")

    value: Annotated[str, Field(min_length=1, max_length=200)]
    label: Annotated[str, Field(min_length=1, max_length=200)]


class FormValidation(BaseModel):
    model_config = ConfigDict(**_STRICT, title="HitlFieldValidation")

    minLength: int | None = Field(default=None, ge=0)  # noqa: N815 (the protocol's names)
    maxLength: int | None = Field(default=None, ge=0)  # noqa: N815
    pattern: Annotated[str, Field(max_length=500)] | None = None
    min: float | None = None
    max: float | None = None


class FormField(BaseModel):
    """The protocol's form field (its ``form-field.json``), less ``conditional`` and ``default_ref``."""

    model_config = ConfigDict(**_STRICT, title="HitlFormField")

    key: Annotated[str, Field(min_length=1, max_length=64, pattern=_KEY)]
    label: Annotated[str, Field(min_length=1, max_length=200)]
    # Custom ``x-`` types fall back to text, as the protocol asks of review pages.
    type: FieldType | Annotated[str, Field(pattern=r"^x-[A-Za-z0-9_-]{1,60}$")]
    required: StrictBool = False
    placeholder: Annotated[str, Field(max_length=200)] | None = None
    hint: Annotated[str, Field(max_length=1000)] | None = None
    default: Any = None
    sensitive: StrictBool = False
    options: list[FormOption] | None = Field(default=None, min_length=1, max_length=100)
    validation: FormValidation | None = None


class ReviewForm(BaseModel):
    model_config = ConfigDict(**_STRICT, title="HitlForm")

    fields: list[FormField] = Field(min_length=1, max_length=20)


class ReviewContext(BaseModel):
    """``context``: ``form`` (input), ``options`` and ``multiple`` (selection); any other key is
    shown to the person under the prompt when its value is text, a number or a boolean."""

    model_config = ConfigDict(extra="allow", strict=True, title="HitlContext")

    form: ReviewForm | None = None
    options: list[FormOption] | None = Field(default=None, min_length=1, max_length=100)
    multiple: StrictBool = True


class CreateReviewBody(BaseModel):
    """``POST /v1/hitl/reviews``: the protocol's ``hitl`` fields an agent chooses, and Handraise's own."""

    model_config = ConfigDict(**_STRICT, title="CreateReview")

    type: ReviewType
    prompt: Annotated[prose(min_length=1, max_length=500), AfterValidator(_not_blank)]
    timeout: Annotated[str, Field(max_length=32, description="ISO 8601 (PT24H, P7D) or 24h, 30m, 7d")] | None = None
    default_action: Literal["skip", "approve", "reject", "abort"] = "skip"
    context: ReviewContext | None = None
    # The protocol's hitl_callback_url: the result is POSTed there once terminal (core/callbacks.py).
    callback_url: label(min_length=1, max_length=2000) | None = None
    # Handraise's: an agent's retry with the same unique_id and body gets the same case.
    unique_id: UniqueId | None = None
    run_id: Id | None = None
    channels: list[Id] | None = Field(default=None, max_length=16)

    @field_validator("default_action")
    @classmethod
    def _never_consent(cls, value: str) -> str:
        if value == "approve":
            raise ValueError("expiry is never consent: an unanswered case cannot default to approve; "
                             "use skip, reject or abort")
        return value


_DURATION_ISO = re.compile(r"^P(?:(\d{1,4})W)?(?:(\d{1,5})D)?(?:T(?:(\d{1,6})H)?(?:(\d{1,7})M)?(?:(\d{1,9})S)?)?$")
_DURATION_SHORT = re.compile(r"^(\d{1,9})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_timeout(text: str) -> int:
    """Seconds of an ISO 8601 duration (``PT24H``, ``P7D``) or a shorthand (``24h``, ``30m``, ``7d``)."""
    short = _DURATION_SHORT.match(text)
    if short:
        return int(short.group(1)) * _UNIT[short.group(2)]
    iso_match = _DURATION_ISO.match(text)
    if iso_match and text not in ("P", "PT") and not text.endswith("T"):
        weeks, days, hours, minutes, seconds = (int(g or 0) for g in iso_match.groups())
        return (((weeks * 7 + days) * 24 + hours) * 60 + minutes) * 60 + seconds
    raise ValidationFailedError("timeout is not a duration", fields=[
        {"field": "timeout", "message": "use an ISO 8601 duration (PT24H, P7D) or 24h, 30m, 7d"}])


def iso_duration(seconds: int) -> str:
    return f"PT{seconds}S"


# -- a review type as a Handraise request ---------------------------------------------------------


def _choices(options: list[FormOption]) -> list[dict[str, str]]:
    return [{"const": o.value, "title": o.label} for o in options]


def _field_schema(field: FormField) -> dict[str, Any]:
    node: dict[str, Any] = {"title": field.label}
    if field.hint:
        node["description"] = field.hint
    rules = field.validation or FormValidation()
    kind = field.type
    if kind in ("select", "multiselect"):
        if not field.options:
            raise ValidationFailedError("a select field needs options", fields=[
                {"field": f"context.form.fields.{field.key}.options", "message": "is required for select fields"}])
        choice = {"type": "string", "oneOf": _choices(field.options)}
        node.update(choice if kind == "select" else {"type": "array", "items": choice, "uniqueItems": True})
    elif kind in ("number", "range"):
        node["type"] = "number"
        if rules.min is not None:
            node["minimum"] = rules.min
        if rules.max is not None:
            node["maximum"] = rules.max
    elif kind == "boolean":
        node["type"] = "boolean"
    else:
        node["type"] = "string"
        fmt = {"date": "date", "email": "email", "url": "uri"}.get(kind)
        if fmt:
            node["format"] = fmt
        if rules.minLength is not None:
            node["minLength"] = rules.minLength
        if rules.maxLength is not None:
            node["maxLength"] = rules.maxLength
        elif kind == "textarea":
            node["maxLength"] = _TEXTAREA_CHARS
        if rules.pattern is not None and fmt is None:
            node["pattern"] = rules.pattern
    if field.sensitive and node["type"] == "string" and "oneOf" not in node:
        node["writeOnly"] = True
    if "default" in field.model_fields_set and field.default is not None:
        if field.sensitive:
            raise ValidationFailedError("a sensitive field has no default", fields=[
                {"field": f"context.form.fields.{field.key}.default", "message": "a sensitive field has no default"}])
        node["default"] = field.default
    return node


def _form_schema(form: ReviewForm) -> dict[str, Any]:
    keys = [f.key for f in form.fields]
    if len(set(keys)) != len(keys):
        raise ValidationFailedError("form field keys must be unique", fields=[
            {"field": "context.form.fields", "message": "keys must be unique"}])
    schema: dict[str, Any] = {"type": "object", "properties": {f.key: _field_schema(f) for f in form.fields}}
    required = [f.key for f in form.fields if f.required]
    if required:
        schema["required"] = required
    return schema


def _selection_schema(context: ReviewContext | None) -> tuple[str, dict[str, Any]]:
    if context is None or not context.options:
        raise ValidationFailedError("a selection needs options", fields=[
            {"field": "context.options", "message": "is required for a selection: [{\"value\", \"label\"}, ...]"}])
    choice = {"type": "string", "oneOf": _choices(context.options)}
    if not context.multiple:
        return "choice", choice
    return "input", {"type": "object", "required": ["selected"], "properties": {"selected": {
        "type": "array", "title": "Selected", "items": choice, "minItems": 1, "uniqueItems": True}}}


CONFIRMATION_SCHEMA = {"type": "string", "oneOf": [{"const": "confirm", "title": "Confirm"},
                                                   {"const": "cancel", "title": "Cancel"}]}


def _context_lines(context: ReviewContext | None) -> list[str]:
    if context is None or not context.model_extra:
        return []
    return [f"{key}: {value}" for key, value in context.model_extra.items() if isinstance(value, (str, int, float))]


# What a form field's part becomes in the schema built from it (_field_schema), read backwards.
_FROM_SCHEMA = {"pattern": "validation.pattern", "minLength": "validation.minLength",
                "maxLength": "validation.maxLength", "minimum": "validation.min", "maximum": "validation.max",
                "default": "default", "oneOf": "options", "items": "options"}


def in_review(error: InvalidSchemaError, body: CreateReviewBody) -> InvalidSchemaError:
    """A refusal of the schema built from a review body, its problems named as that body's fields
    (``schema.properties.code.pattern`` → ``context.form.fields.code.validation.pattern``)."""
    fields = [{"field": _review_field(f["field"], body), "message": f["message"]} for f in error.fields]
    if not fields:
        return error
    message = error.message.replace(error.fields[0]["field"], fields[0]["field"], 1)
    return InvalidSchemaError(message, fields=fields)


def _review_field(field: str, body: CreateReviewBody) -> str:
    steps = field.split(".")[1:]  # after "schema"; form keys and option indexes have no dots
    if body.type == "selection":
        index = next((step for step in steps if step.isdigit()), None)
        return "context.options" + (f".{index}" if index is not None and "oneOf" in steps else "")
    if body.context is None or body.context.form is None:
        return "context"
    if steps[:1] != ["properties"] or len(steps) < 2:
        return "context.form.fields"
    where, rest = f"context.form.fields.{steps[1]}", steps[2:]
    if rest and rest[0] in _FROM_SCHEMA:
        where += "." + _FROM_SCHEMA[rest[0]]
        index = next((step for step in rest if step.isdigit()), None)
        if where.endswith(".options") and index is not None:
            where += f".{index}"
    return where


def to_request(body: CreateReviewBody, *, settings: Settings) -> CreateRequestBody:
    """The Handraise request a review case is: its kind and JSON schema follow the review type."""
    kind, schema, sensitive = "input", None, False
    if body.type == "approval":
        kind = "approval"
    elif body.type == "confirmation":
        kind, schema = "choice", CONFIRMATION_SCHEMA
    elif body.type == "selection":
        kind, schema = _selection_schema(body.context)
    elif body.context is not None and body.context.form is not None:
        schema = _form_schema(body.context.form)
        sensitive = any(f.sensitive for f in body.context.form.fields)
    message = "\n".join([body.prompt, *_context_lines(body.context)])
    limit = settings.limits.max_message_chars
    if len(message) > limit:
        raise ValidationFailedError(f"the prompt with its context is longer than {limit} characters", fields=[
            {"field": "context", "message": f"prompt and context together: at most {limit} characters"}])
    timeout = parse_timeout(body.timeout) if body.timeout is not None else None
    # Checked as any create is: text from the context that is not plain text is a 422, never a 500.
    return parse_body(CreateRequestBody, {
        "unique_id": body.unique_id or f"hitl-{secrets.token_urlsafe(16)}",
        "message_for_user": message, "timeout_seconds": timeout, "schema": schema, "kind": kind,
        "sensitive": sensitive, "run_id": body.run_id, "channels": body.channels,
        **({"callback_url": body.callback_url} if body.callback_url is not None else {}),
    }, what="review")


# -- what a client gets back (the OpenAPI document is built from these) ---------------------------

_OUT = ConfigDict(extra="forbid")


class ReviewResult(BaseModel):
    model_config = ConfigDict(**_OUT, title="HitlResult")

    action: str = Field(description="approve, reject, confirm, cancel, select or submit")
    data: dict[str, Any] | None = Field(default=None, description="Absent once a sensitive answer was handed over")


class Respondent(BaseModel):
    model_config = ConfigDict(**_OUT, title="HitlRespondent")

    name: str = Field(description="The person's name where the tenant lists them, else the principal "
                                  "(telegram:42, link:lnk_…)")
    email: str | None = Field(default=None, description="Their address, when they answered by email or are "
                                                        "listed with one")


def respondent(settings: Settings, tenant_id: str, principal: str,
               decided_by: dict[str, str] | None = None) -> Respondent:
    """Who answered: the proven person who decided (``decided_by``, as the request keeps it), named as
    they were then, else the principal."""
    person = person_of(settings, tenant_id, principal)
    if decided_by is not None or person is not None:  # a row from before 0017 keeps no person: read it now
        name = decided_by["name"] if decided_by is not None else person.display  # type: ignore[union-attr]
        return Respondent(name=name, email=person.email if person is not None else None)
    kind, _, rest = principal.partition(":")
    return Respondent(name=principal, email=rest if kind == "email" and rest else None)


class ReviewStatus(BaseModel):
    """The protocol's poll response (its ``poll-response.json``)."""

    model_config = ConfigDict(**_OUT, title="HitlPollResponse")

    status: CaseStatus
    case_id: str
    created_at: str
    opened_at: str | None = None
    expires_at: str | None = None
    completed_at: str | None = None
    result: ReviewResult | None = None
    responded_by: Respondent | None = None
    expired_at: str | None = None
    default_action: str | None = None
    cancelled_at: str | None = None
    reason: str | None = None


class HitlObject(BaseModel):
    """The protocol's ``hitl`` object (its ``hitl-object.json``); ``review_url`` only for a ``forward`` key."""

    model_config = ConfigDict(**_OUT, title="HitlObject")

    spec_version: Literal["0.8"] = SPEC_VERSION
    case_id: str
    review_url: str | None = None
    poll_url: str
    events_url: str
    callback_url: str | None = None
    type: ReviewType
    prompt: str
    timeout: str
    default_action: str
    created_at: str
    expires_at: str
    context: dict[str, Any] | None = None


class ReviewAccepted(BaseModel):
    """The 202 of ``POST /v1/hitl/reviews``."""

    model_config = ConfigDict(**_OUT, title="HitlAccepted")

    status: Literal["human_input_required"] = "human_input_required"
    message: str
    hitl: HitlObject


# -- a request as a case --------------------------------------------------------------------------


def case_type(view: RequestView, case: dict[str, Any] | None) -> str:
    """The review type: as created through the protocol, else what the request's kind comes closest to."""
    if case is not None:
        return str(case["review_type"])
    return "approval" if view.kind == "approval" else "input"


def case_status(view: RequestView) -> CaseStatus:
    if view.status == "answered":
        return "completed"
    if view.status in ("expired", "cancelled"):
        return view.status  # type: ignore[return-value]
    if view.interacted_at is not None:
        return "in_progress"
    if view.opened_at is not None:
        return "opened"
    return "pending"


def _result(review_type: str, view: RequestView, *, include_answer: bool) -> ReviewResult:
    answer = view.response if include_answer and view.has_response else None
    if review_type == "approval" and isinstance(answer, dict):
        reason = answer.get("reason")
        return ReviewResult(action=answer["decision"], data={"feedback": reason} if reason else {})
    if review_type == "confirmation" and isinstance(answer, str):
        return ReviewResult(action=answer, data={})
    if review_type == "selection" and answer is not None:
        return ReviewResult(action="select", data={
            "selected": answer.get("selected") if isinstance(answer, dict) else [answer]})
    if review_type == "input" and answer is not None:
        return ReviewResult(action="submit", data=answer if isinstance(answer, dict) else {"value": answer})
    # A sensitive answer already handed over (and deleted), or one this key may not see.
    return ReviewResult(action={"input": "submit", "selection": "select"}.get(review_type, "unknown"))


def poll_response(view: RequestView, case: dict[str, Any] | None, *, include_answer: bool,
                  settings: Settings) -> dict[str, Any]:
    """The protocol's poll response for the case as it stands."""
    status = case_status(view)
    out = ReviewStatus(status=status, case_id=view.id, created_at=iso(view.created_at) or "")
    opened = view.opened_at if view.opened_at is not None else view.interacted_at
    out.opened_at = iso(opened)
    if status in ("pending", "opened", "in_progress", "expired"):
        out.expires_at = iso(view.expires_at)
    if status == "completed":
        out.completed_at = iso(view.resolved_at)
        out.result = _result(case_type(view, case), view, include_answer=include_answer)
        out.responded_by = (respondent(settings, view.tenant_id, view.resolved_by, view.resolved_person)
                            if view.resolved_by else None)
    elif status == "expired":
        out.expired_at = iso(view.resolved_at)
        out.default_action = case["default_action"] if case is not None else "skip"
    elif status == "cancelled":
        out.cancelled_at = iso(view.resolved_at)
        out.reason = f"cancelled by {view.resolved_by}" if view.resolved_by else None
    return out.model_dump(mode="json", exclude_none=True)


# The protocol's callback signature: HMAC-SHA256 of the raw body under the shared secret (here the
# tenant's ``[tenants.callbacks] secret``), beside Handraise's own timestamped signature.
HITL_SIGNATURE_HEADER = "X-HITL-Signature"


def hitl_signature(secret: str) -> Callable[[bytes], dict[str, str]]:
    key = secret.encode()
    return lambda body: {HITL_SIGNATURE_HEADER: "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()}


def callback_payload(view: RequestView, case: dict[str, Any], *, settings: Settings,
                     delivery_id: str) -> dict[str, Any]:
    """What a terminal case's ``callback_url`` hears: ``review.<status>`` with the poll response
    (never a sensitive answer: the agent collects that from poll_url) and a delivery id to dedupe on."""
    poll = poll_response(view, case, include_answer=not view.sensitive, settings=settings)
    return {"event": f"review.{poll['status']}", "delivery_id": delivery_id, **poll}


class CaseUrls:
    """Where a case lives on this server (``server.public_url``)."""

    def __init__(self, settings: Settings) -> None:
        self.base = settings.server.public_url.rstrip("/")
        self.reviews = f"{self.base}/v1/hitl/reviews"

    def poll(self, case_id: str) -> str:
        return f"{self.reviews}/{case_id}/status"

    def events(self, case_id: str) -> str:
        return f"{self.reviews}/{case_id}/events"


def accepted_body(view: RequestView, body: CreateReviewBody, *, urls: CaseUrls,
                  review_url: str | None) -> dict[str, Any]:
    """The whole 202: ``human_input_required``, a line for the agent, and the ``hitl`` object."""
    if review_url is not None:
        message = "Send review_url to the person you act for; poll poll_url (or follow events_url) for the result."
    else:
        message = ("Handraise delivers this review to people through its channels; poll poll_url "
                   "(or follow events_url) for the result.")
    hitl = HitlObject(
        case_id=view.id, review_url=review_url, poll_url=urls.poll(view.id), events_url=urls.events(view.id),
        callback_url=body.callback_url,
        type=body.type, prompt=body.prompt, timeout=iso_duration(round(view.expires_at - view.created_at)),
        default_action=body.default_action, created_at=iso(view.created_at) or "",
        expires_at=iso(view.expires_at) or "",
        context=body.context.model_dump(mode="json", exclude_none=True, exclude_unset=True) if body.context else None)
    return ReviewAccepted(message=message, hitl=hitl).model_dump(mode="json", exclude_none=True)


def discovery(settings: Settings) -> dict[str, Any]:
    """``/.well-known/hitl.json`` (the protocol's Appendix D)."""
    urls = CaseUrls(settings)
    limits = settings.limits
    return {"hitl_protocol": {
        "spec_version": SPEC_VERSION,
        "service": {"name": "Handraise", "url": urls.base,
                    "description": "Ask a human for a decision, a value or an approval, and wait for a validated "
                                   "answer; people answer in Telegram, Matrix, Slack, email or a hosted form"},
        "capabilities": {
            "review_types": list(REVIEW_TYPES), "transports": ["polling", "sse", "callback"],
            "default_timeout": iso_duration(limits.default_timeout_seconds),
            "max_timeout": iso_duration(limits.max_timeout_seconds),
            "supports_inline_submit": False, "supports_multi_round": False, "supports_signatures": False,
        },
        "endpoints": {"reviews_base": urls.reviews, "review_page_base": f"{urls.base}/f",
                      "events_base": urls.reviews, "well_known": f"{urls.base}/.well-known/hitl.json"},
        "authentication": {"type": "bearer", "scopes": ["ask", "forward"],
                           "documentation": f"{urls.base}/docs"},
        "rate_limits": {"poll_recommended_interval_seconds": POLL_INTERVAL_SECONDS},
        "examples": {"documentation": f"{urls.base}/docs", "openapi": f"{urls.base}/openapi.json"},
    }}


class ReviewCases:
    """Review cases over the lifecycle service: create one (with its link for a ``forward`` key), read one."""

    def __init__(self, *, service: RequestService) -> None:
        self.service = service
        self.urls = CaseUrls(service.settings)

    async def create(self, *, tenant_id: str, principal: str, forward: bool,
                     body: CreateReviewBody) -> tuple[RequestView, str | None]:
        """The case's request (an identical retry gets the same one) and, for a ``forward`` key that
        created it, a fresh one-time link to hand to the person it acts for."""
        try:
            view, _ = await self.service.create(tenant_id=tenant_id, principal=principal,
                                                body=to_request(body, settings=self.service.settings))
        except InvalidSchemaError as e:
            raise in_review(e, body) from None
        store = self.service.store
        async with store.transaction() as conn:
            # A retry finds the case recorded already; two transactions, so a crash between them
            # leaves a request that reads as a case of the type its kind comes closest to.
            await store.reviews.insert_case(conn, {
                "request_id": view.id, "tenant_id": tenant_id, "review_type": body.type,
                "default_action": body.default_action, "created_at": view.created_at})
        review_url = None
        if forward and view.created_by == principal and not view.terminal:
            link = await self.service.mint_link(tenant_id=tenant_id, request_id=view.id, principal=principal,
                                                recipient="hitl review_url", forward=True)
            review_url = link.url
        return view, review_url

    async def get(self, *, tenant_id: str, case_id: str) -> tuple[RequestView, dict[str, Any] | None]:
        """The case's request and its protocol record (None for a request made through ``/v1/requests``).
        Another tenant's case is NotFoundError, as an unknown one."""
        view = await self.service.get(tenant_id=tenant_id, request_id=case_id, with_deliveries=False)
        return view, await self.service.store.reviews.get_case(tenant_id=tenant_id, request_id=case_id)

"""The API's shapes: request bodies (validated, ``extra="forbid"``) and the views returned to callers."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema, WrapValidator

from handraise.core.errors import (
    AlreadyAnsweredError,
    ExpiredError,
    RequestCancelledError,
    ValidationFailedError,
)
from handraise.core.people import PersonId, PersonRef
from handraise.core.problems import field_problems
from handraise.core.schedule import MAX_REMINDERS, MAX_STEPS, EscalationStep, Schedule, Seconds
from handraise.core.text import label, prose

Kind = Literal["input", "approval", "choice"]
Status = Literal["pending", "answered", "expired", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"answered", "expired", "cancelled"})
# ``answered_via`` of a request its ``on_timeout`` policy resolved (reject, or the default answer).
TIMEOUT_CHANNEL = "timeout"


def url_host(url: str) -> str:
    """The host (and port) of ``url`` without any userinfo: what errors and views may show of a URL."""
    return urlsplit(url).netloc.rpartition("@")[2]


@functools.lru_cache(maxsize=4096)
def iso(ts: float | None) -> str | None:
    # Cached: a request's created_at and expires_at are written in every view and event of it (a cycle
    # wrote the same two times nine times over).
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Stored JSON is the server's own output (json.dumps or canonical JSON, never padded): one call of the C
# scanner reads it, without json.loads's checks for what only a client sends (a BOM, padding, trailing data).
_scan_json = json.JSONDecoder().scan_once


# -- request bodies: strict types, unknown fields refused -----------------------

# Strict: ``"timeout_seconds": true`` or ``"120"`` is a 422, never a request that expires in 1 s.
_BODY = ConfigDict(extra="forbid", strict=True)
MAX_ID_CHARS = 200


def _printable(value: str) -> str:
    if not value.isprintable() or value != value.strip():
        raise ValueError("must be printable, without leading or trailing spaces")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _integral(value: Any) -> Any:
    # JSON Schema's "integer" takes 120.0; a strict int would not. true and "120" stay refused.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# The agent's own name for a request: what it retries with, so exactly what it sent.
UniqueId = Annotated[label(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_printable)]
# A run, recipient or channel name: one line, 1 to 200 characters.
Id = label(min_length=1, max_length=MAX_ID_CHARS)


def _on_timeout(value: Any, handler: Any) -> Any:
    # The union's own errors name its arms ("literal['expire','reject']"); one sentence says it all.
    try:
        value = handler(value)
    except ValidationError:
        value = None
    if value is None or (isinstance(value, dict) and set(value) != {"default"}):
        raise ValueError('must be "expire", "reject" or {"default": <an answer>}')
    return value


# What happens at the deadline: "expire" (the default), "reject" (approvals only) or {"default": <answer>}
# (valid against the request's schema; checked at create, never for approvals: core/timeouts.py).
OnTimeout = Annotated[
    Literal["expire", "reject"] | dict[str, Any], WrapValidator(_on_timeout),
    WithJsonSchema({"anyOf": [{"type": "string", "enum": ["expire", "reject"]},
                              {"type": "object", "properties": {"default": {"description": "The answer applied "
                                                                                           "at the deadline"}},
                               "required": ["default"], "additionalProperties": False}]}),
]


class CreateRequestBody(BaseModel):
    """The body of ``POST /v1/requests`` and of the blocking ``POST /v1/human-feedback``."""

    model_config = ConfigDict(**_BODY, title="CreateRequest")

    unique_id: UniqueId
    message_for_user: Annotated[prose(min_length=1), AfterValidator(_not_blank)]
    timeout_seconds: Annotated[int | None, BeforeValidator(_integral)] = Field(default=None, ge=1)
    # ``schema`` shadows a pydantic attribute, hence the alias.
    form_schema: dict[str, Any] | None = Field(
        default=None, alias="schema", description="A JSON schema in the supported form subset")
    kind: Kind = "input"
    sensitive: bool = False
    run_id: Id | None = None
    channels: list[Id] | None = Field(default=None, max_length=16)
    on_timeout: OnTimeout | None = Field(
        default=None, description='At the deadline: "expire" (default), "reject" (approvals only), '
                                  'or {"default": value} (never for approvals or sensitive requests)')

    callback_url: label(min_length=1, max_length=2000) | None = Field(
        default=None, description="An https URL that hears the result once the request is terminal, signed "
                                  "like [[webhooks]]; the tenant's [tenants.callbacks] allow_hosts may add others")

    proposal: dict[str, Any] | None = Field(
        default=None, description="An approval's proposal (e.g. the command to run), which the approver may "
                                  "edit before approving; valid against proposal_schema")
    proposal_schema: dict[str, Any] | None = Field(
        default=None, description="An object form in the supported subset: what edits of proposal must satisfy")

    def on_timeout_policy(self) -> str | dict[str, Any]:
        """The policy as stored and shown: ``"expire"``, ``"reject"`` or ``{"default": value}``."""
        return self.on_timeout or "expire"
    # Only these people may answer: person ids and ``group:<name>`` of the tenant's [[tenants.people]].
    assign_to: list[PersonRef] | None = Field(default=None, min_length=1, max_length=50)
    # The person the agent acts for: they may never approve it (four eyes; approvals only).
    on_behalf_of: PersonId | None = None
    # Who else is reached, and may answer, while it stays pending (core/schedule.py).
    escalation: list[EscalationStep] | None = Field(default=None, min_length=1, max_length=MAX_STEPS)
    reminders: list[Seconds] | None = Field(
        default=None, min_length=1, max_length=MAX_REMINDERS,
        description="Seconds after creation at which a still-pending request is pinged where it was posted")
    remind_after_seconds: Seconds | None = Field(default=None, description="One reminder: reminders [N]")

    def reminder_schedule(self) -> list[int] | None:
        return self.reminders if self.reminders is not None else (
            [self.remind_after_seconds] if self.remind_after_seconds is not None else None)
    # Quorum (core/quorum.py): N distinct people must approve; what rejects it.
    approvals_required: Annotated[int | None, BeforeValidator(_integral)] = Field(
        default=None, ge=1, le=50, description="Approvals only: this many distinct people must approve "
                                               "(one person counts once, whatever channels they use)")
    reject_policy: Literal["any", "quorum"] | None = Field(
        default=None, description='With approvals_required: "any" (default) — one rejection rejects; "quorum" — '
                                  "it takes as many rejections as approvals, and the first side to get there decides")

    def canonical_body(self, *, timeout_seconds: int) -> dict[str, Any]:
        """What makes two creates 'the same body': every field, defaults filled in."""
        return {
            "unique_id": self.unique_id,
            "message_for_user": self.message_for_user,
            "timeout_seconds": timeout_seconds,
            "schema": self.form_schema,
            "kind": self.kind,
            "sensitive": self.sensitive,
            "run_id": self.run_id,
            "channels": sorted(self.channels) if self.channels is not None else None,
            # Only when set: a retry of a request made before the field existed keeps its hash.
            **({"on_timeout": policy} if (policy := self.on_timeout_policy()) != "expire" else {}),
            **({"callback_url": self.callback_url} if self.callback_url is not None else {}),
            **({"proposal": self.proposal} if self.proposal is not None else {}),
            **({"proposal_schema": self.proposal_schema} if self.proposal_schema is not None else {}),
            **({"assign_to": sorted(set(self.assign_to))} if self.assign_to is not None else {}),
            **({"on_behalf_of": self.on_behalf_of} if self.on_behalf_of is not None else {}),
            **({"escalation": [s.model_dump(exclude_none=True) for s in self.escalation]}
               if self.escalation is not None else {}),
            **({"reminders": reminders} if (reminders := self.reminder_schedule()) is not None else {}),
            **({"approvals_required": self.approvals_required} if self.approvals_required is not None else {}),
            **({"reject_policy": self.reject_policy} if self.reject_policy is not None else {}),
        }


class SubmitBody(BaseModel):
    """``POST /api/human-feedback/submit``: the answer to the request with this ``unique_id``."""

    model_config = ConfigDict(**_BODY, title="Submission")

    unique_id: UniqueId
    # Required, though null is a value (refused by most schemas, with the reason).
    response: Any = Field(json_schema_extra={"description": "The answer, valid against the request's schema"})


class LinkBody(BaseModel):
    """``POST /v1/requests/{id}/links``."""

    model_config = ConfigDict(**_BODY, title="LinkRequest")

    recipient: Id | None = None
    # A link personal to one of the tenant's people: answers through it are theirs (``person:<id>``).
    person: PersonId | None = Field(default=None, description="A person of the tenant who may answer it: the "
                                                              "link answers as them. Needs a key bound to that "
                                                              "person, or deliver")
    deliver: bool = Field(default=False, description="With person: send the link to the person's own channel "
                                                     "(their DM, their address) instead of returning it: 202 "
                                                     "with delivered_to")


ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_body(model: type[ModelT], raw: Any, *, what: str) -> ModelT:
    """A JSON body as ``model``, or 422 ``validation_error`` with a problem per field."""
    if not isinstance(raw, dict):
        raise ValidationFailedError("the body must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ValidationFailedError(f"the {what} is not valid", fields=field_problems(e)) from None


def optional_not_null(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` for a model whose optional fields refuse null: document them as such.

    pydantic writes ``X | None = None`` as ``anyOf: [X, null]``; such a model's validators refuse
    null ("leave the field out instead"), and the OpenAPI document must say what the server does.
    """
    for prop in schema.get("properties", {}).values():
        arms = prop.get("anyOf")
        if isinstance(arms, list) and {"type": "null"} in arms:
            rest = [arm for arm in arms if arm != {"type": "null"}]
            del prop["anyOf"]
            prop.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
        if prop.get("default", 0) is None:
            del prop["default"]


_V = TypeVar("_V")
_new_object = object.__new__


def _built(cls: type[_V], values: dict[str, Any]) -> _V:
    """An instance of the frozen dataclass ``cls`` with ``values`` (every field, by name) as its own, as
    ``cls(**values)`` makes it without a call of object.__setattr__ per field."""
    made = _new_object(cls)
    made.__dict__.update(values)
    return made


@dataclass(frozen=True)
class DeliveryView:
    channel: str
    target: str
    status: str
    attempts: int
    last_error: str | None
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "target": self.target, "status": self.status, "attempts": self.attempts,
                "last_error": self.last_error, "updated_at": iso(self.updated_at)}


@dataclass(frozen=True)
class RequestView:
    """A request as it stands. ``response`` is None unless answered (and, if sensitive, not yet purged)."""

    id: str
    tenant_id: str
    unique_id: str
    status: str
    message_for_user: str
    schema: dict[str, Any] | None
    kind: str
    sensitive: bool
    run_id: str | None
    channels: list[str]
    created_at: float
    expires_at: float
    created_by: str
    response: Any = None
    response_purged: bool = False
    resolved_by: str | None = None
    resolved_channel: str | None = None
    resolved_at: float | None = None
    deliveries: list[DeliveryView] = field(default_factory=list)
    # When a person first opened its hosted form, and first tried to answer (a refused attempt).
    opened_at: float | None = None
    interacted_at: float | None = None
    # "expire", "reject" or {"default": value}: what the deadline does (CreateRequestBody.on_timeout).
    on_timeout: str | dict[str, Any] = "expire"
    # Where the result is POSTed once terminal; never shown whole (it may hold a token): see callback_host.
    callback_url: str | None = None
    # An approval's proposal as the agent made it, and the schema its edits are checked against.
    proposal: dict[str, Any] | None = None
    proposal_schema: dict[str, Any] | None = None

    @property
    def callback_host(self) -> str | None:
        return url_host(self.callback_url) if self.callback_url else None
    assign_to: list[str] | None = None
    on_behalf_of: str | None = None
    # Escalation steps and reminders, and how far the clock took them (core/schedule.py).
    schedule: Schedule | None = None
    # Quorum (core/quorum.py): N distinct people must approve, what rejects it, and the votes so far
    # (each {"person", "name", "decision", "reason"?, "channel", "principal", "at"}, in the order cast).
    approvals_required: int | None = None
    reject_policy: str | None = None
    votes: list[dict[str, Any]] = field(default_factory=list)
    votes_version: int = 0
    # The proven person who decided (``{"id", "name"}``, as it stood then), or None: nobody proven.
    resolved_person: dict[str, str] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def timed_out(self) -> bool:
        """The deadline ended it: expired, or resolved by its ``on_timeout`` policy (nobody answered)."""
        return self.status == "expired" or (self.status == "answered" and self.resolved_channel == TIMEOUT_CHANNEL)

    @property
    def has_response(self) -> bool:
        return self.status == "answered" and not self.response_purged

    @classmethod
    def from_row(cls, row: dict[str, Any], *, deliveries: list[dict[str, Any]] | None = None) -> RequestView:
        # Columns later migrations added may be absent from a row (a fresh insert's): row.get reads them as None.
        get = row.get
        schema_json, response_json, schedule = row["form_schema_json"], row["response_json"], get("schedule_json")
        on_timeout, proposal, proposal_schema = get("on_timeout_json"), get("proposal_json"), get("proposal_schema_json")
        assign_to, votes, person = get("assign_to_json"), get("votes_json"), get("resolved_person_json")
        # Every field, set at once: a frozen dataclass's __init__ sets each of its 33 through
        # object.__setattr__, a third of this method's time on every read of a request.
        return _built(cls, {
            "id": row["id"], "tenant_id": row["tenant_id"], "unique_id": row["unique_id"], "status": row["status"],
            "message_for_user": row["message_for_user"],
            "schema": _scan_json(schema_json, 0)[0] if schema_json else None,
            "kind": row["kind"], "sensitive": bool(row["sensitive"]), "run_id": row["run_id"],
            "channels": _scan_json(row["channels_json"], 0)[0], "created_at": row["created_at"],
            "expires_at": row["expires_at"], "created_by": row["created_by"],
            "response": _scan_json(response_json, 0)[0] if response_json is not None else None,
            "response_purged": bool(row["response_purged"]),
            "resolved_by": row["resolved_by"], "resolved_channel": row["resolved_via"],
            "resolved_at": row["resolved_at"],
            "deliveries": [_built(DeliveryView, {"channel": d["channel"], "target": d["target"], "status": d["status"],
                                                 "attempts": d["attempts"], "last_error": d["last_error"],
                                                 "updated_at": d["updated_at"]})
                           for d in deliveries] if deliveries else [],
            "opened_at": get("opened_at"), "interacted_at": get("interacted_at"),
            "on_timeout": _scan_json(on_timeout, 0)[0] if on_timeout else "expire",
            "callback_url": get("callback_url"),
            "proposal": _scan_json(proposal, 0)[0] if proposal else None,
            "proposal_schema": _scan_json(proposal_schema, 0)[0] if proposal_schema else None,
            "assign_to": _scan_json(assign_to, 0)[0] if assign_to else None,
            "on_behalf_of": get("on_behalf_of"),
            "schedule": Schedule.from_json(schedule, created_at=row["created_at"]) if schedule else None,
            "approvals_required": get("approvals_required"), "reject_policy": get("reject_policy"),
            "votes": _scan_json(votes, 0)[0] if votes else [],
            "votes_version": get("votes_version") or 0,
            "resolved_person": _scan_json(person, 0)[0] if person else None,
        })

    def to_json(self, *, include_response: bool) -> dict[str, Any]:
        """The API shape. ``include_response`` is False for events and for anyone but the asking side."""
        out: dict[str, Any] = {
            "id": self.id, "unique_id": self.unique_id, "status": self.status,
            "message_for_user": self.message_for_user, "schema": self.schema, "kind": self.kind,
            "sensitive": self.sensitive, "run_id": self.run_id, "channels": self.channels,
            "created_at": iso(self.created_at), "expires_at": iso(self.expires_at),
            "on_timeout": self.on_timeout,
        }
        if self.opened_at is not None:
            out["opened_at"] = iso(self.opened_at)
        if self.interacted_at is not None:
            out["interacted_at"] = iso(self.interacted_at)
        if self.callback_url:
            out["callback_host"] = self.callback_host
        if self.proposal is not None:
            out["proposal"], out["proposal_schema"] = self.proposal, self.proposal_schema
        if self.terminal:
            out["timed_out"] = self.timed_out
        if self.assign_to is not None:
            out["assign_to"] = self.assign_to
        if self.on_behalf_of is not None:
            out["on_behalf_of"] = self.on_behalf_of
        if self.schedule is not None:
            out.update(schedule_json(self.schedule))
        if self.approvals_required is not None:
            out["approvals_required"] = self.approvals_required
            out["reject_policy"] = self.reject_policy or "any"
            out["votes"] = [vote_json(v) for v in self.votes]
        if self.status == "answered":
            out["answered_by"] = self.resolved_by
            out["answered_by_person"] = self.resolved_person
            out["answered_at"] = iso(self.resolved_at)
            out["answered_via"] = self.resolved_channel
            if include_response and not self.response_purged:
                out["response"] = self.response
            if self.response_purged:
                out["response_deleted"] = True
        elif self.status == "cancelled":
            out["cancelled_by"] = self.resolved_by
            out["cancelled_at"] = iso(self.resolved_at)
        elif self.status == "expired":
            out["expired_at"] = iso(self.resolved_at)
        out["deliveries"] = [d.to_json() for d in self.deliveries] if self.deliveries else []
        return out

    def event_json(self) -> dict[str, Any]:
        """Safe for every ``read`` key of the tenant: a sensitive response never appears."""
        return self.to_json(include_response=not self.sensitive)


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """A schedule as the request shows it: each step with ``reached`` and ``reached_at``, each reminder
    with ``sent_at``; times as ISO 8601, like every other time of a request."""
    out: dict[str, Any] = {}
    if schedule.steps:
        out["escalation"] = [{**{k: v for k, v in s.to_json().items() if not k.endswith("_at")},
                              "reached": s.reached_at is not None, "reached_at": iso(s.reached_at),
                              **({"reminded_at": iso(s.reminded_at)} if s.reminded_at is not None else {})}
                             for s in schedule.steps]
    if schedule.reminders:
        out["reminders"] = [{"after_seconds": r.after_seconds, "sent_at": iso(r.sent_at)}
                            for r in schedule.reminders]
    return out


def vote_json(vote: dict[str, Any]) -> dict[str, Any]:
    """A stored vote as the API shows it: its time in ISO 8601."""
    return {**vote, "at": iso(vote["at"])}


@dataclass(frozen=True)
class LinkView:
    id: str
    tenant_id: str
    request_id: str
    recipient: str | None
    created_at: float
    used_at: float | None
    # The person it was minted for, or None for a link anyone holding it may use (``link:<id>``).
    principal: str | None = None

    @property
    def answers_as(self) -> str:
        """Who an answer through this link is recorded as: its person, else the link itself."""
        return self.principal or f"link:{self.id}"

    @property
    def channel(self) -> str:
        """The channel an answer through it counts for: the person's messenger, else the web form."""
        kind = self.principal.partition(":")[0] if self.principal else "web"
        return "web" if kind == "person" else kind


@dataclass(frozen=True)
class MintedLink:
    link_id: str
    token: str
    url: str
    expires_at: float

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "expires_at": iso(self.expires_at)}


# -- public shapes, as a caller reads them -----------------------------------------------------
# One definition for the Python client (``handraise.client``), the MCP tools and the OpenAPI
# document's ``Request`` schema. Unknown fields are kept, not refused: a newer server may add some.


class DeliveryRecord(BaseModel):
    """One delivery of a request to a channel target, as ``GET /v1/requests/{id}`` shows it."""

    model_config = ConfigDict(extra="allow")

    channel: str
    target: str
    status: str
    attempts: int = 0
    last_error: str | None = None
    updated_at: datetime | None = None


class VoteRecord(BaseModel):
    """One person's vote on a quorum request (``votes`` of a request, and of its answer)."""

    model_config = ConfigDict(extra="allow")

    person: str = Field(description="The person's id (one person counts once, whatever channel they used)")
    name: str = Field(description="The person's name as configured")
    decision: Literal["approve", "reject"]
    reason: str | None = None
    channel: str = Field(description="The channel the vote came through (telegram, slack, web, inbox, api ...)")
    principal: str = Field(description="Who acted on that channel (telegram:<id>, person:<id> ...)")
    at: datetime


class PersonRecord(BaseModel):
    """A proven person of the tenant: who decided, in human terms."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="The person's id in [[tenants.people]]")
    name: str = Field(description="The person's name as configured (the id when none is)")


class RequestRecord(BaseModel):
    """A request as the API returns it (``RequestView.to_json``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str
    unique_id: str
    status: Status
    message_for_user: str
    form_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    kind: Kind = "input"
    sensitive: bool = False
    run_id: str | None = None
    channels: list[str] = Field(default_factory=list)
    assign_to: list[str] | None = None
    on_behalf_of: str | None = None
    escalation: list[dict[str, Any]] | None = Field(
        default=None, description="Escalation steps, each with reached and reached_at once the clock reached it")
    reminders: list[dict[str, Any]] | None = Field(
        default=None, description="Scheduled reminders, each with sent_at once sent")
    approvals_required: int | None = Field(
        default=None, description="This many distinct people must approve (quorum); absent: one answer decides")
    reject_policy: Literal["any", "quorum"] | None = Field(
        default=None, description='With approvals_required: "any" rejection rejects, or a "quorum" of rejections')
    votes: list[VoteRecord] | None = Field(
        default=None, description="With approvals_required: the votes cast so far, in order")
    created_at: datetime
    expires_at: datetime
    response: Any = None
    response_deleted: bool = False
    answered_by: str | None = None
    answered_by_person: PersonRecord | None = Field(
        default=None, description="The proven person who decided (for a quorum, the deciding vote's; votes "
                                  "lists every voter); null when nobody proven did (a key or session bound to "
                                  "no person, a plain link, on_timeout)")
    answered_at: datetime | None = None
    answered_via: str | None = None
    cancelled_by: str | None = None
    cancelled_at: datetime | None = None
    expired_at: datetime | None = None
    opened_at: datetime | None = Field(default=None, description="When a person first opened its hosted form")
    interacted_at: datetime | None = Field(default=None,
                                           description="When a person first tried to answer and was refused")
    deliveries: list[DeliveryRecord] = Field(default_factory=list)
    on_timeout: Literal["expire", "reject"] | dict[str, Any] = Field(
        default="expire", description='What the deadline does: "expire", "reject" or {"default": value}')
    proposal: dict[str, Any] | None = Field(
        default=None, description="An approval's proposal as the agent made it; the answer's proposal is the one "
                                  "approved, with edited saying whether the approver changed it")
    proposal_schema: dict[str, Any] | None = None
    callback_host: str | None = Field(
        default=None, description="The host of the request's callback_url (its result is POSTed there; "
                                  "see the delivery of channel callback)")
    timed_out: bool = Field(
        default=False, description="Terminal because the deadline passed: expired, or (status answered, "
                                   "answered_via timeout) resolved by on_timeout")

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def has_response(self) -> bool:
        """True when answered and the answer is here (a sensitive one is handed over once, then deleted)."""
        return self.status == "answered" and "response" in self.model_fields_set


class LinkRecord(BaseModel):
    """``POST /v1/requests/{id}/links``: a one-time form link."""

    model_config = ConfigDict(extra="allow")

    url: str
    expires_at: datetime


def raise_if_terminal(view: RequestView) -> None:
    """Refuse a late human: the error that says how the request ended (pending passes)."""
    if view.timed_out:
        # Answered by its on_timeout policy, or expired: to a late human, the time ran out either way.
        raise ExpiredError("the request expired" if view.status == "expired"
                           else "the time ran out: the request's on_timeout policy applied")
    if view.status == "answered":
        raise AlreadyAnsweredError("the request was answered already")
    if view.status == "expired":
        raise ExpiredError("the request expired")
    if view.status == "cancelled":
        raise RequestCancelledError("the request was cancelled")

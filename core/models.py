"""The tables. Every row carries a tenant id; times are UTC epoch seconds (float).

Only ``core/store/`` and the Alembic migrations touch these; everything else
goes through the lifecycle service.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Float, Index, Integer, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel


# Each column needs a Column of its own (SQLAlchemy binds it to one table): these make a fresh one each time.
def seconds() -> Any:
    """A time that is always set: UTC epoch seconds."""
    return Field(sa_column=Column(Float, nullable=False))


def seconds_or_none() -> Any:
    """A time that may not have come yet (None until then)."""
    return Field(default=None, sa_column=Column(Float, nullable=True))


def long_text() -> Any:
    """Text of any length (a question, JSON), always set."""
    return Field(sa_column=Column(Text, nullable=False))


def long_text_or_none() -> Any:
    """Text of any length, or None."""
    return Field(default=None, sa_column=Column(Text, nullable=True))


class RequestRow(SQLModel, table=True):
    __tablename__ = "requests"
    __table_args__ = (
        UniqueConstraint("tenant_id", "unique_id", name="uq_requests_tenant_unique_id"),
        Index("ix_requests_status_expires", "status", "expires_at"),
        # Each list of a tenant's requests (all, by status, by run) is one index range already in
        # creation order (migration 0009): the first page costs the same at a million rows, and
        # SQLite's planner, which has no statistics, is not tempted to scan in order and filter.
        Index("ix_requests_tenant_created", "tenant_id", "created_at"),
        Index("ix_requests_tenant_status_created", "tenant_id", "status", "created_at"),
        Index("ix_requests_tenant_run_created", "tenant_id", "run_id", "created_at"),
        # The sweeper's look for sensitive answers still held: only those rows are in it (migration 0004).
        Index("ix_requests_sealed_held", "resolved_at", sqlite_where=text("response_sealed IS NOT NULL"),
              postgresql_where=text("response_sealed IS NOT NULL")),
        # ... and of those handed out once, by when (migration 0009): each look is a range, not a scan.
        Index("ix_requests_sealed_delivered", "response_delivered_at",
              sqlite_where=text("response_sealed IS NOT NULL"), postgresql_where=text("response_sealed IS NOT NULL")),
        # The sweeper's look for escalation steps and reminders that are due (migration 0013).
        Index("ix_requests_status_next_due", "status", "next_due_at",
              sqlite_where=text("next_due_at IS NOT NULL"), postgresql_where=text("next_due_at IS NOT NULL")),
    )

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=64)
    unique_id: str = Field(max_length=200)
    # sha256 of the canonical create body: same body → idempotent retry.
    body_sha256: str = Field(max_length=64)
    message_for_user: str = long_text()
    form_schema_json: str | None = long_text_or_none()
    kind: str = Field(max_length=16)
    sensitive: bool = False
    run_id: str | None = Field(default=None, max_length=200)
    channels_json: str = long_text()
    status: str = Field(max_length=16)
    created_by: str = Field(max_length=200)
    created_at: float = seconds()
    expires_at: float = seconds()
    # A non-sensitive answer in canonical JSON; a sensitive one is never here (response_sealed).
    response_json: str | None = long_text_or_none()
    # Keyed, per-request digest of the canonical answer (core/sealing.py); the journal keeps the same.
    response_digest: str | None = Field(default=None, max_length=64)
    # A sensitive answer sealed under its own key, and that key wrapped under the server secret's;
    # both are deleted together once the agent has the answer (crypto-shredding).
    response_sealed: str | None = long_text_or_none()
    response_key: str | None = long_text_or_none()
    # When the sealed answer was first handed to the agent: kept for its next call until the grace ends.
    response_delivered_at: float | None = seconds_or_none()
    # Set once a sensitive response was handed to the agent and deleted.
    response_purged: bool = False
    resolved_by: str | None = Field(default=None, max_length=300)
    resolved_via: str | None = Field(default=None, max_length=32)
    resolved_at: float | None = seconds_or_none()
    # When a person first opened the request's hosted form, and first tried to answer (a refused
    # attempt): the HITL protocol's ``opened`` and ``in_progress`` (migration 0006).
    opened_at: float | None = seconds_or_none()
    interacted_at: float | None = seconds_or_none()
    # What the deadline does, JSON: null for "expire", "reject", or {"default": <answer>} (migration 0007).
    on_timeout_json: str | None = long_text_or_none()
    # Where the result is POSTed once terminal (core/callbacks.py; migration 0007).
    callback_url: str | None = long_text_or_none()
    # An approval's proposal and the schema its edits are checked against, JSON (core/proposals.py; migration 0010).
    proposal_json: str | None = long_text_or_none()
    proposal_schema_json: str | None = long_text_or_none()
    # Who may answer: people and ``group:`` names as the agent gave them (JSON), or NULL: anyone allowed.
    assign_to_json: str | None = long_text_or_none()
    # The person the agent acts for: they may never approve this request (four eyes).
    on_behalf_of: str | None = Field(default=None, max_length=64)
    # Escalation steps and reminders with the times reached (core/schedule.py), and when the next is due.
    schedule_json: str | None = long_text_or_none()
    next_due_at: float | None = seconds_or_none()
    # Quorum (core/quorum.py; migration 0014): N distinct people must approve; "any" rejection rejects, or
    # "quorum": N rejections do. NULL: one answer decides, as for any request.
    approvals_required: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    reject_policy: str | None = Field(default=None, max_length=16)
    # The votes cast so far (JSON list), and the counter each vote's compare-and-set increments.
    votes_json: str | None = long_text_or_none()
    votes_version: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    # Who decided, in human terms, as it stood when they did: ``{"id", "name"}`` of the proven person whose
    # answer (or deciding vote) resolved it; NULL when no person did (a key or session bound to nobody,
    # a link, a deadline) (migration 0017).
    resolved_person_json: str | None = long_text_or_none()


class JournalRow(SQLModel, table=True):
    """Append-only audit trail, one HMAC chain per tenant; ``hash`` covers every other column."""

    __tablename__ = "journal"
    __table_args__ = (
        # A request's or a run's entries in chain order, straight from the index (migration 0009).
        Index("ix_journal_tenant_request_seq", "tenant_id", "request_id", "seq"),
        Index("ix_journal_tenant_run_seq", "tenant_id", "run_id", "seq"),
    )

    tenant_id: str = Field(primary_key=True, max_length=64)
    # 1, 2, 3 … within the tenant's chain.
    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    request_id: str | None = Field(default=None, max_length=64)
    run_id: str | None = Field(default=None, max_length=200)
    event: str = Field(max_length=32)
    principal: str | None = Field(default=None, max_length=300)
    channel: str | None = Field(default=None, max_length=32)
    data_json: str = long_text()
    at: float = seconds()
    prev_hash: str = Field(max_length=64)
    hash: str = Field(max_length=64)


class JournalHeadRow(SQLModel, table=True):
    """The last entry of each tenant's chain: appends lock this row, so tenants never wait for each other."""

    __tablename__ = "journal_heads"

    tenant_id: str = Field(primary_key=True, max_length=64)
    seq: int
    hash: str = Field(max_length=64)


class DeliveryRow(SQLModel, table=True):
    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("request_id", "channel", "target", name="uq_deliveries_target"),
        Index("ix_deliveries_tenant_request", "tenant_id", "request_id"),
        # The recovery pass's look for withdrawals a dead instance left half done (migration 0016).
        Index("ix_deliveries_withdrawing", "updated_at", sqlite_where=text("status = 'withdrawing'"),
              postgresql_where=text("status = 'withdrawing'")),
    )

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: str = Field(max_length=64)
    request_id: str = Field(max_length=64)
    channel: str = Field(max_length=32)
    target: str = Field(max_length=300)
    # pending | sent | failed | withdrawing (one instance is editing its message) | withdrawn
    # | bounced (a mail the recipient's server returned later)
    status: str = Field(max_length=16)
    attempts: int = 0
    last_error: str | None = long_text_or_none()
    # The messenger's handle on what was posted (chat and message ids), JSON.
    ref_json: str | None = long_text_or_none()
    created_at: float = seconds()
    updated_at: float = seconds()
    reminded_at: float | None = seconds_or_none()


class LinkRow(SQLModel, table=True):
    __tablename__ = "links"
    # ix_links_created: the sweeper prunes spent links by age (migration 0008).
    __table_args__ = (Index("ix_links_request", "request_id"), Index("ix_links_created", "created_at"))

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=64)
    request_id: str = Field(max_length=64)
    token_sha256: str = Field(max_length=64, unique=True)
    recipient: str | None = Field(default=None, max_length=200)
    created_by: str = Field(max_length=300)
    created_at: float = seconds()
    used_at: float | None = seconds_or_none()
    # The person the link was minted for (``telegram:42``): only they answer through it, as themselves.
    principal: str | None = Field(default=None, max_length=300)


class ApiKeyRow(SQLModel, table=True):
    __tablename__ = "api_keys"

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=64)
    key_sha256: str = Field(max_length=64, unique=True)
    scopes: str = Field(max_length=200)
    created_at: float = seconds()
    revoked_at: float | None = seconds_or_none()
    # The one person of the tenant this key acts as (``person:<id>``), or NULL: a key bound to nobody,
    # which never acts as or mints anything naming a person (migration 0017).
    person: str | None = Field(default=None, max_length=64)


class AnnotationRow(SQLModel, table=True):
    """RFC 0056 per-run side-store: never part of a request or the journal's run events."""

    __tablename__ = "annotations"
    __table_args__ = (
        Index("ix_annotations_tenant_run_seq", "tenant_id", "run_id", "seq"),
        # One successor per annotation, even when two supersede the same one at once (migration 0002).
        Index("uq_annotations_supersedes", "supersedes", unique=True),
    )

    seq: int | None = Field(default=None, primary_key=True)
    annotation_id: str = Field(max_length=64, unique=True)
    tenant_id: str = Field(max_length=64)
    run_id: str = Field(max_length=200)
    event_id: str | None = Field(default=None, max_length=200)
    node_id: str | None = Field(default=None, max_length=200)
    kind: str = Field(max_length=16)
    rating: int | None = None
    label: str | None = long_text_or_none()
    correction: str | None = long_text_or_none()
    note: str | None = long_text_or_none()
    principal: str = Field(max_length=300)
    supersedes: str | None = Field(default=None, max_length=64)
    created_at: float = seconds()


class RunRow(SQLModel, table=True):
    """An agent run that requests and annotations attach to: registered (``POST /v1/runs``) or made by first use."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("tenant_id", "run_id", name="uq_runs_tenant_run"),)

    # Insertion order: the list's cursor, newest first.
    seq: int | None = Field(default=None, primary_key=True)
    tenant_id: str = Field(max_length=64)
    run_id: str = Field(max_length=200)
    # running | completed | failed | cancelled; a terminal status never changes.
    status: str = Field(max_length=16)
    # False while the run exists only because a request or annotation named it.
    registered: bool = False
    name: str | None = Field(default=None, max_length=200)
    workflow_id: str | None = Field(default=None, max_length=200)
    # The registration's inputs (canonical JSON, free text redacted) and the body's sha256 (idempotent retries).
    inputs_json: str | None = long_text_or_none()
    body_sha256: str | None = Field(default=None, max_length=64)
    created_by: str = Field(max_length=300)
    created_at: float = seconds()
    updated_at: float = seconds()
    completed_by: str | None = Field(default=None, max_length=300)
    completed_at: float | None = seconds_or_none()
    reason: str | None = long_text_or_none()


class ChatActionRow(SQLModel, table=True):
    """Server-side map behind a chat button: a short random token names a request and a value."""

    __tablename__ = "chat_actions"
    __table_args__ = (Index("ix_chat_actions_request", "request_id"), Index("ix_chat_actions_created", "created_at"))

    token: str = Field(primary_key=True, max_length=32)
    tenant_id: str = Field(max_length=64)
    request_id: str = Field(max_length=64)
    channel: str = Field(max_length=32)
    value_json: str = long_text()
    created_at: float = seconds()


class MessageRefRow(SQLModel, table=True):
    """Which request a posted chat message belongs to, so a reply or reaction to it finds its request."""

    __tablename__ = "message_refs"
    __table_args__ = (Index("ix_message_refs_created", "created_at"),)

    channel: str = Field(primary_key=True, max_length=32)
    message_key: str = Field(primary_key=True, max_length=300)
    tenant_id: str = Field(max_length=64)
    request_id: str = Field(max_length=64, index=True)
    created_at: float = seconds()


class StateRow(SQLModel, table=True):
    """Small durable key/value state: a connector's sync position, the server secret; and state about one
    request (``request_id`` set), which the sweeper prunes with the request's other spent rows."""

    __tablename__ = "kv_state"
    __table_args__ = (
        Index("ix_kv_state_request_updated", "updated_at", sqlite_where=text("request_id IS NOT NULL"),
              postgresql_where=text("request_id IS NOT NULL")),
    )

    namespace: str = Field(primary_key=True, max_length=64)
    key: str = Field(primary_key=True, max_length=200)
    value: str = long_text()
    updated_at: float = seconds()
    request_id: str | None = Field(default=None, max_length=64)


class InboxSigninRow(SQLModel, table=True):
    """A one-time sign-in link to the operator inbox: only its token's sha256 is kept."""

    __tablename__ = "inbox_signins"
    __table_args__ = (Index("ix_inbox_signins_expires", "expires_at"),)

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=64)
    # Who signs in with it: the session acts as ``operator:<name>``.
    name: str = Field(max_length=64)
    token_sha256: str = Field(max_length=64, unique=True)
    # What the session may do, comma-separated: answer, read, and annotate when the minter had it.
    scopes: str = Field(max_length=200)
    created_by: str = Field(max_length=300)
    created_at: float = seconds()
    expires_at: float = seconds()
    used_at: float | None = seconds_or_none()
    # The person the session will be (``person:<id>``), proven by how the link was handed out: minted by
    # that person's own key, or sent to their own channel. NULL: an operator session (migration 0017).
    person: str | None = Field(default=None, max_length=64)


class InboxSessionRow(SQLModel, table=True):
    """A signed-in browser: the cookie holds a random token, the store its sha256 and both expiries."""

    __tablename__ = "inbox_sessions"
    __table_args__ = (Index("ix_inbox_sessions_expires", "expires_at"),)

    id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=64)
    name: str = Field(max_length=64)
    token_sha256: str = Field(max_length=64, unique=True)
    signin_id: str = Field(max_length=64)
    scopes: str = Field(max_length=200)
    created_at: float = seconds()
    last_seen_at: float = seconds()
    # Absolute end; the idle end is last_seen_at plus the configured idle time.
    expires_at: float = seconds()
    ended_at: float | None = seconds_or_none()
    # The proven person the session acts as (its sign-in's, or the identity provider's mapping), or NULL.
    person: str | None = Field(default=None, max_length=64)


class HitlCaseRow(SQLModel, table=True):
    """A request created through the HITL-protocol endpoints: what the protocol needs back (core/hitl.py)."""

    __tablename__ = "hitl_cases"

    # The case id is the request id.
    request_id: str = Field(primary_key=True, max_length=64)
    tenant_id: str = Field(max_length=64)
    # approval | selection | input | confirmation
    review_type: str = Field(max_length=16)
    # What the agent declared it will do on expiry (skip | reject | abort): echoed, never acted on.
    default_action: str = Field(max_length=16)
    created_at: float = seconds()

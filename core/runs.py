"""Runs as a resource: register, finish, read and list agent runs (DESIGN: run).

A run is registered with ``POST /v1/runs`` or made by the first request or annotation naming it
(tenant-scoped, unregistered, ``running``). It ends once, ``completed``, ``failed`` or ``cancelled``;
a terminal status never changes. With ``[openwop] conformance_fixtures = true`` the OpenWOP
conformance suite's ``conformance-noop`` workflow registers a run that is completed at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from handraise.core.annotations import AnnotationService, check_run_id, decode_cursor, encode_cursor
from handraise.core.api import Id, iso, optional_not_null, parse_body
from handraise.core.canonical import CanonicalizationError, canonical_json
from handraise.core.config import Settings
from handraise.core.errors import BadRequestError, ConflictError, NotFoundError, ValidationFailedError
from handraise.core.redaction import redact, redact_value
from handraise.core.store import Store
from handraise.core.text import label, prose

log = logging.getLogger(__name__)

Clock = Callable[[], float]

RunStatus = Literal["running", "completed", "failed", "cancelled"]
FinishedStatus = Literal["completed", "failed", "cancelled"]
REQUEST_STATUSES = ("pending", "answered", "expired", "cancelled")
# The OpenWOP conformance suite's seed workflow (RFC 0003 fixtures): does nothing, completes at once.
CONFORMANCE_NOOP = "conformance-noop"
MAX_INPUTS_BYTES = 16_384
DEFAULT_PAGE = 100
MAX_PAGE = 500


def _no_null(value: Any) -> Any:
    if value is None:
        raise ValueError("must not be null; leave the field out instead")
    return value


class RegisterRunBody(BaseModel):
    """``POST /v1/runs``: every field optional; without ``run_id`` the server names the run."""

    model_config = ConfigDict(extra="forbid", strict=True, title="RegisterRun", json_schema_extra=optional_not_null)

    run_id: Id | None = None
    name: label(min_length=1, max_length=200) | None = None
    workflowId: Id | None = None
    inputs: dict[str, Any] | None = Field(default=None, description=f"At most {MAX_INPUTS_BYTES} bytes as JSON")
    tenantId: Id | None = Field(default=None, description=(
        "OpenWOP's run-create field, accepted for compatibility: it never chooses the tenant, the key does"))

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        return _no_null(value)


class CompleteRunBody(BaseModel):
    """``POST /v1/runs/{runId}/complete``: how the run ended, and optionally why (redacted before it is stored)."""

    model_config = ConfigDict(extra="forbid", strict=True, title="CompleteRun", json_schema_extra=optional_not_null)

    status: FinishedStatus
    reason: prose(max_length=2000) | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        return _no_null(value)


class RunRequestCounts(BaseModel):
    """A run's requests by status."""

    total: int
    pending: int
    answered: int
    expired: int
    cancelled: int


class RunAnnotationSummary(BaseModel):
    """A run's current annotations: how many, per signal, and the mean rating (null without ratings)."""

    total: int
    superseded: int
    counts: dict[str, int]
    meanRating: float | None


class RunRecord(BaseModel):
    """A run as returned; ``requests`` and ``annotations`` only by ``GET /v1/runs/{runId}`` (annotations
    null while feedback is off)."""

    model_config = ConfigDict(title="RunRecord")

    runId: str
    status: RunStatus
    registered: bool
    name: str | None
    workflowId: str | None
    inputs: dict[str, Any] | None
    createdAt: str = Field(json_schema_extra={"format": "date-time"})
    updatedAt: str = Field(json_schema_extra={"format": "date-time"})
    completedAt: str | None
    completedBy: str | None
    reason: str | None
    requests: RunRequestCounts | None = None
    annotations: RunAnnotationSummary | None = None


def run_json(row: dict[str, Any]) -> dict[str, Any]:
    """A stored run as the API shows it (OpenWOP's RunSnapshot names: ``runId``, ``status``, ``workflowId``)."""
    return {
        "runId": row["run_id"], "status": row["status"], "registered": bool(row["registered"]),
        "name": row["name"], "workflowId": row["workflow_id"],
        "inputs": json.loads(row["inputs_json"]) if row["inputs_json"] is not None else None,
        "createdAt": iso(row["created_at"]), "updatedAt": iso(row["updated_at"]),
        "completedAt": iso(row["completed_at"]), "completedBy": row["completed_by"], "reason": row["reason"],
    }


class RunService:
    """The one door to runs, for the HTTP API; requests and annotations make runs through the store."""

    def __init__(self, *, settings: Settings, store: Store, annotations: AnnotationService,
                 clock: Clock = time.time) -> None:
        self.settings = settings
        self.store = store
        self.annotations = annotations
        self.clock = clock

    def fixtures(self) -> list[str]:
        """The conformance fixtures this host advertises in discovery (off unless configured)."""
        return [CONFORMANCE_NOOP] if self.settings.openwop.conformance_fixtures else []

    def parse_register(self, raw: Any) -> RegisterRunBody:
        body = parse_body(RegisterRunBody, raw, what="run")
        try:
            size = len(canonical_json(body.inputs).encode()) if body.inputs is not None else 0
        except CanonicalizationError:
            raise ValidationFailedError("inputs has no canonical JSON form (an integer beyond 2**53-1?)",
                                        fields=[{"field": "inputs", "message": "integers up to 2**53-1, "
                                                 "text without lone surrogates"}]) from None
        if size > MAX_INPUTS_BYTES:
            raise ValidationFailedError(f"inputs is larger than {MAX_INPUTS_BYTES} bytes",
                                        fields=[{"field": "inputs", "message": f"at most {MAX_INPUTS_BYTES} bytes"}])
        return body

    async def register(self, *, tenant_id: str, principal: str, body: RegisterRunBody) -> tuple[dict[str, Any], bool]:
        """Register a run; returns (run, created). The same ``run_id`` with the same body: the run as it is."""
        described = {"name": body.name, "workflowId": body.workflowId, "inputs": body.inputs}
        body_sha = hashlib.sha256(canonical_json(described).encode()).hexdigest()
        now = self.clock()
        noop = body.workflowId == CONFORMANCE_NOOP and CONFORMANCE_NOOP in self.fixtures()
        values = {"name": body.name, "workflow_id": body.workflowId, "body_sha256": body_sha, "updated_at": now,
                  # Inputs are kept for whoever reads the run: secret-shaped text in them is not.
                  "inputs_json": canonical_json(redact_value(body.inputs)) if body.inputs is not None else None}
        run_id = body.run_id or f"run_{secrets.token_urlsafe(16)}"
        row = {"tenant_id": tenant_id, "run_id": run_id, "status": "running", "registered": True,
               "created_by": principal, "created_at": now, **values}
        async with self.store.transaction() as conn:
            created = await self.store.runs.insert(conn, row)
            if not created:
                created = await self.store.runs.claim(conn, tenant_id=tenant_id, run_id=run_id, values=values)
            if created:
                await self.store.append_journal(
                    conn, tenant_id=tenant_id, event="run_registered", run_id=run_id, principal=principal,
                    data={"name": body.name, "workflow_id": body.workflowId}, at=now)
                if noop:
                    await self._finish(conn, tenant_id=tenant_id, run_id=run_id, principal=principal,
                                       status="completed", reason=None, now=now)
            stored = await self.store.runs.get(tenant_id, run_id, conn=conn)
        assert stored is not None  # inserted, claimed or found in this transaction
        if not created:
            if stored["body_sha256"] != body_sha:
                raise ConflictError(f"run {run_id!r} is registered already with another name, workflowId or inputs")
            return run_json(stored), False
        log.info("run registered", extra={"run_id": run_id, "tenant_id": tenant_id, "status": stored["status"]})
        return run_json(stored), True

    async def complete(self, *, tenant_id: str, run_id: str, principal: str, body: CompleteRunBody) -> dict[str, Any]:
        """Finish a running run. Once finished, the same status again answers the run; another is 409."""
        check_run_id(run_id)
        now = self.clock()
        reason = redact(body.reason) if body.reason is not None else None
        async with self.store.transaction() as conn:
            finished = await self._finish(conn, tenant_id=tenant_id, run_id=run_id, principal=principal,
                                          status=body.status, reason=reason, now=now)
            stored = await self.store.runs.get(tenant_id, run_id, conn=conn)
        if stored is None:
            raise NotFoundError(f"no run {run_id!r}")
        if not finished and stored["status"] != body.status:
            raise ConflictError(f"run {run_id!r} is {stored['status']} already; a finished run stays as it ended",
                                details={"status": stored["status"]})
        if finished:
            log.info("run finished", extra={"run_id": run_id, "tenant_id": tenant_id, "status": body.status})
        return run_json(stored)

    async def _finish(self, conn: Any, *, tenant_id: str, run_id: str, principal: str, status: str,
                      reason: str | None, now: float) -> bool:
        finished = await self.store.runs.finish(conn, tenant_id=tenant_id, run_id=run_id, status=status,
                                                principal=principal, now=now, reason=reason)
        if finished:
            data: dict[str, Any] = {"status": status}
            if reason is not None:
                data["reason"] = reason
            await self.store.append_journal(conn, tenant_id=tenant_id, event="run_finished", run_id=run_id,
                                            principal=principal, data=data, at=now)
        return finished

    async def get(self, *, tenant_id: str, run_id: str) -> dict[str, Any]:
        """The run with its requests counted by status and its annotations summarised; 404 for another tenant's."""
        check_run_id(run_id)
        row = await self.store.runs.get(tenant_id, run_id)
        if row is None:
            raise NotFoundError(f"no run {run_id!r}")
        counts = await self.store.runs.request_counts(tenant_id, run_id)
        out = run_json(row)
        out["requests"] = {"total": sum(counts.values()), **{s: counts.get(s, 0) for s in REQUEST_STATUSES}}
        out["annotations"] = None
        if self.annotations.enabled:
            summary = await self.annotations.summary(tenant_id=tenant_id, run_id=run_id)
            out["annotations"] = {"total": summary["annotations"], "superseded": summary["superseded"],
                                  "counts": summary["counts"], "meanRating": summary["mean_rating"]}
        return out

    async def list(self, *, tenant_id: str, status: str | None = None, cursor: str | None = None,
                   limit: int = DEFAULT_PAGE) -> dict[str, Any]:
        """This tenant's runs, newest first, ``limit`` (1..500) at a time."""
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequestError(f"limit must be between 1 and {MAX_PAGE}")
        before = decode_cursor(cursor, kind="r") if cursor else None
        rows = await self.store.runs.page(tenant_id, status=status, before_seq=before, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return {"runs": [run_json(r) for r in rows],
                "next_cursor": encode_cursor(rows[-1]["seq"], kind="r") if more else None}


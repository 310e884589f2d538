"""Run annotations (OpenWOP RFC 0056): validate, redact, record, list, summarise and export quality signals.

Annotations live in their own append-only side-store, never in a request or a run's event log; a
change is a new annotation naming the one it ``supersedes`` (RFC open question 1).
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from handraise.core.api import RequestView, iso, optional_not_null
from handraise.core.config import Settings
from handraise.core.errors import (
    BadRequestError,
    CapabilityNotProvidedError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ValidationFailedError,
)
from handraise.core.events import RUN_ANNOTATED, Event, EventBus
from handraise.core.problems import field_problems
from handraise.core.redaction import redact, redact_value
from handraise.core.store import Store
from handraise.core.text import label, prose

log = logging.getLogger(__name__)

Clock = Callable[[], float]

TARGETS: tuple[str, ...] = ("run", "event", "node")
SIGNALS: tuple[str, ...] = ("rating", "correction", "label", "flag")
SignalKind = Literal["rating", "correction", "label", "flag"]

# Ids match the store's column widths; an id is an identifier, not prose.
MAX_ID_CHARS = 200
# Free text is capped per field: 422 beyond it, as the RFC's schema (and our OpenAPI) says maxLength.
MAX_TEXT_CHARS: dict[str, int] = {"signal.label": 500, "signal.correction": 10_000, "note": 10_000}
DEFAULT_PAGE = 100
MAX_PAGE = 500
# A summary is computed over at most this many annotations; a wider window is refused, not truncated.
MAX_SUMMARY_ANNOTATIONS = 100_000
# Fields the server assigns: naming them in a body is refused rather than silently ignored.
SERVER_ASSIGNED = ("annotationId", "actor", "createdAt")
# Journal data keys that hold identifiers or digests: exported as they are, not run through the redactor.
_ID_KEYS = frozenset({"unique_id", "link_id", "annotation_id", "supersedes", "event_id", "node_id",
                      "expires_at", "timeout_seconds", "kind", "rating", "sensitive"})


# -- the RFC 0056 schema, as pydantic models -----------------------------------

# Ids are one line; free text may span lines; each is capped (422 beyond the cap).
AnnotationId = label(min_length=1, max_length=MAX_ID_CHARS)
AnnotationRef = label(min_length=1, max_length=64)
SignalLabel = label(min_length=1, max_length=MAX_TEXT_CHARS["signal.label"])
Correction = prose(max_length=MAX_TEXT_CHARS["signal.correction"])
Note = prose(max_length=MAX_TEXT_CHARS["note"])


def _no_null(value: Any) -> Any:
    # JSON Schema's "type": "string" refuses null; pydantic's Optional would take it.
    if value is None:
        raise ValueError("must not be null; leave the field out instead")
    return value


class AnnotationTarget(BaseModel):
    """``target``: the run, and optionally one event or node in it. ``runId`` defaults to the path."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=optional_not_null)

    runId: AnnotationId | None = None
    eventId: AnnotationId | None = None
    nodeId: AnnotationId | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        return _no_null(value)


class AnnotationSignal(BaseModel):
    """``signal``: ``rating`` iff kind=rating (1..5), ``label`` iff kind=label, ``correction`` iff kind=correction."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=optional_not_null)

    kind: SignalKind
    rating: int | None = Field(default=None, ge=1, le=5)
    label: SignalLabel | None = None
    # An empty correction is allowed: "the right output was nothing" is a correction.
    correction: Correction | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        return _no_null(value)

    @field_validator("rating", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        # JSON Schema's "integer" takes 4.0; strict int would not.
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @field_validator("label")
    @classmethod
    def _label_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class AnnotationBody(BaseModel):
    """What a client sends: the RFC's Annotation minus ``annotationId``, ``actor`` and ``createdAt``."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=optional_not_null)

    target: AnnotationTarget | None = None
    signal: AnnotationSignal
    note: Note | None = None
    # Additive (RFC open question 1): the annotation of the same run this one replaces.
    supersedes: AnnotationRef | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        return _no_null(value)


@dataclass(frozen=True)
class AnnotationPage:
    annotations: list[dict[str, Any]]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"annotations": self.annotations, "next_cursor": self.next_cursor}


def annotation_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row as the RFC's Annotation; optional members appear only when set."""
    target: dict[str, Any] = {"runId": row["run_id"]}
    if row["event_id"] is not None:
        target["eventId"] = row["event_id"]
    if row["node_id"] is not None:
        target["nodeId"] = row["node_id"]
    signal: dict[str, Any] = {"kind": row["kind"]}
    for name in ("rating", "label", "correction"):
        if row[name] is not None:
            signal[name] = row[name]
    out: dict[str, Any] = {"annotationId": row["annotation_id"], "target": target, "signal": signal,
                           "actor": {"principalRef": row["principal"]}}
    if row["note"] is not None:
        out["note"] = row["note"]
    out["createdAt"] = iso(row["created_at"])
    if row["supersedes"] is not None:
        out["supersedes"] = row["supersedes"]
    return out


def encode_cursor(seq: int, *, kind: str = "a") -> str:
    """An opaque list cursor: ``kind`` names the list (``a`` annotations, ``r`` runs) so one is not taken for the other."""
    return base64.urlsafe_b64encode(f"{kind}:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, *, kind: str = "a") -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        seq = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadRequestError("cursor is not one this server gave out") from None
    if prefix != kind or seq < 0:
        raise BadRequestError("cursor is not one this server gave out")
    return seq


def parse_time(value: str, *, name: str) -> float:
    """An ISO 8601 date-time (UTC when it names no zone) as epoch seconds; 400 otherwise."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequestError(f"{name} must be an ISO 8601 date-time such as 2026-05-01T00:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class AnnotationService:
    """The one door to the annotation side-store, for the HTTP API and for connectors (rating buttons)."""

    def __init__(self, *, settings: Settings, store: Store, bus: EventBus, clock: Clock = time.time) -> None:
        self.settings = settings
        self.store = store
        self.bus = bus
        self.clock = clock
        bus.register_loader(RUN_ANNOTATED, self._load_event_data)

    # -- capability ------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.settings.feedback.enabled

    def capability(self) -> dict[str, Any]:
        """The RFC 0056 §A ``host.feedback`` block."""
        if not self.enabled:
            return {"supported": False}
        return {"supported": True, "targets": list(TARGETS), "signals": list(SIGNALS)}

    def require_enabled(self) -> None:
        if not self.enabled:
            raise CapabilityNotProvidedError("this host does not provide host.feedback (RFC 0056): "
                                             "[feedback] enabled = false")

    # -- validation ------------------------------------------------------------

    def parse(self, body: Any) -> AnnotationBody:
        """Validate a client body against the RFC schema: 422 with details per field."""
        if not isinstance(body, dict):
            raise ValidationFailedError("the body must be a JSON object")
        assigned = [k for k in SERVER_ASSIGNED if k in body]
        if assigned:
            raise ValidationFailedError(
                f"{', '.join(assigned)} {'is' if len(assigned) == 1 else 'are'} assigned by the server",
                fields=[{"field": k, "message": "assigned by the server; leave it out"} for k in assigned])
        try:
            parsed = AnnotationBody.model_validate(body)
        except ValidationError as e:
            raise ValidationFailedError("the annotation is not valid", fields=field_problems(e)) from None
        details = _signal_details(parsed.signal)
        if details:
            raise ValidationFailedError("the annotation is not valid: " + "; ".join(
                f"{d['field']} {d['message']}" for d in details), fields=details)
        return parsed

    # -- record ----------------------------------------------------------------

    async def record(self, *, tenant_id: str, run_id: str, principal: str, body: AnnotationBody | Mapping[str, Any],
                     channel: str = "api") -> dict[str, Any]:
        """Validate, redact, persist and announce one annotation; returns the stored Annotation.

        ``principal`` is who acts (``operator:<key id>``, ``telegram:<user id>`` …): never taken from the
        body. ``channel`` is the journal's channel (how the annotation arrived). Raises CapabilityNotProvidedError (501),
        ValidationFailedError (422), ForbiddenError (403, superseding another
        actor's annotation), ConflictError (409, the superseded annotation was superseded already).
        """
        self.require_enabled()
        parsed = body if isinstance(body, AnnotationBody) else self.parse(dict(body))
        check_run_id(run_id)
        target = parsed.target or AnnotationTarget()
        if target.runId is not None and target.runId != run_id:
            raise ValidationFailedError("target.runId must match the run in the path",
                                        fields=[{"field": "target.runId", "message": "must match the run in the path"}])
        if parsed.supersedes is not None:
            await self._check_supersedes(tenant_id=tenant_id, run_id=run_id, principal=principal,
                                         annotation_id=parsed.supersedes)
        signal = parsed.signal
        row: dict[str, Any] = {
            "annotation_id": f"ann_{secrets.token_urlsafe(16)}", "tenant_id": tenant_id, "run_id": run_id,
            "event_id": target.eventId, "node_id": target.nodeId, "kind": signal.kind, "rating": signal.rating,
            # Untrusted text is redacted before it is stored, so nothing downstream ever sees the secret.
            "label": _redacted(signal.label), "correction": _redacted(signal.correction),
            "note": _redacted(parsed.note), "principal": principal, "supersedes": parsed.supersedes,
        }
        try:
            async with self.store.transaction() as conn:
                # The journal append locks the tenant's chain head until COMMIT (SQLite: BEGIN IMMEDIATE
                # already serialises writers); inserting after it makes seq order commit order within the
                # tenant, so a list cursor never skips an annotation that committed late, and createdAt
                # never goes backwards along seq.
                entry = await self.store.append_journal(
                    conn, tenant_id=tenant_id, event="annotation_recorded", run_id=run_id, principal=principal,
                    channel=channel, data=_journal_data(row))
                row["created_at"] = self.clock()
                # An annotation on a run nobody registered makes the run (tenant-scoped, unregistered).
                await self.store.runs.ensure(conn, tenant_id=tenant_id, run_id=run_id, principal=principal,
                                             now=row["created_at"])
                row["seq"] = await self.store.insert_annotation(conn, row)
                await self.store.notify(conn, {"type": RUN_ANNOTATED, "tenant_id": tenant_id,
                                               "id": row["annotation_id"], "run_id": run_id,
                                               "origin": self.bus.instance_id, "seq": entry.seq})
        except ConflictError:
            if parsed.supersedes is None:
                raise
            # Annotation ids are random, so this is the one-successor rule on ``supersedes`` (migration 0002).
            raise ConflictError(f"annotation {parsed.supersedes} was superseded already; "
                                "supersede the newest annotation of its chain") from None
        annotation = annotation_json(row)
        log.info("annotation recorded", extra={"annotation_id": row["annotation_id"], "tenant_id": tenant_id,
                                               "run_id": run_id, "kind": signal.kind, "channel": channel})
        self.bus.publish(Event(RUN_ANNOTATED, tenant_id, row["annotation_id"], annotation, run_id, seq=entry.seq))
        return annotation

    async def _check_supersedes(self, *, tenant_id: str, run_id: str, principal: str, annotation_id: str) -> None:
        previous = await self.store.get_annotation(tenant_id, annotation_id)
        if previous is None or previous["run_id"] != run_id:
            # Another tenant's annotation reads exactly like a missing one.
            raise ValidationFailedError("supersedes must name an annotation of this run",
                                        fields=[{"field": "supersedes", "message": "no such annotation on this run"}])
        if previous["principal"] != principal:
            raise ForbiddenError("an annotation can only be superseded by the actor who recorded it")

    # -- read ------------------------------------------------------------------

    async def get(self, *, tenant_id: str, annotation_id: str) -> dict[str, Any] | None:
        row = await self.store.get_annotation(tenant_id, annotation_id)
        return None if row is None else annotation_json(row)

    async def list(self, *, tenant_id: str, run_id: str, cursor: str | None = None,
                   limit: int = DEFAULT_PAGE) -> AnnotationPage:
        """This tenant's annotations of a run, oldest first, ``limit`` (1..500) at a time."""
        self.require_enabled()
        check_run_id(run_id)
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequestError(f"limit must be between 1 and {MAX_PAGE}")
        after = decode_cursor(cursor) if cursor else 0
        rows = await self.store.list_annotations(tenant_id, run_id, after_seq=after, limit=limit + 1)
        if not rows and await self.store.runs.get(tenant_id, run_id) is None:
            # Another tenant's run reads like no run at all: 404, not an empty list.
            raise NotFoundError(f"no run {run_id!r}")
        more = len(rows) > limit
        rows = rows[:limit]
        return AnnotationPage([annotation_json(r) for r in rows],
                              encode_cursor(rows[-1]["seq"]) if more else None)

    async def all_for_run(self, *, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            rows = await self.store.list_annotations(tenant_id, run_id, after_seq=after, limit=MAX_PAGE)
            out.extend(annotation_json(r) for r in rows)
            if len(rows) < MAX_PAGE:
                return out
            after = rows[-1]["seq"]

    async def _load_event_data(self, tenant_id: str, annotation_id: str) -> dict[str, Any] | None:
        return await self.get(tenant_id=tenant_id, annotation_id=annotation_id)

    # -- summary (RFC open question 3) -----------------------------------------

    async def summary(self, *, tenant_id: str, run_id: str | None = None, since: float | None = None,
                      until: float | None = None) -> dict[str, Any]:
        """Counts per signal, mean rating, correction and flag rates over one run or a time window.

        Only current annotations count: one superseded by another annotation of the window is left
        out, so the summary is the state as of the window's end. Rates are per annotated run.
        """
        self.require_enabled()
        if run_id is not None:
            check_run_id(run_id)
        if since is not None and until is not None and since >= until:
            raise BadRequestError("since must be before until")
        rows = await self.store.query_annotations(tenant_id, run_id=run_id, since=since, until=until,
                                                  limit=MAX_SUMMARY_ANNOTATIONS + 1)
        if len(rows) > MAX_SUMMARY_ANNOTATIONS:
            raise ValidationFailedError(f"more than {MAX_SUMMARY_ANNOTATIONS} annotations match: "
                                        "narrow the window with since/until or pick a run_id")
        superseded = {r["supersedes"] for r in rows if r["supersedes"] is not None}
        current = [r for r in rows if r["annotation_id"] not in superseded]
        counts = Counter(r["kind"] for r in current)
        ratings = [r["rating"] for r in current if r["kind"] == "rating"]
        runs = {r["run_id"] for r in current}
        corrected = {r["run_id"] for r in current if r["kind"] == "correction"}
        flagged = {r["run_id"] for r in current if r["kind"] == "flag"}
        labels = Counter(r["label"] for r in current if r["kind"] == "label")
        return {
            "run_id": run_id, "since": iso(since), "until": iso(until),
            "annotations": len(current), "superseded": len(rows) - len(current), "runs": len(runs),
            "counts": {kind: counts.get(kind, 0) for kind in SIGNALS},
            "ratings": {str(n): ratings.count(n) for n in range(1, 6)},
            "mean_rating": _ratio(sum(ratings), len(ratings)),
            "correction_rate": _ratio(len(corrected), len(runs)),
            "flag_rate": _ratio(len(flagged), len(runs)),
            "labels": dict(labels.most_common(20)),
        }

    # -- debug bundle (RFC 0056 §D) --------------------------------------------

    async def bundle(self, *, tenant_id: str, run_id: str) -> dict[str, Any]:
        """One JSON export of a run: its annotations, requests and journal entries, free text redacted.

        Annotations are included only while feedback is enabled (the side-store is then provided).
        Journal ``data`` is redacted here, so its entries' hashes verify only against the store itself.
        """
        check_run_id(run_id)
        rows = await self.store.list_requests(tenant_id, run_id=run_id, limit=10_000)
        deliveries = await self.store.deliveries.for_requests(tenant_id, [r["id"] for r in rows])
        requests = [_redacted_request(RequestView.from_row(r, deliveries=deliveries[r["id"]]).event_json())
                    for r in rows]
        journal = [
            {"seq": e.seq, "event": e.event, "request_id": e.request_id, "run_id": e.run_id,
             "principal": e.principal, "channel": e.channel, "at": iso(e.at), "hash": e.hash,
             "data": {k: v if k in _ID_KEYS else redact_value(v) for k, v in e.public_data().items()}}
            for e in await self.store.journal_rows_for_run(tenant_id=tenant_id, run_id=run_id)
        ]
        out: dict[str, Any] = {"format": "handraise.run-bundle/1", "run_id": run_id,
                               "exported_at": iso(self.clock())}
        annotations: list[dict[str, Any]] = []
        if self.enabled:
            # Stored already redacted; redacting again costs little and covers rows written before a fix.
            annotations = [redact_value(a) for a in await self.all_for_run(tenant_id=tenant_id, run_id=run_id)]
            out["annotations"] = annotations
        if not (requests or journal or annotations) and await self.store.runs.get(tenant_id, run_id) is None:
            # Nothing of this tenant's names the run (another tenant's reads the same): 404, as GET /v1/runs/{id}.
            raise NotFoundError(f"no run {run_id!r}")
        out["requests"] = requests
        out["journal"] = journal
        return out


# -- helpers -------------------------------------------------------------------


def _signal_details(signal: AnnotationSignal) -> list[dict[str, str]]:
    """The RFC's "required iff kind=…" rules, which its JSON Schema states only in prose."""
    out = []
    for member in ("rating", "label", "correction"):
        present = getattr(signal, member) is not None
        if signal.kind == member and not present:
            out.append({"field": f"signal.{member}", "message": f"is required when kind is {member}"})
        elif signal.kind != member and present:
            out.append({"field": f"signal.{member}", "message": f"is only allowed when kind is {member}"})
    return out


def check_run_id(run_id: str) -> None:
    """A run id from a path: 1 to 200 characters, else 422."""
    if not run_id or len(run_id) > MAX_ID_CHARS:
        raise ValidationFailedError(f"runId must be 1 to {MAX_ID_CHARS} characters",
                                    fields=[{"field": "runId", "message": f"1 to {MAX_ID_CHARS} characters"}])


def _redacted(text: str | None) -> str | None:
    return None if text is None else redact(text)


def _journal_data(row: Mapping[str, Any]) -> dict[str, Any]:
    # Ids and the rating only: the free text lives in the side-store, not in the hash-chained journal.
    data: dict[str, Any] = {"annotation_id": row["annotation_id"], "kind": row["kind"]}
    for key in ("rating", "event_id", "node_id", "supersedes"):
        if row[key] is not None:
            data[key] = row[key]
    return data


def _redacted_request(view: dict[str, Any]) -> dict[str, Any]:
    out = dict(view)
    out["message_for_user"] = redact(view["message_for_user"])
    if "response" in out:
        out["response"] = redact_value(out["response"])
    out["deliveries"] = [{**d, "last_error": _redacted(d["last_error"])} for d in view["deliveries"]]
    return out


def _ratio(numerator: float, denominator: int) -> float | None:
    if denominator == 0:
        return None
    value = numerator / denominator
    return round(value, 6) if math.isfinite(value) else None

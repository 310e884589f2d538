"""What the client hands back besides plain answers: an approval decision, a server-sent event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from handraise.core.api import RequestRecord, VoteRecord


@dataclass(frozen=True)
class Decision:
    """A human's answer to ``approve``. ``approved`` is True only for an explicit approval."""

    approved: bool
    reason: str | None
    decided_by: str | None
    decided_at: datetime | None
    request: RequestRecord
    # With approvals_required: every vote counted (person, name, decision, channel, at), in order.
    votes: tuple[VoteRecord, ...] = ()

    @classmethod
    def from_request(cls, record: RequestRecord) -> Decision:
        answer = record.response if isinstance(record.response, dict) else {}
        votes = tuple(VoteRecord.model_validate(v) for v in answer.get("votes") or ())
        return cls(approved=answer.get("decision") == "approve", reason=answer.get("reason"),
                   decided_by=record.answered_by, decided_at=record.answered_at, request=record, votes=votes)


@dataclass(frozen=True)
class Event:
    """One event from ``GET /v1/events``: ``request.created``, ``request.resolved`` or ``run.annotated``."""

    type: str
    data: Any
    id: str | None = None

    @property
    def request(self) -> RequestRecord | None:
        """The request an event of type ``request.*`` is about (never with a sensitive answer)."""
        if self.type.startswith("request.") and isinstance(self.data, dict):
            return RequestRecord.model_validate(self.data)
        return None

"""The delivery log: where each request was posted (one delivery per request, channel and target), how
each attempt went, and the journal entries that tell it, each change written with its entry at once.

The dispatcher keeps it; a connector reports through it what it learns later (a mail that bounced).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from handraise.core.redaction import redact
from handraise.core.store.deliveries import DeliveryRecords
from handraise.core.store.journal import entry_row

Clock = Callable[[], float]
# What a change may set: the row's status and bookkeeping, and the messenger's handle (``ref``).
_CHANGEABLE = frozenset({"status", "attempts", "last_error", "ref", "reminded_at"})


@dataclass(frozen=True)
class Delivery:
    """One place a request goes: its row's id, and where."""

    id: int
    tenant_id: str
    request_id: str
    channel: str
    target: str


@dataclass(frozen=True)
class DeliveryRecord(Delivery):
    """A delivery as it stands: ``pending``, ``sent``, ``failed``, ``withdrawing`` (one instance is
    editing its message), ``withdrawn`` or ``bounced``; ``ref`` is the messenger's handle on what
    was posted."""

    status: str = "pending"
    attempts: int = 0
    last_error: str | None = None
    ref: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    reminded_at: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeliveryRecord:
        return cls(id=row["id"], tenant_id=row["tenant_id"], request_id=row["request_id"], channel=row["channel"],
                   target=row["target"], status=row["status"], attempts=row["attempts"],
                   last_error=row["last_error"], ref=json.loads(row["ref_json"]) if row["ref_json"] else {},
                   created_at=row["created_at"], updated_at=row["updated_at"], reminded_at=row["reminded_at"])


class DeliveryLog:
    """Deliveries of requests, and their journal entries written in the same transaction."""

    def __init__(self, *, records: DeliveryRecords, clock: Clock) -> None:
        self._records = records
        self._clock = clock
        # Told of each delivery that bounced (the dispatcher: it may post the request elsewhere).
        self._bounce_listeners: list[Callable[[DeliveryRecord], None]] = []

    def on_bounce(self, listener: Callable[[DeliveryRecord], None]) -> None:
        self._bounce_listeners.append(listener)

    async def open(self, *, tenant_id: str, request_id: str, channel: str, target: str) -> Delivery:
        """The delivery of a request to ``target``, made ``pending`` unless it exists already."""
        delivery_id = await self._records.open(tenant_id=tenant_id, request_id=request_id, channel=channel,
                                               target=target, now=self._clock())
        return Delivery(delivery_id, tenant_id, request_id, channel, target)

    async def of_request(self, *, tenant_id: str, request_id: str) -> list[DeliveryRecord]:
        """The request's deliveries, oldest first."""
        return [DeliveryRecord.from_row(r) for r in await self._records.for_request(tenant_id, request_id)]

    async def get(self, delivery: Delivery) -> DeliveryRecord | None:
        return next((d for d in await self.of_request(tenant_id=delivery.tenant_id, request_id=delivery.request_id)
                     if d.id == delivery.id), None)

    async def update(self, delivery: Delivery, **changes: Any) -> None:
        """Change the delivery without a journal entry (bookkeeping no one audits: a reminder's mark)."""
        await self._records.update(delivery.id, _columns(changes))

    async def record(self, delivery: Delivery, *, event: str, run_id: str | None, data: Mapping[str, Any],
                     **changes: Any) -> None:
        """Journal ``event`` about the delivery (its target joins ``data``) and apply ``changes`` to it, in
        one transaction: a failing journal leaves the row as it was."""
        journal = entry_row(tenant_id=delivery.tenant_id, event=event, request_id=delivery.request_id,
                            run_id=run_id, channel=delivery.channel, data={"target": delivery.target, **data})
        await self._records.update(delivery.id, _columns(changes), journal=journal)

    async def claim_withdrawal(self, delivery: Delivery, *, stale_after: float) -> bool:
        """True for the one instance that may now edit the sent message (a claim untouched for
        ``stale_after`` seconds is taken over: its holder died)."""
        now = self._clock()
        return await self._records.claim_withdrawal(delivery.id, now=now, stale_before=now - stale_after)

    async def abandoned_withdrawals(self, *, stale_after: float) -> list[DeliveryRecord]:
        """Deliveries left ``withdrawing`` for ``stale_after`` seconds: their holder died mid-withdrawal."""
        rows = await self._records.abandoned_withdrawals(stale_before=self._clock() - stale_after)
        return [DeliveryRecord.from_row(r) for r in rows]

    async def reclaim_withdrawal(self, delivery: Delivery, *, stale_after: float, run_id: str | None,
                                 since: float) -> bool:
        """Take over a withdrawal abandoned ``withdrawing`` (untouched for ``stale_after`` seconds, since
        ``since``), journaled ``withdrawal_reclaimed`` with it: True for the one instance that finishes it."""
        now = self._clock()
        journal = entry_row(tenant_id=delivery.tenant_id, event="withdrawal_reclaimed", request_id=delivery.request_id,
                            run_id=run_id, channel=delivery.channel,
                            data={"target": delivery.target, "idle_seconds": round(now - since, 1)})
        return await self._records.reclaim_withdrawal(delivery.id, now=now, stale_before=now - stale_after,
                                                      journal=journal)

    async def release_withdrawal(self, delivery: Delivery) -> None:
        """A claimed withdrawal that did not happen: the message is still up."""
        await self._records.release_withdrawal(delivery.id, now=self._clock())

    async def callbacks_due(self) -> list[tuple[str, str, float | None]]:
        """Terminal requests (id, tenant id, resolved at) whose callback is neither sent nor failed for good."""
        return [(r["id"], r["tenant_id"], r["resolved_at"]) for r in await self._records.callbacks_due()]

    async def bounced(self, *, tenant_id: str, request_id: str, channel: str, target: str, error: str,
                      ref: Mapping[str, Any] | None = None) -> bool:
        """A sent delivery turned out never to arrive (a mail bounce, a Matrix invite refused): shown as
        ``bounced`` and journaled. ``ref``: only the delivery whose ref holds these items (the message that
        bounced), and its ref is cleared: nothing keeps pointing where it went. False when the request has no
        such delivery."""
        for delivery in await self.of_request(tenant_id=tenant_id, request_id=request_id):
            if delivery.channel != channel or delivery.target.lower() != target.lower():
                continue
            if ref is not None and any(delivery.ref.get(k) != v for k, v in ref.items()):
                continue
            error = redact(error)[:500]
            await self.record(delivery, event="delivery_bounced", run_id=None, data={"error": error},
                              status="bounced", last_error=error, **({"ref": {}} if ref is not None else {}))
            for listener in self._bounce_listeners:
                listener(delivery)
            return True
        return False


def _columns(changes: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(changes) - _CHANGEABLE
    if unknown:
        raise TypeError(f"a delivery has no {', '.join(sorted(unknown))} to change")
    columns = dict(changes)
    if "ref" in columns:
        columns["ref_json"] = json.dumps(columns.pop("ref"))
    return columns

"""Escalation and reminders on the clock: the sweeper's part of a request's schedule (core/schedule.py).

Checked at create (:func:`check_at_create`): steps in increasing time before the deadline, people and
groups of the tenant, channels that serve it. Run by the sweeper with the service's clock
(:meth:`Escalator.run_due`): every step due is reached in one compare-and-set with the request still
pending, so exactly one instance reaches it. Reaching a step widens who may answer (an assignment grows
by the step's people) and where it is posted (the step's channels), journals ``escalated``, and tells
this instance's dispatcher, which reaches the new people and places (``request.scheduled``); the
connectors' ``targets_for`` includes them from then on, so the recovery pass delivers what a crash cut short.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from handraise.core.api import CreateRequestBody, RequestView
from handraise.core.errors import ValidationFailedError
from handraise.core.events import REQUEST_SCHEDULED, Event
from handraise.core.people import expand
from handraise.core.schedule import Schedule, problems

if TYPE_CHECKING:
    from handraise.core.service import RequestService

log = logging.getLogger(__name__)


def check_at_create(service: RequestService, *, tenant_id: str, body: CreateRequestBody, timeout: int,
                    now: float) -> Schedule | None:
    """The request's schedule, or a 422 naming each field that cannot stand."""
    reminders = body.reminder_schedule()
    if body.reminders is not None and body.remind_after_seconds is not None:
        raise ValidationFailedError("give reminders or remind_after_seconds, not both", fields=[
            {"field": "remind_after_seconds", "message": "give reminders or remind_after_seconds, not both"}])
    tenant = service.settings.tenant(tenant_id)
    if body.escalation and (tenant is None or not tenant.people):
        raise ValidationFailedError("escalation: this tenant lists no people", fields=[
            {"field": "escalation", "message": "this tenant lists no people ([[tenants.people]] in the config)"}])
    available = service.channels_for(tenant_id)

    def channel_problem(channel: str) -> str | None:
        return None if channel in available else f"channel {channel!r} does not serve this tenant"

    found = problems(escalation=body.escalation, reminders=reminders, timeout=timeout,
                     unknown=lambda refs: expand(service.settings, tenant_id, refs).unknown,
                     channel_problem=channel_problem)
    if body.remind_after_seconds is not None and body.reminders is None:
        # Reported under the field the agent gave.
        found = [{**p, "field": "remind_after_seconds"} if p["field"] == "reminders.0" else p for p in found]
    if found:
        raise ValidationFailedError("; ".join(f"{p['field']}: {p['message']}" for p in found), fields=found)
    return Schedule.make(escalation=body.escalation, reminders=reminders, created_at=now)


def columns(schedule: Schedule | None) -> dict[str, Any]:
    """A new request's columns for its schedule."""
    if schedule is None:
        return {"schedule_json": None, "next_due_at": None}
    return {"schedule_json": schedule.to_json(), "next_due_at": schedule.next_due_at()}


class Escalator:
    """Moves requests' schedules on as the service's clock passes their times."""

    def __init__(self, service: RequestService) -> None:
        self.service = service
        # A step reached on another instance arrives as a NOTIFY: its data is the request as it stands.
        service.bus.register_loader(REQUEST_SCHEDULED, self._load_event_data)

    async def _load_event_data(self, tenant_id: str, request_id: str) -> dict[str, Any] | None:
        row = await self.service.store.get_request(tenant_id, request_id)
        return None if row is None else RequestView.from_row(row).event_json()

    async def run_due(self) -> int:
        """Reach every step and send every reminder due now; how many requests moved on."""
        store, now = self.service.store, self.service.clock()
        moved = 0
        for request_id, tenant_id in await store.schedule.due(now):
            if await self.advance(tenant_id=tenant_id, request_id=request_id, now=now):
                moved += 1
        return moved

    async def advance(self, *, tenant_id: str, request_id: str, now: float) -> bool:
        """Move one request's schedule on to ``now``; False when there was nothing to do or another
        instance (or a resolution) got there first."""
        service, store = self.service, self.service.store
        row = await store.get_request(tenant_id, request_id)
        if row is None or row["status"] != "pending" or row["next_due_at"] is None or row["next_due_at"] > now:
            return False
        view = RequestView.from_row(row)
        if view.schedule is None or view.expires_at <= now:
            return False  # its deadline is the sweeper's other business
        step = view.schedule.advance(now)
        assign_to, channels = step.schedule.widen(assign_to=view.assign_to, channels=view.channels,
                                                  reached=step.reached)
        values = {"schedule_json": step.schedule.to_json(), "next_due_at": step.schedule.next_due_at(),
                  "assign_to_json": json.dumps(assign_to) if assign_to is not None else None,
                  "channels_json": json.dumps(channels)}
        seq = 0
        async with store.transaction() as conn:
            if not await store.schedule.advance(conn, request_id=request_id, tenant_id=tenant_id,
                                                due=row["next_due_at"], values=values):
                return False
            for i in step.reached:
                reached = step.schedule.steps[i]
                found = expand(service.settings, tenant_id, reached.to).people
                entry = await store.append_journal(
                    conn, tenant_id=tenant_id, event="escalated", request_id=request_id, run_id=view.run_id,
                    at=now, data={"step": i + 1, "after_seconds": reached.after_seconds, "to": list(reached.to),
                                  "people": list(found), "channels": list(reached.channels),
                                  **({"assign_to": assign_to} if assign_to is not None else {})})
                seq = entry.seq
            if step.remind:
                entry = await store.append_journal(conn, tenant_id=tenant_id, event="reminder_due",
                                                   request_id=request_id, run_id=view.run_id, at=now)
                seq = entry.seq
            if step.reached:
                # Other instances' inboxes show the request to the people it now reaches (their dispatchers
                # do nothing: only this instance's acts on it).
                await store.notify(conn, {"type": REQUEST_SCHEDULED, "tenant_id": tenant_id, "id": request_id,
                                          "run_id": view.run_id, "origin": service.bus.instance_id, "seq": seq})
        log.info("schedule advanced", extra={"request_id": request_id, "steps": [i + 1 for i in step.reached],
                                             "remind": step.remind})
        after = RequestView.from_row({**row, **values})
        service.bus.publish(Event(REQUEST_SCHEDULED, tenant_id, request_id,
                                  {**after.event_json(), "reached": [i + 1 for i in step.reached],
                                   "remind": step.remind}, view.run_id, seq=seq))
        return True

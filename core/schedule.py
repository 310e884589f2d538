"""A request's schedule: its escalation steps and reminders, as the agent (or its tenant's defaults) gave
them, and how far the clock has taken them.

A step ``{"after_seconds": 300, "to": ["bob", "group:secondary"], "channels": ["telegram"]}`` is reached
300 s after the request was created if it is still pending: its people are reached and may answer, and its
channels are added. A reminder ``after_seconds`` pings everywhere the request was posted; a step's own
``remind_after_seconds`` pings that long after the step. Everything is measured from ``created_at``, so
when anything is due is known at create, and the sweeper (``core/escalation.py``) finds it by one column.

This module holds the shapes and the arithmetic only: it imports nothing of core but its text types, so the
configuration (tenant defaults per kind) and the API's bodies share it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from handraise.core.text import label

MAX_STEPS = 10
MAX_REMINDERS = 10

Seconds = Annotated[int, Field(ge=1)]
# A person (``alice``) or a group (``group:oncall``); whether the tenant has them is checked at create.
Reference = label(min_length=1, max_length=70)
ChannelName = label(min_length=1, max_length=200)


class EscalationStep(BaseModel):
    """One step of ``escalation``, in a create's body and in ``[tenants.defaults.<kind>]``."""

    model_config = ConfigDict(extra="forbid", strict=True, title="EscalationStep")

    after_seconds: Seconds = Field(description="Seconds after creation when, still pending, the step is reached")
    to: list[Reference] = Field(min_length=1, max_length=50,
                                description="People and group: names reached, and added to who may answer")
    channels: list[ChannelName] | None = Field(
        default=None, max_length=16, description="Channels added to the request at this step")
    remind_after_seconds: Seconds | None = Field(
        default=None, description="One reminder this long after the step, if still pending")


Problems = list[dict[str, str]]


def problems(*, escalation: list[EscalationStep] | None, reminders: list[int] | None, timeout: int,
             unknown: Callable[[list[str]], Iterable[str]], channel_problem: Callable[[str], str | None] | None,
             prefix: str = "") -> Problems:
    """Why a schedule cannot stand, per field (``escalation.1.after_seconds`` ...): steps in increasing
    time, everything before the deadline (``timeout``), people the tenant has (``unknown`` names the
    references nobody answers to) and channels that serve it (``channel_problem``)."""
    out: Problems = []

    def refuse(name: str, message: str) -> None:
        out.append({"field": prefix + name, "message": message})

    previous = 0
    for i, step in enumerate(escalation or []):
        if step.after_seconds <= previous:
            refuse(f"escalation.{i}.after_seconds",
                   f"must be later than the step before ({previous} s): steps come in increasing time")
        elif step.after_seconds >= timeout:
            refuse(f"escalation.{i}.after_seconds",
                   f"must be shorter than the timeout ({timeout} s): the step would never be reached")
        previous = max(previous, step.after_seconds)
        for ref in unknown(step.to):
            refuse(f"escalation.{i}.to", f"{ref} is not one of this tenant's people or groups")
        if step.remind_after_seconds is not None and step.after_seconds + step.remind_after_seconds >= timeout:
            refuse(f"escalation.{i}.remind_after_seconds",
                   f"the reminder would come at or after the deadline ({timeout} s)")
        for channel in step.channels or []:
            problem = channel_problem(channel) if channel_problem is not None else None
            if problem is not None:
                refuse(f"escalation.{i}.channels", problem)
    previous = 0
    for i, after in enumerate(reminders or []):
        if after <= previous:
            refuse(f"reminders.{i}", f"must be later than the reminder before ({previous} s)")
        elif after >= timeout:
            refuse(f"reminders.{i}", f"must be shorter than the timeout ({timeout} s)")
        previous = max(previous, after)
    return out


# -- the state: what was given, and what the clock reached ------------------------------------


@dataclass(frozen=True)
class StepState:
    after_seconds: int
    to: tuple[str, ...]
    channels: tuple[str, ...] = ()
    remind_after_seconds: int | None = None
    reached_at: float | None = None
    reminded_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"after_seconds": self.after_seconds, "to": list(self.to)}
        if self.channels:
            out["channels"] = list(self.channels)
        if self.remind_after_seconds is not None:
            out["remind_after_seconds"] = self.remind_after_seconds
        if self.reached_at is not None:
            out["reached_at"] = self.reached_at
        if self.reminded_at is not None:
            out["reminded_at"] = self.reminded_at
        return out


@dataclass(frozen=True)
class ReminderState:
    after_seconds: int
    sent_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"after_seconds": self.after_seconds, **({"sent_at": self.sent_at} if self.sent_at else {})}


@dataclass(frozen=True)
class Advance:
    """What one tick of the clock did: the schedule after it, the steps it reached, whether to remind."""

    schedule: Schedule
    reached: tuple[int, ...]
    remind: bool


@dataclass(frozen=True)
class Schedule:
    steps: tuple[StepState, ...] = ()
    reminders: tuple[ReminderState, ...] = ()
    created_at: float = 0.0

    @classmethod
    def make(cls, *, escalation: list[EscalationStep] | None, reminders: list[int] | None,
             created_at: float) -> Schedule | None:
        if not escalation and not reminders:
            return None
        steps = tuple(StepState(s.after_seconds, tuple(dict.fromkeys(s.to)), tuple(dict.fromkeys(s.channels or [])),
                                s.remind_after_seconds) for s in escalation or [])
        return cls(steps, tuple(ReminderState(r) for r in reminders or []), created_at)

    @classmethod
    def from_json(cls, raw: str | None, *, created_at: float) -> Schedule | None:
        if not raw:
            return None
        data = json.loads(raw)
        steps = tuple(StepState(s["after_seconds"], tuple(s["to"]), tuple(s.get("channels", ())),
                                s.get("remind_after_seconds"), s.get("reached_at"), s.get("reminded_at"))
                      for s in data.get("escalation", []))
        reminders = tuple(ReminderState(r["after_seconds"], r.get("sent_at")) for r in data.get("reminders", []))
        return cls(steps, reminders, created_at)

    def to_json(self) -> str:
        data: dict[str, Any] = {}
        if self.steps:
            data["escalation"] = [s.to_json() for s in self.steps]
        if self.reminders:
            data["reminders"] = [r.to_json() for r in self.reminders]
        return json.dumps(data, separators=(",", ":"))

    @property
    def reminds(self) -> bool:
        """Whether this schedule has reminders of its own (they replace a connector's one reminder)."""
        return bool(self.reminders) or any(s.remind_after_seconds for s in self.steps)

    def _due(self) -> list[tuple[float, str, int]]:
        """Everything not yet done: (when, what, index)."""
        out = []
        for i, s in enumerate(self.steps):
            if s.reached_at is None:
                out.append((self.created_at + s.after_seconds, "step", i))
            if s.remind_after_seconds is not None and s.reminded_at is None:
                out.append((self.created_at + s.after_seconds + s.remind_after_seconds, "step_reminder", i))
        for i, r in enumerate(self.reminders):
            if r.sent_at is None:
                out.append((self.created_at + r.after_seconds, "reminder", i))
        return out

    def next_due_at(self) -> float | None:
        due = self._due()
        return min(when for when, _, _ in due) if due else None

    def advance(self, now: float) -> Advance:
        """Mark done everything due by ``now``. Reminders that fell due together ping once; none pings
        when a step is reached in the same tick (its people were just reached)."""
        steps, reminders = list(self.steps), list(self.reminders)
        reached: list[int] = []
        pings = 0
        for when, what, i in sorted(self._due()):
            if when > now:
                break
            if what == "step":
                steps[i] = replace(steps[i], reached_at=now)
                reached.append(i)
            elif what == "step_reminder":
                steps[i] = replace(steps[i], reminded_at=now)
                pings += 1
            else:
                reminders[i] = replace(reminders[i], sent_at=now)
                pings += 1
        after = replace(self, steps=tuple(steps), reminders=tuple(reminders))
        return Advance(after, tuple(reached), remind=pings > 0 and not reached)

    def last_ping_at(self) -> float | None:
        """When the sweeper last decided that every place should be pinged (a reminder or a step's
        reminder falling due), or None; a tick that also reached a step pinged nobody (``advance``)."""
        reached = {s.reached_at for s in self.steps if s.reached_at is not None}
        pings = [t for t in (*(r.sent_at for r in self.reminders), *(s.reminded_at for s in self.steps))
                 if t is not None and t not in reached]
        return max(pings) if pings else None

    def reached_refs(self) -> list[str]:
        """The people and groups of every step reached so far, in order, each once."""
        return list(dict.fromkeys(ref for s in self.steps if s.reached_at is not None for ref in s.to))

    def widen(self, *, assign_to: list[str] | None, channels: list[str],
              reached: Iterable[int]) -> tuple[list[str] | None, list[str]]:
        """Who may answer and where it is posted once these steps are reached: an assignment grows by
        their people (no assignment stays none: anyone allowed may answer already), channels by theirs."""
        assigned = None if assign_to is None else list(assign_to)
        out_channels = list(channels)
        for i in reached:
            step = self.steps[i]
            if assigned is not None:
                assigned += [ref for ref in step.to if ref not in assigned]
            out_channels += [c for c in step.channels if c not in out_channels]
        return assigned, out_channels

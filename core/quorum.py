"""Quorum: an approval that ``approvals_required`` distinct people must approve, decided by their votes.

The rules (README "Quorum approvals"):

- Each person votes once. A person is one of the tenant's ``[[tenants.people]]``, whatever channel
  they use: Alice approving in Telegram and again in Slack is one approval. Her repeated vote is
  ignored (journaled ``vote_repeated``, the request as it stands is the answer); a different second
  vote is refused (409 ``already_voted``): votes are final. With N ≥ 2 only people vote; an answer key
  or a link that names nobody is refused (403 ``not_assigned``). Four eyes and assignment apply per vote.
- ``reject_policy``: ``any`` (the default: one rejection rejects at once, as one veto stops a deploy),
  or ``quorum`` (it takes N rejections too; the first side to reach N decides, and a request neither
  side can decide waits for its deadline and ``on_timeout``).
- With a ``proposal``, N ≥ 2 people approve the same thing: the proposal as the agent made it. An
  approval carrying an edited proposal is refused (422 on ``proposal``); an approver who wants a change
  rejects with a reason and the agent asks again. One approver (N = 1) may edit, as without quorum.
- Every vote is a compare-and-set on the request's ``votes_version`` (core/store/votes.py), journaled
  ``voted`` (person, decision, channel, time, the tally) in the same unit of work; the deciding vote
  also resolves the request (``answered``) there. Until then the request stays pending and each vote
  publishes ``request.progress``, which edits the tally into every posted message.
- The agent's answer is ``{"decision", "reason"?, "votes": [...]}``: each counted vote with the person,
  their name, the channel and the time (``reason``: the deciding rejection's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handraise.core import proposals, wording
from handraise.core.api import RequestView, raise_if_terminal, vote_json
from handraise.core.canonical import canonical_json
from handraise.core.config import Settings
from handraise.core.errors import (
    AlreadyVotedError,
    InvalidAnswerError,
    LinkUsedError,
    PersonRequiredError,
)
from handraise.core.events import REQUEST_VOTED, Event
from handraise.core.names import display_name
from handraise.core.people import expand, names, person_of
from handraise.core.redaction import redact
from handraise.core.schema import FieldError

if TYPE_CHECKING:
    from handraise.core.service import RequestService

log = logging.getLogger(__name__)

ANY = "any"
QUORUM = "quorum"
# Votes racing on one request retry their compare-and-set; each retry follows a vote that won.
MAX_TRIES = 64


@dataclass(frozen=True)
class Tally:
    """Where a quorum request stands: the votes in order, and the people who may still vote (None:
    not known, for N = 1 on a tenant without people)."""

    required: int
    policy: str
    votes: tuple[dict[str, Any], ...]
    expected: tuple[str, ...] | None

    @property
    def approvals(self) -> list[dict[str, Any]]:
        return [v for v in self.votes if v["decision"] == "approve"]

    @property
    def rejections(self) -> list[dict[str, Any]]:
        return [v for v in self.votes if v["decision"] == "reject"]

    def decision(self) -> str | None:
        """``approve``, ``reject``, or None while undecided."""
        if len(self.approvals) >= self.required:
            return "approve"
        if self.rejections and (self.policy == ANY or len(self.rejections) >= self.required):
            return "reject"
        return None

    def counts(self) -> dict[str, int]:
        return {"approved": len(self.approvals), "rejected": len(self.rejections), "required": self.required}


# -- create ----------------------------------------------------------------------------------


def eligible(settings: Settings, tenant_id: str, *, assign_to: list[str] | None,
             on_behalf_of: str | None) -> tuple[str, ...] | None:
    """The people who may approve (ids): those assigned, else all the tenant's people, never the
    ``on_behalf_of`` person; None when the tenant lists nobody."""
    tenant = settings.tenant(tenant_id)
    if tenant is None or not tenant.people:
        return None
    people = (expand(settings, tenant_id, assign_to).people if assign_to is not None
              else tuple(p.id for p in tenant.people))
    return tuple(p for p in people if p != on_behalf_of)


def create_problems(settings: Settings, tenant_id: str, *, kind: str, sensitive: bool,
                    approvals_required: int | None, reject_policy: str | None, assign_to: list[str] | None,
                    on_behalf_of: str | None, escalation_to: list[str] = ()) -> list[dict[str, str]]:
    """Why a create's ``approvals_required`` / ``reject_policy`` cannot stand, per field (empty: they can).
    ``escalation_to``: the people and groups its escalation steps add to an assignment."""
    if assign_to is not None:
        assign_to = [*assign_to, *escalation_to]
    if approvals_required is None:
        if reject_policy is not None:
            return [{"field": "reject_policy", "message": "applies only with approvals_required"}]
        return []
    field = "approvals_required"
    if kind != "approval":
        return [{"field": field, "message": 'applies to approvals only (kind "approval")'}]
    if sensitive:
        return [{"field": field, "message": "a sensitive approval takes no quorum: votes are stored and shown"}]
    people = eligible(settings, tenant_id, assign_to=assign_to, on_behalf_of=on_behalf_of)
    if people is None:
        if approvals_required == 1:
            return []
        return [{"field": field, "message": "counts distinct people: this tenant lists none "
                                            "([[tenants.people]] in the config)"}]
    if approvals_required > len(people):
        who = "the people assigned" if assign_to is not None else "this tenant's people"
        but = f" but {on_behalf_of}, on whose behalf it asks" if on_behalf_of in _ids(settings, tenant_id) else ""
        return [{"field": field, "message": f"is {approvals_required}, but only {len(people)} of {who}{but} may "
                                            "approve: the quorum could never be reached"}]
    return []


def _ids(settings: Settings, tenant_id: str) -> set[str]:
    tenant = settings.tenant(tenant_id)
    return {p.id for p in tenant.people} if tenant is not None else set()


# -- reading ---------------------------------------------------------------------------------


def tally(settings: Settings, view: RequestView) -> Tally | None:
    """The tally of a quorum request (None for any other)."""
    if view.approvals_required is None:
        return None
    people = eligible(settings, view.tenant_id, assign_to=view.assign_to, on_behalf_of=view.on_behalf_of)
    voted = {v["person"] for v in view.votes}
    expected = None if people is None else tuple(p for p in people if p not in voted)
    return Tally(view.approvals_required, view.reject_policy or ANY, tuple(view.votes), expected)


def tally_text(settings: Settings, view: RequestView) -> str:
    """What every channel shows of a pending quorum request's votes (core.wording words it); "" for
    a request one answer decides."""
    counted = tally(settings, view)
    if counted is None or counted.required < 2 or view.terminal:
        return ""
    expected = None if counted.expected is None else names(settings, view.tenant_id, counted.expected)
    return wording.tally(required=counted.required, policy=counted.policy,
                         approvers=[v["name"] for v in counted.approvals],
                         rejecters=[v["name"] for v in counted.rejections], expected=expected)


def _voter(settings: Settings, tenant_id: str, principal: str, required: int) -> tuple[str, str] | None:
    """(person id, name) of who votes as ``principal``; with N = 1 anyone allowed to answer votes as
    their principal; with N ≥ 2 only people (None otherwise)."""
    person = person_of(settings, tenant_id, principal)
    if person is not None:
        return person.id, person.display
    if required > 1:
        return None
    return principal, display_name(settings, tenant_id, principal) or principal


# -- voting ----------------------------------------------------------------------------------


class _Lost(Exception):
    """Another vote (or the deadline, a cancel) changed the request first: read it again."""


class _LinkUsed(Exception):
    """The link was used by another submission first."""


class Voting:
    """The vote path of ``RequestService.submit`` for quorum requests."""

    def __init__(self, service: RequestService) -> None:
        self.service = service

    async def vote(self, view: RequestView, *, response: Any, principal: str, channel: str,
                   link_id: str | None, deliveries: Sequence[dict[str, Any]]) -> RequestView:
        """Count one valid approval answer as a vote; resolves the request when it decides it."""
        service, settings = self.service, self.service.settings
        tenant_id = view.tenant_id
        assert view.approvals_required is not None
        voter = _voter(settings, tenant_id, principal, view.approvals_required)
        if voter is None:
            await service.journal(tenant_id=tenant_id, event="answer_refused", request_id=view.id,
                                  run_id=view.run_id, principal=principal, channel=channel,
                                  data={"reason": "person_required"})
            raise PersonRequiredError(f"this request needs {view.approvals_required} approvals from distinct people: "
                                      "only the tenant's people vote on it, each proven (a key bound to them, "
                                      "their own sign-in or channel)")
        await self._refuse_edits(view, response=response, principal=principal, channel=channel)
        person, name = voter
        decision = response["decision"]
        vote = {"person": person, "name": name, "decision": decision, "channel": channel, "principal": principal}
        if isinstance(response.get("reason"), str) and response["reason"]:
            vote["reason"] = redact(response["reason"])
        for _ in range(MAX_TRIES):
            mine = next((v for v in view.votes if v["person"] == person), None)
            if mine is not None:
                return await self._again(view, mine, decision=decision, principal=principal, channel=channel)
            try:
                return await self._cast(view, vote, edit=response.get(proposals.PROPOSAL), principal=principal,
                                        channel=channel, link_id=link_id, deliveries=deliveries)
            except _LinkUsed:
                raise LinkUsedError("this link was used already") from None
            except _Lost:
                view = await service.get(tenant_id=tenant_id, request_id=view.id, with_deliveries=False)
                raise_if_terminal(view)
        raise AlreadyVotedError("too many votes at once; please try again")  # pragma: no cover

    async def _refuse_edits(self, view: RequestView, *, response: Any, principal: str, channel: str) -> None:
        assert view.approvals_required is not None
        if view.approvals_required < 2 or view.proposal is None or proposals.PROPOSAL not in response:
            return
        if canonical_json(response[proposals.PROPOSAL]) == canonical_json(view.proposal):
            return
        errors = [FieldError(proposals.PROPOSAL, f"{view.approvals_required} people approve the same proposal: "
                                                 "it cannot be edited; approve it as proposed, or reject it "
                                                 "with a reason", "const")]
        await self.service.invalid_attempt(view, principal=principal, channel=channel,
                                           errors=[{"field": e.field, "message": e.message} for e in errors])
        raise InvalidAnswerError("the answer is not valid: " + errors[0].message, fields=[e.to_json() for e in errors])

    async def _again(self, view: RequestView, mine: dict[str, Any], *, decision: str, principal: str,
                     channel: str) -> RequestView:
        """The same person votes again: the same vote is ignored (idempotent), another is refused."""
        same = mine["decision"] == decision
        await self.service.journal(
            tenant_id=view.tenant_id, event="vote_repeated" if same else "answer_refused", request_id=view.id,
            run_id=view.run_id, principal=principal, channel=channel,
            data={"decision": decision, "first": {"decision": mine["decision"], "channel": mine["channel"]},
                  **({} if same else {"reason": "already_voted"})})
        if same:
            return view
        raise AlreadyVotedError(f"you voted {mine['decision']} already (through {mine['channel']}): votes are final")

    async def _cast(self, view: RequestView, vote: dict[str, Any], *, edit: Any, principal: str, channel: str,
                    link_id: str | None, deliveries: Sequence[dict[str, Any]]) -> RequestView:
        service = self.service
        now = service.clock()
        votes = [*view.votes, {**vote, "at": now}]
        after = Tally(view.approvals_required or 1, view.reject_policy or ANY, tuple(votes), None)
        outcome = after.decision()
        values: dict[str, Any] = {"votes_json": json.dumps(votes, ensure_ascii=False)}
        person_data = {"person": vote["person"]}
        voted = {"type": REQUEST_VOTED, "tenant_id": view.tenant_id, "id": view.id, "run_id": view.run_id,
                 "origin": service.bus.instance_id}
        journal: list[tuple[dict[str, Any], dict[str, Any]]] = [({
            "tenant_id": view.tenant_id, "event": "voted", "request_id": view.id, "principal": principal,
            "channel": channel, "at": now,
            "data": {**person_data, "decision": vote["decision"], **after.counts(),
                     **({"link_id": link_id} if link_id else {})}}, voted)]
        canonical = None
        if outcome is not None:
            result = result_of(view, outcome=outcome, votes=votes, edit=edit)
            answer, data, canonical = service._answer_columns(view, result)
            values |= {**answer, "status": "answered", "resolved_at": now, "resolved_by": principal,
                       "resolved_via": channel, "resolved_person_json": service._person_column(view.tenant_id, principal)}
            journal.append(({"tenant_id": view.tenant_id, "event": "answered", "request_id": view.id,
                             "principal": principal, "channel": channel, "at": now,
                             "data": {**data, **person_data, **({"link_id": link_id} if link_id else {})}},
                            service._resolved_notice(view.tenant_id, view.id, view.run_id)))
        async with service.store.transaction() as conn:
            if link_id is not None and not await service.store.links.use(conn, link_id=link_id, now=now):
                raise _LinkUsed
            cast = await service.store.votes.cast(conn, request_id=view.id, tenant_id=view.tenant_id,
                                                  version=view.votes_version, now=now, values=values,
                                                  journal=journal)
            if cast is None:
                raise _Lost  # rolls the link's use back too
        log.info("vote counted", extra={"request_id": view.id, "channel": channel, "decided": outcome is not None})
        fresh = RequestView.from_row({**cast.row, "response_json": canonical} if canonical is not None else cast.row,
                                     deliveries=list(deliveries))
        service.bus.publish(Event(REQUEST_VOTED, view.tenant_id, view.id, fresh.event_json(), view.run_id,
                                  seq=cast.entries[0].seq))
        if canonical is not None:
            return service._resolved(fresh, seq=cast.entries[-1].seq)
        return fresh


def result_of(view: RequestView, *, outcome: str, votes: list[dict[str, Any]], edit: Any = None) -> dict[str, Any]:
    """The agent's answer to a decided quorum request: the decision and every vote counted (``edit``:
    the deciding approver's proposal, which differs from the agent's only when one approval decides)."""
    result: dict[str, Any] = {"decision": outcome}
    if outcome == "approve" and edit is not None:
        result[proposals.PROPOSAL] = edit
    if outcome == "reject":
        reason = next((v.get("reason") for v in reversed(votes) if v["decision"] == "reject" and v.get("reason")),
                      None)
        if reason:
            result["reason"] = reason
    result["votes"] = [vote_json(v) for v in votes]
    return proposals.result(proposal=view.proposal, response=result)



"""The request lifecycle: create, wait, submit, cancel; the one door to the store (deadlines and the sweeper in
core/sweeper.py, form links in core/links.py, both bases of RequestService).

Every path that changes a request goes through a compare-and-set in the store,
journals in the same transaction, and only then publishes an event (register
before publish). Waiters are in-process futures, woken by local resolutions and,
with PostgreSQL, by NOTIFYs from other instances.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from handraise.core import callbacks, defaults, escalation, proposals, quorum, timeouts
from handraise.core.api import (
    CreateRequestBody,
    RequestView,
    raise_if_terminal,
    url_host,
)
from handraise.core.attempts import AttemptLimiter
from handraise.core.canonical import canonical_json
from handraise.core.config import Settings
from handraise.core.cursors import KEY_PURPOSE as CURSOR_KEY_PURPOSE
from handraise.core.cursors import CursorSigner, Position
from handraise.core.errors import (
    ConflictError,
    ExpiredError,
    InvalidAnswerError,
    LinkUsedError,
    NotAssignedError,
    NotFoundError,
    NotPendingError,
    ShuttingDownError,
    UniqueIdReusedError,
    ValidationFailedError,
)
from handraise.core.held import HeldViews
from handraise.core.jsontext import dumps, dumps_unicode
from handraise.core.links import LinkDoors, new_id
from handraise.core.events import REQUEST_CREATED, REQUEST_PROGRESS, REQUEST_RESOLVED, REQUEST_VOTED, Event, EventBus
from handraise.core.people import four_eyes_refusal, is_assigned, person_json, person_of, routing_problems
from handraise.core.schema import check_schema_off_loop
from handraise.core.sealing import Sealer
from handraise.core.store import Store
from handraise.core.sweeper import Sweeping

log = logging.getLogger(__name__)

# JSON the server wrote itself (canonical JSON): one call of the C scanner reads it.
_scan_json = json.JSONDecoder().scan_once

Clock = Callable[[], float]


def _time_out(fut: asyncio.Future[Any]) -> None:
    """A parked wait's deadline: it wakes with no view, and reads the request as it stands."""
    if not fut.done():
        fut.set_result(None)


class RequestService(Sweeping, LinkDoors):
    """Everything a channel (HTTP API, hosted form, chat bot) may do to a request."""

    def __init__(self, *, settings: Settings, store: Store, bus: EventBus, clock: Clock = time.time) -> None:
        self.settings = settings
        self.store = store
        self.bus = bus
        self.clock = clock
        self._waiters: dict[str, set[asyncio.Future[None]]] = defaultdict(set)
        self.stopping = False  # set by stop_waits() at shutdown
        self._purges: set[asyncio.Task[None]] = set()
        self._sealer: Sealer | None = None
        self._cursors: CursorSigner | None = None
        self._pruned_at = float("-inf")
        limits = settings.limits
        self.attempts = AttemptLimiter(max_failures=limits.max_failed_attempts,
                                       window=limits.failed_attempts_window_seconds)
        # Which enabled channels serve which tenant; the app fills this in from its channels.
        self.channel_serves: dict[str, Callable[[str], bool]] = {}
        # Told of each wait that a resolution ended (the wake-latency metric); set by the app.
        self.on_wake: Callable[[RequestView], None] | None = None
        # Views made here, held for the next call of their request (core/held.py).
        self.held = HeldViews()
        bus.register_loader(REQUEST_CREATED, self._load_event_data)
        bus.register_loader(REQUEST_RESOLVED, self._load_event_data)
        bus.register_loader(REQUEST_PROGRESS, self._load_event_data)
        bus.register_loader(REQUEST_VOTED, self._load_event_data)
        bus.add_listener(self._wake_on_event, remote_data=False)
        # Escalation steps and reminders, moved on by the sweeper (core/escalation.py).
        self.escalations = escalation.Escalator(self)
        # Quorum requests are decided by votes (core/quorum.py).
        self.voting = quorum.Voting(self)

    # -- create ----------------------------------------------------------------

    async def create(self, *, tenant_id: str, principal: str, body: CreateRequestBody) -> tuple[RequestView, bool]:
        """Store a new request; returns (request, created). An identical retry returns the existing one."""
        body = defaults.apply(self.settings.tenant(tenant_id), body)
        limits = self.settings.limits
        timeout = body.timeout_seconds if body.timeout_seconds is not None else limits.default_timeout_seconds
        if not 1 <= timeout <= limits.max_timeout_seconds:
            raise ValidationFailedError(
                f"timeout_seconds must be between 1 and {limits.max_timeout_seconds}",
                fields=[{"field": "timeout_seconds", "message": f"must be between 1 and {limits.max_timeout_seconds}"}],
            )
        if len(body.message_for_user) > limits.max_message_chars:
            raise ValidationFailedError(
                f"message_for_user is longer than {limits.max_message_chars} characters",
                fields=[{"field": "message_for_user", "message": f"at most {limits.max_message_chars} characters"}],
            )
        effective = await check_schema_off_loop(body.form_schema, kind=body.kind, max_fields=limits.max_schema_fields,
                                 max_bytes=limits.max_schema_bytes)
        on_timeout = body.on_timeout_policy()
        await timeouts.check_policy(on_timeout, kind=body.kind, sensitive=body.sensitive, schema=effective)
        proposal_schema = await proposals.check_at_create(
            proposal=body.proposal, schema=body.proposal_schema, kind=body.kind, sensitive=body.sensitive,
            max_fields=limits.max_schema_fields, max_bytes=limits.max_schema_bytes)
        available = self.channels_for(tenant_id)
        tenant = self.settings.tenant(tenant_id)
        if body.callback_url is not None:
            problem = await callbacks.url_problem(body.callback_url, tenant.callbacks if tenant else None)
            if problem is not None:
                raise ValidationFailedError(f"callback_url {problem}",
                                            fields=[{"field": "callback_url", "message": problem}])
        if body.channels is not None:
            channels = body.channels
        elif tenant is not None and tenant.default_channels is not None:
            channels = tenant.default_channels
        else:
            channels = available
        unknown = [c for c in channels if c not in available]
        if unknown:
            raise ValidationFailedError(
                f"channel(s) {', '.join(unknown)} do not serve this tenant; available: {', '.join(available)}",
                fields=[{"field": "channels", "message": f"channel {c!r} does not serve this tenant"}
                         for c in unknown],
            )
        channels = list(dict.fromkeys(channels))
        problems = routing_problems(self.settings, tenant_id, kind=body.kind, assign_to=body.assign_to,
                                    on_behalf_of=body.on_behalf_of)
        problems += quorum.create_problems(self.settings, tenant_id, kind=body.kind, sensitive=body.sensitive,
                                           approvals_required=body.approvals_required,
                                           reject_policy=body.reject_policy, assign_to=body.assign_to,
                                           on_behalf_of=body.on_behalf_of,
                                           escalation_to=[ref for step in body.escalation or () for ref in step.to])
        if problems:
            raise ValidationFailedError("; ".join(f"{p['field']}: {p['message']}" for p in problems), fields=problems)
        body_sha = hashlib.sha256(canonical_json(body.canonical_body(timeout_seconds=timeout)).encode()).hexdigest()
        now = self.clock()
        schedule = escalation.check_at_create(self, tenant_id=tenant_id, body=body, timeout=timeout, now=now)
        row = {
            "id": new_id("req"), "tenant_id": tenant_id, "unique_id": body.unique_id, "body_sha256": body_sha,
            "message_for_user": body.message_for_user,
            # Stored as given, not canonicalised: property order is the order humans see the fields in.
            "form_schema_json": dumps_unicode(effective) if effective is not None else None,
            "kind": body.kind, "sensitive": body.sensitive, "run_id": body.run_id,
            "channels_json": dumps(channels), "status": "pending", "created_by": principal,
            "created_at": now, "expires_at": now + timeout,
            "on_timeout_json": None if on_timeout == timeouts.EXPIRE else canonical_json(on_timeout),
            "callback_url": body.callback_url,
            # As given, like the schema: field order is the order people see them in.
            "proposal_json": json.dumps(body.proposal, ensure_ascii=False) if proposal_schema else None,
            "proposal_schema_json": json.dumps(proposal_schema, ensure_ascii=False) if proposal_schema else None,
            "assign_to_json": json.dumps(body.assign_to) if body.assign_to is not None else None,
            "on_behalf_of": body.on_behalf_of,
            **escalation.columns(schedule),
            "approvals_required": body.approvals_required,
            "reject_policy": (body.reject_policy or quorum.ANY) if body.approvals_required is not None else None,
        }
        journal = {"tenant_id": tenant_id, "event": "created", "request_id": row["id"], "run_id": body.run_id,
                   "principal": principal, "at": now, "data": {
                       "unique_id": body.unique_id, "message_for_user": body.message_for_user,
                       "schema": effective, "kind": body.kind, "sensitive": body.sensitive,
                       "channels": channels, "timeout_seconds": timeout, "expires_at": row["expires_at"],
                       **({"on_timeout": on_timeout} if on_timeout != timeouts.EXPIRE else {}),
                       **({"callback_host": url_host(body.callback_url)} if body.callback_url else {}),
                       **({"proposal": body.proposal, "proposal_schema": proposal_schema} if proposal_schema else {}),
                       **({"assign_to": body.assign_to} if body.assign_to is not None else {}),
                       **({"on_behalf_of": body.on_behalf_of} if body.on_behalf_of is not None else {}),
                       **(json.loads(schedule.to_json()) if schedule is not None else {}),
                       **({"approvals_required": body.approvals_required, "reject_policy": row["reject_policy"]}
                          if body.approvals_required is not None else {})}}
        async with self.store.transaction() as conn:
            entry = await self.store.create_request(conn, row, journal=journal, notify={
                "type": REQUEST_CREATED, "tenant_id": tenant_id, "id": row["id"], "run_id": body.run_id,
                "origin": self.bus.instance_id})
        inserted = entry is not None
        if not inserted:
            existing = await self.store.get_request_by_unique_id(tenant_id, body.unique_id)
            if existing is None:  # deleted between the two statements: cannot happen, rows are never deleted
                raise ConflictError("unique_id is in use")
            view = await self._settle(self._view(existing))
            if existing["body_sha256"] == body_sha:
                return view, False
            if view.status == "pending":
                raise ConflictError(f"unique_id {body.unique_id!r} is pending with a different body")
            raise UniqueIdReusedError(f"unique_id {body.unique_id!r} was used already; generate a fresh one")
        assert entry is not None
        view = RequestView.from_row(row | {"response_json": None, "response_purged": False, "votes_version": 0,
                                           "resolved_by": None, "resolved_via": None, "resolved_at": None})
        log.info("request created", extra={"request_id": view.id, "tenant_id": tenant_id, "kind": view.kind})
        self.held.created(view)
        # The event's id is its journal entry's seq, so a stream can resume from the journal (core/http/events.py).
        self.bus.publish(Event(REQUEST_CREATED, tenant_id, view.id, view.event_json(), view.run_id, seq=entry.seq))
        return view, True

    def channels_for(self, tenant_id: str) -> list[str]:
        """The enabled channels that deliver this tenant's requests."""
        return sorted(name for name, serves in self.channel_serves.items() if serves(tenant_id))

    # -- read ------------------------------------------------------------------

    @property
    def sealer(self) -> Sealer:
        if self._sealer is None:
            self._sealer = Sealer(self.store.secret)
        return self._sealer

    def _view(self, row: dict[str, Any], *, deliveries: list[dict[str, Any]] | None = None) -> RequestView:
        """The request as the asking side may see it: a held sensitive answer is unsealed here, in memory."""
        if row.get("response_sealed") is not None and row.get("response_key") is not None:
            canonical = self.sealer.open(tenant_id=row["tenant_id"], request_id=row["id"],
                                         sealed=row["response_sealed"], wrapped=row["response_key"])
            row = {**row, "response_json": canonical}
        return RequestView.from_row(row, deliveries=deliveries)

    async def get(self, *, tenant_id: str, request_id: str, with_deliveries: bool = True) -> RequestView:
        if with_deliveries:
            found = await self.store.get_request_with_deliveries(tenant_id, request_id=request_id)
            if found is None:
                raise NotFoundError("no such request")
            return await self._settle(self._view(found[0], deliveries=found[1]))
        row = await self.store.get_request(tenant_id, request_id)
        if row is None:
            raise NotFoundError("no such request")
        return await self._settle(self._view(row))

    async def get_by_unique_id(self, *, tenant_id: str, unique_id: str) -> RequestView:
        row = await self.store.get_request_by_unique_id(tenant_id, unique_id)
        if row is None:
            raise NotFoundError("no such request")
        return await self._settle(self._view(row))

    async def list(self, *, tenant_id: str, status: str | None = None, run_id: str | None = None,
                   limit: int = 100) -> list[RequestView]:
        rows = await self.store.list_requests(tenant_id, status=status, run_id=run_id, limit=limit)
        return [RequestView.from_row(r) for r in rows]

    async def page(self, *, tenant_id: str, status: str | None = None, run_id: str | None = None,
                   cursor: str | None = None, limit: int = 100) -> tuple[list[RequestView], str | None]:
        """One page of the tenant's requests, oldest first, after ``cursor``; and the next page's cursor
        (None on the last). Rows created while a client pages appear once, on a later page, or not at all."""
        if self._cursors is None:
            self._cursors = CursorSigner(self.store.secret.key(CURSOR_KEY_PURPOSE))
        scope = {"tenant": tenant_id, "status": status, "run_id": run_id}
        after = self._cursors.decode(cursor, scope=scope) if cursor is not None else None
        rows = await self.store.list_requests(tenant_id, status=status, run_id=run_id, limit=limit + 1,
                                              after=None if after is None else (after.created_at, after.id))
        more = len(rows) > limit
        views = [RequestView.from_row(r) for r in rows[:limit]]
        now = self.clock()
        if any(v.status == "pending" and v.expires_at <= now for v in views):
            # Past its deadline and not yet swept: listed as it is read one at a time (expired, or answered
            # by its on_timeout policy), and left out of a list of another status. The cursor stays the
            # last row read, so the next page starts where this one's rows ended.
            views = [await self._settle(v) for v in views]
            if status is not None:
                views = [v for v in views if v.status == status]
        if not more:
            return views, None
        last = rows[limit - 1]
        return views, self._cursors.encode(Position(last["created_at"], last["id"]), scope=scope)

    async def _settle(self, view: RequestView) -> RequestView:
        """A pending request past its deadline is expired now rather than shown as pending."""
        if view.status == "pending" and view.expires_at <= self.clock():
            expired = await self._expire(tenant_id=view.tenant_id, request_id=view.id, view=view)
            if expired is not None:
                return expired
            return await self._reread(view)
        return view

    async def _reread(self, view: RequestView) -> RequestView:
        row = await self.store.get_request(view.tenant_id, view.id)
        assert row is not None
        return self._view(row, deliveries=[_delivery_row(d) for d in view.deliveries])

    # -- wait ------------------------------------------------------------------

    async def wait(self, *, tenant_id: str, request_id: str, timeout: float) -> RequestView:
        """Return as soon as the request is terminal, or after ``timeout`` seconds as it stands.

        A resolution in this process hands its view straight to the waiters (no re-read);
        one from another instance (NOTIFY) or the request's own deadline makes them read the store.
        """
        loop = asyncio.get_running_loop()
        waiters = self._waiters[request_id]
        fut: asyncio.Future[RequestView | None] = loop.create_future()
        waiters.add(fut)
        try:
            view = self.held.collecting(tenant_id, request_id) or await self.get(tenant_id=tenant_id,
                                                                                  request_id=request_id)
            deadline = self.clock() + max(0.0, timeout)
            waited = False
            while not view.terminal and not self.stopping:
                now = self.clock()
                remaining = deadline - now
                if remaining <= 0:
                    break
                delay = min(remaining, max(view.expires_at - now, 0.0)) + 0.001
                # Parked, a wait holds only its future and one timer: no copy of the request (it is
                # read again or handed over on waking) and none of asyncio.wait's set, inner future
                # and callbacks. 10,000 agents waiting is 10,000 of these (issue 19: under 250 MB).
                del view
                timer = loop.call_later(delay, _time_out, fut)
                try:
                    woke = await fut
                finally:
                    timer.cancel()
                waited = True
                waiters.discard(fut)
                fut = loop.create_future()
                waiters.add(fut)
                if woke is not None and woke.tenant_id == tenant_id:
                    view = woke
                else:
                    view = await self.get(tenant_id=tenant_id, request_id=request_id)
            if waited and view.terminal and self.on_wake is not None:
                self.on_wake(view)
            return view
        finally:
            waiters.discard(fut)
            if not waiters and self._waiters.get(request_id) is waiters:
                del self._waiters[request_id]

    async def until_terminal(self, *, tenant_id: str, view: RequestView) -> RequestView:
        """The request once terminal (the blocking call, MCP tools); ``ShuttingDownError`` if the server stops."""
        while not view.terminal:
            if self.stopping:
                raise ShuttingDownError("the server is shutting down; make the same call again to re-attach")
            remaining = view.expires_at - self.clock()
            view = await self.wait(tenant_id=tenant_id, request_id=view.id, timeout=max(remaining, 0) + 1)
        return view

    def stop_waits(self) -> None:
        """At shutdown: every wait, now or later, returns the request as it stands (the agent waits again)."""
        self.stopping = True
        self.wake_all()

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def _wake(self, request_id: str, view: RequestView | None = None) -> None:
        for fut in self._waiters.get(request_id, ()):
            if not fut.done():
                fut.set_result(view)

    def _wake_on_event(self, ev: Event) -> None:
        # Local resolutions woke their waiters with the view already; these come from other instances.
        if ev.type == REQUEST_RESOLVED and not ev.local:
            self._wake(ev.object_id)

    def wake_all(self) -> None:
        """After a lost NOTIFY connection: every waiter re-reads the store."""
        for request_id in list(self._waiters):
            self._wake(request_id)

    async def _load_event_data(self, tenant_id: str, request_id: str) -> dict[str, Any] | None:
        row = await self.store.get_request(tenant_id, request_id)
        return None if row is None else RequestView.from_row(row).event_json()

    # -- submit ----------------------------------------------------------------

    async def submit(self, *, tenant_id: str, response: Any, principal: str, channel: str,
                     request_id: str | None = None, unique_id: str | None = None,
                     link_id: str | None = None) -> RequestView:
        """Validate and apply one answer; exactly one submission wins.

        Raises NotFoundError, AlreadyAnsweredError (409), ExpiredError / RequestCancelledError (410),
        InvalidAnswerError (422; the request stays pending), RateLimitedError (429: this principal made
        too many refused attempts lately; nothing is journaled).
        """
        self.attempts.check(principal)
        if request_id is None and unique_id is None:
            raise NotFoundError("no such request")
        # A request created here is answered as it was made, with no read, when the long way would take the
        # answer; the compare-and-set below still decides whether it is pending and unexpired (core/held.py).
        held = None
        if request_id is None and link_id is None and unique_id is not None:
            held = self.held.answering(tenant_id, unique_id)
        if held is not None and await self._takes(held, principal, response):
            view, deliveries = held, []
        else:
            found = await self.store.get_request_with_deliveries(tenant_id, request_id=request_id, unique_id=unique_id)
            if found is None:
                raise NotFoundError("no such request")
            row, deliveries = found
            view = await self._settle(self._view(row, deliveries=deliveries))
            raise_if_terminal(view)
            if not self.may_answer(view, principal):
                await self.journal(tenant_id=tenant_id, event="answer_refused", request_id=view.id, run_id=view.run_id,
                                   principal=principal, channel=channel, data={"reason": "not_assigned"})
                raise NotAssignedError("this request is assigned to other people: only they may answer it")
            errors = await proposals.answer_errors(schema=view.schema, proposal_schema=view.proposal_schema,
                                                   response=response)
            if errors:
                await self.invalid_attempt(view, principal=principal, channel=channel,
                                           errors=[{"field": e.field, "message": e.message} for e in errors])
                raise InvalidAnswerError(_errors_message(errors), fields=[e.to_json() for e in errors])
            refusal = four_eyes_refusal(self.settings, tenant_id, view.on_behalf_of, principal, response)
            if refusal is not None:
                await self.journal(tenant_id=tenant_id, event="answer_refused", request_id=view.id, run_id=view.run_id,
                                   principal=principal, channel=channel, data={"reason": refusal.code})
                raise refusal
            if view.approvals_required is not None:
                return await self.voting.vote(view, response=response, principal=principal, channel=channel,
                                              link_id=link_id, deliveries=deliveries)
        # An approval of a proposal carries the proposal as approved and whether it was edited.
        response = proposals.result(proposal=view.proposal, response=response)
        answer, data, canonical = self._answer_columns(view, response)
        now = self.clock()
        try:
            async with self.store.transaction() as conn:
                if link_id is not None and not await self.store.links.use(conn, link_id=link_id, now=now):
                    raise _LostRace
                if link_id is not None:
                    data["link_id"] = link_id
                data |= self._person_data(tenant_id, principal)
                done = await self.store.resolve(
                    conn, request_id=view.id, tenant_id=tenant_id, status="answered", now=now,
                    require_unexpired=True, values={**answer, "resolved_by": principal, "resolved_via": channel,
                                                    "resolved_person_json": self._person_column(tenant_id, principal)},
                    # The deliveries as read just before: the answer's view does not wait for a fresh read.
                    with_deliveries=False,
                    journal={"tenant_id": tenant_id, "event": "answered", "request_id": view.id,
                             "principal": principal, "channel": channel, "data": data, "at": now},
                    notify=self._resolved_notice(tenant_id, view.id, view.run_id))
                if done is None:
                    # Rolls back the link use too: the request was not ours to answer.
                    raise _LostRace
        except _LostRace:
            current = await self.get(tenant_id=tenant_id, request_id=view.id, with_deliveries=False)
            if link_id is not None and current.status == "pending":
                raise LinkUsedError("this link was used already") from None
            raise_if_terminal(current)
            raise ExpiredError("the request expired") from None
        log.info("request answered", extra={"request_id": view.id, "channel": channel})
        # The answer is at hand: a sealed one need not be opened again.
        resolved = RequestView.from_row({**done.row, "response_json": canonical}, deliveries=deliveries)
        return self._resolved(resolved, seq=done.entry.seq)

    async def _takes(self, view: RequestView, principal: str, response: Any) -> bool:
        """Whether the long way would pass this answer to ``view`` as it stands: unexpired, ``principal`` may
        answer, not their own approval, valid (a check that fails sends the answer the long way, which refuses
        and journals it as ever)."""
        return (view.expires_at > self.clock() and self.may_answer(view, principal)
                and four_eyes_refusal(self.settings, view.tenant_id, view.on_behalf_of, principal, response) is None
                and not await proposals.answer_errors(schema=view.schema, proposal_schema=view.proposal_schema,
                                                      response=response))

    def _answer_columns(self, view: RequestView, response: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
        """An answer as the request's columns hold it, as its journal entry does, and in canonical JSON."""
        canonical = canonical_json(response)
        digest = self.sealer.digest(tenant_id=view.tenant_id, request_id=view.id, canonical=canonical)
        answer: dict[str, Any] = {"response_digest": digest}
        # The journal's keyed digest is never exported (JournalEntry.public_data).
        data: dict[str, Any] = {"response_digest": digest}
        if view.sensitive:
            # Sealed before it reaches the store: the database never holds the value itself.
            answer["response_sealed"], answer["response_key"] = self.sealer.seal(
                tenant_id=view.tenant_id, request_id=view.id, canonical=canonical)
        else:
            answer["response_json"] = canonical
            data["response"] = _scan_json(canonical, 0)[0]  # a copy of the answer as canonical JSON reads
        return answer, data, canonical
    def may_answer(self, view: RequestView, principal: str) -> bool:
        """Whether ``principal`` is one of the people ``view`` is assigned to (True without assignment).
        Every route asks before it shows a form or takes an answer; ``submit`` asks again."""
        return is_assigned(self.settings, view.tenant_id, view.assign_to, principal)

    async def invalid_attempt(self, view: RequestView, *, principal: str, channel: str,
                              errors: list[dict[str, str]]) -> None:
        """Journal a refused answer and count it against the principal's attempt limit."""
        self.attempts.failed(principal)
        async with self.store.transaction() as conn:
            entry = await self.store.append_journal(conn, tenant_id=view.tenant_id, event="invalid_attempt",
                                                    request_id=view.id, run_id=view.run_id, principal=principal,
                                                    channel=channel,
                                                    data={"errors": errors, **self._person_data(view.tenant_id, principal)})
            # The first attempt shows the request as being worked on (the HITL protocol's in_progress).
            first_try = await self.store.reviews.mark_interacted(conn, tenant_id=view.tenant_id,
                                                                 request_id=view.id, now=entry.at)
            if first_try:
                await self._notify_progress(conn, view, seq=entry.seq)
        log.info("invalid answer", extra={"request_id": view.id, "channel": channel,
                                          "fields": [e["field"] for e in errors]})
        if first_try:
            await self._progressed(view, seq=entry.seq)

    async def _notify_progress(self, conn: Any, view: RequestView, *, seq: int) -> None:
        await self.store.notify(conn, {"type": REQUEST_PROGRESS, "tenant_id": view.tenant_id, "id": view.id,
                                       "run_id": view.run_id, "origin": self.bus.instance_id, "seq": seq})

    async def _progressed(self, view: RequestView, *, seq: int) -> None:
        fresh = await self.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
        self.bus.publish(Event(REQUEST_PROGRESS, view.tenant_id, view.id, fresh.event_json(), view.run_id, seq=seq))

    def _resolved(self, view: RequestView, *, seq: int) -> RequestView:
        """A resolution committed: wake this instance's waiters with the view (or hold it for the next wait
        when none is parked) and publish it."""
        if view.id in self._waiters:
            self._wake(view.id, view)
        else:
            self.held.resolved(view)
        self.bus.publish(Event(REQUEST_RESOLVED, view.tenant_id, view.id, view.event_json(), view.run_id, seq=seq))
        return view

    def _resolved_notice(self, tenant_id: str, request_id: str, run_id: str | None) -> dict[str, Any]:
        """The NOTIFY other instances hear once the resolution commits (the journal adds its seq)."""
        return {"type": REQUEST_RESOLVED, "tenant_id": tenant_id, "id": request_id, "run_id": run_id,
                "origin": self.bus.instance_id}

    # -- cancel and expire -----------------------------------------------------

    async def cancel(self, *, tenant_id: str, request_id: str, principal: str) -> RequestView:
        view = await self.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        if view.terminal:
            raise NotPendingError(f"the request is {view.status} already")
        now = self.clock()
        async with self.store.transaction() as conn:
            done = await self.store.cancel(
                conn, request_id=request_id, tenant_id=tenant_id, now=now, principal=principal,
                journal={"tenant_id": tenant_id, "event": "cancelled", "request_id": request_id,
                         "principal": principal, "channel": "api", "at": now},
                notify=self._resolved_notice(tenant_id, request_id, view.run_id))
        if done is None:
            current = await self.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
            raise NotPendingError(f"the request is {current.status} already")
        log.info("request cancelled", extra={"request_id": request_id})
        return self._resolved(self._view(done.row, deliveries=done.deliveries), seq=done.entry.seq)

    # -- journal and deliveries (for connectors) -------------------------------

    async def journal(self, *, tenant_id: str, event: str, request_id: str | None = None, run_id: str | None = None,
                      principal: str | None = None, channel: str | None = None,
                      data: dict[str, Any] | None = None) -> None:
        if principal is not None:
            data = {**self._person_data(tenant_id, principal), **(data or {})}
        async with self.store.transaction() as conn:
            await self.store.append_journal(conn, tenant_id=tenant_id, event=event, request_id=request_id,
                                            run_id=run_id, principal=principal, channel=channel, data=data)

    def _person_column(self, tenant_id: str, principal: str) -> str | None:
        """``resolved_person_json``: who decided, as the request keeps it (None: no proven person)."""
        found = person_json(self.settings, tenant_id, principal)
        return None if found is None else dumps_unicode(found)

    def _person_data(self, tenant_id: str, principal: str) -> dict[str, str]:
        """``{"person": <id>}`` when ``principal`` is one of the tenant's people: the journal names the
        person, so one person acting from two channels reads as one."""
        person = person_of(self.settings, tenant_id, principal)
        return {"person": person.id} if person is not None else {}

    async def journal_entries(self, *, tenant_id: str, request_id: str) -> list[dict[str, Any]]:
        entries = await self.store.journal_entries(tenant_id=tenant_id, request_id=request_id)
        return [_entry_json(e) for e in entries]


class _LostRace(Exception):
    """Another submission won the compare-and-set; the transaction rolls back."""


def _errors_message(errors: list[Any]) -> str:
    parts = [f"{e.field}: {e.message}" if e.field else e.message for e in errors]
    return "the answer is not valid: " + "; ".join(parts)


def _delivery_row(d: Any) -> dict[str, Any]:
    return {"channel": d.channel, "target": d.target, "status": d.status, "attempts": d.attempts,
            "last_error": d.last_error, "updated_at": d.updated_at}


def _entry_json(e: Any) -> dict[str, Any]:
    from handraise.core.api import iso

    return {"seq": e.seq, "event": e.event, "request_id": e.request_id, "run_id": e.run_id,
            "principal": e.principal, "channel": e.channel, "data": e.public_data(), "at": iso(e.at),
            "hash": e.hash}


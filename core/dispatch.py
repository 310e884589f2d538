"""Delivery of requests to connectors: immediately on creation, retried, withdrawn when terminal.

Each (request, channel, target) is one delivery row; attempts and outcomes are
journaled and shown on the request as ``deliveries``. Every delivery runs as its
own task, so a failing channel never delays another. Only the instance where an
event happened acts on it (``Event.local``), so deliveries are not duplicated
across instances; a periodic recovery pass (one instance at a time) picks up
what a crashed instance left half done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from handraise.core import callbacks, hitl
from handraise.core.api import RequestView
from handraise.core.backoff import Backoff, while_unavailable
from handraise.core.bounces import Bounces
from handraise.core.connectors import Connector
from handraise.core.deliveries import Delivery, DeliveryLog
from handraise.core.errors import ConnectorError, NotFoundError
from handraise.core.events import REQUEST_CREATED, REQUEST_RESOLVED, REQUEST_SCHEDULED, REQUEST_VOTED, Event
from handraise.core.leadership import Leadership
from handraise.core.recovery import RECOVERY_LEADER, Recovery
from handraise.core.redaction import redact
from handraise.core.service import RequestService

log = logging.getLogger(__name__)

T = TypeVar("T")

# Refs of reminder messages are kept inside the original delivery's ref under this key.
REMINDER_REFS = "_reminders"
# Tally edits one message gets in a row while votes keep coming in (each shows the newest tally).
_TALLY_EDITS = 8


class ReviewCases(Protocol):
    """The HITL-protocol case of a request, for a callback in the protocol's shape (``core/store/reviews.py``)."""

    async def get_case(self, *, tenant_id: str, request_id: str) -> dict[str, Any] | None: ...


class Dispatcher(Recovery, Bounces):
    """Runs deliveries, withdrawals and reminders for the connectors of one instance.

    It reads requests through the lifecycle ``service``, keeps its rows in the ``deliveries`` log, and runs
    its recovery pass where it holds ``leadership``. ``shared``: other instances may use the same store
    (PostgreSQL), so their work in flight cannot be told from abandoned work at startup.
    """

    def __init__(self, *, service: RequestService, deliveries: DeliveryLog, leadership: Leadership,
                 cases: ReviewCases, shared: bool, connectors: dict[str, Connector],
                 http: callbacks.CallbackHttp | None = None, max_attempts: int = 12, backoff_initial: float = 0.5,
                 backoff_cap: float = 60.0, withdraw_attempts: int = 8, recovery_interval: float = 60.0) -> None:
        self.service = service
        self.deliveries = deliveries
        deliveries.on_bounce(self._on_bounce)
        self.leadership = leadership
        self.cases = cases
        self.shared = shared
        self.connectors = connectors
        # Posts requests' callbacks (core/callbacks.py); None: callbacks are not sent by this instance.
        self.http = http
        # 12 attempts with a 60 s cap span about five minutes: a messenger outage of that
        # length still delivers; a permanent error stops at once.
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self.withdraw_attempts = withdraw_attempts
        self.recovery_interval = recovery_interval
        # Work in flight per request (what ``idle`` waits for).
        self._tasks: dict[str, set[asyncio.Task[Any]]] = {}
        # Sleeping reminders and the recovery loop: not "work in flight".
        self._timers: set[asyncio.Task[Any]] = set()
        # Set when a request becomes terminal (here or on another instance): cuts retry waits short.
        self._resolved: dict[str, asyncio.Event] = {}
        self._withdrawing: set[int] = set()
        # Outcome edits in flight: a stop lets them finish (briefly), or messages keep stale buttons.
        self._withdrawals: set[asyncio.Task[Any]] = set()
        self._recover_lock = asyncio.Lock()
        self._started_at = 0.0
        self._closed = False
        # Told of each delivery outcome (channel, "sent" | "retry" | "failed" | "withdrawn"): the metrics.
        self.on_delivery: Callable[[str, str], None] | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        self._started_at = self.service.clock()
        self.service.bus.add_listener(self._on_event, remote_data=False)
        if (self.connectors or self.http is not None) and self.recovery_interval > 0:
            self._timer(self._recovery_loop(), name="dispatch-recovery")

    async def stop(self, *, grace: float = 5.0) -> None:
        self._closed = True
        if self._withdrawals:
            await asyncio.wait(list(self._withdrawals), timeout=grace)
        tasks = [t for ts in self._tasks.values() for t in ts] + list(self._timers)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._timers.clear()
        with contextlib.suppress(Exception):
            await self.leadership.release(RECOVERY_LEADER)

    async def idle(self) -> None:
        """Wait until no delivery work is in flight (tests and graceful shutdown).

        Reminders still sleeping towards their time are not work in flight.
        """
        while True:
            tasks = [t for ts in self._tasks.values() for t in ts if not t.done()]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- events ----------------------------------------------------------------

    def _on_event(self, ev: Event) -> None:
        if ev.type == REQUEST_RESOLVED:
            # Wherever it was resolved, local retries and reminders stop waiting.
            flag = self._resolved.get(ev.object_id)
            if flag is not None:
                flag.set()
        if not ev.local or self._closed:
            return
        if ev.type == REQUEST_CREATED:
            # Most requests of a web-only tenant go nowhere: decide that before making a task.
            if self.delivers(ev.tenant_id, ev.data.get("channels", [])):
                self._spawn(ev.object_id, self._deliver_all(ev.tenant_id, ev.object_id))
        elif ev.type == REQUEST_SCHEDULED:
            self._spawn(ev.object_id, self._scheduled(ev.tenant_id, ev.object_id,
                                                      reached=bool(ev.data.get("reached")),
                                                      remind=bool(ev.data.get("remind"))))
        elif ev.type == REQUEST_VOTED and ev.data.get("status") == "pending":
            if self.delivers(ev.tenant_id, ev.data.get("channels", [])):
                self._spawn(ev.object_id, self._show_votes_all(ev.tenant_id, ev.object_id))
        elif ev.type == REQUEST_RESOLVED:
            if ev.data.get("callback_host"):
                self._spawn(ev.object_id, self._call_back(ev.tenant_id, ev.object_id))
            # A request none of whose channels delivers to this tenant was never sent anywhere: nothing
            # to withdraw, and no read (one still being sent withdraws itself when it sees the outcome).
            if not self.delivers(ev.tenant_id, ev.data.get("channels", [])):
                return
            self._spawn(ev.object_id, self._withdraw_all(ev.tenant_id, ev.object_id))

    def delivers(self, tenant_id: str, channels: list[str]) -> bool:
        """Whether any of these channels reaches this tenant's people, in a room or directly (else no delivery
        row is ever made): ``Connector.serves``, not its rooms alone (``targets_for`` may name DMs only)."""
        return any(self.connectors.get(c) and self.connectors[c].serves(tenant_id) for c in channels)

    def _count(self, channel: str, outcome: str) -> None:
        if self.on_delivery is not None:
            self.on_delivery(channel, outcome)

    def _spawn(self, request_id: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        bucket = self._tasks.setdefault(request_id, set())
        bucket.add(task)
        self._resolved.setdefault(request_id, asyncio.Event())

        def done(t: asyncio.Task[Any]) -> None:
            bucket.discard(t)
            if not bucket and self._tasks.get(request_id) is bucket:
                del self._tasks[request_id]
                if not any(request_id == getattr(x, "request_id", None) for x in self._timers):
                    self._resolved.pop(request_id, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("delivery task failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    def _timer(self, coro: Coroutine[Any, Any, Any], *, name: str, request_id: str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.request_id = request_id  # type: ignore[attr-defined]
        if request_id is not None:
            self._resolved.setdefault(request_id, asyncio.Event())
        self._timers.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._timers.discard(t)
            if request_id is not None and request_id not in self._tasks:
                self._resolved.pop(request_id, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("dispatch timer failed", exc_info=t.exception())

        task.add_done_callback(done)

    async def _pause(self, request_id: str, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the request became terminal meanwhile."""
        flag = self._resolved.setdefault(request_id, asyncio.Event())
        if flag.is_set():
            return True
        try:
            await asyncio.wait_for(flag.wait(), timeout=max(0.0, seconds))
            return True
        except TimeoutError:
            return False

    def _backoff(self) -> Backoff:
        return Backoff(initial=self.backoff_initial, cap=self.backoff_cap)

    # -- delivery --------------------------------------------------------------

    async def _deliver_all(self, tenant_id: str, request_id: str) -> None:
        view = await _stored(lambda: self.service.get(tenant_id=tenant_id, request_id=request_id,
                                                      with_deliveries=False))
        for channel in view.channels:
            connector = self.connectors.get(channel)
            if connector is None:
                continue
            targets = connector.targets_for(view)
            if not targets:
                log.debug("channel serves no target for this tenant",
                          extra={"request_id": request_id, "channel": channel, "tenant_id": tenant_id})
            opened = [await _stored(lambda t=target, c=channel: self.deliveries.open(  # type: ignore[misc]
                tenant_id=tenant_id, request_id=request_id, channel=c, target=t)) for target in targets]
            fallback = connector.fallback_targets(view)
            if fallback and opened:
                self._spawn(request_id, self._deliver_or_fall_back(connector, view, opened, fallback))
                continue
            for delivery in opened:
                self._spawn(request_id, self._deliver_one(connector, view, delivery))

    async def _deliver_or_fall_back(self, connector: Connector, view: RequestView, deliveries: list[Delivery],
                                    fallback: list[str]) -> None:
        """Deliver to ``deliveries`` (people's DMs); when not one of them could be posted, to ``fallback``."""
        sent = await asyncio.gather(*(self._deliver_one(connector, view, d) for d in deliveries))
        if not any(sent):
            await self._fall_back(connector, view, [d.target for d in deliveries], fallback)

    async def _fall_back(self, connector: Connector, view: RequestView, failed: list[str],
                         fallback: list[str]) -> None:
        """Post a still-pending request to ``fallback`` because every delivery to ``failed`` failed for good;
        each new delivery journals ``delivery_fallback`` (what it stands in for) as it is opened."""
        try:
            current = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
        except NotFoundError:
            return
        if current.terminal:
            return
        log.warning("no direct delivery succeeded: posting to the tenant's places instead",
                    extra={"request_id": view.id, "channel": connector.name, "failed": len(failed)})
        for target in fallback:
            delivery = await self.deliveries.open(tenant_id=view.tenant_id, request_id=view.id,
                                                  channel=connector.name, target=target)
            await self.deliveries.record(delivery, event="delivery_fallback", run_id=view.run_id,
                                         data={"instead_of": failed})
            self._spawn(view.id, self._deliver_one(connector, current, delivery))

    async def _deliver_one(self, connector: Connector, view: RequestView, delivery: Delivery,
                           *, first_attempt: int = 1) -> bool:
        """Post the request to the delivery's target; True once it is posted (False: failed for good, or
        the request ended first)."""
        shown: list[int] = []

        async def send(current: RequestView) -> dict[str, Any]:
            shown.append(current.votes_version)
            return await connector.deliver(current, target=delivery.target)

        sent = await self._send(view, delivery, send=send, first_attempt=first_attempt, while_pending=True)
        if sent is None:
            return False
        # Resolved while we were sending: the withdraw pass may have missed this message.
        after = await _stored(lambda: self.service.get(tenant_id=view.tenant_id, request_id=view.id,
                                                       with_deliveries=False))
        if after.terminal:
            await self._withdraw_one(connector, after, delivery, sent)
            return True
        if shown and after.votes_version != shown[-1]:
            # A vote came in while we were posting: the message shows an older tally.
            await self._show_votes_one(connector, after, delivery, sent)
        remind_after = connector.remind_after()
        # A request with reminders of its own is pinged on its schedule instead (core/escalation.py).
        if remind_after and not (after.schedule is not None and after.schedule.reminds):
            self._schedule_reminder(connector, after, delivery, remind_after)
        return True

    async def _send(self, view: RequestView, delivery: Delivery, *,
                    send: Callable[[RequestView], Awaitable[dict[str, Any] | None]], first_attempt: int,
                    while_pending: bool) -> dict[str, Any] | None:
        """Attempt ``send`` with the backoff until it succeeds (its ref), fails for good, or, ``while_pending``,
        the request is resolved (None for both). Each attempt is recorded on the delivery and journaled with it."""
        channel = delivery.channel
        backoff = self._backoff()
        attempt = first_attempt - 1
        while True:
            attempt += 1
            # Each store call here waits out an outage of the store (a task that died would leave a message
            # posted and not recorded, which the recovery pass would post again).
            try:
                current = await _stored(lambda: self.service.get(tenant_id=view.tenant_id, request_id=view.id,
                                                                 with_deliveries=False))
            except NotFoundError:
                return None
            if while_pending and current.terminal:
                await _stored(lambda: self.deliveries.update(delivery, status="withdrawn", attempts=attempt - 1))
                return None
            try:
                ref = await send(current)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error = _as_connector_error(e)
                message = _error_text(error)
                final = error.permanent or attempt >= self.max_attempts
                await _stored(lambda: self.deliveries.record(
                    delivery, event="delivery_failed", run_id=view.run_id,
                    data={"attempt": attempt, "error": message, "final": final,
                          **({"retry_after": error.retry_after} if error.retry_after is not None else {})},
                    status="failed" if final else "pending", attempts=attempt, last_error=message))
                log.warning("delivery failed", extra={"request_id": view.id, "channel": channel,
                                                      "attempt": attempt, "final": final, "error": message[:200]})
                self._count(channel, "failed" if final else "retry")
                if final:
                    return None
                pause = error.retry_after if error.retry_after is not None else backoff.next()
                if while_pending:
                    await self._pause(view.id, pause)  # cut short when the request is resolved
                else:
                    await asyncio.sleep(pause)
                continue
            ref = ref or {}
            self._count(channel, "sent")
            await _stored(lambda: self.deliveries.record(delivery, event="delivered", run_id=view.run_id,
                                                         data={"attempt": attempt}, status="sent", attempts=attempt,
                                                         last_error=None, ref=ref))
            return ref

    # -- callbacks -------------------------------------------------------------

    async def _call_back(self, tenant_id: str, request_id: str, *, first_attempt: int = 1) -> None:
        """POST a terminal request's result to its ``callback_url`` (core/callbacks.py), retried like a
        delivery; a callback recorded as sent or failed for good is never posted again."""
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        if view.callback_url is None or self.http is None:
            return
        url, host = view.callback_url, view.callback_host or ""
        delivery = await self.deliveries.open(tenant_id=tenant_id, request_id=request_id, channel=callbacks.CHANNEL,
                                              target=host)
        row = await self.deliveries.get(delivery)
        if row is None or row.status in ("sent", "failed"):
            return
        tenant = self.service.settings.tenant(tenant_id)
        settings = tenant.callbacks if tenant is not None else None
        http = self.http
        # A case created through the HITL-protocol endpoints is called back in the protocol's shape.
        case = await self.cases.get_case(tenant_id=tenant_id, request_id=request_id)

        async def send(current: RequestView) -> dict[str, Any]:
            payload = None if case is None else hitl.callback_payload(
                current, case, settings=self.service.settings, delivery_id=f"{current.id}:{callbacks.CHANNEL}")
            return await callbacks.send(http, view=current, url=url, settings=settings, log=log,
                                        hitl_payload=payload)

        await self._send(view, delivery, send=send, first_attempt=max(first_attempt, row.attempts + 1),
                         while_pending=False)

    # -- reminders -------------------------------------------------------------

    def _schedule_reminder(self, connector: Connector, view: RequestView, delivery: Delivery, after: float) -> None:
        if after >= view.expires_at - self.service.clock():
            return  # it would only remind of something about to expire
        self._timer(self._remind_later(connector, view, delivery, after), name=f"remind:{view.id}",
                    request_id=view.id)

    async def _remind_later(self, connector: Connector, view: RequestView, delivery: Delivery, after: float) -> None:
        if await self._pause(view.id, after) or self._closed:
            return
        # The send itself is work in flight; the sleep before it was not.
        self._spawn(view.id, self._remind_one(connector, view, delivery))

    async def _remind_one(self, connector: Connector, view: RequestView, delivery: Delivery, *,
                          scheduled: bool = False) -> None:
        """One reminder of a sent delivery: the connector's one (``remind_after_seconds``), or, ``scheduled``,
        one of the request's own schedule (which the sweeper decided once, for every instance)."""
        try:
            current = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
        except NotFoundError:
            return
        row = await self.deliveries.get(delivery)
        if current.terminal or row is None or row.status != "sent" or (
                row.reminded_at is not None and not scheduled):
            return
        # Marked first: a reminder is sent at most once, even if the send below fails.
        await self.deliveries.update(delivery, reminded_at=self.service.clock())
        ref = dict(row.ref)
        try:
            extra = await connector.remind(current, target=delivery.target, ref=_main_ref(ref))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            message = _error_text(_as_connector_error(e))
            log.warning("reminder failed", extra={"request_id": view.id, "channel": connector.name,
                                                  "error": message[:200]})
            await self.deliveries.record(delivery, event="reminder_failed", run_id=view.run_id,
                                         data={"error": message})
            return
        if extra:
            ref[REMINDER_REFS] = [*ref.get(REMINDER_REFS, []), extra]
        # The reminder's message joins the delivery's refs with its journal entry (withdrawn with the rest).
        await self.deliveries.record(delivery, event="reminded", run_id=view.run_id, data={},
                                     **({"ref": ref} if extra else {}))
        after = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
        if after.terminal and extra:
            # Resolved while the reminder was being posted: the withdraw pass may have missed it.
            await self._withdraw_one(connector, after, delivery, ref)

    # -- escalation steps and scheduled reminders (core/escalation.py) ---------

    async def _scheduled(self, tenant_id: str, request_id: str, *, reached: bool, remind: bool) -> None:
        """The sweeper reached escalation steps of this request or a reminder: post it where it now goes
        (its steps' people and channels: ``targets_for``) and had no delivery yet, or ping every place it
        was posted. What a crash cuts short here, the recovery pass delivers (the same targets)."""
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return
        if view.terminal:
            return
        rows = await self.deliveries.of_request(tenant_id=tenant_id, request_id=request_id)
        if reached:
            had = {(d.channel, d.target) for d in rows}
            for channel in view.channels:
                connector = self.connectors.get(channel)
                if connector is None:
                    continue
                for target in connector.targets_for(view):
                    if (channel, target) in had:
                        continue
                    delivery = await self.deliveries.open(tenant_id=tenant_id, request_id=request_id,
                                                          channel=channel, target=target)
                    self._spawn(request_id, self._deliver_one(connector, view, delivery))
        if remind:
            for row in rows:
                connector = self.connectors.get(row.channel)
                if connector is not None and row.status == "sent":
                    self._spawn(request_id, self._remind_one(connector, view, row, scheduled=True))

    # -- quorum tallies ----------------------------------------------------------

    async def _show_votes_all(self, tenant_id: str, request_id: str) -> None:
        """A vote was counted: every message still up shows the new tally (core/quorum.py)."""
        rows = [d for d in await self.deliveries.of_request(tenant_id=tenant_id, request_id=request_id)
                if d.status == "sent"]
        if not rows:
            return
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        for row in rows:
            connector = self.connectors.get(row.channel)
            if connector is not None:
                self._spawn(request_id, self._show_votes_one(connector, view, row, row.ref))

    async def _show_votes_one(self, connector: Connector, view: RequestView, delivery: Delivery,
                              ref: dict[str, Any]) -> None:
        """Edit one message to the tally as it stands, holding the same claim a withdrawal takes, so an
        outcome is never overwritten by an older tally. Once the claim is given back: a request resolved
        meanwhile is withdrawn here (its own withdraw pass found the message claimed), and a vote counted
        meanwhile is shown by another edit (its own edit found the message claimed and gave up)."""
        for _ in range(_TALLY_EDITS):
            if not await self.deliveries.claim_withdrawal(delivery, stale_after=self._claim_stale()):
                return
            shown = None
            try:
                current = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
                if not current.terminal:
                    await connector.show_votes(current, target=delivery.target, ref=_main_ref(ref))
                    shown = current.votes_version
            except asyncio.CancelledError:
                raise
            except Exception as e:
                # Not retried now: the next vote or the outcome edits the message again.
                log.warning("tally edit failed", extra={"request_id": view.id, "channel": connector.name,
                                                        "error": _error_text(_as_connector_error(e))[:200]})
            finally:
                with contextlib.suppress(Exception):
                    await self.deliveries.release_withdrawal(delivery)
            after = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
            if after.terminal:
                await self._withdraw_one(connector, after, delivery, ref)
                return
            if shown is None or after.votes_version == shown:
                return

    # -- withdraw --------------------------------------------------------------

    async def _withdraw_all(self, tenant_id: str, request_id: str) -> None:
        rows = [d for d in await self.deliveries.of_request(tenant_id=tenant_id, request_id=request_id)
                if d.status == "sent"]
        if not rows:
            return
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id)
        for row in rows:
            connector = self.connectors.get(row.channel)
            if connector is None:
                continue
            task = self._spawn(request_id, self._withdraw_one(connector, view, row, row.ref))
            self._withdrawals.add(task)
            task.add_done_callback(self._withdrawals.discard)

    async def _withdraw_one(self, connector: Connector, view: RequestView, delivery: Delivery,
                            ref: dict[str, Any]) -> None:
        if delivery.id in self._withdrawing:
            return
        self._withdrawing.add(delivery.id)
        try:
            # Several instances may see the same sent message end (the resolver's withdraw pass, the
            # sender's check after sending): the claim lets exactly one of them edit it.
            if not await self.deliveries.claim_withdrawal(delivery, stale_after=self._claim_stale()):
                return
            try:
                await self._withdraw_claimed(connector, view, delivery, ref)
            finally:
                # Failed for good, or stopped: a claim still held is given back (the message is still up).
                with contextlib.suppress(Exception):
                    await self.deliveries.release_withdrawal(delivery)
        finally:
            self._withdrawing.discard(delivery.id)

    def _claim_stale(self) -> float:
        """How long a withdraw claim lasts untouched: a live holder updates its row at least once per
        attempt, and waits at most ``backoff_cap`` between attempts."""
        return 2 * self.backoff_cap + 60

    async def _withdraw_claimed(self, connector: Connector, view: RequestView, delivery: Delivery,
                                ref: dict[str, Any]) -> None:
        """Edit every message of a claimed delivery, retried; ``withdrawn`` once done."""
        row = await self.deliveries.get(delivery)
        if row is None:
            return
        if row.ref:
            ref = row.ref  # the freshest, with any reminder refs
        refs = [_main_ref(ref), *ref.get(REMINDER_REFS, [])]
        backoff = self._backoff()
        for attempt in range(1, self.withdraw_attempts + 1):
            try:
                for one in refs:
                    await connector.withdraw(view, target=delivery.target, ref=one)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error = _as_connector_error(e)
                message = _error_text(error)
                final = error.permanent or attempt >= self.withdraw_attempts
                await self.deliveries.record(delivery, event="withdraw_failed", run_id=view.run_id,
                                             data={"attempt": attempt, "error": message, "final": final},
                                             last_error=message)
                log.warning("withdraw failed", extra={"request_id": view.id, "channel": connector.name,
                                                      "attempt": attempt, "error": message[:200]})
                if final:
                    return
                pause = backoff.next()
                await asyncio.sleep(error.retry_after if error.retry_after is not None else pause)
                continue
            await _stored(lambda: self.deliveries.record(delivery, event="withdrawn", run_id=view.run_id,
                                                         data={"status": view.status}, status="withdrawn",
                                                         last_error=None))
            self._count(connector.name, "withdrawn")
            return


def _stored(call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
    return while_unavailable(call, log=log, what="delivery")


def _main_ref(ref: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ref.items() if k != REMINDER_REFS}


def _as_connector_error(e: BaseException) -> ConnectorError:
    return e if isinstance(e, ConnectorError) else ConnectorError(f"{type(e).__name__}: {e}")


def _error_text(error: ConnectorError) -> str:
    # Shown on GET /v1/requests/{id} and journaled: no token or key may ride along.
    return redact(error.message)[:500]

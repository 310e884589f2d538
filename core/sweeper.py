"""The clock's side of the lifecycle: deadlines applied (expiry or the ``on_timeout`` policy), the sweeper
that applies them and moves escalations on, pruning of spent rows, and the hand-over and deletion of
sensitive answers. A part of :class:`~handraise.core.service.RequestService`, kept here so the service
module holds creating, waiting and answering."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from handraise.core import timeouts
from handraise.core.api import TIMEOUT_CHANNEL, RequestView
from handraise.core.errors import NotPendingError, UnavailableError

if TYPE_CHECKING:
    from handraise.core.service import RequestService

log = logging.getLogger("handraise.core.service")

__all__ = ["PRUNE_EVERY_SECONDS", "SweeperTask", "Sweeping"]

# The longest pause between two prunings of spent rows (``RequestService.prune_spent``).
PRUNE_EVERY_SECONDS = 60.0


class Sweeping:
    """Deadlines, sweeping and sensitive answers' retention (a base of RequestService: ``self`` is the service)."""

    async def expire(self: RequestService, *, tenant_id: str, request_id: str) -> bool:
        """Pending and past its deadline → its ``on_timeout`` policy applied. True when this call made the change."""
        return await self._expire(tenant_id=tenant_id, request_id=request_id) is not None

    async def _expire(self: RequestService, *, tenant_id: str, request_id: str, view: RequestView | None = None,
                      policy: str | dict[str, Any] | None = None) -> RequestView | None:
        """Apply the deadline: expired, or answered with the ``on_timeout`` policy's answer (``answered_via:
        "timeout"``, nobody as ``answered_by``). None when another writer won (a human's answer racing it
        is refused by the same compare-and-set). The policy comes from ``view``, or ``policy`` ("expire"
        spares the read), else from the store."""
        if view is None and policy != timeouts.EXPIRE:
            row = await self.store.get_request(tenant_id, request_id)
            if row is None:
                return None
            view = RequestView.from_row(row)
        applies, response = timeouts.answer_at_deadline(view.on_timeout if view is not None else timeouts.EXPIRE)
        now = self.clock()
        notify = self._resolved_notice(tenant_id, request_id, None)
        canonical = None
        if not applies:
            status, values = "expired", {"resolved_via": TIMEOUT_CHANNEL}
            journal: dict[str, Any] = {"tenant_id": tenant_id, "event": "expired", "request_id": request_id,
                                       "at": now}
        else:
            assert view is not None
            answer, data, canonical = self._answer_columns(view, response)
            data["on_timeout"] = timeouts.policy_name(view.on_timeout)
            status, values = "answered", {**answer, "resolved_via": TIMEOUT_CHANNEL, "resolved_by": None}
            # The journal's event is the status; "answered" by the policy says so in its data and channel.
            journal = {"tenant_id": tenant_id, "event": "answered", "request_id": request_id,
                       "channel": TIMEOUT_CHANNEL, "data": data, "at": now}
        async with self.store.transaction() as conn:
            done = await self.store.resolve(conn, request_id=request_id, tenant_id=tenant_id, status=status, now=now,
                                            require_unexpired=False, values=values, journal=journal, notify=notify)
        if done is None:
            return None
        log.info("request timed out", extra={"request_id": request_id, "outcome": status})
        row = done.row if canonical is None else {**done.row, "response_json": canonical}
        return self._resolved(RequestView.from_row(row, deliveries=done.deliveries), seq=done.entry.seq)

    async def sweep(self) -> int:
        """Expire every overdue request; the store stays true even when nobody waits.

        Also deletes sensitive answers no agent collected within ``limits.sensitive_retention_seconds``,
        and those handed out whose grace (``limits.sensitive_grace_seconds``) is over.
        """
        count = 0
        for request_id, tenant_id, policy in await self.store.overdue_requests(self.clock()):
            if await self._expire(tenant_id=tenant_id, request_id=request_id,
                                  policy=None if policy else timeouts.EXPIRE) is not None:
                count += 1
        now, limits = self.clock(), self.settings.limits
        held = await self.store.sealed.due(resolved_before=now - limits.sensitive_retention_seconds,
                                           delivered_before=now - limits.sensitive_grace_seconds)
        for request_id, tenant_id in held:
            row = await self.store.get_request(tenant_id, request_id)
            if row is not None:
                reason = "retention" if row["response_delivered_at"] is None else "grace_over"
                await self._purge(tenant_id=tenant_id, request_id=request_id, run_id=row["run_id"], reason=reason)
        # What this tick's deletions and those since the last left in the database's files goes now.
        await self.store.sealed.shred()
        await self.escalations.run_due()
        await self.prune_spent()
        return count

    async def prune_spent(self: RequestService, *, force: bool = False) -> dict[str, int]:
        """Delete what finished requests left behind past ``limits.spent_retention_seconds``.

        At most once a minute (or once per retention, when shorter) unless ``force``: nothing becomes
        prunable faster than that, and a sweep runs every second.
        """
        now, retention = self.clock(), self.settings.limits.spent_retention_seconds
        if not force and now - self._pruned_at < min(PRUNE_EVERY_SECONDS, retention):
            return {}
        self._pruned_at = now
        pruned = await self.store.prune_spent(before=now - retention, now=now)
        if any(pruned.values()):
            log.info("spent rows pruned", extra={"pruned": pruned})
        return pruned

    async def run_sweeper(self: RequestService, interval: float) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except UnavailableError:
                # The database is restarting or out of reach: one line a tick, not a traceback; the
                # next tick does what this one could not (nothing is lost by skipping).
                log.warning("sweep skipped: the store does not answer")
            except Exception:
                log.exception("sweep failed")
            await asyncio.sleep(interval)

    # -- handing the answer to the agent ---------------------------------------

    def response_delivered(self: RequestService, view: RequestView) -> asyncio.Task[None] | None:
        """A sensitive answer's bytes have left for the agent.

        The first hand-over keeps the answer for the agent's next call on the request (its
        connection may have died with the bytes in flight), for ``limits.sensitive_grace_seconds``
        at most; the next hand-over, an acknowledgement or the end of the grace shreds it.
        Runs as a task of its own, so a handler cancelled at shutdown cannot skip it;
        ``drain`` waits for every such task before the store closes.
        """
        if not (view.sensitive and view.has_response):
            return None
        task = asyncio.get_running_loop().create_task(self._handed_over(view))
        self._purges.add(task)
        task.add_done_callback(self._purges.discard)
        return task

    async def drain(self) -> None:
        """Finish the deletions under way (called before the store closes)."""
        while self._purges:
            await asyncio.gather(*list(self._purges), return_exceptions=True)

    async def _handed_over(self: RequestService, view: RequestView) -> None:
        first = await self.store.sealed.mark_delivered(request_id=view.id, tenant_id=view.tenant_id, now=self.clock())
        if not first or self.settings.limits.sensitive_grace_seconds == 0:
            await self._purge(tenant_id=view.tenant_id, request_id=view.id, run_id=view.run_id, reason="delivered")

    async def acknowledge(self: RequestService, *, tenant_id: str, request_id: str) -> RequestView:
        """The agent says it has the answer: a held sensitive answer is shredded now."""
        view = await self.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        if view.status != "answered":
            raise NotPendingError(f"the request is {view.status}: there is no answer to acknowledge")
        if view.sensitive:
            await self._purge(tenant_id=tenant_id, request_id=request_id, run_id=view.run_id, reason="acknowledged")
        return await self.get(tenant_id=tenant_id, request_id=request_id)

    async def _purge(self: RequestService, *, tenant_id: str, request_id: str, run_id: str | None, reason: str) -> None:
        # The shredding and its journal entry commit together: nobody sees the answer gone unjournaled.
        async with self.store.transaction() as conn:
            purged = await self.store.sealed.purge(conn, request_id=request_id, tenant_id=tenant_id)
            if purged:
                await self.store.append_journal(conn, tenant_id=tenant_id, event="response_deleted",
                                                request_id=request_id, run_id=run_id, data={"reason": reason})
        if purged:
            await self.store.checkpoint()
            log.info("sensitive response deleted", extra={"request_id": request_id, "reason": reason})


class SweeperTask:
    """The one task that runs the service's sweeper, started and stopped by the app (core/app.py).

    Kept on the app (``SWEEPER``) rather than in its cleanup context alone, so that a test that does the
    sweeper's work itself (a sweep on a moved clock, counting what it did) can stop it first: no tick of
    its own is then under way to do that work before the test's call and leave it nothing to do.
    """

    def __init__(self, service: RequestService, *, interval: float) -> None:
        self.service = service
        self.interval = interval
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.service.run_sweeper(self.interval), name="sweeper")

    async def stop(self) -> None:
        """Cancel the task and wait until it has ended: when this returns no tick is under way. Stopping a
        sweeper already stopped does nothing."""
        task, self.task = self.task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

"""The dispatcher's recovery pass: one instance at a time resumes what a stopped or crashed instance left
half done (deliveries never started or stalled in their retries, overdue reminders, callbacks, messages
it was withdrawing). A part of
:class:`~handraise.core.dispatch.Dispatcher`, kept here so the dispatch module holds delivering itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from handraise.core import callbacks
from handraise.core.errors import NotFoundError

if TYPE_CHECKING:
    from handraise.core.api import RequestView
    from handraise.core.connectors import Connector
    from handraise.core.deliveries import DeliveryRecord
    from handraise.core.dispatch import Dispatcher

log = logging.getLogger("handraise.core.dispatch")

__all__ = ["RECOVERY_LEADER", "Recovery"]

RECOVERY_LEADER = "dispatch-recovery"


class Recovery:
    """Resuming abandoned work (a base of Dispatcher: ``self`` is the dispatcher)."""


    async def _recovery_loop(self) -> None:
        first = True
        while True:
            try:
                if await self.leadership.take(RECOVERY_LEADER) and await self.leadership.alive(RECOVERY_LEADER):
                    await self.recover(startup=first)
                    first = False
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivery recovery failed")
            await asyncio.sleep(self.recovery_interval)

    async def recover(self: Dispatcher, *, startup: bool = False) -> int:
        """Resume what a stopped or crashed instance left undone; returns how many were resumed.

        For every pending request: deliveries never started or stalled in their retries are
        sent, and overdue reminders fire (a connector's, or a ping of the request's own schedule
        that a stopped instance decided but never sent). Work this instance is doing itself is left alone;
        with several instances only work older than a live instance's retry horizon counts
        as abandoned, so nothing is sent twice.
        """
        async with self._recover_lock:
            return await self._recover(startup=startup)

    async def _recover(self: Dispatcher, *, startup: bool) -> int:
        now = self.service.clock()
        # One process on SQLite: at startup, anything from before this start was abandoned;
        # what arrived since is this process's own (it may be committed but not yet published).
        alone = not self.shared and startup
        # A live instance touches a pending delivery at least every backoff_cap seconds.
        stale = 2 * self.backoff_cap + 30
        resumed = 0
        for tenant in self.service.settings.tenants:
            for view in await self.service.list(tenant_id=tenant.id, status="pending", limit=500):
                if view.id in self._tasks or (view.expires_at <= now):
                    continue
                rows = {(d.channel, d.target): d
                        for d in await self.deliveries.of_request(tenant_id=tenant.id, request_id=view.id)}
                for channel in view.channels:
                    connector = self.connectors.get(channel)
                    if connector is None:
                        continue
                    for target in connector.targets_for(view):
                        row = rows.get((channel, target))
                        if row is None:
                            if (view.created_at >= self._started_at if alone
                                    else now - view.created_at < stale):
                                continue  # its creator may be about to deliver it
                            delivery = await self.deliveries.open(tenant_id=tenant.id, request_id=view.id,
                                                                  channel=channel, target=target)
                            self._spawn(view.id, self._deliver_one(connector, view, delivery))
                            resumed += 1
                        elif row.status == "pending":
                            if (row.updated_at >= self._started_at if alone
                                    else now - row.updated_at < stale):
                                continue
                            self._spawn(view.id, self._deliver_one(connector, view, row,
                                                                   first_attempt=row.attempts + 1))
                            resumed += 1
                        elif row.status == "sent" and view.schedule is not None and view.schedule.reminds:
                            # The request's own schedule: a ping the sweeper decided that this place never got
                            # (its instance stopped in between), once older than a live instance's horizon.
                            ping = view.schedule.last_ping_at()
                            if (ping is not None and row.created_at < ping
                                    and (row.reminded_at is None or row.reminded_at < ping)
                                    and ((ping < self._started_at) if alone else (now >= ping + stale))):
                                self._spawn(view.id, self._remind_one(connector, view, row, scheduled=True))
                                resumed += 1
                        elif row.status == "sent" and row.reminded_at is None and connector.remind_after():
                            due = row.updated_at + (connector.remind_after() or 0)
                            if alone:
                                overdue = row.updated_at < self._started_at and now >= due
                            else:
                                overdue = now >= due + stale
                            if overdue:
                                self._spawn(view.id, self._remind_one(connector, view, row))
                                resumed += 1
                    resumed += await self._recover_fallback(connector, view, rows, alone=alone, stale=stale, now=now)
        resumed += await self._recover_callbacks(alone=alone, stale=stale, now=now)
        resumed += await self._recover_withdrawals()
        if resumed:
            log.info("deliveries resumed", extra={"count": resumed})
        return resumed

    async def _recover_fallback(self: Dispatcher, connector: Connector, view: RequestView,
                                rows: dict[tuple[str, str], DeliveryRecord], *, alone: bool, stale: float,
                                now: float) -> int:
        """A request whose every direct delivery failed for good, with no delivery to its fallback places
        yet (an instance stopped between the two): the fallback is made now."""
        fallback = connector.fallback_targets(view)
        if not fallback or any((connector.name, place) in rows for place in fallback):
            return 0
        failed = [rows.get((connector.name, t)) for t in connector.targets_for(view)]
        if not failed or any(row is None or row.status != "failed" for row in failed):
            return 0
        latest = max(row.updated_at for row in failed if row is not None)
        if (latest >= self._started_at) if alone else (now - latest < stale):
            return 0  # the instance that saw the last one fail may be falling back right now
        direct = [row.target for row in failed if row is not None]
        await self._fall_back(connector, view, direct, fallback)
        return 1

    async def _recover_callbacks(self: Dispatcher, *, alone: bool, stale: float, now: float) -> int:
        """Callbacks of terminal requests that no live instance is sending: resumed from their last attempt."""
        if self.http is None:
            return 0
        resumed = 0
        for request_id, tenant_id, resolved_at in await self.deliveries.callbacks_due():
            if request_id in self._tasks:
                continue
            rows = [d for d in await self.deliveries.of_request(tenant_id=tenant_id, request_id=request_id)
                    if d.channel == callbacks.CHANNEL]
            touched = max([resolved_at or 0.0, *(d.updated_at for d in rows)])
            if (touched >= self._started_at) if alone else (now - touched < stale):
                continue  # its resolver may be posting it right now
            self._spawn(request_id, self._call_back(tenant_id, request_id))
            resumed += 1
        return resumed

    async def _recover_withdrawals(self: Dispatcher) -> int:
        """Messages an instance was withdrawing (or editing to a new tally) when it died: their delivery stays
        ``withdrawing`` and no event will bring them back. One untouched for longer than a live holder ever
        leaves it is taken over with a compare-and-set (journaled ``withdrawal_reclaimed``), so exactly one
        instance finishes it: withdrawn if its request is terminal, else given back (``sent``) and its tally
        shown."""
        resumed = 0
        for row in await self.deliveries.abandoned_withdrawals(stale_after=self._claim_stale()):
            connector = self.connectors.get(row.channel)
            if connector is None or row.id in self._withdrawing:
                continue  # a channel this instance does not run, or its own withdrawal in flight
            try:
                view = await self.service.get(tenant_id=row.tenant_id, request_id=row.request_id,
                                              with_deliveries=False)
            except NotFoundError:
                continue
            if not await self.deliveries.reclaim_withdrawal(row, stale_after=self._claim_stale(),
                                                            run_id=view.run_id, since=row.updated_at):
                continue  # another instance took it over first
            self._spawn(view.id, self._finish_withdrawal(connector, view, row))
            resumed += 1
        return resumed

    async def _finish_withdrawal(self: Dispatcher, connector: Connector, view: RequestView,
                                 row: DeliveryRecord) -> None:
        self._withdrawing.add(row.id)
        try:
            if view.terminal:
                await self._withdraw_claimed(connector, view, row, row.ref)
        finally:
            # Withdrawn (then this changes nothing), failed for good, or a pending request's tally edit:
            # the claim is given back.
            with contextlib.suppress(Exception):
                await self.deliveries.release_withdrawal(row)
            self._withdrawing.discard(row.id)
        if not view.terminal:
            await self._show_votes_one(connector, view, row, row.ref)

"""Delivery of requests to connectors: immediately on creation, retried, withdrawn when terminal.

Each (request, channel, target) is one delivery row; attempts and outcomes are
journaled and shown on the request as ``deliveries``. Every delivery runs as its
own task, so a failing channel never delays another. Only the instance where an
event happened acts on it (``Event.local``), so deliveries are not duplicated
across instances.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

from core.api import RequestView
from core.connectors import Connector
from core.errors import ConnectorError, NotFoundError
from core.events import REQUEST_CREATED, REQUEST_RESOLVED, Event
from core.service import RequestService

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, *, service: RequestService, connectors: dict[str, Connector],
                 max_attempts: int = 8, backoff_initial: float = 0.5, backoff_cap: float = 30.0) -> None:
        self.service = service
        self.connectors = connectors
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self._tasks: dict[str, set[asyncio.Task[Any]]] = {}
        self._closed = False

    def start(self) -> None:
        self.service.bus.add_listener(self._on_event)

    async def stop(self) -> None:
        self._closed = True
        tasks = [t for ts in self._tasks.values() for t in ts]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def idle(self) -> None:
        """Wait until no delivery work is in flight (tests and graceful shutdown)."""
        while True:
            tasks = [t for ts in self._tasks.values() for t in ts if not t.done()]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    def _on_event(self, ev: Event) -> None:
        if not ev.local or self._closed:
            return
        if ev.type == REQUEST_CREATED:
            self._spawn(ev.object_id, self._deliver_all(ev.tenant_id, ev.object_id))
        elif ev.type == REQUEST_RESOLVED:
            self._spawn(ev.object_id, self._withdraw_all(ev.tenant_id, ev.object_id))

    def _spawn(self, request_id: str, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        bucket = self._tasks.setdefault(request_id, set())
        bucket.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            bucket.discard(t)
            if not bucket and self._tasks.get(request_id) is bucket:
                del self._tasks[request_id]
            if not t.cancelled() and t.exception() is not None:
                log.error("delivery task failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    async def _deliver_all(self, tenant_id: str, request_id: str) -> None:
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        for channel in view.channels:
            connector = self.connectors.get(channel)
            if connector is None:
                continue
            for target in connector.targets(tenant_id):
                delivery_id = await self.service.store.upsert_delivery(
                    tenant_id=tenant_id, request_id=request_id, channel=channel, target=target,
                    now=self.service.clock())
                self._spawn(request_id, self._deliver_one(connector, view, target, delivery_id))

    async def _deliver_one(self, connector: Connector, view: RequestView, target: str, delivery_id: int) -> None:
        store = self.service.store
        delay = self.backoff_initial
        for attempt in range(1, self.max_attempts + 1):
            current = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
            if current.terminal:
                await store.update_delivery(delivery_id, status="withdrawn", attempts=attempt - 1)
                return
            try:
                ref = await connector.deliver(current, target=target)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error = e if isinstance(e, ConnectorError) else ConnectorError(f"{type(e).__name__}: {e}")
                permanent = error.permanent or attempt == self.max_attempts
                await store.update_delivery(delivery_id, status="failed" if permanent else "pending",
                                            attempts=attempt, last_error=error.message[:500])
                await self.service.journal(
                    tenant_id=view.tenant_id, event="delivery_failed", request_id=view.id, run_id=view.run_id,
                    channel=connector.name,
                    data={"target": target, "attempt": attempt, "error": error.message[:500],
                          "final": permanent})
                log.warning("delivery failed", extra={"request_id": view.id, "channel": connector.name,
                                                      "attempt": attempt, "error": error.message[:200]})
                if permanent:
                    return
                wait = error.retry_after if error.retry_after is not None else delay * (0.5 + random.random() / 2)
                delay = min(delay * 2, self.backoff_cap)
                await asyncio.sleep(wait)
                continue
            await store.update_delivery(delivery_id, status="sent", attempts=attempt, last_error=None,
                                        ref_json=json.dumps(ref or {}))
            await self.service.journal(tenant_id=view.tenant_id, event="delivered", request_id=view.id,
                                       run_id=view.run_id, channel=connector.name,
                                       data={"target": target, "attempt": attempt})
            # Resolved while we were sending: the withdraw pass may have missed this message.
            after = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
            if after.terminal:
                await self._withdraw_one(connector, after, target, delivery_id, ref or {})
                return
            remind_after = connector.remind_after()
            if remind_after:
                self._spawn(view.id, self._remind(connector, view, target, delivery_id, ref or {}, remind_after))
            return

    async def _remind(self, connector: Connector, view: RequestView, target: str, delivery_id: int,
                      ref: dict[str, Any], after: float) -> None:
        deadline = view.expires_at - self.service.clock()
        if after >= deadline:
            return
        await asyncio.sleep(after)
        try:
            current = await self.service.get(tenant_id=view.tenant_id, request_id=view.id, with_deliveries=False)
        except NotFoundError:
            return
        if current.terminal:
            return
        try:
            await connector.remind(current, target=target, ref=ref)
        except Exception as e:
            log.warning("reminder failed", extra={"request_id": view.id, "channel": connector.name,
                                                  "error": str(e)[:200]})
            return
        await self.service.store.update_delivery(delivery_id, reminded_at=self.service.clock())
        await self.service.journal(tenant_id=view.tenant_id, event="reminded", request_id=view.id,
                                   run_id=view.run_id, channel=connector.name, data={"target": target})

    async def _withdraw_all(self, tenant_id: str, request_id: str) -> None:
        view = await self.service.get(tenant_id=tenant_id, request_id=request_id)
        rows = await self.service.store.deliveries_for(tenant_id, request_id)
        for row in rows:
            connector = self.connectors.get(row["channel"])
            if connector is None or row["status"] != "sent":
                continue
            ref = json.loads(row["ref_json"]) if row["ref_json"] else {}
            self._spawn(request_id, self._withdraw_one(connector, view, row["target"], row["id"], ref))

    async def _withdraw_one(self, connector: Connector, view: RequestView, target: str, delivery_id: int,
                            ref: dict[str, Any]) -> None:
        delay = self.backoff_initial
        for attempt in range(1, 4):
            try:
                await connector.withdraw(view, target=target, ref=ref)
                await self.service.store.update_delivery(delivery_id, status="withdrawn")
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                retry_after = e.retry_after if isinstance(e, ConnectorError) else None
                log.warning("withdraw failed", extra={"request_id": view.id, "channel": connector.name,
                                                      "attempt": attempt, "error": str(e)[:200]})
                if isinstance(e, ConnectorError) and e.permanent:
                    return
                await asyncio.sleep(retry_after if retry_after is not None else delay)
                delay = min(delay * 2, self.backoff_cap)

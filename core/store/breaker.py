"""Failing fast while PostgreSQL is gone: once a call finds the server lost (refused, reset, shutting
down, or no answer within ``[storage] connect_timeout_seconds``), new calls are refused at once with
503 ``unavailable`` and Retry-After instead of each waiting for a connection, until a probe gets one.

The probe is a caller: at most one call per ``probe_every`` seconds is let through to try the server
(the sweeper's tick is one, so an idle instance finds the server back too); it closes the breaker
when it succeeds. Agents' parked waits do not touch the store and keep waiting; the event listener
re-reads them when it reconnects (core/events.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from handraise.core.errors import UnavailableError
from handraise.core.store.units import server_lost

log = logging.getLogger(__name__)

__all__ = ["StoreBreaker"]


class StoreBreaker:
    """Open (``lost_since`` set) from the first call that found the server gone to the first that reached it."""

    def __init__(self, *, probe_every: float = 1.0, on_lost: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.probe_every = probe_every
        # Called once per outage, when it opens: the pools' connections to the old server are stale.
        self.on_lost = on_lost
        self.clock = clock
        self.lost_since: float | None = None
        self._next_probe = 0.0
        # Calls refused without trying, over this process's life (metrics, tests).
        self.refused = 0

    @property
    def retry_after(self) -> int:
        return max(1, math.ceil(self.probe_every))

    def admit(self) -> None:
        """Before a call while open: let it through as the probe when one is due, else refuse it at once."""
        if self.lost_since is None:
            return
        now = self.clock()
        if now >= self._next_probe:
            self._next_probe = now + self.probe_every
            return
        self.refused += 1
        raise UnavailableError("the store does not answer (PostgreSQL is away; retry)", retry_after=self.retry_after)

    def failed(self, error: BaseException) -> None:
        """A call failed with ``error``: open when it says the server is gone (not for a call's own fault)."""
        if not server_lost(error.__cause__ if isinstance(error, UnavailableError) else error):
            return
        now = self.clock()
        self._next_probe = now + self.probe_every
        if self.lost_since is None:
            self.lost_since = now
            log.warning("store: PostgreSQL is gone; calls fail fast until it answers again")
            if self.on_lost is not None:
                self.on_lost()

    def succeeded(self) -> None:
        """A call reached the server: closed."""
        if self.lost_since is not None:
            log.warning("store: PostgreSQL answers again after %.1f s", self.clock() - self.lost_since)
            self.lost_since = None

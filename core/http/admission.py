"""Backpressure: a write is admitted only while the time it would queue stays under a target. Past it the
write is refused at once with 503 ``overloaded`` and ``Retry-After``, before it reaches the service (nothing
is half done), instead of joining a queue that turns into multi-second answers for everyone.

Everything the estimate uses is measured here, over the last ``SAMPLES`` writes completed:

- the drain rate, writes completed per second of *busy* time (time with a write in flight), counting the
  time since the last completion: idle gaps do not make a fast store look slow, and a store that stalls
  drains at a falling rate while nothing completes;
- the writes in flight on average over that busy time, and a write's own service time, measured on
  writes that had none ahead.

Rate × service time is how many writes the store actually worked on side by side. When that falls short
of the writes that were in flight, the rest were waiting: the store is saturated at the measured rate, and
a write admitted now leaves after the ``n`` in flight and itself, ``(n + 1) / rate`` (Little's law), of
which its own service time is not queueing. So a store that takes one write at a time (a journal head)
sheds at ``target / service time`` writes ahead, while writes that are slow but run side by side (a
webhook calling its messenger) are not shed for being slow. A count of writes in flight stays as a hard
cap; waits and reads are never counted, never shed. Retry-After spreads the refused over the time the
store needs for them and the writes ahead (``retry_after_seconds``), so they do not all come back at once.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterator

from handraise.core.errors import OverloadedError
from handraise.core.schema.validation import plural

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Machine traffic, which retries after a Retry-After: the API and messengers' webhooks. A person's
# form or inbox post is never shed (a browser would show them a JSON error page).
_BOUNDED = ("/v1/", "/api/", "/bots/")
# Requests that wait for a human after their write: the handler admits only the write itself
# (``WriteAdmission.admit``), so parked agents never hold a place that fresh writes need.
_ADMITTED_BY_HANDLER = ("/v1/human-feedback",)
# Completions the drain rate is measured over: enough to smooth one slow write out, few enough that the
# estimate follows the store within a fraction of a second at tens of writes a second.
SAMPLES = 32
# Weight of the newest sample in the service time's moving average.
_SERVICE_WEIGHT = 0.25
# The store counts as saturated when it worked on fewer writes side by side than this share of those in
# flight (the rest waited); measurement noise on an unsaturated store stays above it.
_SATURATED = 0.9
# Retry-After is whole seconds (RFC 9110); a drain estimate longer than this is not worth promising.
MAX_RETRY_AFTER = 60
# Why a write was shed (the metrics' label): the count of writes in flight, or the time it would queue.
BY_COUNT, BY_QUEUE = "count", "queue"


class WriteAdmission:
    """Admits writes while their expected queueing stays under ``max_queue_seconds`` (0: no time bound)
    and fewer than ``limit`` are in flight (0: no count bound). ``clock`` is injectable for tests."""

    def __init__(self, *, limit: int, retry_after: int, max_queue_seconds: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.max_queue_seconds = max_queue_seconds
        # The least Retry-After sent (limits.overload_retry_after_seconds), and the one sent before any
        # drain rate is measured.
        self.retry_after = retry_after
        self.clock = clock
        # Called with BY_COUNT or BY_QUEUE for each write shed (the metrics' counter).
        self.on_shed: Callable[[str], None] | None = None
        self.in_flight = 0
        self.shed = 0  # refused since start, whatever the reason
        self.shed_by = {BY_COUNT: 0, BY_QUEUE: 0}
        # Seconds of a write with none ahead (moving average); None until one completed.
        self.service_seconds: float | None = None
        self._busy = 0.0                    # seconds so far with a write in flight (the busy clock)
        self._load = 0.0                    # the integral of writes in flight over the busy clock
        self._mark: float | None = None     # when both were last brought up to date
        # (busy clock, load integral) at each recent completion.
        self._done: deque[tuple[float, float]] = deque(maxlen=SAMPLES)
        self._refused = 0.0                 # writes shed in about the last second (decaying), coming back
        self._refused_at = 0.0

    # -- measurement -------------------------------------------------------------------------

    def _now(self) -> tuple[float, float]:
        now = self.clock()
        if self.in_flight and self._mark is not None:
            elapsed = max(0.0, now - self._mark)
            self._busy += elapsed
            self._load += elapsed * self.in_flight
        self._mark = now
        return self._busy, self._load

    def drain_rate(self) -> float | None:
        """Writes completed per busy second over the recent completions, counting the time since the last
        one (a stalled store drains at a falling rate); None until two have completed."""
        return self._measure()[0]

    def _measure(self) -> tuple[float | None, float]:
        """(drain rate or None, writes in flight on average) over the recent completions and since."""
        busy, load = self._now()
        if len(self._done) < 2:
            return None, 0.0
        busy0, load0 = self._done[0]
        span = busy - busy0
        if span <= 0:
            return None, 0.0
        return (len(self._done) - 1) / span, (load - load0) / span

    def expected_wait(self) -> float:
        """Seconds a write admitted now would queue behind the ones in flight: 0 with none ahead, before
        the rate is measured, or while the store keeps up with every write in flight."""
        rate, in_flight = self._measure()
        if not self.in_flight or not rate:
            return 0.0
        service = self.service_seconds or 0.0
        if rate * service >= _SATURATED * in_flight:
            return 0.0
        return max(0.0, (self.in_flight + 1) / rate - service)

    # -- admission ---------------------------------------------------------------------------

    def retry_after_seconds(self) -> int:
        """When to come back: the writes in flight and those refused in about the last second (they come
        back too) over the drain rate, in whole seconds; at least ``retry_after``, at most 60. Refused
        callers are spread over the time the store needs for them instead of all returning in a second."""
        rate = self.drain_rate()
        if not rate:
            return self.retry_after
        ahead = self.in_flight + self._refused * math.exp(-(self.clock() - self._refused_at))
        return min(MAX_RETRY_AFTER, max(self.retry_after, math.ceil(ahead / rate)))

    def _refuse(self, reason: str, message: str) -> OverloadedError:
        self.shed += 1
        self.shed_by[reason] += 1
        if self.on_shed is not None:
            self.on_shed(reason)
        now = self.clock()
        self._refused = 1 + self._refused * math.exp(-(now - self._refused_at))
        self._refused_at = now
        retry_after = self.retry_after_seconds()
        return OverloadedError(f"{message}; retry after {retry_after} s", retry_after=retry_after)

    def bounds(self, method: str, path: str) -> bool:
        """Whether a request is a write this bound admits (machine traffic, not admitted by its handler)."""
        return method in _WRITES and path.startswith(_BOUNDED) and not path.startswith(_ADMITTED_BY_HANDLER)

    def enter(self) -> tuple[float, bool]:
        """Admit one write, or raise ``OverloadedError``; hand what it returns to ``leave`` once the write is done."""
        if self.limit and self.in_flight >= self.limit:
            raise self._refuse(BY_COUNT, f"this instance has {plural(self.limit, 'write')} in flight")
        # With none in flight a write queues behind nothing (expected_wait's own answer, without the arithmetic).
        if self.max_queue_seconds and self.in_flight and (wait := self.expected_wait()) > self.max_queue_seconds:
            raise self._refuse(BY_QUEUE, f"writes queue here for about {wait * 1000:.0f} ms (bound "
                               f"{self.max_queue_seconds * 1000:.0f} ms)")
        solo = self.in_flight == 0
        started, _ = self._now()
        self.in_flight += 1
        return started, solo

    def leave(self, admitted: tuple[float, bool]) -> None:
        # A write that failed left the queue all the same: it counts towards the rate.
        started, solo = admitted
        done = self._now()
        self._done.append(done)
        self.in_flight -= 1
        if solo:
            took = done[0] - started
            self.service_seconds = took if self.service_seconds is None else (
                self.service_seconds + _SERVICE_WEIGHT * (took - self.service_seconds))

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        admitted = self.enter()
        try:
            yield
        finally:
            self.leave(admitted)

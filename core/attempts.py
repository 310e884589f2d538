"""Attempt limits: invalid answers counted per principal (a key, a form link, a chat user) over a
sliding window; past the limit the principal hears 429 with Retry-After until old failures age out.

Counted in this process only: several instances each allow the limit (documented), which still
bounds a guesser to a few tries a minute instead of hundreds a second.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from handraise.core.errors import RateLimitedError

# Principals tracked at once; the oldest is forgotten first (a flood of fresh links cannot grow memory).
MAX_TRACKED = 50_000


class AttemptLimiter:
    def __init__(self, *, max_failures: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window = window
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, principal: str, now: float) -> deque[float] | None:
        times = self._failures.get(principal)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[principal]
            return None
        return times

    def check(self, principal: str) -> None:
        """RateLimitedError (429, ``retry_after`` seconds) while ``principal`` is over its limit."""
        now = self._clock()
        times = self._recent(principal, now)
        if times is not None and len(times) >= self.max_failures:
            retry_after = max(1, math.ceil(times[0] + self.window - now))
            raise RateLimitedError(f"too many refused attempts; try again in {retry_after} s",
                                   retry_after=retry_after)

    def failed(self, principal: str) -> None:
        now = self._clock()
        times = self._recent(principal, now)
        if times is None:
            times = self._failures[principal] = deque()
            if len(self._failures) > MAX_TRACKED:
                self._failures.popitem(last=False)
        times.append(now)

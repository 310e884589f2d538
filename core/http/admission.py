"""Backpressure: a bound on the writes one instance works on at once. Past it a write is refused at once
with 503 ``overloaded`` and ``Retry-After``, before it reaches the service (nothing is half done), instead
of joining a queue that turns into multi-second answers for everyone."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web

from handraise.core.errors import OverloadedError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Machine traffic, which retries after a Retry-After: the API and messengers' webhooks. A person's
# form or inbox post is never shed (a browser would show them a JSON error page).
_BOUNDED = ("/v1/", "/api/", "/bots/")
# Requests that wait for a human after their write: the handler admits only the write itself
# (``WriteAdmission.admit``), so parked agents never hold a place that fresh writes need.
_ADMITTED_BY_HANDLER = ("/v1/human-feedback",)


class WriteAdmission:
    """Counts the writes in flight; ``limit`` 0 admits everything."""

    def __init__(self, *, limit: int, retry_after: int) -> None:
        self.limit = limit
        self.retry_after = retry_after
        self.in_flight = 0
        self.shed = 0  # refused since start (the metrics)

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        if self.limit and self.in_flight >= self.limit:
            self.shed += 1
            raise OverloadedError(f"this instance has {self.limit} writes in flight; retry after "
                                  f"{self.retry_after} s", retry_after=self.retry_after)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        @web.middleware
        async def admission(request: web.Request, handler: Handler) -> web.StreamResponse:
            path = request.path
            if (request.method not in _WRITES or not path.startswith(_BOUNDED)
                    or path.startswith(_ADMITTED_BY_HANDLER)):
                return await handler(request)
            with self.admit():
                return await handler(request)

        return admission

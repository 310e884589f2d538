"""The client's calls without I/O: each flow is a generator that yields ``Call``s and ``Sleep``s.

The sync and the async client drive the same flows, so retries, re-attaching and error mapping are
written once. A driver sends back a ``Reply`` for a ``Call`` or throws ``TransportFailure`` into
the flow when the call never got an HTTP answer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from handraise.client.errors import (
    AnswerDeleted,
    Cancelled,
    Expired,
    HandraiseClientError,
    ServerUnavailable,
    error_from_reply,
)
from handraise.core.api import RequestRecord

@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, str] | None = None
    # Seconds to wait for the reply; None: the client's default.
    read_timeout: float | None = None


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class TransportFailure(Exception):
    """No HTTP answer. ``maybe_sent``: the server may have acted on the call (not just a refused connect)."""

    def __init__(self, message: str, *, maybe_sent: bool) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


Step = Call | Sleep
Flow = Generator[Step, Reply, Any]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded, jittered exponential backoff for 5xx, 429 and connection failures."""

    attempts: int = 5
    base_seconds: float = 0.2
    cap_seconds: float = 5.0
    # How long past a request's deadline a waiting call keeps trying to learn the outcome from a
    # server that does not answer: the server decides expiry, and a client that gave up at the
    # deadline would miss an answer given in its last second.
    grace_seconds: float = 30.0

    def delay(self, attempt: int, *, retry_after: str | None = None) -> float:
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.cap_seconds * 4)
            except ValueError:
                pass
        high = min(self.cap_seconds, self.base_seconds * (2 ** attempt))
        return random.uniform(high / 2, high)


class _Transient(Exception):
    def __init__(self, error: HandraiseClientError, *, maybe_sent: bool = True, retry_after: str | None = None):
        super().__init__(str(error))
        self.error = error
        self.maybe_sent = maybe_sent
        self.retry_after = retry_after


def _checked(reply: Reply) -> Any:
    """The body of a 2xx reply; raises the mapped error, or ``_Transient`` for 5xx and 429."""
    if 200 <= reply.status < 300:
        return reply.body
    error = error_from_reply(reply.status, reply.body)
    if reply.status >= 500 or reply.status == 429:
        raise _Transient(error, retry_after=reply.headers.get("retry-after"))
    raise error


def _send(call: Call) -> Generator[Step, Reply, Reply]:
    try:
        return (yield call)
    except TransportFailure as e:
        raise _Transient(ServerUnavailable(f"cannot reach the server: {e}", status=None, code="unreachable"),
                         maybe_sent=e.maybe_sent) from None


def call_flow(call: Call, *, policy: RetryPolicy, idempotent: bool = True) -> Flow:
    """One call, retried while the server is unavailable; a call that may have acted is retried only if idempotent."""
    attempt = 0
    while True:
        try:
            return _checked((yield from _send(call)))
        except _Transient as t:
            attempt += 1
            if attempt >= policy.attempts or (t.maybe_sent and not idempotent):
                raise t.error from None
            yield Sleep(policy.delay(attempt - 1, retry_after=t.retry_after))


def settle_flow(attach: Call, *, timeout_seconds: float, policy: RetryPolicy, wait_chunk: float,
                clock: Any = time.time) -> Flow:
    """Attach to a request (``attach``: its idempotent create, or a read) and wait until it is terminal.

    Any failure to reach the server, at attach or while waiting, is retried with backoff until the
    request's own deadline (plus a grace). Each retry attaches again: the identical create is
    answered with the existing request as it stands, so a dropped connection or a server restart
    re-attaches, and no request is created twice.
    """
    deadline = clock() + timeout_seconds + policy.grace_seconds
    record: RequestRecord | None = None
    failures = 0
    while True:
        try:
            if record is None:
                record = RequestRecord.model_validate(_checked((yield from _send(attach))))
                deadline = max(deadline, record.expires_at.timestamp() + policy.grace_seconds)
            while not record.terminal:
                # At least a second: a client clock ahead of the server's must not spin on instant replies.
                chunk = max(1.0, min(wait_chunk, record.expires_at.timestamp() - clock() + 1.0))
                record = RequestRecord.model_validate(_checked((yield from _send(Call(
                    "GET", f"/v1/requests/{record.id}/wait", params={"timeout": f"{chunk:.3f}"},
                    read_timeout=chunk + 30.0)))))
                failures = 0
            if record.sensitive and record.has_response:
                yield from _acknowledge(record)
            return record
        except _Transient as t:
            pause = policy.delay(min(failures, 16), retry_after=t.retry_after)
            failures += 1
            if clock() + pause > deadline:
                raise t.error from None
            yield Sleep(pause)
            record = None


def _acknowledge(record: RequestRecord) -> Generator[Step, Reply, None]:
    """A sensitive answer is in hand: the server deletes it now instead of keeping it for a retry."""
    try:
        yield from _send(Call("POST", f"/v1/requests/{record.id}/ack"))
    except _Transient:
        pass  # unreachable now: the server deletes it when its short grace ends


def outcome(record: RequestRecord) -> RequestRecord:
    """The answered request, or the exception that says how it ended instead."""
    if record.status == "expired":
        raise Expired(f"request {record.unique_id!r} expired unanswered", request=record)
    if record.status == "cancelled":
        who = f" by {record.cancelled_by}" if record.cancelled_by else ""
        raise Cancelled(f"request {record.unique_id!r} was cancelled{who}", request=record)
    if record.status == "answered" and not record.has_response:
        raise AnswerDeleted(f"request {record.unique_id!r} was answered, but its sensitive answer was already "
                            "handed over once and is deleted", request=record)
    return record

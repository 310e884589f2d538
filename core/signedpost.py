"""Signed JSON POSTs: the one way Handraise calls a URL it was given (``[[webhooks]]``, a request's ``callback_url``).

    X-Handraise-Timestamp: <unix seconds>
    X-Handraise-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>

A receiver recomputes it over the raw body, compares in constant time, and refuses a
timestamp more than 5 minutes from its clock (the replay window); ``verify_signature``
does all three. A failure raises ``ConnectorError``: retryable for 5xx, 408, 425, 429 and
network errors (honouring ``Retry-After``), permanent for any other status.

The receiver is an outsider, so one exchange is bounded: at most ``MAX_EXCHANGE_SECONDS`` (or the
endpoint's shorter ``timeout``) from connecting to the last byte read, and at most
``MAX_RESPONSE_BYTES`` of its body read. Its status is its answer: a 2xx with an endless body is
delivered, and the connection is closed rather than drained.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from handraise.core.api import RequestView, url_host
from handraise.core.errors import ConnectorError

SIGNATURE_HEADER = "X-Handraise-Signature"
TIMESTAMP_HEADER = "X-Handraise-Timestamp"
EVENT_HEADER = "X-Handraise-Event"
DELIVERY_HEADER = "X-Handraise-Delivery"
REPLAY_WINDOW_SECONDS = 300
CREATED = "request.created"
RESOLVED = "request.resolved"
# A vote on a quorum request (core/quorum.py); webhooks receive it when they ask for it.
VOTED = "request.voted"
# Worth another try: the receiver is busy, rate-limiting or briefly down. Any other 4xx is final.
_RETRYABLE = frozenset({408, 425, 429})
# The most of a receiver's body ever read. Nothing in it is used (the status is the answer); a short
# reply ("ok", "{}") is read to its end only so that a kept-alive connection can carry the next POST.
# Anything longer is left unread and its connection closed: a receiver answering 1 GB costs us 4 KiB.
MAX_RESPONSE_BYTES = 4096
# The longest one exchange may take, whatever an endpoint's timeout_seconds says (configuration allows
# up to this): connect, send, the response's headers and the bounded read of its body, all together.
MAX_EXCHANGE_SECONDS = 60.0


def envelope(event: str, request: RequestView, *, delivery_id: str) -> dict[str, Any]:
    """The body every signed POST carries: the event, a delivery id receivers dedupe on, the request."""
    body = request.event_json()  # never a sensitive response
    body.pop("deliveries", None)
    return {"event": event, "delivery_id": delivery_id, "tenant_id": request.tenant_id, "request": body}


async def post_signed(http: aiohttp.ClientSession, *, url: str, secret: str, payload: dict[str, Any],
                      timeout: float, log: logging.Logger, user_agent: str = "Handraise-Webhook/1",
                      also_signed: Callable[[bytes], dict[str, str]] | None = None) -> int:
    """POST ``payload`` (an ``envelope``) signed with ``secret``; the 2xx status, else ``ConnectorError``.

    ``also_signed(body)``: more headers over the same body (a HITL-protocol callback's ``X-HITL-Signature``).
    """
    event = payload["event"]
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    timestamp = int(time.time())  # fresh per attempt: a retry is not a replay
    headers = {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        EVENT_HEADER: event,
        DELIVERY_HEADER: payload["delivery_id"],
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp=timestamp, body=body),
        **(also_signed(body) if also_signed is not None else {}),
    }
    # The URL may hold a token of its own (hook URLs often do): errors name the host only.
    host = url_host(url)
    seconds = min(timeout, MAX_EXCHANGE_SECONDS)
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        # Until the headers are in: a receiver that never answers is a failure, retried later.
        async with asyncio.timeout_at(deadline):
            # auto_decompress off: the body is never used, so a compressed one is never inflated.
            resp = await http.post(url, data=body, headers=headers, allow_redirects=False, auto_decompress=False,
                                   timeout=aiohttp.ClientTimeout(total=seconds))
    except (TimeoutError, aiohttp.ClientError) as e:
        raise ConnectorError(f"{event} to {host}: {type(e).__name__}") from e
    try:
        status = resp.status
        retry_after = _retry_after(resp.headers.get("Retry-After"))
        await _read_bounded(resp, deadline=deadline)
    finally:
        resp.release()
    if 200 <= status < 300:
        log.info("signed post delivered", extra={"host": host, "event": event, "status": status})
        return status
    message = f"{event} to {host}: HTTP {status}"
    if status in _RETRYABLE or status >= 500:
        raise ConnectorError(message, retry_after=retry_after)
    raise ConnectorError(message, permanent=True)


async def _read_bounded(resp: aiohttp.ClientResponse, *, deadline: float) -> None:
    """Read at most ``MAX_RESPONSE_BYTES`` of the body by ``deadline``; close the connection if more is left.

    The status is already the answer: a body cut short, too long or too slow changes nothing but the
    connection, which is then closed instead of going back to the pool half read.
    """
    left = MAX_RESPONSE_BYTES
    try:
        async with asyncio.timeout_at(deadline):
            while left > 0:
                chunk = await resp.content.read(left)
                if not chunk:
                    return  # the whole body, short enough: the connection may be kept alive
                left -= len(chunk)
    except (TimeoutError, aiohttp.ClientError):
        pass  # too slow, or cut off: the status stands, the connection goes
    if not resp.content.at_eof():
        resp.close()


def sign(secret: str | bytes, *, timestamp: int | str, body: bytes) -> str:
    """The ``X-Handraise-Signature`` value: ``v1=`` and the hex HMAC-SHA256 of ``"<timestamp>." + body``."""
    key = secret.encode() if isinstance(secret, str) else secret
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify_signature(secret: str | bytes, *, timestamp: str, body: bytes, signature: str,
                     now: float | None = None, tolerance: float = REPLAY_WINDOW_SECONDS) -> bool:
    """For receivers: the signature matches and the timestamp is within the replay window."""
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - sent) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, timestamp=sent, body=body), signature or "")


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds, or as an HTTP date; capped at an hour."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), 3600.0)

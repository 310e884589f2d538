"""Signed JSON POSTs: the one way Handraise calls a URL it was given (``[[webhooks]]``, a request's ``callback_url``).

    X-Handraise-Timestamp: <unix seconds>
    X-Handraise-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>

A receiver recomputes it over the raw body, compares in constant time, and refuses a
timestamp more than 5 minutes from its clock (the replay window); ``verify_signature``
does all three. A failure raises ``ConnectorError``: retryable for 5xx, 408, 425, 429 and
network errors (honouring ``Retry-After``), permanent for any other status.
"""

from __future__ import annotations

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
    try:
        async with http.post(url, data=body, headers=headers, allow_redirects=False,
                             timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            await resp.read()
            status = resp.status
            retry_after = _retry_after(resp.headers.get("Retry-After"))
    except (TimeoutError, aiohttp.ClientError) as e:
        raise ConnectorError(f"{event} to {host}: {type(e).__name__}") from e
    if 200 <= status < 300:
        log.info("signed post delivered", extra={"host": host, "event": event, "status": status})
        return status
    message = f"{event} to {host}: HTTP {status}"
    if status in _RETRYABLE or status >= 500:
        raise ConnectorError(message, retry_after=retry_after)
    raise ConnectorError(message, permanent=True)


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

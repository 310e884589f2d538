"""The generic outgoing webhook channel (``[[webhooks]]``): the bridge to SMS, mail or paging tools.

Each configured endpoint receives ``request.created`` (with a fresh one-time form link)
and ``request.resolved`` as signed JSON POSTs, retried like any delivery. Signature:

    X-Handraise-Timestamp: <unix seconds>
    X-Handraise-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>

A receiver recomputes it over the raw body, compares in constant time, and refuses a
timestamp more than 5 minutes from its clock (the replay window); ``verify_signature``
does all three.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from handraise.core.api import RequestView, iso
from handraise.core.config import Settings
from handraise.core.connectors import Connector
from handraise.core.errors import ConfigError, ConnectorError

SIGNATURE_HEADER = "X-Handraise-Signature"
TIMESTAMP_HEADER = "X-Handraise-Timestamp"
EVENT_HEADER = "X-Handraise-Event"
DELIVERY_HEADER = "X-Handraise-Delivery"
REPLAY_WINDOW_SECONDS = 300
CREATED = "request.created"
RESOLVED = "request.resolved"
# Worth another try: the receiver is busy, rate-limiting or briefly down. Any other 4xx is final.
_RETRYABLE = frozenset({408, 425, 429})


class WebhookEndpoint(BaseModel):
    """One ``[[webhooks]]`` entry."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    url: str
    secret: SecretStr
    tenants: list[str] = Field(min_length=1)
    events: list[Literal["request.created", "request.resolved"]] = Field(
        default_factory=lambda: [CREATED, RESOLVED], min_length=1)
    timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("secret")
    @classmethod
    def _long_secret(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return value


class WebhookSettings(BaseModel):
    """The validated list; ``[[webhooks]]`` is a list of tables, not one section."""

    endpoints: list[WebhookEndpoint]


class WebhookConnector(Connector):
    name = "webhooks"
    settings_model: ClassVar[type[BaseModel] | None] = WebhookSettings

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._endpoints: dict[str, WebhookEndpoint] = {e.id: e for e in self.settings.endpoints}

    # -- configuration ---------------------------------------------------------

    @classmethod
    def is_enabled(cls, app_settings: Settings) -> bool:
        entries = cls.section(app_settings)
        return isinstance(entries, list) and any(e.get("enabled", True) is not False for e in entries)

    @classmethod
    def load_settings(cls, app_settings: Settings) -> WebhookSettings:
        entries = cls.section(app_settings) or []
        known = {t.id for t in app_settings.tenants}
        endpoints: list[WebhookEndpoint] = []
        for index, raw in enumerate(entries):
            if raw.get("enabled", True) is False:
                continue
            try:
                endpoint = WebhookEndpoint.model_validate({k: v for k, v in raw.items() if k != "enabled"})
            except ValidationError as e:
                raise app_settings.config_error(e, section=("webhooks", index)) from None
            if any(other.id == endpoint.id for other in endpoints):
                raise ConfigError(f"webhooks[{index}].id: {endpoint.id!r} appears twice")
            unknown = [t for t in endpoint.tenants if t not in known]
            if unknown:
                raise ConfigError(f"webhooks[{index}].tenants: no such tenant {unknown[0]!r}")
            endpoints.append(endpoint)
        return WebhookSettings(endpoints=endpoints)

    def targets(self, tenant_id: str) -> list[str]:
        return [e.id for e in self._endpoints.values() if tenant_id in e.tenants]

    # -- delivery --------------------------------------------------------------

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        endpoint = self._endpoint(target)
        if CREATED not in endpoint.events:
            # Only request.resolved is wanted; the delivery row still marks the endpoint as served.
            return {"endpoint": endpoint.id, "created_posted": False}
        link = await self.service.mint_link(tenant_id=request.tenant_id, request_id=request.id,
                                            principal=f"webhooks:{endpoint.id}", recipient=f"webhook {endpoint.id}")
        payload = {**self._envelope(CREATED, request, endpoint),
                   "form_url": link.url, "form_expires_at": iso(link.expires_at)}
        status = await self._post(endpoint, CREATED, payload)
        return {"endpoint": endpoint.id, "created_posted": True, "status": status}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        endpoint = self._endpoint(target)
        if RESOLVED in endpoint.events:
            await self._post(endpoint, RESOLVED, self._envelope(RESOLVED, request, endpoint))

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        return None  # the receiver owns its own follow-ups

    def _endpoint(self, target: str) -> WebhookEndpoint:
        endpoint = self._endpoints.get(target)
        if endpoint is None:
            raise ConnectorError(f"no webhook endpoint {target!r} is configured any more", permanent=True)
        return endpoint

    def _envelope(self, event: str, request: RequestView, endpoint: WebhookEndpoint) -> dict[str, Any]:
        body = request.event_json()  # never a sensitive response
        body.pop("deliveries", None)
        return {"event": event, "delivery_id": f"{request.id}:{endpoint.id}:{event}",
                "tenant_id": request.tenant_id, "request": body}

    async def _post(self, endpoint: WebhookEndpoint, event: str, payload: dict[str, Any]) -> int:
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        timestamp = int(time.time())  # fresh per attempt: a retry is not a replay
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Handraise-Webhook/1",
            EVENT_HEADER: event,
            DELIVERY_HEADER: payload["delivery_id"],
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(endpoint.secret.get_secret_value(), timestamp=timestamp, body=body),
        }
        # The URL may hold a token of its own (hook URLs often do): errors name the host only.
        host = urlsplit(endpoint.url).netloc.rpartition("@")[2]
        try:
            async with self.http.post(endpoint.url, data=body, headers=headers, allow_redirects=False,
                                      timeout=aiohttp.ClientTimeout(total=endpoint.timeout_seconds)) as resp:
                await resp.read()
                status = resp.status
                retry_after = _retry_after(resp.headers.get("Retry-After"))
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ConnectorError(f"{event} to {host}: {type(e).__name__}") from e
        if 200 <= status < 300:
            self.log.info("webhook delivered", extra={"endpoint": endpoint.id, "event": event, "status": status})
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

"""The generic outgoing webhook channel (``[[webhooks]]``): the bridge to SMS, mail or paging tools.

Each configured endpoint receives ``request.created`` (with a fresh one-time form link)
and ``request.resolved`` as signed JSON POSTs, retried like any delivery, and if it asks for it
``request.voted`` on each vote of a quorum request (its tally so far). The signature
and the POST itself are core's (``core/signedpost.py``), shared with request callbacks;
``sign`` and ``verify_signature`` are re-exported here for receivers that import them from this module.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from handraise.core.api import RequestView, iso
from handraise.core.config import Settings, SigningSecret
from handraise.core.connectors import Connector
from handraise.core.errors import ConfigError, ConnectorError
from handraise.core.signedpost import (
    CREATED,
    DELIVERY_HEADER,
    EVENT_HEADER,
    REPLAY_WINDOW_SECONDS,
    RESOLVED,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    VOTED,
    envelope,
    post_signed,
    sign,
    verify_signature,
)

__all__ = ["CREATED", "DELIVERY_HEADER", "EVENT_HEADER", "REPLAY_WINDOW_SECONDS", "RESOLVED", "SIGNATURE_HEADER",
           "TIMESTAMP_HEADER", "WebhookConnector", "WebhookEndpoint", "sign", "verify_signature"]


class WebhookEndpoint(BaseModel):
    """One ``[[webhooks]]`` entry."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    url: str
    secret: SigningSecret
    tenants: list[str] = Field(min_length=1)
    events: list[Literal["request.created", "request.resolved", "request.voted"]] = Field(
        default_factory=lambda: [CREATED, RESOLVED], min_length=1)
    # One POST, connect to the last byte read; at most core/signedpost.py MAX_EXCHANGE_SECONDS.
    timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        return value


class WebhookSettings(BaseModel):
    """The validated list; ``[[webhooks]]`` is a list of tables, not one section."""

    endpoints: list[WebhookEndpoint]


class WebhookConnector(Connector[WebhookSettings]):
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
        # A retried delivery posts the link its first try minted, while unused: the receiver holds one.
        link = await self.service.mint_link(tenant_id=request.tenant_id, request_id=request.id,
                                            principal=f"webhooks:{endpoint.id}", recipient=f"webhook {endpoint.id}",
                                            reuse=True)
        payload = {**self._envelope(CREATED, request, endpoint),
                   "form_url": link.url, "form_expires_at": iso(link.expires_at)}
        status = await self._post(endpoint, payload)
        return {"endpoint": endpoint.id, "created_posted": True, "status": status}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        endpoint = self._endpoint(target)
        if RESOLVED in endpoint.events:
            await self._post(endpoint, self._envelope(RESOLVED, request, endpoint))

    async def show_votes(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        endpoint = self._endpoint(target)
        if VOTED in endpoint.events:
            # One delivery id per tally: a receiver dedupes retries, not the next vote.
            await self._post(endpoint, envelope(VOTED, request, delivery_id=(
                f"{request.id}:{endpoint.id}:{VOTED}:{request.votes_version}")))

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        return None  # the receiver owns its own follow-ups

    def _endpoint(self, target: str) -> WebhookEndpoint:
        endpoint = self._endpoints.get(target)
        if endpoint is None:
            raise ConnectorError(f"no webhook endpoint {target!r} is configured any more", permanent=True)
        return endpoint

    def _envelope(self, event: str, request: RequestView, endpoint: WebhookEndpoint) -> dict[str, Any]:
        return envelope(event, request, delivery_id=f"{request.id}:{endpoint.id}:{event}")

    async def _post(self, endpoint: WebhookEndpoint, payload: dict[str, Any]) -> int:
        return await post_signed(self.http, url=endpoint.url, secret=endpoint.secret.get_secret_value(),
                                 payload=payload, timeout=endpoint.timeout_seconds, log=self.log)

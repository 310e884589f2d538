"""``[oidc]``: the identity provider the inbox signs people in through (OpenID Connect, code flow + PKCE);
the sign-in itself is core/oidc/."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

__all__ = ["OidcSettings", "is_loopback_host"]

# RFC 6749 §3.3 scope-token: printable ASCII without space, '"' or '\'.
_SCOPE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,100}$")


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` or a loopback address: the only hosts an ``http://`` issuer may have (a test, a
    provider beside the server); anything else must be https."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OidcSettings(BaseModel):
    """How the inbox's "Sign in with …" button proves who someone is, and which of a tenant's people
    (``[[tenants.people]]``) that makes them."""

    model_config = ConfigDict(extra="forbid")

    # Exactly as the provider's ID tokens carry it in "iss"; its discovery document is
    # <issuer>/.well-known/openid-configuration.
    issuer: str = Field(min_length=1, max_length=500)
    client_id: str = Field(min_length=1, max_length=255)
    # Set: a confidential client (client_secret_basic at the token endpoint). Unset: a public client,
    # whose code only the PKCE verifier kept on this server redeems.
    client_secret: SecretStr | None = None
    # What names the person: "email" matches a person's email (verified by the provider, see below);
    # "sub" matches a person's oidc, the provider's stable subject id for them.
    claim: Literal["email", "sub"] = "email"
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"], min_length=1, max_length=20)
    # With claim = "email": an address the provider does not say it verified (email_verified) proves nobody.
    require_email_verified: bool = True
    # The signed-out inbox page's button, as people read it.
    button_label: str = Field(default="Sign in with single sign-on", min_length=1, max_length=80)
    # Each call to the provider (discovery, keys, token, userinfo) gives up after this.
    timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be the provider's absolute https:// URL, e.g. https://login.example.com")
        if parts.scheme == "http" and not is_loopback_host(parts.hostname):
            raise ValueError("must be https:// (plain http only for localhost or a loopback address)")
        if parts.query or parts.fragment:
            raise ValueError("must not carry a query or a fragment")
        return value

    @field_validator("scopes")
    @classmethod
    def _scope_tokens(cls, value: list[str]) -> list[str]:
        bad = [s for s in value if not _SCOPE.match(s)]
        if bad:
            raise ValueError(f"not scope names: {', '.join(repr(s) for s in bad)}")
        if "openid" not in value:
            raise ValueError('must include "openid" (without it the provider sends no ID token)')
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _claim_needs_scope(self) -> OidcSettings:
        if self.claim == "email" and "email" not in self.scopes:
            raise ValueError('claim = "email" needs the "email" scope: without it the provider sends no address')
        return self

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"

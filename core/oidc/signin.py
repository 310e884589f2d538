"""One sign-in through the identity provider, from ``/inbox/login`` to an inbox session of the person it
proves (DESIGN invariant 10: a person is proven, never asserted).

``start`` makes the state, the nonce and the PKCE verifier, keeps them server-side for ten minutes
(``oidc_logins``, by the state's sha256, bound to the browser by a cookie's sha256) and names the
provider's authorization URL. ``finish`` uses that row once, whatever follows: an error from the provider,
a code it refuses, an ID token that fails a check, a claim that is none of the people each end the
sign-in with a refusal, and nothing else is stored. A proven person gets ``InboxAccess.open_session``
(journaled ``inbox_signed_in`` via ``oidc``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handraise.core.attempts import AttemptLimiter
from handraise.core.config import Settings
from handraise.core.errors import NoPersonError, SeveralTenantsError, SigninRefusedError
from handraise.core.inbox import InboxAccess, InboxSession
from handraise.core.oidc.provider import CALLBACK_PATH, OidcProvider, error_word
from handraise.core.oidcsettings import OidcSettings
from handraise.core.store import Store

__all__ = ["CALLBACK_PATH", "LOGIN_SECONDS", "OidcSignin", "StartedLogin"]

log = logging.getLogger(__name__)

# A sign-in is finished within this many seconds of its start, or started again.
LOGIN_SECONDS = 600
# Sign-ins one address may start a minute (a person retrying, a few tabs); a flood is a 429, not rows.
STARTS_PER_MINUTE = 20
# Longer values than any this server makes are not looked up (a state, a browser cookie).
_MAX_TOKEN = 128


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _plausible(value: str | None) -> bool:
    return bool(value) and len(value) <= _MAX_TOKEN  # type: ignore[arg-type]


@dataclass(frozen=True)
class StartedLogin:
    """Where the browser goes (the provider), and the cookie that binds the callback to this browser."""

    url: str
    browser: str
    max_age: int = LOGIN_SECONDS


class OidcSignin:
    """Start and finish sign-ins through ``[oidc]``'s provider; the people come from ``[[tenants.people]]``."""

    def __init__(self, *, settings: Settings, store: Store, inbox: InboxAccess, provider: OidcProvider | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        assert settings.oidc is not None
        self.settings = settings
        self.oidc: OidcSettings = settings.oidc
        self.store = store
        self.inbox = inbox
        self.clock = clock
        self.provider = provider or OidcProvider(settings=self.oidc, server=settings.server)
        self.starts = AttemptLimiter(max_failures=STARTS_PER_MINUTE, window=60.0)

    async def start(self, *, tenant_id: str | None, browser: str | None, client: str = "") -> StartedLogin:
        """A new sign-in; ``tenant_id``: the tenant asked for (``?tenant=``), checked only at the end so a
        stranger learns nothing about which tenants exist. ``browser``: the browser's binding cookie if it
        has one already (a second tab keeps the first one's sign-in working). ``client``: the address it
        came from: anyone may start a sign-in, and each is a row, so each address starts a few a minute
        (RateLimitedError beyond)."""
        self.starts.check(client)
        self.starts.failed(client)
        browser = browser if _plausible(browser) else secrets.token_urlsafe(32)
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        # RFC 7636 §4.1: 43 to 128 unreserved characters; 64 here.
        verifier = secrets.token_urlsafe(48)
        url = await self.provider.authorization_url(state=state, nonce=nonce, code_verifier=verifier)
        now = self.clock()
        row = {"id": f"oid_{secrets.token_urlsafe(12)}", "state_sha256": _digest(state),
               "browser_sha256": _digest(browser), "nonce": nonce, "code_verifier": verifier, "tenant_id": tenant_id,
               "created_at": now, "expires_at": now + LOGIN_SECONDS, "used_at": None}
        await self.store.oidc_logins.insert(row)
        log.info("oidc sign-in started", extra={"login_id": row["id"]})
        return StartedLogin(url=url, browser=browser)

    async def finish(self, *, state: str | None, code: str | None, error: str | None, issuer: str | None,
                     browser: str | None) -> tuple[str, InboxSession]:
        """The provider's answer to a sign-in (the callback's state, code, error and iss): a new inbox
        session of the person it proves, and its cookie token. SigninRefusedError, NoPersonError,
        SeveralTenantsError, ProviderUnavailableError."""
        login = await self._take(state, browser)
        # RFC 9207: an answer naming another issuer is another provider's (a mix-up), whatever it holds;
        # a provider that says it names itself and does not is not believed either.
        named = (await self.provider.metadata()).get("authorization_response_iss_parameter_supported") is True
        if issuer != self.oidc.issuer and (issuer is not None or named):
            log.info("oidc sign-in refused", extra={"login_id": login["id"], "why": "another issuer"})
            raise SigninRefusedError("the answer does not come from [oidc] issuer", reason="token_invalid")
        if error is not None:
            log.info("oidc sign-in ended by the provider", extra={"login_id": login["id"], "error": error_word(error)})
            raise SigninRefusedError(f"the identity provider answered {error_word(error)}",
                                     reason="cancelled" if error == "access_denied" else "provider_error")
        if not code or len(code) > 2048:
            raise SigninRefusedError("the identity provider's answer carries no code", reason="token_invalid")
        token = await self.provider.exchange(code=code, code_verifier=login["code_verifier"])
        claims = await self.provider.identity(token, nonce=login["nonce"])
        tenant_id, person = self._person(claims, tenant_id=login["tenant_id"], login_id=login["id"])
        return await self.inbox.open_session(tenant_id=tenant_id, person=person, via="oidc",
                                             detail={"claim": self.oidc.claim, "issuer": self.oidc.issuer,
                                                     "subject": str(claims["sub"])[:255]})

    async def _take(self, state: str | None, browser: str | None) -> dict[str, Any]:
        """The login this state names, used up now; refused when unknown, used, past its end, or carried
        to another browser than the one that started it."""
        if not _plausible(state):
            raise SigninRefusedError("the sign-in names no state", reason="unknown")
        login, won = await self.store.oidc_logins.take(_digest(state), now=self.clock())  # type: ignore[arg-type]
        if login is None:
            raise SigninRefusedError("no sign-in has this state", reason="unknown")
        if not won:
            used = login["used_at"] is not None
            log.info("oidc sign-in refused", extra={"login_id": login["id"], "why": "used" if used else "expired"})
            raise SigninRefusedError("this sign-in was used already" if used else "this sign-in expired",
                                     reason="used" if used else "expired")
        presented = _digest(browser) if _plausible(browser) else ""
        if not hmac.compare_digest(presented, login["browser_sha256"]):
            log.info("oidc sign-in refused", extra={"login_id": login["id"], "why": "another browser"})
            raise SigninRefusedError("this sign-in was started in another browser", reason="browser")
        return login

    def _person(self, claims: dict[str, Any], *, tenant_id: str | None, login_id: str) -> tuple[str, str]:
        """(tenant, person) the proven claim names; never logs the claim's value."""
        claim = self.oidc.claim
        value = claims.get(claim)
        if not isinstance(value, str) or not value:
            log.info("oidc sign-in refused: no claim", extra={"login_id": login_id, "claim": claim})
            raise NoPersonError(f"the identity provider gave no {claim}", reason="nobody")
        if claim == "email" and self.oidc.require_email_verified and claims.get("email_verified") not in (True, "true"):
            log.info("oidc sign-in refused: address not verified", extra={"login_id": login_id})
            raise NoPersonError("the identity provider has not verified this address", reason="unverified")
        # A person's email is kept lower-case (config.py); a subject is compared exactly.
        wanted, identity = (value.lower(), "email") if claim == "email" else (value, "oidc")
        found = [(t.id, p.id) for t in self.settings.tenants if tenant_id is None or t.id == tenant_id
                 for p in t.people if p.identity(identity) == wanted]
        if not found:
            log.info("oidc sign-in matched no person", extra={"login_id": login_id, "claim": claim,
                                                              "tenant_named": tenant_id is not None})
            raise NoPersonError("this account is none of the people here", reason="nobody")
        if len(found) > 1:
            # One value is one person within a tenant (config.py): several rows are several tenants.
            log.info("oidc sign-in matched people of several tenants", extra={"login_id": login_id})
            raise SeveralTenantsError("this account is a person of several tenants: name one",
                                      tenants=[t for t, _ in found])
        return found[0]

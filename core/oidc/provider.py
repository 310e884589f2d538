"""The identity provider, as this server's OpenID Connect client sees it: its discovery document and keys
(fetched with a timeout and a size bound, cached), the authorization URL, the code exchange, and the ID
token's checks.

authlib does the protocol: its httpx ``AsyncOAuth2Client`` builds the authorization URL (PKCE S256) and
redeems the code; joserfc, the JOSE library authlib itself uses, checks the ID token's signature against
the provider's JWKS, and ``authlib.oidc.core.CodeIDToken`` its claims (iss, aud, exp, iat, nonce, azp,
at_hash). Nothing here reads or checks a JWT by hand.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import httpx2
from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from handraise.core.config import ServerSettings
from handraise.core.errors import ProviderUnavailableError, SigninRefusedError
from handraise.core.oidcsettings import OidcSettings, is_loopback_host

__all__ = ["CALLBACK_PATH", "OidcProvider", "error_word", "verify_id_token"]

log = logging.getLogger(__name__)

# The redirect URI registered at the provider is the server's public_url followed by this.
CALLBACK_PATH = "/inbox/oidc/callback"
# The discovery document and the keys are fetched again after this; keys also when a token names a key
# not among them (the provider rotated its keys).
CACHE_SECONDS = 3600.0
# Clock skew allowed on exp, iat and nbf.
LEEWAY_SECONDS = 60
# Every read from the provider is bounded (DESIGN invariant 11); real documents are a few KB.
MAX_DOCUMENT_BYTES = 256 * 1024
# Signatures an ID token may carry: asymmetric only (an HS* token would be keyed by the client secret,
# "none" is unsigned). The provider's id_token_signing_alg_values_supported narrows it further.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519")

# An OAuth error code as it may be shown and logged.
_WORD = re.compile(r"[A-Za-z0-9_]{1,40}")


def verify_id_token(id_token: str, *, keys: KeySet, algorithms: list[str], issuer: str, client_id: str,
                    nonce: str, access_token: str | None, now: float) -> dict[str, Any]:
    """The ID token's claims once its signature (one of ``keys``) and claims hold: ``iss`` is the
    issuer, ``aud`` names this client, not expired, issued, the nonce this sign-in sent. Raises
    InvalidKeyIdError for a key not in ``keys``, SigninRefusedError for anything else."""
    try:
        token = jwt.decode(id_token, keys, algorithms=algorithms)
        claims = CodeIDToken(token.claims, token.header,
                             {"iss": {"essential": True, "value": issuer},
                              "aud": {"essential": True, "value": client_id}},
                             {"nonce": nonce, "client_id": client_id, "access_token": access_token})
        claims.validate(now=int(now), leeway=LEEWAY_SECONDS)
    except InvalidKeyIdError:
        raise
    except (JoseError, ValueError) as e:
        # The check that failed, never the token (it is a credential); the log line only in fixed words.
        problem = getattr(e, "description", None) or getattr(e, "error", None) or type(e).__name__
        log.info("oidc id token refused", extra={"error": error_word(getattr(e, "error", "malformed")),
                                                 "claim": error_word(getattr(e, "claim", ""))})
        raise SigninRefusedError(f"the ID token failed a check: {problem}", reason="token_invalid") from None
    return dict(claims)


def _metadata_problem(document: dict[str, Any], *, issuer: str) -> str | None:
    """What makes a discovery document unusable for this client, or None."""
    if document.get("issuer") != issuer:
        # OpenID Connect Discovery §4.3: a document naming another issuer is not this provider's.
        return "its discovery document names another issuer than [oidc] issuer"
    secure = not is_loopback_host(httpx2.URL(issuer).host)
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        value = document.get(name)
        if not isinstance(value, str) or not value.startswith("https://" if secure else ("https://", "http://")):
            return f"its discovery document has no usable {name}"
    methods = document.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        return "it does not take PKCE with S256 (code_challenge_methods_supported)"
    return None


class OidcProvider:
    """One configured provider: cached discovery and keys, and the three calls a sign-in makes."""

    def __init__(self, *, settings: OidcSettings, server: ServerSettings,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.server = server
        self.clock = clock
        self._metadata: dict[str, Any] | None = None
        self._metadata_until = 0.0
        self._keys: KeySet | None = None
        self._keys_until = 0.0
        # One fetch of a document at a time: a burst of sign-ins after a restart fetches it once.
        self._lock = asyncio.Lock()

    @property
    def redirect_uri(self) -> str:
        """Where the provider sends the browser back: registered at the provider. Read at each use, since
        an unset public_url follows the address served (known once the server listens)."""
        return self.server.public_url + CALLBACK_PATH

    def _client(self, token: dict[str, Any] | None = None) -> AsyncOAuth2Client:
        secret = self.settings.client_secret
        return AsyncOAuth2Client(
            client_id=self.settings.client_id,
            client_secret=secret.get_secret_value() if secret is not None else None,
            # A public client authenticates with nothing but its PKCE verifier.
            token_endpoint_auth_method="client_secret_basic" if secret is not None else "none",
            scope=" ".join(self.settings.scopes), redirect_uri=self.redirect_uri, code_challenge_method="S256",
            token=token, timeout=self.settings.timeout_seconds, follow_redirects=False,
            event_hooks={"response": [_bounded]})

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (cached); ProviderUnavailableError when it cannot be had."""
        if self._metadata is not None and self.clock() < self._metadata_until:
            return self._metadata
        async with self._lock:
            if self._metadata is None or self.clock() >= self._metadata_until:
                document = await self._get_json(self.settings.discovery_url, what="discovery document")
                problem = _metadata_problem(document, issuer=self.settings.issuer)
                if problem is not None:
                    raise ProviderUnavailableError(f"the identity provider cannot be used: {problem}")
                self._metadata, self._metadata_until = document, self.clock() + CACHE_SECONDS
            return self._metadata

    async def keys(self, *, again: bool = False) -> KeySet:
        """The provider's signing keys (cached; ``again``: fetched anew, after a rotation)."""
        if not again and self._keys is not None and self.clock() < self._keys_until:
            return self._keys
        metadata = await self.metadata()
        async with self._lock:
            if again or self._keys is None or self.clock() >= self._keys_until:
                document = await self._get_json(metadata["jwks_uri"], what="keys (jwks_uri)")
                try:
                    keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
                except (JoseError, ValueError, KeyError, TypeError) as e:
                    raise ProviderUnavailableError("the identity provider's keys (jwks_uri) are not a JWK "
                                                   f"set ({type(e).__name__})") from None
                self._keys, self._keys_until = keys, self.clock() + CACHE_SECONDS
            return self._keys  # type: ignore[return-value]

    async def authorization_url(self, *, state: str, nonce: str, code_verifier: str) -> str:
        """Where the browser goes to sign in: the authorization endpoint with the code flow's parameters
        and the verifier's S256 challenge."""
        endpoint = (await self.metadata())["authorization_endpoint"]
        async with self._client() as client:
            url, _ = client.create_authorization_url(endpoint, state=state, code_verifier=code_verifier,
                                                     nonce=nonce)
        return str(url)

    async def exchange(self, *, code: str, code_verifier: str) -> dict[str, Any]:
        """Redeem the code at the token endpoint: the token response (access and ID token)."""
        endpoint = (await self.metadata())["token_endpoint"]
        try:
            async with self._client() as client:
                token = await client.fetch_token(endpoint, grant_type="authorization_code", code=code,
                                                 code_verifier=code_verifier)
        except OAuthError as e:
            # invalid_grant: a code used, expired, made for another client or another verifier.
            log.info("oidc code refused", extra={"error": error_word(e.error)})
            raise SigninRefusedError(f"the identity provider refused the code ({error_word(e.error)})",
                                     reason="code_refused") from None
        except (httpx2.HTTPError, ValueError) as e:
            raise ProviderUnavailableError(f"the identity provider's token endpoint failed ({type(e).__name__})") \
                from None
        return dict(token)

    async def identity(self, token: dict[str, Any], *, nonce: str) -> dict[str, Any]:
        """Who the token response proves: the ID token's checked claims, completed from the userinfo
        endpoint when the claim that names people is not in it (many providers put email only there)."""
        id_token = token.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise SigninRefusedError("the identity provider sent no ID token", reason="token_invalid")
        metadata = await self.metadata()
        offered = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [a for a in offered if a in ALGORITHMS] or ["RS256"]
        access_token = token.get("access_token") if isinstance(token.get("access_token"), str) else None
        check = {"algorithms": algorithms, "issuer": self.settings.issuer, "client_id": self.settings.client_id,
                 "nonce": nonce, "access_token": access_token}
        try:
            claims = verify_id_token(id_token, keys=await self.keys(), now=self.clock(), **check)
        except InvalidKeyIdError:
            try:
                claims = verify_id_token(id_token, keys=await self.keys(again=True), now=self.clock(), **check)
            except InvalidKeyIdError:
                raise SigninRefusedError("the ID token is signed with a key the provider does not publish",
                                         reason="token_invalid") from None
        wanted = self.settings.claim
        if claims.get(wanted) is None or (wanted == "email" and "email_verified" not in claims):
            claims = {**await self._userinfo(token, metadata, subject=claims["sub"]), **claims}
        return claims

    async def _userinfo(self, token: dict[str, Any], metadata: dict[str, Any], *, subject: str) -> dict[str, Any]:
        endpoint = metadata.get("userinfo_endpoint")
        if not isinstance(endpoint, str) or not isinstance(token.get("access_token"), str):
            return {}
        info = await self._get_json(endpoint, what="userinfo", token=token)
        # OpenID Connect Core §5.3.2: userinfo about anyone but the ID token's subject is not used.
        if info.get("sub") != subject:
            raise SigninRefusedError("the identity provider's userinfo is about someone else", reason="token_invalid")
        return info

    async def _get_json(self, url: str, *, what: str, token: dict[str, Any] | None = None) -> dict[str, Any]:
        """A JSON object from the provider, read up to MAX_DOCUMENT_BYTES within the timeout."""
        body = bytearray()
        try:
            async with self._client(token) as client:
                async with client.stream("GET", url, withhold_token=token is None,
                                         headers={"Accept": "application/json"}) as response:
                    if response.status_code != 200:
                        raise ProviderUnavailableError(f"the identity provider's {what} answered HTTP "
                                                       f"{response.status_code}")
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_DOCUMENT_BYTES:
                            raise ProviderUnavailableError(f"the identity provider's {what} is larger than "
                                                           f"{MAX_DOCUMENT_BYTES // 1024} KB")
        except (httpx2.HTTPError, OAuthError) as e:
            raise ProviderUnavailableError(f"the identity provider's {what} could not be fetched "
                                           f"({type(e).__name__})") from None
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise ProviderUnavailableError(f"the identity provider's {what} is not a JSON object")
        return document


async def _bounded(response: httpx2.Response) -> None:
    # The token endpoint's answer is read whole by authlib: one that says it is too large is refused first.
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_DOCUMENT_BYTES:
        raise ProviderUnavailableError(f"the identity provider's answer is larger than {MAX_DOCUMENT_BYTES // 1024} KB")


def error_word(text: object) -> str:
    """An OAuth error code from the provider as it may be shown and logged (nothing outside shapes a log
    line): a short word of letters, digits and _, else "error"."""
    value = str(text or "")
    return value if _WORD.fullmatch(value) else "error"

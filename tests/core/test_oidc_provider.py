"""The OpenID Connect client's own checks, without a browser: the ID token (signature, issuer, audience,
expiry, nonce, algorithm) and the provider's documents (fetched with a timeout and a size bound, cached,
fetched again when they age or a key is new).

ID tokens are signed here with keys made here (joserfc); the provider's documents come from a real HTTP
server on loopback that counts what it is asked. The flow against a real provider is in
tests/webforms/test_oidc_http.py and test_oidc_browser.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError
from joserfc.jwk import KeySet, OctKey, RSAKey

from handraise.core.config import ServerSettings
from handraise.core.errors import ProviderUnavailableError, SigninRefusedError
from handraise.core.oidc.provider import CACHE_SECONDS, MAX_DOCUMENT_BYTES, OidcProvider, verify_id_token
from handraise.core.oidcsettings import OidcSettings

ISSUER = "https://login.example.com"
CLIENT = "handraise"
NONCE = "n-0123456789"
NOW = 1_800_000_000.0

KEY = RSAKey.generate_key(2048, parameters={"kid": "k1"})
# Another key under the same kid: a token it signs must fail the signature check, not find a key.
IMPOSTOR = RSAKey.generate_key(2048, parameters={"kid": "k1"})
PUBLIC = KeySet([RSAKey.import_key(KEY.as_dict(private=False))])


def id_token(*, key: Any = KEY, alg: str = "RS256", drop: tuple[str, ...] = (), **changes: Any) -> str:
    claims = {"iss": ISSUER, "sub": "alice", "aud": CLIENT, "exp": int(NOW) + 300, "iat": int(NOW),
              "nonce": NONCE, **changes}
    for name in drop:
        claims.pop(name)
    return jwt.encode({"alg": alg, "kid": "k1"}, claims, key, algorithms=[alg])


def verify(token: str) -> dict[str, Any]:
    return verify_id_token(token, keys=PUBLIC, algorithms=["RS256"], issuer=ISSUER, client_id=CLIENT, nonce=NONCE,
                           access_token=None, now=NOW)


def test_an_id_token_that_holds_gives_its_claims() -> None:
    assert verify(id_token())["sub"] == "alice"
    # Clock skew up to a minute is allowed on the expiry; an audience list naming this client is fine.
    assert verify(id_token(exp=int(NOW) - 30, aud=[CLIENT, "other"], azp=CLIENT))["sub"] == "alice"


@pytest.mark.parametrize(("token", "problem"), [
    (lambda: id_token(aud="someone-else"), "aud"),
    (lambda: id_token(aud=["someone-else", "another"]), "aud"),
    (lambda: id_token(drop=("aud",)), "aud"),
    (lambda: id_token(iss="https://evil.example.com"), "iss"),
    (lambda: id_token(exp=int(NOW) - 120), "expired"),
    (lambda: id_token(drop=("exp",)), "exp"),
    (lambda: id_token(nonce="another-sign-in"), "nonce"),
    (lambda: id_token(drop=("nonce",)), "nonce"),
    (lambda: id_token(key=IMPOSTOR), "signature"),
    (lambda: id_token(key=OctKey.generate_key(256), alg="HS256"), "HS256"),
], ids=["audience", "audience-list", "no-audience", "issuer", "expired", "no-expiry", "nonce", "no-nonce",
        "signature", "hs256"])
def test_an_id_token_that_fails_a_check_is_refused(token: Callable[[], str], problem: str) -> None:
    with pytest.raises(SigninRefusedError) as refused:
        verify(token())
    assert refused.value.reason == "token_invalid" and refused.value.status == 400
    assert problem in refused.value.message
    # The message names the check, never the token.
    assert token().split(".")[1] not in refused.value.message


def test_an_unsigned_id_token_is_refused() -> None:
    import base64

    claims = id_token().split(".")[1]
    none = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=").decode()
    with pytest.raises(SigninRefusedError):
        verify(f"{none}.{claims}.")
    with pytest.raises(SigninRefusedError):
        verify("not a token")


def test_a_key_the_provider_does_not_publish_is_asked_for_again() -> None:
    stranger = RSAKey.generate_key(2048, parameters={"kid": "k2"})
    with pytest.raises(InvalidKeyIdError):
        verify(jwt.encode({"alg": "RS256", "kid": "k2"}, {"iss": ISSUER}, stranger))


# -- the provider's documents ------------------------------------------------------------------------


class FakeProviderDocuments:
    """A real HTTP server on loopback serving a discovery document and keys, counting each fetch."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {"discovery": 0, "jwks": 0}
        self.issuer = ""
        self.document: dict[str, Any] = {}
        self.jwks: Any = {"keys": [KEY.as_dict(private=False)]}
        # Sent in chunks without a Content-Length: only reading it tells its size.
        self.chunked = False
        self.userinfo: dict[str, Any] = {}
        self.bearer: list[str] = []
        self.hold = asyncio.Event()  # never set: a route that does not answer

    async def discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response(self.document)

    async def keys(self, request: web.Request) -> web.StreamResponse:
        self.hits["jwks"] += 1
        if not self.chunked:
            return web.json_response(self.jwks)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        body = json.dumps(self.jwks).encode()
        for start in range(0, len(body), 65536):
            await response.write(body[start:start + 65536])
        await response.write_eof()
        return response

    async def info(self, request: web.Request) -> web.Response:
        self.bearer.append(request.headers.get("Authorization", ""))
        return web.json_response(self.userinfo)

    async def silent(self, request: web.Request) -> web.Response:
        await self.hold.wait()
        return web.Response()


@contextlib.asynccontextmanager
async def documents() -> AsyncIterator[FakeProviderDocuments]:
    fake = FakeProviderDocuments()
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", fake.discovery)
    app.router.add_get("/jwks", fake.keys)
    app.router.add_get("/userinfo", fake.info)
    app.router.add_get("/slow/.well-known/openid-configuration", fake.silent)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.issuer = f"http://{host}:{port}"
    fake.document = {"issuer": fake.issuer, "authorization_endpoint": f"{fake.issuer}/auth",
                     "token_endpoint": f"{fake.issuer}/token", "jwks_uri": f"{fake.issuer}/jwks",
                     "userinfo_endpoint": f"{fake.issuer}/userinfo",
                     "code_challenge_methods_supported": ["S256"]}
    try:
        yield fake
    finally:
        await runner.cleanup()


def provider_for(issuer: str, *, clock: Callable[[], float] = time.time, timeout: float = 5.0) -> OidcProvider:
    settings = OidcSettings(issuer=issuer, client_id=CLIENT, timeout_seconds=timeout)
    return OidcProvider(settings=settings, server=ServerSettings(public_url="http://127.0.0.1:8080"), clock=clock)


async def test_discovery_and_keys_are_fetched_once_and_again_when_they_age() -> None:
    async with documents() as fake:
        now = [1000.0]
        provider = provider_for(fake.issuer, clock=lambda: now[0])
        first = await provider.metadata()
        await asyncio.gather(*(provider.metadata() for _ in range(5)))
        keys = await provider.keys()
        assert await provider.keys() is keys
        assert fake.hits == {"discovery": 1, "jwks": 1}
        assert first["token_endpoint"] == f"{fake.issuer}/token"
        # An authorization URL needs no fetch of its own, and carries the code flow's parameters.
        url = await provider.authorization_url(state="s-1", nonce="n-1", code_verifier="v" * 64)
        assert url.startswith(f"{fake.issuer}/auth?response_type=code&client_id=handraise&")
        for part in ("redirect_uri=http%3A%2F%2F127.0.0.1%3A8080%2Finbox%2Foidc%2Fcallback", "state=s-1",
                     "nonce=n-1", "code_challenge_method=S256", "scope=openid+email+profile"):
            assert part in url, part
        assert fake.hits == {"discovery": 1, "jwks": 1}

        now[0] += CACHE_SECONDS + 1
        await provider.metadata()
        await provider.keys()
        assert fake.hits == {"discovery": 2, "jwks": 2}
        # A key not among them makes one fetch at once (the provider rotated its keys).
        await provider.keys(again=True)
        assert fake.hits == {"discovery": 2, "jwks": 3}


async def test_an_email_missing_from_the_id_token_is_read_from_userinfo_about_the_same_subject() -> None:
    async with documents() as fake:
        provider = provider_for(fake.issuer, clock=lambda: NOW)
        token = {"id_token": id_token(iss=fake.issuer), "access_token": "at-1", "token_type": "Bearer"}
        fake.userinfo = {"sub": "alice", "email": "alice@example.org", "email_verified": True, "iss": "ignored"}
        claims = await provider.identity(token, nonce=NONCE)
        assert (claims["sub"], claims["email"], claims["email_verified"]) == ("alice", "alice@example.org", True)
        # The ID token's own claims stand over userinfo's; userinfo is asked with the access token.
        assert claims["iss"] == fake.issuer and fake.bearer == ["Bearer at-1"]
        # Userinfo about someone else is not believed (OpenID Connect Core 5.3.2).
        fake.userinfo = {"sub": "mallory", "email": "alice@example.org", "email_verified": True}
        with pytest.raises(SigninRefusedError, match="someone else"):
            await provider.identity(token, nonce=NONCE)
        # An ID token that carries the claim needs no userinfo.
        fake.bearer.clear()
        with_email = {**token, "id_token": id_token(iss=fake.issuer, email="a@example.org", email_verified=True)}
        assert (await provider.identity(with_email, nonce=NONCE))["email"] == "a@example.org"
        assert fake.bearer == []


async def test_a_discovery_document_for_another_issuer_or_without_pkce_is_refused() -> None:
    async with documents() as fake:
        fake.document["issuer"] = "https://someone-else.example.com"
        with pytest.raises(ProviderUnavailableError, match="another issuer"):
            await provider_for(fake.issuer).metadata()
        fake.document["issuer"] = fake.issuer
        fake.document["code_challenge_methods_supported"] = ["plain"]
        with pytest.raises(ProviderUnavailableError, match="S256"):
            await provider_for(fake.issuer).metadata()
        fake.document["code_challenge_methods_supported"] = ["S256"]
        del fake.document["jwks_uri"]
        with pytest.raises(ProviderUnavailableError, match="jwks_uri"):
            await provider_for(fake.issuer).metadata()
        # A refusal is not cached: the next sign-in asks again.
        assert fake.hits["discovery"] == 3


async def test_keys_that_are_no_key_set_or_too_large_are_refused() -> None:
    async with documents() as fake:
        fake.jwks = ["not", "a", "key", "set"]
        with pytest.raises(ProviderUnavailableError, match="JSON object"):
            await provider_for(fake.issuer).keys()
        fake.jwks = {"keys": [{"kty": "nonsense"}]}
        with pytest.raises(ProviderUnavailableError, match="not a JWK set"):
            await provider_for(fake.issuer).keys()
        fake.jwks = {"keys": [], "padding": "x" * MAX_DOCUMENT_BYTES}
        with pytest.raises(ProviderUnavailableError, match="larger than"):
            await provider_for(fake.issuer).keys()
        fake.chunked = True
        with pytest.raises(ProviderUnavailableError, match="larger than"):
            await provider_for(fake.issuer).keys()


async def test_a_provider_that_is_down_or_silent_is_unavailable_within_the_timeout() -> None:
    async with documents() as fake:
        closed = f"http://127.0.0.1:{_closed_port()}"
        with pytest.raises(ProviderUnavailableError, match="could not be fetched"):
            await provider_for(closed).metadata()
        started = time.monotonic()
        with pytest.raises(ProviderUnavailableError, match="could not be fetched"):
            await provider_for(f"{fake.issuer}/slow", timeout=0.3).metadata()
        assert time.monotonic() - started < 5


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("issuer", "problem"), [
    ("http://login.example.com", "https"),
    ("https://login.example.com?x=1", "query"),
    ("login.example.com", "absolute"),
])
def test_an_issuer_must_be_https_except_on_loopback(issuer: str, problem: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=problem):
        OidcSettings(issuer=issuer, client_id=CLIENT)
    for loopback in ("http://localhost:9000", "http://127.0.0.1:9000/realms/x", "http://[::1]:9000"):
        assert OidcSettings(issuer=loopback, client_id=CLIENT).issuer == loopback

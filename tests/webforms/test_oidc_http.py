"""Signing in to the inbox through a real OpenID Connect provider (node-oidc-provider on loopback), over HTTP:
the person the provider proves gets a session acting as them, and every bad input is a 4xx page that
leaves no session behind (a state replayed, expired, forged or carried to another browser, a cancel at
the provider, a code it refuses, a nonce that does not match, an answer from another issuer, an account
that is nobody here or a person of several tenants).

The app is the real one with the web channel; the provider's login page is walked with aiohttp
(``harness.oidc.log_in``); the browser test is test_oidc_browser.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp import ClientSession, CookieJar
from sqlalchemy import text

from conftest import Api, base_config, settings_from, web_app
from handraise.core.appkeys import OIDC, SERVICE, STORE
from handraise.core.oidc.signin import LOGIN_SECONDS, STARTS_PER_MINUTE
from handraise.core.store.units import rowcount, scalar
from harness.fixtures import oidc_provider  # noqa: F401  (registers the fixture)
from harness.oidc import OidcProviderServer, log_in

PUBLIC = "http://127.0.0.1:8080"
CALLBACK = f"{PUBLIC}/inbox/oidc/callback"
PEOPLE = [{"id": "alice", "name": "Alice Example", "email": "Alice@Example.org"},
          {"id": "bob", "name": "Bob Builder", "oidc": "u-42"}]


class Flow:
    """One browser (its own cookie jar) against the app and the provider."""

    def __init__(self, api: Api, http: ClientSession) -> None:
        self.api, self.http = api, http
        self.csrf = ""

    async def get(self, path: str) -> tuple[int, str, Any]:
        async with self.http.get(self.api.url(path), allow_redirects=False) as r:
            page = await r.text()
            token = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page)
            self.csrf = token.group(1) if token else self.csrf
            return r.status, page, r.headers

    async def start(self, query: str = "") -> str:
        """GET /inbox/login: where it sends the browser (the provider's authorization URL)."""
        status, page, headers = await self.get(f"/inbox/login{query}")
        assert status == 303, (status, page)
        return headers["Location"]

    async def at_provider(self, url: str, *, login: str, cancel: bool = False) -> str:
        """Through the provider's login page: the callback URL it sends the browser to."""
        return await log_in(self.http, url, login=login, stop_at=CALLBACK, cancel=cancel)

    async def callback(self, url: str) -> tuple[int, str, Any]:
        return await self.get(url[len(PUBLIC):])

    async def sign_in(self, login: str, query: str = "") -> tuple[int, str, Any]:
        return await self.callback(await self.at_provider(await self.start(query), login=login))

    async def post(self, path: str, data: dict[str, str]) -> int:
        async with self.http.post(self.api.url(path), data={**data, "handraise:csrf": self.csrf},
                                  allow_redirects=False) as r:
            return r.status


@contextlib.asynccontextmanager
async def oidc_app(provider: OidcProviderServer, storage_url: str, *, public: bool = False,
                   people: list[dict[str, Any]] | None = None, oidc: dict[str, Any] | None = None,
                   globex_people: list[dict[str, Any]] | None = None) -> AsyncIterator[Flow]:
    client = provider.register_client(CALLBACK, public=public)
    config = base_config(storage_url)
    config["tenants"][0].update(name="Acme Ops", people=people if people is not None else PEOPLE)
    config["tenants"][1].update(name="Globex", people=globex_people or [])
    config["oidc"] = {"issuer": provider.issuer, "client_id": client["client_id"],
                      "button_label": "Sign in with Test SSO", **(oidc or {})}
    if not public:
        config["oidc"]["client_secret"] = client["client_secret"]
    async with web_app(settings_from(config)) as api, ClientSession(cookie_jar=CookieJar(unsafe=True)) as http:
        yield Flow(api, http)


def another(sqlite_url: str) -> str:
    """A second database beside a test's own, for a second app."""
    return sqlite_url.replace("handraise.db", "second.db")


async def sessions(api: Api) -> int:
    async with api.app[STORE].reader() as conn:
        return int(await conn.run(scalar, text("SELECT count(*) FROM inbox_sessions")))


async def signed_in_events(api: Api, tenant_id: str = "acme") -> list[Any]:
    return [e for e in await api.app[STORE].journal.entries(tenant_id=tenant_id) if e.event == "inbox_signed_in"]


async def refused(flow: Flow, status: int, page: str, expected: int, words: str) -> None:
    """A refusal page: its status, its words, a way to start again, and no session anywhere."""
    assert status == expected, (status, page)
    assert words in page, page
    assert await sessions(flow.api) == 0
    assert await signed_in_events(flow.api) == [] and await signed_in_events(flow.api, "globex") == []


# -- signing in --------------------------------------------------------------------------------------


async def test_a_person_signs_in_by_verified_email_and_answers_as_themselves(
        oidc_provider: OidcProviderServer, storage_url: str) -> None:
    async with oidc_app(oidc_provider, storage_url) as flow:
        status, page, headers = await flow.get("/inbox")
        assert status == 401 and "Sign in with Test SSO" in page and '<a class="button" href="/inbox/login">Sign in with Test SSO</a>' in page

        authorize = await flow.start()
        query = parse_qs(urlsplit(authorize).query)
        assert authorize.startswith(f"{oidc_provider.issuer}/auth?")
        assert query["code_challenge_method"] == ["S256"] and query["redirect_uri"] == [CALLBACK]
        assert query["scope"] == ["openid email profile"] and query["nonce"] and query["state"]

        status, page, headers = await flow.callback(await flow.at_provider(authorize, login="alice"))
        # The session cookie is the sign-in link's: HttpOnly, SameSite=Strict, /inbox. The page moves on
        # to the inbox by itself (a redirect would not carry the Strict cookie, see webforms/inbox/oidc.py).
        assert status == 200 and "Signed in as <strong>Alice Example</strong>" in page
        assert '<meta http-equiv="refresh" content="0;url=/inbox">' in page
        cookie = next(c for c in headers.getall("Set-Cookie") if c.startswith("handraise_inbox="))
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/inbox" in cookie
        status, page, _ = await flow.get("/inbox")
        assert status == 200 and "Alice Example · Acme Ops" in page

        [event] = await signed_in_events(flow.api)
        assert event.principal == "person:alice" and event.channel == "inbox"
        assert {k: event.data[k] for k in ("via", "claim", "issuer", "subject")} == {
            "via": "oidc", "claim": "email", "issuer": oidc_provider.issuer, "subject": "alice"}

        # Proven, she answers as herself: a request assigned to her is hers to approve.
        created = await flow.api.create({"unique_id": f"a-{secrets.token_hex(4)}", "kind": "approval",
                                         "message_for_user": "Deploy to production?", "assign_to": ["alice"],
                                         "timeout_seconds": 300})
        await flow.get(f"/inbox/r/{created['id']}")
        assert await flow.post(f"/inbox/r/{created['id']}", {"decision": "approve"}) == 303
        done = await flow.api.wait(created["id"])
        assert (done["answered_by"], done["answered_via"]) == ("person:alice", "inbox")
        assert done["answered_by_person"] == {"id": "alice", "name": "Alice Example"}


async def test_a_public_client_signs_in_with_pkce_alone(oidc_provider: OidcProviderServer, sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url, public=True) as flow:
        status, page, _ = await flow.sign_in("alice")
        assert status == 200 and "Alice Example" in page
        assert [e.principal for e in await signed_in_events(flow.api)] == ["person:alice"]


async def test_claim_sub_signs_in_by_the_providers_subject(oidc_provider: OidcProviderServer, sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url, oidc={"claim": "sub"}) as flow:
        status, page, _ = await flow.sign_in("u-42")
        assert status == 200 and "Bob Builder" in page
        assert [e.principal for e in await signed_in_events(flow.api)] == ["person:bob"]
    async with oidc_app(oidc_provider, another(sqlite_url), oidc={"claim": "sub"}) as flow:
        # Alice's address matches, but by sub she is nobody: the claim configured is the only one read.
        status, page, _ = await flow.sign_in("alice")
        await refused(flow, status, page, 403, "not one of the people here")


async def test_a_person_of_several_tenants_names_one(oidc_provider: OidcProviderServer, sqlite_url: str) -> None:
    alice_at_globex = [{"id": "alice", "name": "Alice G.", "email": "alice@example.org"}]
    async with oidc_app(oidc_provider, sqlite_url, globex_people=alice_at_globex) as flow:
        status, page, _ = await flow.sign_in("alice")
        await refused(flow, status, page, 409, "several teams")
        assert 'href="/inbox/login?tenant=acme">Acme Ops</a>' in page
        assert 'href="/inbox/login?tenant=globex">Globex</a>' in page

        status, page, _ = await flow.sign_in("alice", "?tenant=globex")
        assert status == 200 and "Alice G." in page
        assert [e.principal for e in await signed_in_events(flow.api, "globex")] == ["person:alice"]
        assert await signed_in_events(flow.api) == []


# -- refusals ---------------------------------------------------------------------------------------


async def test_a_state_works_once(oidc_provider: OidcProviderServer, storage_url: str) -> None:
    async with oidc_app(oidc_provider, storage_url) as flow:
        back = await flow.at_provider(await flow.start(), login="alice")
        assert (await flow.callback(back))[0] == 200
        status, page, _ = await flow.callback(back)
        assert status == 400 and "This sign-in was used already" in page
        assert len(await signed_in_events(flow.api)) == 1 and await sessions(flow.api) == 1


async def test_a_forged_missing_or_altered_state_is_refused(oidc_provider: OidcProviderServer,
                                                            sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        back = await flow.at_provider(await flow.start(), login="alice")
        for altered in (re.sub(r"state=[^&]+", "state=forged", back), re.sub(r"&?state=[^&]+", "", back),
                        re.sub(r"state=[^&]+", "state=" + "x" * 500, back)):
            status, page, _ = await flow.callback(altered)
            await refused(flow, status, page, 400, "This sign-in is not valid")
        # The genuine one still works: a forged state used up nothing.
        assert (await flow.callback(back))[0] == 200


async def test_an_expired_state_is_refused(oidc_provider: OidcProviderServer, sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        back = await flow.at_provider(await flow.start(), login="alice")
        signin = flow.api.app[OIDC]
        real = signin.clock
        signin.clock = lambda: real() + LOGIN_SECONDS + 1
        status, page, _ = await flow.callback(back)
        await refused(flow, status, page, 400, "This sign-in took too long")


async def test_a_callback_carried_to_another_browser_is_refused(oidc_provider: OidcProviderServer,
                                                                sqlite_url: str) -> None:
    # A login CSRF: someone finishes a sign-in at the provider and hands its callback to a victim.
    async with oidc_app(oidc_provider, sqlite_url) as attacker:
        back = await attacker.at_provider(await attacker.start(), login="alice")
        async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as other:
            victim = Flow(attacker.api, other)
            status, page, _ = await victim.callback(back)
            await refused(victim, status, page, 400, "started in another browser")
            # A second tab of the same browser keeps the first tab's sign-in working.
            first = await attacker.start()
            await attacker.start()
            assert (await attacker.callback(await attacker.at_provider(first, login="alice")))[0] == 200


async def test_cancelling_at_the_provider_is_refused(oidc_provider: OidcProviderServer, sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        back = await flow.at_provider(await flow.start(), login="alice", cancel=True)
        assert "error=access_denied" in back
        status, page, _ = await flow.callback(back)
        await refused(flow, status, page, 400, "Sign-in was cancelled")
        # Any other error the provider names is shown as a word, whatever else it sent.
        back = await flow.at_provider(await flow.start(), login="alice", cancel=True)
        status, page, _ = await flow.callback(back.replace("access_denied", "server_error<script>"))
        await refused(flow, status, page, 400, "It answered “error”")


async def test_a_code_the_provider_refuses_ends_the_sign_in(oidc_provider: OidcProviderServer,
                                                            sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        # A made-up code.
        back = await flow.at_provider(await flow.start(), login="alice")
        status, page, _ = await flow.callback(re.sub(r"code=[^&]+", "code=made-up", back))
        await refused(flow, status, page, 400, "could not be verified")
        # A real code under another sign-in's state: its PKCE verifier is not the one the code was made for.
        first = await flow.at_provider(await flow.start(), login="alice")
        second = await flow.at_provider(await flow.start(), login="alice")
        code = parse_qs(urlsplit(first).query)["code"][0]
        status, page, _ = await flow.callback(re.sub(r"code=[^&]+", f"code={code}", second))
        await refused(flow, status, page, 400, "could not be verified")


async def test_a_nonce_that_does_not_match_is_refused(oidc_provider: OidcProviderServer, sqlite_url: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        back = await flow.at_provider(await flow.start(), login="alice")
        # The provider signed the nonce it was sent; the sign-in kept here expects another.
        async with flow.api.app[STORE].transaction() as conn:
            assert await conn.run(rowcount, text("UPDATE oidc_logins SET nonce = 'another-nonce'")) == 1
        status, page, _ = await flow.callback(back)
        await refused(flow, status, page, 400, "could not be verified")
        assert [(r.error, r.claim) for r in caplog.records if r.getMessage() == "oidc id token refused"] == [
            ("invalid_claim", "nonce")]


async def test_an_answer_from_another_issuer_is_refused(oidc_provider: OidcProviderServer, sqlite_url: str) -> None:
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        for change in (lambda url: re.sub(r"iss=[^&]+", "iss=https%3A%2F%2Fevil.example.com", url),
                       lambda url: re.sub(r"&iss=[^&]+", "", url)):
            back = await flow.at_provider(await flow.start(), login="alice")
            status, page, _ = await flow.callback(change(back))
            await refused(flow, status, page, 400, "could not be verified")


async def test_an_account_that_is_nobody_here_is_refused_and_journaled_nowhere(
        oidc_provider: OidcProviderServer, sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with oidc_app(oidc_provider, sqlite_url) as flow:
        status, page, _ = await flow.sign_in("stranger")
        await refused(flow, status, page, 403, "not one of the people here")
        for tenant in ("acme", "globex"):
            assert await flow.api.app[STORE].journal.entries(tenant_id=tenant) == []
        # A tenant named that she is not a person of reads the same; a malformed name is refused at once.
        status, page, _ = await flow.sign_in("alice", "?tenant=globex")
        await refused(flow, status, page, 403, "not one of the people here")
        status, page, _ = await flow.get("/inbox/login?tenant=no%20such%3Cthing")
        await refused(flow, status, page, 400, "This sign-in is not valid")
    lines = [r for r in caplog.records if r.getMessage() == "oidc sign-in matched no person"]
    assert len(lines) == 2 and all(r.levelno == logging.INFO and r.claim == "email" for r in lines)
    for record in caplog.records:
        assert "stranger@example.org" not in record.getMessage() + json.dumps(vars(record), default=str)


async def test_an_address_the_provider_did_not_verify_proves_nobody(oidc_provider: OidcProviderServer,
                                                                    sqlite_url: str) -> None:
    people = [{"id": "ursula", "name": "Ursula", "email": "unverified-ursula@example.org"}]
    async with oidc_app(oidc_provider, sqlite_url, people=people) as flow:
        status, page, _ = await flow.sign_in("unverified-ursula")
        await refused(flow, status, page, 403, "Your email address is not verified")
    async with oidc_app(oidc_provider, another(sqlite_url), people=people,
                        oidc={"require_email_verified": False}) as flow:
        status, page, _ = await flow.sign_in("unverified-ursula")
        assert status == 200 and "Ursula" in page


async def test_a_flood_of_starts_is_refused_and_spent_logins_go_at_their_end(oidc_provider: OidcProviderServer,
                                                                           sqlite_url: str) -> None:
    """Anyone may start a sign-in and each start is a row: an address starts at most STARTS_PER_MINUTE a
    minute (then a 429 page with Retry-After, no row), and the sweeper deletes a login once past its end."""
    async def logins(api: Api) -> int:
        async with api.app[STORE].reader() as conn:
            return int(await conn.run(scalar, text("SELECT count(*) FROM oidc_logins")))

    async with oidc_app(oidc_provider, sqlite_url) as flow:
        for _ in range(STARTS_PER_MINUTE):
            await flow.start()
        status, page, headers = await flow.get("/inbox/login")
        assert status == 429 and "Too many sign-ins at once" in page and int(headers["Retry-After"]) >= 1
        assert await logins(flow.api) == STARTS_PER_MINUTE
        service = flow.api.app[SERVICE]
        service.clock = lambda: time.time() + LOGIN_SECONDS + 1
        await service.prune_spent(force=True)
        assert await logins(flow.api) == 0


async def test_a_provider_that_does_not_answer_is_a_502_page(sqlite_url: str) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    config = base_config(sqlite_url)
    config["oidc"] = {"issuer": f"http://127.0.0.1:{closed}", "client_id": "handraise", "timeout_seconds": 2}
    async with web_app(settings_from(config)) as api, ClientSession() as http:
        async with http.get(api.url("/inbox/login"), allow_redirects=False) as r:
            assert r.status == 502 and "The identity provider does not answer" in await r.text()
        async with api.app[STORE].reader() as conn:
            assert await conn.run(scalar, text("SELECT count(*) FROM oidc_logins")) == 0


async def test_without_oidc_there_is_no_button_and_no_login_route(web: Api) -> None:
    async with ClientSession() as http:
        async with http.get(web.url("/inbox")) as r:
            page = await r.text()
            assert r.status == 401 and "/inbox/login" not in page and "handraise inbox-link" in page
        async with http.get(web.url("/inbox/login"), allow_redirects=False) as r:
            assert r.status == 404
        async with http.get(web.url("/inbox/oidc/callback?state=x&code=y"), allow_redirects=False) as r:
            assert r.status == 404


def test_the_callback_is_the_public_urls(tmp_path: Path) -> None:
    # The redirect URI to register at the provider follows public_url, also when it is only known once the
    # server listens (an unset public_url follows the address served).
    from handraise.core.oidc.provider import OidcProvider

    settings = settings_from({**base_config(f"sqlite:///{tmp_path / 'x.db'}", server={"host": "127.0.0.1"}),
                              "oidc": {"issuer": "https://login.example.com", "client_id": "c"}})
    settings.server = type(settings.server)(host="127.0.0.1", port=0)
    provider = OidcProvider(settings=settings.oidc, server=settings.server)  # type: ignore[arg-type]
    settings.server.served_at("127.0.0.1", 8123)
    assert provider.redirect_uri == "http://127.0.0.1:8123/inbox/oidc/callback"

"""The inbox's sign-in through the identity provider: ``GET /inbox/login`` sends the browser to the provider,
``GET /inbox/oidc/callback`` brings it back signed in as the person the provider proved, or says why not.

Thin handlers over core/oidc/signin.py. The session cookie is set exactly as a sign-in link sets it
(``set_cookie``); each refusal is a page with its own 4xx status and a way to start again.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from handraise.core.appkeys import OIDC
from handraise.core.errors import (
    NoPersonError,
    ProviderUnavailableError,
    RateLimitedError,
    SeveralTenantsError,
    SigninRefusedError,
)
from handraise.core.names import display_name
from handraise.core.oidc.provider import CALLBACK_PATH, error_word
from handraise.webforms.inbox.session import INBOX_HEADERS, OIDC_COOKIE, is_https, set_cookie, set_oidc_cookie

__all__ = ["OidcPages"]

# A tenant id as config.py allows them; anything else in ?tenant= is refused before the provider is asked.
_TENANT = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

Render = Callable[..., Awaitable[web.Response]]


class OidcPages:
    """The two routes of a sign-in through ``[oidc]``'s provider; pages drawn by the inbox's ``render``."""

    def __init__(self, *, settings: Any, render: Render) -> None:
        self.settings = settings
        self.render = render

    def routes(self) -> list[web.AbstractRouteDef]:
        return [web.get("/inbox/login", self.login), web.get(CALLBACK_PATH, self.callback)]

    async def login(self, request: web.Request) -> web.Response:
        tenant = request.query.get("tenant") or None
        if tenant is not None and not _TENANT.match(tenant):
            return await self._refused(request, "unknown", status=400)
        try:
            started = await request.app[OIDC].start(tenant_id=tenant,  # type: ignore[union-attr]
                                                    browser=request.cookies.get(OIDC_COOKIE),
                                                    client=request.remote or "")
        except ProviderUnavailableError:
            return await self._refused(request, "unavailable", status=502, tenant=tenant)
        except RateLimitedError as e:
            refused = await self._refused(request, "rate_limited", status=429, tenant=tenant)
            refused.headers["Retry-After"] = str(e.retry_after)
            return refused
        response = web.HTTPSeeOther(started.url, headers=INBOX_HEADERS)
        set_oidc_cookie(response, started.browser, secure=self._secure(request), max_age=started.max_age)
        raise response

    async def callback(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            token, session = await request.app[OIDC].finish(  # type: ignore[union-attr]
                state=query.get("state"), code=query.get("code"), error=query.get("error"), issuer=query.get("iss"),
                browser=request.cookies.get(OIDC_COOKIE))
        except SigninRefusedError as e:
            return await self._refused(request, e.reason, status=e.status, error=error_word(query.get("error")))
        except NoPersonError as e:
            return await self._refused(request, e.reason, status=e.status)
        except SeveralTenantsError as e:
            choices = [{"name": display_name(self.settings, t) or t, "href": "/inbox/login?" + urlencode({"tenant": t})}
                       for t in e.tenants]
            return await self._refused(request, "several", status=e.status, choices=choices)
        except ProviderUnavailableError:
            return await self._refused(request, "unavailable", status=502)
        # The session cookie is SameSite=Strict, and this response ends a navigation the provider's site
        # started: a redirect would carry that start along, and the browser would not send the new cookie
        # to /inbox. A page of this site that moves on by itself starts a navigation of its own.
        response = await self.render(request, "inbox/oidc.html", session=None, title="Sign in", reason="signed_in",
                                     who=session.name)
        set_cookie(response, token, secure=self._secure(request), max_age=int(session.expires_at - session.created_at))
        return response

    def _secure(self, request: web.Request) -> bool:
        return is_https(request, self.settings.server.public_url)

    async def _refused(self, request: web.Request, reason: str, *, status: int, tenant: str | None = None,
                       **context: Any) -> web.Response:
        return await self.render(request, "inbox/oidc.html", session=None, status=status, title="Sign in",
                                 reason=reason, tenant=tenant, **context)

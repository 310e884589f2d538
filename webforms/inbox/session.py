"""The inbox's browser session: the cookie that names it, the CSRF token bound to it, the headers of its pages.

The cookie holds a random token (the store keeps its sha256, core/inbox.py); it is
``HttpOnly``, ``SameSite=Strict``, scoped to ``/inbox`` and ``Secure`` whenever the
server is reached over https. Every state-changing request also carries a CSRF token,
an HMAC of the session id, so a page of another site can neither read nor forge it.
"""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web

from handraise.webforms.pages import PAGE_HEADERS

__all__ = ["COOKIE", "CSRF_HEADER", "INBOX_HEADERS", "OIDC_COOKIE", "clear_cookie", "csrf_for", "csrf_matches",
           "is_https", "set_cookie", "set_oidc_cookie"]

COOKIE = "handraise_inbox"
# Binds a sign-in through the identity provider to the browser that started it (core/oidc/signin.py).
OIDC_COOKIE = "handraise_oidc"
CSRF_HEADER = "X-CSRF-Token"
# Domain separation: the hosted forms sign link ids with the same server secret.
_PURPOSE = b"handraise/inbox/csrf/v1:"

# The form's policy plus connect-src 'self' (the live list's EventSource and fetches).
INBOX_HEADERS: dict[str, str] = {
    **PAGE_HEADERS,
    "Content-Security-Policy": PAGE_HEADERS["Content-Security-Policy"] + "; connect-src 'self'",
}


def csrf_for(secret: bytes, session_id: str) -> str:
    return hmac.new(secret, _PURPOSE + session_id.encode(), hashlib.sha256).hexdigest()


def csrf_matches(secret: bytes, session_id: str, presented: object) -> bool:
    if not isinstance(presented, str) or not presented or len(presented) > 128:
        return False
    return hmac.compare_digest(csrf_for(secret, session_id).encode(), presented.encode("utf-8", "replace"))


def is_https(request: web.Request, public_url: str) -> bool:
    return request.secure or public_url.startswith("https://")


def set_cookie(response: web.StreamResponse, token: str, *, secure: bool, max_age: int) -> None:
    response.set_cookie(COOKIE, token, path="/inbox", httponly=True, samesite="Strict", secure=secure,
                        max_age=max_age)


def clear_cookie(response: web.StreamResponse, *, secure: bool) -> None:
    response.del_cookie(COOKIE, path="/inbox", secure=secure, httponly=True, samesite="Strict")


def set_oidc_cookie(response: web.StreamResponse, token: str, *, secure: bool, max_age: int) -> None:
    # Lax, not Strict: the provider sends the browser back with a top-level GET from its own site, and the
    # callback must see this cookie then. It is left to expire: a sign-in started in a second tab keeps
    # the same value, so the first tab's still finishes.
    response.set_cookie(OIDC_COOKIE, token, path="/inbox", httponly=True, samesite="Lax", secure=secure,
                        max_age=max_age)

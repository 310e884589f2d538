"""Cross-site posts refused: the form's CSRF token (an HMAC of the link id, so it fits exactly one link) and its Origin."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

# Domain separation: the same server secret signs other things elsewhere.
_PURPOSE = b"handraise/webforms/csrf/v1:"


def csrf_token(secret: bytes, link_id: str) -> str:
    return hmac.new(secret, _PURPOSE + link_id.encode(), hashlib.sha256).hexdigest()


def csrf_valid(secret: bytes, link_id: str, presented: object) -> bool:
    """Whether the posted token is the one for this link (constant-time)."""
    if not isinstance(presented, str) or not presented:
        return False
    return hmac.compare_digest(csrf_token(secret, link_id).encode(), presented.encode("utf-8", "replace"))


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, host: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(f"{scheme}://{host}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    scheme = scheme.lower()
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


def origin_allowed(origin: str | None, *, public_url: str, host: str | None) -> bool:
    """Whether a form post's ``Origin`` header, when the browser sent one, names this server.

    ``null`` is allowed: a browser sends it for our own form, whose page has
    ``Referrer-Policy: no-referrer`` (Fetch), and the CSRF token still has to match.
    ``public_url`` is the name the links carry; ``host`` the one this request reached.
    """
    if origin is None or origin.strip() == "null":
        return True
    parts = urlsplit(origin.strip())
    theirs = _origin(parts.scheme, parts.netloc) if parts.scheme and parts.netloc else None
    if theirs is None:
        return False
    public = urlsplit(public_url)
    if theirs == _origin(public.scheme, public.netloc):
        return True
    # Reached by another name than public_url (behind a proxy, in tests): the host it spoke to.
    return host is not None and theirs[1:] == (_origin(theirs[0], host) or ("", "", None))[1:]

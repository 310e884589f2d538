"""The form's CSRF token: an HMAC of the link id under the installation's secret, so it fits exactly one link."""

from __future__ import annotations

import hashlib
import hmac

# Domain separation: the same server secret signs other things elsewhere.
_PURPOSE = b"handraise/webforms/csrf/v1:"


def csrf_token(secret: bytes, link_id: str) -> str:
    return hmac.new(secret, _PURPOSE + link_id.encode(), hashlib.sha256).hexdigest()


def csrf_valid(secret: bytes, link_id: str, presented: object) -> bool:
    """Whether the posted token is the one for this link (constant-time)."""
    if not isinstance(presented, str) or not presented:
        return False
    return hmac.compare_digest(csrf_token(secret, link_id).encode(), presented.encode("utf-8", "replace"))

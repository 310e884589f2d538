"""The unguessable names of one mail thread: reply and bounce addresses, Message-IDs, and reading them back.

Every (request, recipient) pair gets a token: an HMAC of both under the installation's
secret, so the same pair always gets the same token (a retried send keeps its
Message-ID) and a token proves which address it was sent to. Replies come back to
``local+<token>@domain`` or quote a Message-ID ``<hr.<token>…@domain>``; bounces to
``local+bounce-<token>@domain``. Pure functions; the connector remembers which
request a token stands for.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from email.headerregistry import Address

# Domain separation: these HMACs can never equal another use of the server secret (CSRF, buttons).
_CONTEXT = b"handraise-email-v1\x00"
TOKEN_LENGTH = 26  # base32 characters: 130 bits
_TOKEN = re.compile(rf"[a-z2-7]{{{TOKEN_LENGTH}}}")
BOUNCE_TAG = "bounce-"
# Message-IDs of the thread: the question, then later mails with a suffix after the token.
_MESSAGE_ID = re.compile(rf"<hr\.([a-z2-7]{{{TOKEN_LENGTH}}})(?:\.[a-z0-9-]+)?@[^<>\s]+>", re.IGNORECASE)


def thread_token(secret: bytes, *, request_id: str, recipient: str) -> str:
    """The token of one request's thread with one recipient (lower-case base32, 130 bits)."""
    mac = hmac.new(secret, _CONTEXT + request_id.encode() + b"\x00" + recipient.lower().encode(), hashlib.sha256)
    return base64.b32encode(mac.digest()).decode("ascii").lower()[:TOKEN_LENGTH]


def token_matches(secret: bytes, token: str, *, request_id: str, sender: str) -> bool:
    """Whether ``token`` is the one sent to ``sender`` about ``request_id`` (constant time)."""
    return hmac.compare_digest(token, thread_token(secret, request_id=request_id, recipient=sender))


def reply_address(mailbox: Address, token: str) -> str:
    return f"{mailbox.username}+{token}@{mailbox.domain}"


def bounce_address(mailbox: Address, token: str) -> str:
    return f"{mailbox.username}+{BOUNCE_TAG}{token}@{mailbox.domain}"


def message_id(mailbox: Address, token: str, suffix: str | None = None) -> str:
    """``<hr.<token>@domain>`` for the question, ``<hr.<token>.<suffix>@domain>`` for later mails."""
    return f"<hr.{token}{'.' + suffix if suffix else ''}@{mailbox.domain}>"


def token_of_address(address: str, mailbox: Address) -> tuple[str, str] | None:
    """("reply" | "bounce", token) when ``address`` is one of the mailbox's plus-addresses, else None."""
    local, at, domain = address.strip().strip("<>").rpartition("@")
    if not at or domain.lower() != mailbox.domain.lower():
        return None
    base, plus, tag = local.partition("+")
    if not plus or base.lower() != mailbox.username.lower():
        return None
    tag = tag.lower()
    kind = "reply"
    if tag.startswith(BOUNCE_TAG):
        kind, tag = "bounce", tag[len(BOUNCE_TAG):]
    return (kind, tag) if _TOKEN.fullmatch(tag) else None


def tokens_of_message_ids(header: str | None) -> list[str]:
    """The thread tokens in an In-Reply-To or References header, in order, without repeats."""
    found: list[str] = []
    for match in _MESSAGE_ID.finditer(header or ""):
        token = match.group(1).lower()
        if token not in found:
            found.append(token)
    return found

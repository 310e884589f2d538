"""Keyset cursors for request lists: an opaque, signed position (created_at, id) in one tenant's list.

A page after a cursor is an index range that starts at that position, so the thousandth page costs
what the first does, and rows inserted meanwhile never shift a page (no OFFSET). The position is
signed, bound to the tenant and to the list's filters, so a cursor that was altered, forged, or
given out to another tenant or for another filter is refused (400) instead of read as a position.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from handraise.core.errors import BadRequestError

# Domain separation: this key signs list positions and nothing else (ServerSecret.key's purpose).
KEY_PURPOSE = "request list cursor"
_VERSION = b"c1"
# 16 bytes of HMAC-SHA256: forging one is 2**128 work, and the cursor stays short in a URL.
_TAG_BYTES = 16
# A cursor longer than this was not made here (an id is at most 64 characters).
MAX_CURSOR_CHARS = 200
_REFUSED = "cursor is not one this server gave out for this list"


@dataclass(frozen=True, order=True)
class Position:
    """Where a page ended: the last row's creation time and id (ids break ties of equal times)."""

    created_at: float
    id: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorSigner:
    """Signs and checks positions under one key: ``scope`` binds a cursor to its tenant and filters."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _tag(self, scope: Mapping[str, str | None], payload: bytes) -> bytes:
        bound = "\x00".join(f"{k}={'' if v is None else v}" for k, v in sorted(scope.items()))
        mac = hmac.new(self._key, _VERSION + b"\x00" + bound.encode() + b"\x00" + payload, hashlib.sha256)
        return mac.digest()[:_TAG_BYTES]

    def encode(self, position: Position, *, scope: Mapping[str, str | None]) -> str:
        # repr() of a float reads back as the same float: the position is exact, not rounded.
        payload = f"{position.created_at!r}\x1f{position.id}".encode()
        return _b64(_VERSION + payload) + "." + _b64(self._tag(scope, payload))

    def decode(self, cursor: str, *, scope: Mapping[str, str | None]) -> Position:
        """The position a cursor names; ``BadRequestError`` for one altered, forged or not for ``scope``."""
        body, dot, tag = cursor.partition(".")
        if not dot or len(cursor) > MAX_CURSOR_CHARS:
            raise BadRequestError(_REFUSED)
        try:
            raw, given = _unb64(body), _unb64(tag)
        except (binascii.Error, ValueError):
            raise BadRequestError(_REFUSED) from None
        if not raw.startswith(_VERSION):
            raise BadRequestError(_REFUSED)
        payload = raw[len(_VERSION):]
        if not hmac.compare_digest(given, self._tag(scope, payload)):
            raise BadRequestError(_REFUSED)
        # Signed by us, so well formed; parsed defensively all the same.
        try:
            created, _, request_id = payload.decode().partition("\x1f")
            return Position(float(created), request_id)
        except (UnicodeDecodeError, ValueError):
            raise BadRequestError(_REFUSED) from None

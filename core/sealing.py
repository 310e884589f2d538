"""Sensitive answers at rest: sealed under a key of their own (AES-256-GCM), that key wrapped under a
key derived from the server secret; destroying the wrapped key at delivery shreds the answer. And the
keyed, per-request digest of an answer that the journal keeps in place of the answer."""

from __future__ import annotations

import base64
import hmac
import os
from typing import Any

from handraise.core.serversecret import ServerSecret

_NONCE = 12


def _aad(tenant_id: str, request_id: str, what: bytes) -> bytes:
    # Binds a sealed value to its request: a ciphertext copied onto another row does not open.
    return b"\x00".join((b"handraise", what, tenant_id.encode(), request_id.encode()))


def _aesgcm(key: bytes) -> Any:
    # Imported on first use: a server that never sees a sensitive answer does not carry the library (6 MB).
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


class Sealer:
    def __init__(self, secret: ServerSecret) -> None:
        self._wrap_key = secret.key("sensitive answer wrapping")
        self._digest_key = secret.key("answer digest")

    def seal(self, *, tenant_id: str, request_id: str, canonical: str) -> tuple[str, str]:
        """(sealed answer, wrapped key), both base64: what the request row keeps until delivery."""
        key = os.urandom(32)
        n1, n2 = os.urandom(_NONCE), os.urandom(_NONCE)
        sealed = n1 + _aesgcm(key).encrypt(n1, canonical.encode(), _aad(tenant_id, request_id, b"answer"))
        wrapped = n2 + _aesgcm(self._wrap_key).encrypt(n2, key, _aad(tenant_id, request_id, b"key"))
        return base64.b64encode(sealed).decode(), base64.b64encode(wrapped).decode()

    def open(self, *, tenant_id: str, request_id: str, sealed: str, wrapped: str) -> str:
        """The canonical answer; ValueError when either part was altered or belongs elsewhere."""
        from cryptography.exceptions import InvalidTag

        try:
            w = base64.b64decode(wrapped)
            key = _aesgcm(self._wrap_key).decrypt(w[:_NONCE], w[_NONCE:], _aad(tenant_id, request_id, b"key"))
            s = base64.b64decode(sealed)
            return _aesgcm(key).decrypt(s[:_NONCE], s[_NONCE:], _aad(tenant_id, request_id, b"answer")).decode()
        except (InvalidTag, ValueError) as e:
            raise ValueError("the sealed answer does not open") from e

    def digest(self, *, tenant_id: str, request_id: str, canonical: str) -> str:
        """HMAC of the answer, salted by its request: without the server secret, no guess can be checked."""
        message = _aad(tenant_id, request_id, b"digest") + b"\x00" + canonical.encode()
        return hmac.digest(self._digest_key, message, "sha256").hex()  # hmac.new(...).hexdigest(), in one call

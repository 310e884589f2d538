"""The signing key: random bytes made once per installation and kept in the store, so that every
instance signs and checks the same CSRF tokens and mail thread tokens.

Not the server secret (``core/serversecret.py``), which stays outside the database and keys the
journal and sealed answers: a token signed with this key proves only that this installation made it.
"""

from __future__ import annotations

import secrets

from handraise.core.state import StateStore

_NAMESPACE, _KEY = "server", "secret"


class SigningKey:
    def __init__(self, *, state: StateStore) -> None:
        self._state = state
        self._value: bytes | None = None

    async def get(self) -> bytes:
        """The installation's key, made by whichever instance asks first (it never changes after)."""
        if self._value is None:
            stored = await self._state.set_if_absent(_NAMESPACE, _KEY, secrets.token_hex(32))
            self._value = bytes.fromhex(stored)
        return self._value

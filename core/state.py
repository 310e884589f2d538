"""Durable key/value state for connectors and core's chat path: a messenger's sync position, who was
told what, the names people go by. Values are short strings; state about one request names it and is
pruned with that request's other spent rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class StateStore(Protocol):
    """Namespaced keys to string values, shared by every instance (``core/store/state.py``)."""

    async def get(self, namespace: str, key: str) -> str | None:
        """The stored value, or None."""

    async def set(self, namespace: str, key: str, value: str, *, request_id: str | None = None) -> None:
        """Store ``value`` (the last writer wins); ``request_id``: pruned with that request."""

    async def set_if_absent(self, namespace: str, key: str, value: str, *, request_id: str | None = None) -> str:
        """Store ``value`` unless one is there; what is stored (the first writer wins, atomically)."""

    async def update(self, namespace: str, key: str, change: Callable[[str | None], str], *,
                     request_id: str | None = None) -> str:
        """Change a value atomically: ``change`` (pure) maps what is stored (or None) to the new value and
        is applied again if another writer got in first. Returns what was stored."""

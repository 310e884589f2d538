"""Leadership: which instance runs a stateful loop (delivery recovery, Telegram polling, Matrix sync,
Slack Socket Mode, the mailbox) when several share one store. On SQLite, one process always leads."""

from __future__ import annotations

from typing import Protocol


class Leadership(Protocol):
    """Named leader locks (``core/store/leadership.py``): a loop runs while its instance holds the lock."""

    async def take(self, name: str) -> bool:
        """Lead the named loop: True when this instance holds its lock (now or already)."""

    async def alive(self, name: str) -> bool:
        """Whether this instance still holds the lock (its connection may have died)."""

    async def release(self, name: str) -> None:
        """Stop leading: another instance may take over."""

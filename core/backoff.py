"""Capped, jittered exponential backoff: the one retry and reconnect policy (channels and dispatcher).

Written once, as errbot's ``_delay_reconnect`` is, but with ``asyncio.sleep``: ``Backoff`` says how long
to pause, ``retry`` calls a step until it succeeds, ``run_forever`` calls a loop's step again whenever
it returns or fails, ``while_unavailable`` makes a store call again while the store does not answer.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from handraise.core.errors import UnavailableError

T = TypeVar("T")


class Backoff:
    """Capped, jittered exponential delays."""

    def __init__(self, *, initial: float, cap: float) -> None:
        self.initial = initial
        self.cap = cap
        self._delay = initial

    def next(self) -> float:
        """The next pause: between half and all of the current delay, which then doubles up to the cap."""
        pause = self._delay * (0.5 + random.random() / 2)
        self._delay = min(self._delay * 2, self.cap)
        return pause

    def reset(self) -> None:
        self._delay = self.initial


async def retry(step: Callable[[], Awaitable[T]], *, backoff: Backoff, log: logging.Logger, what: str) -> T:
    """Call ``step`` until it succeeds, pausing as ``backoff`` says after each failure; return its result."""
    while True:
        try:
            return await step()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            pause = backoff.next()
            log.warning("%s failed (%s); retrying in %.1fs", what, type(e).__name__, pause)
        await asyncio.sleep(pause)


async def run_forever(step: Callable[[], Awaitable[None]], *, backoff: Backoff, log: logging.Logger,
                      what: str) -> None:
    """Run ``step`` again whenever it returns or fails, after a pause (reset by each clean return)."""
    while True:
        try:
            await step()
            backoff.reset()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("%s failed (%s)", what, type(e).__name__)
        await asyncio.sleep(backoff.next())


async def while_unavailable(call: Callable[[], Awaitable[T]], *, log: logging.Logger, what: str) -> T:
    """``call()``, made again while the store answers ``UnavailableError`` (PostgreSQL stopped, restarting,
    unreachable; its breaker refuses at once, so the pause is here): a task with work half done (a message
    posted, its ``sent`` not yet written) waits for the store instead of dying with it."""
    backoff = Backoff(initial=0.2, cap=5.0)
    warned = False
    while True:
        try:
            return await call()
        except UnavailableError:
            if not warned:
                log.warning("%s: the store does not answer; waiting for it", what)
                warned = True
        await asyncio.sleep(backoff.next())

"""Polling for updates on exactly one instance: the one that holds the polling lock (leadership).

Several instances may share one bot token, but Telegram serves ``getUpdates`` to one caller at a
time; a PostgreSQL advisory lock (on SQLite, the one process) elects it, and a standby keeps
trying to take over. Webhook mode needs none of this.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from telegram.error import Forbidden, TelegramError
from telegram.ext import Updater

from handraise.bots.telegram.errors import scrub
from handraise.bots.telegram.settings import TelegramSettings
from handraise.core.errors import ConnectorError

if TYPE_CHECKING:
    from handraise.core.leadership import Leadership

POLL_LOCK = "telegram-poll"


class TelegramPoller:
    """Polls while this instance leads; ``polling`` says whether it does right now."""

    def __init__(self, *, updater: Updater, leadership: Leadership, settings: TelegramSettings,
                 log: logging.Logger) -> None:
        self.updater = updater
        self.leadership = leadership
        self.settings = settings
        self.log = log
        self.polling = False  # this instance holds the polling lock and polls
        self._error: TelegramError | None = None  # why polling cannot go on (a Forbidden getUpdates)

    async def poll_while_leading(self) -> None:
        """Poll while this instance holds the lock; a standby keeps trying to take it over."""
        interval = self.settings.leader_check_seconds
        if not await self.leadership.take(POLL_LOCK):
            await asyncio.sleep(interval)
            return
        updater = self.updater
        self._error = None
        try:
            await updater.start_polling(timeout=self.settings.poll_timeout_seconds,
                                        allowed_updates=["message", "callback_query"],
                                        error_callback=self._on_error)
            self.polling = True
            self.log.info("telegram polling: this instance polls")
            while updater.running and await self.leadership.alive(POLL_LOCK):
                died = self._failure()
                if died is not None:
                    # Holding the lock without polling would silence the bot on every instance.
                    self.log.error("telegram polling stopped (%s); releasing the polling lock", died)
                    raise ConnectorError(f"telegram polling stopped ({died})")
                await asyncio.sleep(interval)
            else:
                self.log.warning("telegram polling: lost the polling lock; standing by")
        finally:
            self.polling = False
            if updater.running:
                await _stop_updater(updater)
            await self.release()

    async def release(self) -> None:
        await self.leadership.release(POLL_LOCK)

    def _on_error(self, error: TelegramError) -> None:
        self.log.warning("telegram getUpdates failed: %s", scrub(str(error), self.settings))
        if isinstance(error, Forbidden):
            # The token works no more for updates (a revoked bot): python-telegram-bot would retry forever.
            self._error = error

    def _failure(self) -> str | None:
        """Why python-telegram-bot's polling ended on its own, or None while it polls.

        An InvalidToken (401: a revoked token) ends its polling task while ``updater.running`` stays
        True, and it offers no public way to see that: the task is read by its mangled name.
        """
        if self._error is not None:
            return type(self._error).__name__
        task = getattr(self.updater, "_Updater__polling_task", None)
        if isinstance(task, asyncio.Task) and task.done():
            error = None if task.cancelled() else task.exception()
            return type(error).__name__ if error is not None else "its task ended"
        return None


async def _stop_updater(updater: Any) -> None:
    try:
        await updater.stop()
    except Exception:
        # Its polling task died with an error (InvalidToken): stop() re-raises it before forgetting the task
        # and clearing its stop event, and with that event still set the next start_polling would spin
        # without polling. Forget both here, as stop() would have.
        if getattr(updater, "_Updater__polling_task", None) is not None:
            updater._Updater__polling_task = None
            updater._Updater__polling_task_stop_event.clear()

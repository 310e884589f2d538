"""python-telegram-bot's failures, wrapped once, and error texts made safe to log and journal."""

from __future__ import annotations

import datetime as dt
import re
import warnings

from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.warnings import PTBDeprecationWarning

from handraise.bots.telegram.settings import TelegramSettings
from handraise.core.errors import ConnectorError
from handraise.core.redaction import redact

_FORM_TOKEN = re.compile(r"/f/[A-Za-z0-9_-]+")


def wrap(error: TelegramError, settings: TelegramSettings) -> ConnectorError:
    """What to retry, when, and what is hopeless."""
    message = scrub(str(error), settings)
    if isinstance(error, RetryAfter):
        return ConnectorError(f"Telegram rate limit: {message}", retry_after=retry_seconds(error))
    if isinstance(error, InvalidToken):
        return ConnectorError("Telegram refused the bot token", permanent=True)
    if isinstance(error, ChatMigrated):
        return ConnectorError(f"the chat became supergroup {error.new_chat_id}: update chat_ids", permanent=True)
    if isinstance(error, (BadRequest, Forbidden)):
        return ConnectorError(f"Telegram: {message}", permanent=True)
    if isinstance(error, (TimedOut, NetworkError, Conflict)):
        return ConnectorError(f"Telegram unreachable: {message}")
    return ConnectorError(f"Telegram: {message}")


def retry_seconds(error: RetryAfter) -> float:
    # An int or a timedelta depending on PTB_TIMEDELTA; reading the int form warns.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        period = error.retry_after
    return period.total_seconds() if isinstance(period, dt.timedelta) else float(period)


def scrub(text: str, settings: TelegramSettings) -> str:
    """An error text safe to show and journal: no bot token, no one-time link token."""
    text = text.replace(settings.token.get_secret_value(), "<token>")
    return redact(_FORM_TOKEN.sub("/f/…", text))

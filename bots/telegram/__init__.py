"""The Telegram bot: questions as messages with buttons, answered by a tap, a reply or the hosted form.

Import it as ``handraise.bots.telegram`` (entry point ``handraise.bots.telegram:TelegramConnector``),
never as a top-level ``telegram``: that name is python-telegram-bot's."""

from __future__ import annotations

from handraise.bots.telegram.connector import TelegramConnector
from handraise.bots.telegram.settings import TelegramSettings, TelegramTenantSettings

__all__ = ["TelegramConnector", "TelegramSettings", "TelegramTenantSettings"]

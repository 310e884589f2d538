"""Slack connector: requests as Block Kit messages with buttons and a schema-built modal (slack-bolt)."""

from __future__ import annotations

from handraise.bots.slack.connector import SlackConnector
from handraise.bots.slack.settings import SlackSettings, SlackTenantSettings

__all__ = ["SlackConnector", "SlackSettings", "SlackTenantSettings"]

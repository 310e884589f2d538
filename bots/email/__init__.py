"""Email: questions by mail with personal one-time links, answers by reply (SMTP out, IMAP in)."""

from handraise.bots.email.connector import EmailConnector
from handraise.bots.email.settings import EmailSettings

__all__ = ["EmailConnector", "EmailSettings"]

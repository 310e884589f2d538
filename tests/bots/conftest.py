"""Fixtures the connector tests share: the session's real Synapse (Matrix tests and the Matrix contract driver),
and its mail servers (the email contract driver)."""

from __future__ import annotations

from harness.fixtures import synapse  # noqa: F401  (one Synapse per session, counted by the harness)
from harness.mail import dovecot, smtp_server  # noqa: F401  (one of each per session, counted by the harness)

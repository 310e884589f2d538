"""Fixtures the connector tests share: the session's real Synapse (Matrix tests and the Matrix contract driver)."""

from __future__ import annotations

from harness.fixtures import synapse  # noqa: F401  (one Synapse per session, counted by the harness)

"""The Matrix bot: a card per request in each configured room, answered by reply, thread or reaction.

Import it as ``bots.matrix`` (entry point ``bots.matrix:MatrixConnector``), never as a top-level ``matrix``."""

from __future__ import annotations

from handraise.bots.matrix.connector import MatrixConnector
from handraise.bots.matrix.settings import MatrixSettings, MatrixTenantSettings

__all__ = ["MatrixConnector", "MatrixSettings", "MatrixTenantSettings"]

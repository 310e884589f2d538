"""Handraise: ask a human over HTTP and wait, for a bounded time, for a validated answer.

The distribution installs this one import package. The repository keeps the
owner's top-level folders and maps them in (see ``pyproject.toml``):
``handraise.core`` is ``core/``, ``handraise.bots`` is ``bots/``,
``handraise.webforms`` is ``webforms/`` and ``handraise.templates`` is
``templates/`` (package data).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("handraise")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]

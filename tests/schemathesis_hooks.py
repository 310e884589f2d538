"""Schemathesis hooks for tests/core/test_openapi_conformance.py: each operation gets a key with its scope.

Loaded by the schemathesis CLI through ``SCHEMATHESIS_HOOKS``; the keys come from
``HANDRAISE_ST_KEYS`` (JSON: scope -> key), so nothing here knows the test config.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis

_KEYS: dict[str, str] = json.loads(os.environ.get("HANDRAISE_ST_KEYS", "{}"))


@schemathesis.auth(refresh_interval=None)
class ScopedKeys:
    """The bearer key for the first scope the operation's ``security`` names (none for open operations)."""

    def get(self, case: Any, ctx: Any) -> str | None:
        for requirement in case.operation.definition.raw.get("security") or []:
            for scope in requirement.get("bearer", []):
                if scope in _KEYS:
                    return _KEYS[scope]
        return None

    def set(self, case: Any, data: str | None, ctx: Any) -> None:
        if data is not None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

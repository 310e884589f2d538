"""A channel made without an app, for tests of its settings, routing and wording: nothing of core is
there to reach, so every interface core would hand it is None."""

from __future__ import annotations

from typing import Any

NO_CORE: dict[str, Any] = {"service": None, "state": None, "leadership": None, "chat_refs": None,
                           "deliveries": None, "signing_key": None}

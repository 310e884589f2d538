"""The connector interface every channel implements, and discovery through entry points.

A connector delivers requests to humans somewhere (a chat, a webhook, the hosted
form) and submits their correlated answers through the lifecycle service. It is
found by the entry-point group ``handraise.connectors`` and enabled by its
config section, so a connector's optional dependency is imported only when that
connector is enabled.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar

from aiohttp import ClientSession, web
from pydantic import BaseModel, ValidationError

from core.api import RequestView
from core.config import Settings
from core.errors import ConfigError

if TYPE_CHECKING:
    from core.service import RequestService

ENTRY_POINT_GROUP = "handraise.connectors"


class Connector(ABC):
    """One channel. Subclasses set ``name`` and ``settings_model`` and implement deliver/withdraw."""

    name: ClassVar[str]
    settings_model: ClassVar[type[BaseModel] | None] = None
    # Routes mount under /bots/{name}/ unless a connector serves its own absolute paths.
    mount_prefix: ClassVar[str | None] = None
    # Reconnect backoff (capped, jittered), shared by every loop a connector runs.
    backoff_initial: ClassVar[float] = 0.5
    backoff_cap: ClassVar[float] = 30.0

    def __init__(self, *, settings: Any, service: RequestService, http: ClientSession,
                 log: logging.Logger, app_settings: Settings) -> None:
        self.settings = settings
        self.service = service
        self.http = http
        self.log = log
        self.app_settings = app_settings
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- enabling --------------------------------------------------------------

    @classmethod
    def section(cls, app_settings: Settings) -> Any:
        return app_settings.connector_section(cls.name)

    @classmethod
    def is_enabled(cls, app_settings: Settings) -> bool:
        """Enabled when its config section is present (and not ``enabled = false``)."""
        section = cls.section(app_settings)
        if section is None:
            return False
        if isinstance(section, dict) and section.get("enabled") is False:
            return False
        return True

    @classmethod
    def load_settings(cls, app_settings: Settings) -> Any:
        if cls.settings_model is None:
            return None
        raw = cls.section(app_settings)
        raw = {k: v for k, v in raw.items() if k != "enabled"} if isinstance(raw, dict) else (raw or {})
        try:
            return cls.settings_model.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
            raise ConfigError(f"{cls.name}.{where}: {message}") from None

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect; long-running loops are started with ``spawn``."""

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()

    def spawn(self, coro: Awaitable[Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run_forever(self, step: Callable[[], Awaitable[None]], *, what: str) -> None:
        """Run ``step`` again whenever it returns or fails, after a capped, jittered backoff."""
        delay = self.backoff_initial
        while True:
            try:
                await step()
                delay = self.backoff_initial
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("%s failed (%s); retrying in %.1fs", what, type(e).__name__, delay)
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, self.backoff_cap)

    # -- routing ---------------------------------------------------------------

    def serves(self, tenant_id: str) -> bool:
        return bool(self.targets(tenant_id))

    @abstractmethod
    def targets(self, tenant_id: str) -> list[str]:
        """Where this connector posts a tenant's requests (chat ids, room ids, URLs)."""

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        """Whether a messenger user may answer this tenant's requests (the allowlist)."""
        return False

    # -- delivery --------------------------------------------------------------

    @abstractmethod
    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        """Post the question; return what identifies the posted message (kept for withdraw).

        Raise ``ConnectorError`` (with ``retry_after`` or ``permanent``) on failure.
        """

    @abstractmethod
    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """The request is terminal: show its outcome where it was posted and remove its buttons."""

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """Ping a still-pending request once more (``remind_after_seconds``); default: post it again."""
        await self.deliver(request, target=target)

    def remind_after(self) -> float | None:
        value = getattr(self.settings, "remind_after_seconds", None)
        return float(value) if value else None

    def routes(self) -> list[web.AbstractRouteDef]:
        return []


def discover() -> dict[str, type[Connector]]:
    """Connector classes by name from the entry-point group, imported lazily by the caller."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}  # type: ignore[misc]


def load_enabled(app_settings: Settings) -> list[type[Connector]]:
    """The classes of the enabled connectors; an enabled one that cannot be imported is a ConfigError."""
    classes: list[type[Connector]] = []
    for name, ep in sorted(discover().items()):
        section = app_settings.connector_section(name)
        if name != "web" and section is None:
            continue
        try:
            cls = ep.load()
        except ImportError as e:
            raise ConfigError(
                f"{name}: connector is configured but cannot be imported ({e}); install handraise[{name}]"
            ) from None
        if name == "web" or cls.is_enabled(app_settings):
            classes.append(cls)
    return classes

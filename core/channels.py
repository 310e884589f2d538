"""A channel: anything that reaches humans (a chat bot, a webhook, the hosted forms), and how channels are found.

A :class:`Channel` has a name, validates its own config section with its ``settings_model``,
starts and stops its long-lived work and may serve routes. A channel that also posts requests
somewhere and takes them back is a :class:`~handraise.core.connectors.Connector`; only those are
asked to deliver. Channels are found by the entry-point group ``handraise.connectors`` and enabled
by their config section, so a channel's optional dependency is imported only when it is enabled.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC
from collections.abc import Awaitable, Callable, Coroutine
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from aiohttp import ClientSession, web
from pydantic import BaseModel, ValidationError

from handraise.core import backoff
from handraise.core.config import Settings
from handraise.core.errors import ConfigError

if TYPE_CHECKING:
    from handraise.core.annotations import AnnotationService
    from handraise.core.chatrefs import ChatRefs
    from handraise.core.deliveries import DeliveryLog
    from handraise.core.leadership import Leadership
    from handraise.core.service import RequestService
    from handraise.core.signingkey import SigningKey
    from handraise.core.state import StateStore

# Named "connectors" since before channels that post nowhere joined it; it lists every channel.
ENTRY_POINT_GROUP = "handraise.connectors"
# How long Channel.stop waits for its cancelled tasks before cancelling them again.
STOP_RECANCEL_SECONDS = 5.0

SettingsT = TypeVar("SettingsT")
T = TypeVar("T")


class Channel(ABC, Generic[SettingsT]):
    """One way to reach humans. Subclasses set ``name`` and ``settings_model`` (whose instance is
    ``settings``: ``class SlackConnector(ChatConnector[SlackSettings])``)."""

    name: ClassVar[str]
    settings_model: ClassVar[type[BaseModel] | None] = None
    # Routes mount under /bots/{name}/ unless a channel serves its own absolute paths.
    mount_prefix: ClassVar[str | None] = None
    # Reconnect backoff (capped, jittered), shared by every loop a channel runs.
    backoff_initial: ClassVar[float] = 0.5
    backoff_cap: ClassVar[float] = 30.0

    def __init__(self, *, settings: SettingsT, service: RequestService, state: StateStore, leadership: Leadership,
                 chat_refs: ChatRefs, deliveries: DeliveryLog, signing_key: SigningKey, http: ClientSession,
                 log: logging.Logger, app_settings: Settings, annotations: AnnotationService | None = None) -> None:
        self.settings = settings
        # The request lifecycle: the one door to requests.
        self.service = service
        # Beside it, one small interface per concept: durable key/value state, leader locks for loops one
        # instance runs, button tokens and posted messages, where requests were delivered, the signing key.
        self.state = state
        self.leadership = leadership
        self.chat_refs = chat_refs
        self.deliveries = deliveries
        self.signing_key = signing_key
        self.http = http
        self.log = log
        self.app_settings = app_settings
        # The run-annotation side-store, for rating buttons on resolved requests (None: no ratings).
        self.annotations = annotations
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
        """This channel's section validated by its ``settings_model`` (None without one)."""
        if cls.settings_model is None:
            return None
        raw = cls.section(app_settings)
        raw = {k: v for k, v in raw.items() if k != "enabled"} if isinstance(raw, dict) else (raw or {})
        try:
            return cls.settings_model.model_validate(raw)
        except ValidationError as e:
            raise app_settings.config_error(e, section=(cls.name,)) from None

    @classmethod
    async def check(cls, settings: Any, *, app_settings: Settings, http: ClientSession) -> list[str] | None:
        """``handraise doctor``: try the credentials live, change nothing; each problem is one line with its fix.

        None means this channel has nothing to try (the default); ``[]`` means every check passed.
        """
        return None

    def serves(self, tenant_id: str) -> bool:
        """Whether this channel reaches this tenant's humans (a request may then name it in ``channels``)."""
        return True

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect; long-running loops are started with ``spawn``."""

    async def stop(self) -> None:
        tasks = list(self._tasks)
        running = tasks
        while running:
            for task in running:
                task.cancel()
            # Cancelled again until done: a library (or Python 3.11's asyncio.wait_for) may swallow one
            # cancellation, and a loop that carries on after it would hold stop() forever (a Matrix
            # sync loop waited for the batch lock that stop() holds). Not sooner than a few seconds:
            # a task's own cleanup (a finally that stops polling, releases a lock) gets to finish.
            await asyncio.wait(running, timeout=STOP_RECANCEL_SECONDS)
            running = [t for t in running if not t.done()]
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: a loop's last failure was logged where it happened
        self._tasks.clear()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _backoff(self) -> backoff.Backoff:
        return backoff.Backoff(initial=self.backoff_initial, cap=self.backoff_cap)

    async def retry(self, step: Callable[[], Awaitable[T]], *, what: str) -> T:
        """Call ``step`` until it succeeds, with this channel's backoff; return its result."""
        return await backoff.retry(step, backoff=self._backoff(), log=self.log, what=what)

    async def run_forever(self, step: Callable[[], Awaitable[None]], *, what: str) -> None:
        """Run ``step`` again whenever it returns or fails, after this channel's backoff."""
        await backoff.run_forever(step, backoff=self._backoff(), log=self.log, what=what)

    def routes(self) -> list[web.AbstractRouteDef]:
        return []


def discover() -> dict[str, EntryPoint]:
    """The channels' entry points by name; ``ep.load()`` imports a class only when it is wanted."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_enabled(app_settings: Settings) -> list[type[Channel[Any]]]:
    """The classes of the enabled channels; an enabled one that cannot be imported is a ConfigError."""
    classes: list[type[Channel[Any]]] = []
    for name, ep in sorted(discover().items()):
        if app_settings.connector_section(name) is None:
            continue  # not configured: never imported, so its optional dependency may be missing
        try:
            cls = ep.load()
        except ImportError as e:
            raise ConfigError(
                f"{name}: connector is configured but cannot be imported ({e}); install handraise[{name}]"
            ) from None
        if cls.is_enabled(app_settings):
            classes.append(cls)
    return classes

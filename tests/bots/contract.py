"""The connector contract's driver interface: how the shared contract test plays the human on a messenger.

Each chat connector adds one module ``tests/bots/contract_<name>.py`` that subclasses
:class:`ConnectorDriver` and registers a factory with :func:`register_driver`;
``tests/bots/test_contract.py`` finds those modules by name and runs every contract test
against every registered driver. A driver owns its messenger side (a fake server, a real
Synapse ...) and speaks to it the way a human's client would.

Two people exist in every driver: the allowed human (on the connector's allowlist for
tenant ``acme``) and a stranger (on no allowlist). The contract's requests all belong to
``acme`` and name the driver's channel.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
from conftest import Api, base_config, running_app, settings_from

from handraise.core.appkeys import DELIVERIES, DISPATCHER
from handraise.core.connectors import Connector

DriverFactory = Callable[[pytest.FixtureRequest], "ConnectorDriver"]
DRIVERS: dict[str, DriverFactory] = {}


def register_driver(name: str) -> Callable[[DriverFactory], DriverFactory]:
    """``@register_driver("matrix")`` on a factory ``(pytest request) -> ConnectorDriver``."""

    def add(factory: DriverFactory) -> DriverFactory:
        if name in DRIVERS:
            raise ValueError(f"a contract driver named {name!r} is registered already")
        DRIVERS[name] = factory
        return factory

    return add


def load_drivers() -> dict[str, DriverFactory]:
    """Import every ``tests/bots/contract_*.py`` so its drivers register themselves."""
    here = Path(__file__).parent
    for module in pkgutil.iter_modules([str(here)]):
        if module.name.startswith("contract_"):
            try:
                importlib.import_module(f"{__package__}.{module.name}")
            except ModuleNotFoundError as e:
                # A messenger's optional library (matrix-nio) is missing: its cases skip, the others run.
                DRIVERS.setdefault(module.name.removeprefix("contract_"), _missing(module.name, e))
    return DRIVERS


def _missing(module: str, error: ModuleNotFoundError) -> DriverFactory:
    def skip(request: pytest.FixtureRequest) -> ConnectorDriver:
        pytest.skip(f"{module} needs {error.name}, which is not installed")

    return skip


@dataclass
class Posted:
    """One question as it appeared on the messenger, for the driver to act on."""

    request_id: str
    target: str
    ref: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Action:
    """Something a person did (a press, a reply), for the driver to check the bot's reaction to."""

    posted: Posted
    kind: str  # "press" | "reply"
    stranger: bool
    handle: dict[str, Any] = field(default_factory=dict)


class ConnectorDriver(ABC):
    """Plays the human on one messenger. Subclass, implement the abstract methods, register a factory."""

    channel: ClassVar[str]
    # What the messenger lets a bot do; the contract checks the rest alike on every connector.
    removes_replies: ClassVar[bool] = True  # the bot can delete (redact) a person's message
    typed_decisions: ClassVar[bool] = True  # a typed "approve" decides an approval (else: buttons only)
    # Tenant acme's time zone (config ``timezone``); a contract case sets another to see deadlines in it.
    timezone: str = "UTC"
    # Contract cases this connector does not pass yet: test function name -> why (a strict xfail, so
    # the entry must go the day the case passes).
    pending: ClassVar[dict[str, str]] = {}

    # Keys a contract case sets in the connector's config section (``remind_after_seconds``): assign
    # a new mapping on the driver, this one is shared and read-only.
    section_overrides: Mapping[str, Any] = MappingProxyType({})

    # -- setup -----------------------------------------------------------------

    async def start(self) -> None:
        """Start the messenger side (fake server, harness); called before the app starts."""

    async def stop(self) -> None:
        """Stop what ``start`` started; called after the app stopped."""

    @abstractmethod
    def connector_classes(self) -> list[type[Connector]]:
        """The connector classes the app under test runs."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Config sections to add to ``base_config`` (e.g. ``{"telegram": {...}}``): tenant ``acme``
        is served, the allowed human may answer, the stranger may not."""

    async def ready(self, api: Api) -> None:
        """Wait until the connector listens for humans (e.g. its first long poll is parked)."""

    @abstractmethod
    def principal(self) -> str:
        """The principal core must record for the allowed human (``telegram:42`` ...)."""

    @abstractmethod
    def display_name(self) -> str:
        """How outcomes name the allowed human ("Alice (@alice)", a mention ...)."""

    # -- the human's side ------------------------------------------------------

    async def posted(self, api: Api, request: dict[str, Any]) -> Posted:
        """Wait for the question to be delivered; by default from the delivery's ``ref``."""
        await api.app[DISPATCHER].idle()
        rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])
        sent = [r for r in rows if r.channel == self.channel and r.status == "sent"]
        assert sent, f"no {self.channel} delivery sent: {rows}"
        return Posted(request_id=request["id"], target=sent[0].target, ref=sent[0].ref)

    @abstractmethod
    async def press(self, posted: Posted, choice: str, *, stranger: bool = False) -> Action:
        """Answer with the messenger's direct control for ``choice`` ("approve", "reject", an enum
        value): a button; on a messenger without buttons, its quickest equivalent."""

    @abstractmethod
    async def reply(self, posted: Posted, text: str, *, stranger: bool = False) -> Action:
        """Reply to the question with ``text`` as a chat message (threaded/quoted the messenger's way)."""

    @abstractmethod
    async def assert_refused(self, action: Action) -> None:
        """The person was told they may not answer (e.g. "not authorized")."""

    @abstractmethod
    async def assert_reply_removed(self, action: Action) -> None:
        """A chat reply to a sensitive request was refused and removed where the messenger allows
        (deleted, redacted), and the person was pointed to the form."""

    @abstractmethod
    async def assert_withdrawn(self, posted: Posted, outcome: str) -> None:
        """The question now shows ``outcome`` ("Answered", "Expired", "Cancelled") and no buttons."""

    @abstractmethod
    async def told(self, action: Action) -> str:
        """What the bot said to the person about what they did (a notice, a private or ephemeral message)."""

    async def assert_removed(self, action: Action) -> None:
        """The person's reply is gone from the chat (only asked when ``removes_replies``)."""
        raise NotImplementedError

    @abstractmethod
    async def question_text(self, posted: Posted) -> str:
        """The question as people read it now (text, buttons' labels)."""

    @abstractmethod
    async def outcome_text(self, posted: Posted) -> str:
        """The withdrawn question's outcome as people read it (call after ``assert_withdrawn``)."""

    @abstractmethod
    async def open_form(self, posted: Posted, *, stranger: bool = False) -> str | None:
        """Ask for the form the way the messenger offers it: the one-time link the person got
        (privately), or None when they got none (they were told why)."""

    @abstractmethod
    async def shared_view(self, posted: Posted) -> str:
        """Everything about the request that everyone in the shared chat can read: the question,
        its buttons (with their URLs), the bot's public notices."""

    @abstractmethod
    async def reminder_text(self, posted: Posted) -> str:
        """The first reminder the bot sent about the question, as people read it."""

    async def assert_no_buttons_left(self) -> None:
        """No message the bot sent (question, notice, private link) has a live button any more (called
        after ``assert_withdrawn``); a messenger without buttons has nothing to check."""

    # -- running ---------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, storage_url: str) -> AsyncIterator[Api]:
        await self.start()
        try:
            config = base_config(storage_url, **self.config())
            config["tenants"][0]["timezone"] = self.timezone
            config[self.channel] = {**config[self.channel], **self.section_overrides}
            settings = settings_from(config)
            async with running_app(settings, connector_classes=self.connector_classes()) as api:
                await self.ready(api)
                yield api
        finally:
            await self.stop()

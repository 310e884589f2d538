"""Channels and connectors: every registered entry point is a channel, and only connectors deliver."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import OPERATOR_KEY, base_config, running_app, settings_from

from handraise.core.api import RequestView
from handraise.core.appkeys import CHANNELS, CONNECTORS, DISPATCHER
from handraise.core.channels import Channel, discover
from handraise.core.connectors import Connector
from handraise.webforms.connector import WebFormsChannel


@pytest.mark.parametrize("name", sorted(discover()))
def test_every_registered_entry_point_loads_as_a_channel_of_its_name(name: str) -> None:
    cls = discover()[name].load()
    assert isinstance(cls, type) and issubclass(cls, Channel), cls
    assert cls.name == name


def test_the_web_forms_are_a_channel_and_the_chat_bots_connectors() -> None:
    found = {name: ep.load() for name, ep in discover().items()}
    assert not issubclass(found["web"], Connector)
    assert all(issubclass(found[name], Connector) for name in ("telegram", "matrix", "slack", "email", "webhooks"))


class RecordingConnector(Connector):
    name: ClassVar[str] = "recorder"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delivered: list[str] = []
        self.withdrawn: list[str] = []

    def targets(self, tenant_id: str) -> list[str]:
        return ["room"]

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        self.delivered.append(request.id)
        return {"n": len(self.delivered)}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.withdrawn.append(request.id)


class DeliverTrap(Channel[None]):
    """A channel that happens to have methods named like a connector's: never to be called."""

    name: ClassVar[str] = "trap"
    called: ClassVar[list[str]] = []

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        self.called.append("deliver")
        return {}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        self.called.append("withdraw")

    def targets(self, tenant_id: str) -> list[str]:
        self.called.append("targets")
        return ["somewhere"]


async def test_only_connectors_are_asked_to_deliver_and_withdraw(tmp_path: Path) -> None:
    DeliverTrap.called.clear()
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    classes: list[type[Channel[Any]]] = [WebFormsChannel, RecordingConnector, DeliverTrap]
    async with running_app(settings, connector_classes=classes) as api:
        assert set(api.app[CHANNELS]) == {"web", "recorder", "trap"}
        assert set(api.app[CONNECTORS]) == {"recorder"} == set(api.app[DISPATCHER].connectors)
        # Every channel reaches the tenant, so a request may name each of them.
        created = await api.create({"unique_id": "ch-1", "message_for_user": "Go?",
                                    "channels": ["web", "recorder", "trap"]})
        assert created["channels"] == ["web", "recorder", "trap"]
        await api.app[DISPATCHER].idle()
        status, _ = await api.submit("ch-1", "yes", key=OPERATOR_KEY)
        assert status == 200
        await api.app[DISPATCHER].idle()

        recorder = api.app[CONNECTORS]["recorder"]
        assert isinstance(recorder, RecordingConnector)
        assert recorder.delivered == [created["id"]] and recorder.withdrawn == [created["id"]]
        assert DeliverTrap.called == []
        _, body = await api.call("GET", f"/v1/requests/{created['id']}", key=OPERATOR_KEY)
        assert [(d["channel"], d["target"]) for d in body["deliveries"]] == [("recorder", "room")]

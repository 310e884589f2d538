"""Channels: found by entry point and enabled by their section, their loops and stop, and only connectors deliver."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import OPERATOR_KEY, base_config, running_app, settings_from

from handraise.core.api import RequestView
from handraise.core.appkeys import CHANNELS, CONNECTORS, DISPATCHER
from handraise.core.channels import Channel, discover, load_enabled
from handraise.core.connectors import Connector
from handraise.core.errors import ConfigError
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


class PostsNowhere(Channel[None]):
    name: ClassVar[str] = "web"


class LoopingChannel(Channel[None]):
    name: ClassVar[str] = "looping"
    backoff_initial = 0.01
    backoff_cap = 0.04


def test_channels_are_found_by_entry_point() -> None:
    found = discover()
    assert {"telegram", "webhooks"} <= set(found)
    assert found["telegram"].value == "handraise.bots.telegram:TelegramConnector"
    assert found["telegram"].load().name == "telegram"
    assert found["webhooks"].load().name == "webhooks"


def test_a_channel_is_enabled_by_its_section(tmp_path: Path) -> None:
    from handraise.bots.telegram import TelegramConnector

    url = f"sqlite:///{tmp_path / 'c.db'}"
    section = {"token": "1:x", "chat_ids": [1], "allowed_user_ids": [2], "tenant": "acme"}
    assert not TelegramConnector.is_enabled(settings_from(base_config(url)))
    assert TelegramConnector.is_enabled(settings_from(base_config(url, telegram=section)))
    assert not TelegramConnector.is_enabled(settings_from(base_config(url, telegram={**section, "enabled": False})))
    with pytest.raises(ConfigError, match=r"telegram\.token: is required"):
        TelegramConnector.load_settings(settings_from(base_config(url, telegram={"chat_ids": [1]})))


def test_load_enabled_imports_only_configured_channels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    import handraise.core.channels as channels

    eps = {
        "web": EntryPoint("web", "tests.core.test_channels:PostsNowhere", "handraise.connectors"),
        "telegram": EntryPoint("telegram", "handraise.bots.telegram:TelegramConnector", "handraise.connectors"),
        "slack": EntryPoint("slack", "no_such_module_anywhere:Nope", "handraise.connectors"),
    }
    monkeypatch.setattr(channels, "discover", lambda: eps)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    # An unconfigured channel is never imported, so its missing dependency does not matter.
    # The web channel's table is there by default: it is on without a [web] section.
    assert load_enabled(settings_from(base_config(url))) == [PostsNowhere]
    with pytest.raises(ConfigError, match=r"slack: connector is configured but cannot be imported"):
        load_enabled(settings_from(base_config(url, slack={"token": "x"})))


async def test_run_forever_runs_the_step_again_after_a_pause(tmp_path: Path) -> None:
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    async with running_app(settings, connector_classes=[LoopingChannel]) as api:
        channel = api.app[CHANNELS]["looping"]
        stamps: list[float] = []
        loop = asyncio.get_running_loop()
        seven = asyncio.Event()

        async def failing() -> None:
            stamps.append(loop.time())
            if len(stamps) >= 7:
                seven.set()
            raise OSError("down")

        task = channel.spawn(channel.run_forever(failing, what="test loop"), name="loop")
        await asyncio.wait_for(seven.wait(), timeout=30)
        task.cancel()
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        # A failing step is never retried at once: at least half the initial delay passes (a loaded
        # machine only makes the pauses longer; the cap is the Backoff test's).
        assert all(gap >= 0.005 for gap in gaps), gaps

        tries = []

        async def flaky() -> str:
            tries.append(1)
            if len(tries) < 3:
                raise OSError("not yet")
            return "up"

        assert await channel.retry(flaky, what="test connect") == "up"
        assert len(tries) == 3


async def test_stop_ends_a_loop_that_swallowed_one_cancellation(tmp_path: Path) -> None:
    # A loop that carries on after one cancellation (Python 3.11's wait_for returning a result that
    # arrived with the cancel; a library catching it) must not hold stop() forever: a Matrix sync loop
    # did, waiting for the batch lock stop() held, and the instance never stopped.
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    async with running_app(settings, connector_classes=[LoopingChannel]) as api:
        channel = api.app[CHANNELS]["looping"]
        started, swallowed = asyncio.Event(), asyncio.Event()

        async def stubborn() -> None:
            try:
                started.set()
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed.set()  # and carries on
            await asyncio.sleep(3600)

        task = channel.spawn(stubborn(), name="stubborn")
        await started.wait()
        stopping = asyncio.create_task(channel.stop())
        # Waited for, not cancelled on time-out: a second cancellation would unstick the loop by itself.
        await asyncio.wait([stopping], timeout=30)
        stopped = stopping.done()
        stopping.cancel()
        assert stopped and swallowed.is_set() and task.cancelled()

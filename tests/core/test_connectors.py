"""The connector base: discovery by entry point, enabling by config section, backoff, the shared answer path."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import base_config, running_app, settings_from
from pydantic import BaseModel, ConfigDict

from handraise.core.api import RequestView
from handraise.core.appkeys import CONNECTORS, SERVICE
from handraise.core.backoff import Backoff
from handraise.core.channels import Channel, discover, load_enabled
from handraise.core.connectors import Connector
from handraise.core.outcomes import outcome_text
from handraise.core.errors import ConfigError


class PlainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allowed: list[str] = []


class PlainConnector(Connector):
    name: ClassVar[str] = "plain"
    settings_model = PlainSettings
    backoff_initial = 0.01
    backoff_cap = 0.04

    def targets(self, tenant_id: str) -> list[str]:
        return ["the-room"]

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        return user_id == "ok-user"

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        return {}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        return None


class PostsNowhere(Channel[None]):
    name: ClassVar[str] = "web"


def test_connectors_are_found_by_entry_point() -> None:
    found = discover()
    assert {"telegram", "webhooks"} <= set(found)
    assert found["telegram"].value == "handraise.bots.telegram:TelegramConnector"
    assert found["telegram"].load().name == "telegram"
    assert found["webhooks"].load().name == "webhooks"


def test_a_connector_is_enabled_by_its_section(tmp_path: Path) -> None:
    from handraise.bots.telegram import TelegramConnector

    url = f"sqlite:///{tmp_path / 'c.db'}"
    section = {"token": "1:x", "chat_ids": [1], "allowed_user_ids": [2], "tenant": "acme"}
    assert not TelegramConnector.is_enabled(settings_from(base_config(url)))
    assert TelegramConnector.is_enabled(settings_from(base_config(url, telegram=section)))
    assert not TelegramConnector.is_enabled(settings_from(base_config(url, telegram={**section, "enabled": False})))
    with pytest.raises(ConfigError, match=r"telegram\.token: is required"):
        TelegramConnector.load_settings(settings_from(base_config(url, telegram={"chat_ids": [1]})))


def test_load_enabled_imports_only_configured_connectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    import handraise.core.channels as channels

    eps = {
        "web": EntryPoint("web", "tests.core.test_connectors:PostsNowhere", "handraise.connectors"),
        "telegram": EntryPoint("telegram", "handraise.bots.telegram:TelegramConnector", "handraise.connectors"),
        "slack": EntryPoint("slack", "no_such_module_anywhere:Nope", "handraise.connectors"),
    }
    monkeypatch.setattr(channels, "discover", lambda: eps)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    # An unconfigured connector is never imported, so its missing dependency does not matter.
    # The web channel's table is there by default: it is on without a [web] section.
    assert load_enabled(settings_from(base_config(url))) == [PostsNowhere]
    with pytest.raises(ConfigError, match=r"slack: connector is configured but cannot be imported"):
        load_enabled(settings_from(base_config(url, slack={"token": "x"})))


def test_backoff_doubles_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(initial=0.01, cap=0.04)
    pauses = [backoff.next() for _ in range(8)]
    ceilings = [0.01, 0.02, 0.04, 0.04, 0.04, 0.04, 0.04, 0.04]
    # Each pause lies between half and all of its delay: never beyond the cap, and jittered.
    assert all(c / 2 <= p <= c for p, c in zip(pauses, ceilings)), pauses
    assert len(set(pauses)) > 1
    backoff.reset()
    assert 0.005 <= backoff.next() <= 0.01


async def test_run_forever_runs_the_step_again_after_a_pause(tmp_path: Path) -> None:
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    async with running_app(settings, connector_classes=[PlainConnector]) as api:
        connector = api.app[CONNECTORS]["plain"]
        stamps: list[float] = []
        loop = asyncio.get_running_loop()
        seven = asyncio.Event()

        async def failing() -> None:
            stamps.append(loop.time())
            if len(stamps) >= 7:
                seven.set()
            raise OSError("down")

        task = connector.spawn(connector.run_forever(failing, what="test loop"), name="loop")
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

        assert await connector.retry(flaky, what="test connect") == "up"
        assert len(tries) == 3


async def test_stop_ends_a_loop_that_swallowed_one_cancellation(tmp_path: Path) -> None:
    # A loop that carries on after one cancellation (Python 3.11's wait_for returning a result that
    # arrived with the cancel; a library catching it) must not hold stop() forever: a Matrix sync loop
    # did, waiting for the batch lock stop() held, and the instance never stopped.
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    async with running_app(settings, connector_classes=[PlainConnector]) as api:
        connector = api.app[CONNECTORS]["plain"]
        started, swallowed = asyncio.Event(), asyncio.Event()

        async def stubborn() -> None:
            try:
                started.set()
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed.set()  # and carries on
            await asyncio.sleep(3600)

        task = connector.spawn(stubborn(), name="stubborn")
        await started.wait()
        stopping = asyncio.create_task(connector.stop())
        # Waited for, not cancelled on time-out: a second cancellation would unstick the loop by itself.
        await asyncio.wait([stopping], timeout=30)
        stopped = stopping.done()
        stopping.cancel()
        assert stopped and swallowed.is_set() and task.cancelled()


async def test_submit_answer_enforces_the_allowlist_and_maps_outcomes(tmp_path: Path) -> None:
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    async with running_app(settings, connector_classes=[PlainConnector]) as api:
        connector = api.app[CONNECTORS]["plain"]
        created = await api.create({"unique_id": "sa-1", "message_for_user": "Size?", "channels": ["plain"],
                                    "schema": {"type": "integer", "minimum": 1}})
        rid = created["id"]

        refused = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="eve", response=3)
        assert (refused.code, refused.message) == ("not_authorized", "You are not authorized to answer this.")
        invalid = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="ok-user", response=0)
        assert invalid.code == "invalid" and invalid.message.startswith("That answer is not valid:")
        accepted = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="ok-user", response=3)
        assert accepted.accepted and accepted.view is not None and accepted.view.resolved_by == "plain:ok-user"
        again = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="ok-user", response=4)
        assert again.code == "already_answered"
        other_tenant = await connector.submit_answer(tenant_id="globex", request_id=rid, user_id="ok-user",
                                                     response=4)
        assert other_tenant.code == "not_found"

        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=rid)
        events = [(e["event"], e["principal"]) for e in entries]
        assert ("answer_refused", "plain:eve") in events
        assert ("answered", "plain:ok-user") in events
        assert outcome_text(accepted.view) == "Answered by ok-user via plain"

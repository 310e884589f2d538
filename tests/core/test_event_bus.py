"""Events from other instances (core/events.py ``EventBus.on_notify``): their data is read from the store
only for a subscription that would get them; the listeners get them by id either way."""

from __future__ import annotations

import json
from typing import Any

from handraise.core.events import REQUEST_RESOLVED, Event, EventBus, PostgresListener


def _bus() -> tuple[EventBus, list[tuple[str, str]], list[Event]]:
    bus = EventBus(instance_id="here")
    loads: list[tuple[str, str]] = []
    heard: list[Event] = []

    async def loader(tenant_id: str, object_id: str) -> dict[str, Any] | None:
        loads.append((tenant_id, object_id))
        return None if object_id == "gone" else {"id": object_id, "status": "answered"}

    bus.register_loader(REQUEST_RESOLVED, loader)
    bus.add_listener(heard.append, remote_data=False)
    return bus, loads, heard


def _payload(object_id: str, *, tenant_id: str = "acme", origin: str = "there", seq: int = 7) -> str:
    return json.dumps({"type": REQUEST_RESOLVED, "tenant_id": tenant_id, "id": object_id, "run_id": None,
                       "origin": origin, "seq": seq})


async def test_with_no_stream_open_a_remote_event_reads_nothing_and_still_reaches_the_listeners() -> None:
    bus, loads, heard = _bus()
    await bus.on_notify(_payload("req_1"))
    assert loads == []
    assert [(e.object_id, e.local, e.seq, e.data) for e in heard] == [("req_1", False, 7, {})]
    await bus.on_notify(_payload("req_2", origin="here"))  # this instance's own: already published here
    assert len(heard) == 1


async def test_a_stream_that_would_get_it_has_the_data_read_for_it() -> None:
    bus, loads, heard = _bus()
    with bus.subscribe(tenant_id="other") as elsewhere:
        await bus.on_notify(_payload("req_1"))
        assert loads == [] and elsewhere.queue.empty()  # another tenant's stream: nothing read
        with bus.subscribe(tenant_id="acme") as sub:
            await bus.on_notify(_payload("req_2"))
            assert loads == [("acme", "req_2")]
            got = sub.queue.get_nowait()
            assert (got.object_id, got.data, got.seq, got.local) == ("req_2", {"id": "req_2", "status": "answered"},
                                                                     7, False)
            await bus.on_notify(_payload("gone"))  # deleted since: not published
            assert sub.queue.empty() and [e.object_id for e in heard] == ["req_1", "req_2"]


async def test_a_listener_that_reads_remote_data_has_it_read_for_every_remote_event() -> None:
    bus, loads, _ = _bus()
    seen: list[Event] = []
    bus.add_listener(seen.append)
    await bus.on_notify(_payload("req_1"))
    assert loads == [("acme", "req_1")] and seen[0].data == {"id": "req_1", "status": "answered"}


async def test_the_app_listens_to_other_instances_by_id_alone(tmp_path: Any) -> None:
    """The service's waiters, the dispatcher and the metrics: with no stream open, an event from another
    instance reads nothing from the store."""
    from conftest import base_config, running_app, settings_from

    from handraise.core.appkeys import SERVICE

    async with running_app(settings_from(base_config(f"sqlite:///{tmp_path / 'h.db'}"))) as api:
        assert api.app[SERVICE].bus._remote_data_listeners == 0  # noqa: SLF001


async def test_the_listener_makes_no_task_for_this_instances_own_notifications() -> None:
    import asyncio

    bus, loads, heard = _bus()
    listener = PostgresListener(dsn="postgresql://unused", channel="handraise_events", bus=bus)
    listener._handle(None, 1, "handraise_events", _payload("req_1", origin="here"))  # noqa: SLF001
    listener._handle(None, 1, "handraise_events", _payload("req_2"))  # noqa: SLF001
    # An agent's run id that spells the marker is escaped inside its string: not taken for this instance's.
    sneaky = json.dumps({"type": REQUEST_RESOLVED, "tenant_id": "acme", "id": "req_3",
                         "run_id": '"origin": "here"', "origin": "there"})
    listener._handle(None, 1, "handraise_events", sneaky)  # noqa: SLF001
    assert len(asyncio.all_tasks()) == 1 + 2  # this test's own, and the two others' events
    await asyncio.sleep(0)
    assert [e.object_id for e in heard] == ["req_2", "req_3"] and loads == []

"""People on chat channels, end to end through the wire-level fakes: allowlists that name people,
outcomes and the journal that name the person whatever channel they used."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from conftest import Api, base_config
from handraise.core.appkeys import DELIVERIES, DISPATCHER, SERVICE
from handraise.core.deliveries import DeliveryRecord
from handraise.core.errors import ConfigError
from tests.bots.contract import Posted
from tests.bots.contract_telegram import ALLOWED, CHAT, GLOBEX_CHAT, GLOBEX_USER, STRANGER, TelegramDriver
from tests.bots.test_telegram import ask as telegram_ask

BOB_TG = 7777
# Alice is Telegram's ALLOWED user, Bob another on-call person; Gus is globex's.
ALICE = {"id": "alice", "name": "Alice Example", "telegram": ALLOWED, "email": "alice@example.org",
         "groups": ["oncall"]}
BOB = {"id": "bob", "name": "Bob Builder", "telegram": BOB_TG, "groups": ["oncall"]}
GUS = {"id": "gus", "name": "Gus", "telegram": GLOBEX_USER}


class PeopleTelegramDriver(TelegramDriver):
    """Acme's allowlist names its people by group; globex's by name. ``acme_chats``: acme's group
    chats (none: acme is reached only in its people's private chats)."""

    def __init__(self, *, acme_chats: tuple[int, ...] = (CHAT,), **overrides: Any) -> None:
        super().__init__(**overrides)
        self.acme_chats = list(acme_chats)

    async def start(self) -> None:
        await super().start()
        self.tg.add_user(BOB_TG, first_name="Bob", username="bob")

    def config(self) -> dict[str, Any]:
        tenants = base_config("sqlite://")["tenants"]
        tenants[0]["people"] = [ALICE, BOB]
        tenants[1]["people"] = [GUS]
        section = super().config()["telegram"]
        section["tenants"] = {"acme": {"chat_ids": self.acme_chats, "allowed_user_ids": ["group:oncall"]},
                              "globex": {"chat_ids": [GLOBEX_CHAT], "allowed_user_ids": ["gus"]}}
        return {"telegram": section, "tenants": tenants}


@contextlib.asynccontextmanager
async def telegram(sqlite_url: str, **options: Any) -> AsyncIterator[tuple[TelegramDriver, Api]]:
    driver = PeopleTelegramDriver(**options)
    async with driver.running(sqlite_url) as api:
        yield driver, api


def ask(uid: str, **extra: Any) -> dict[str, Any]:
    return telegram_ask(uid, kind="approval", **extra)


async def test_a_person_on_a_named_allowlist_answers_and_is_named(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("p-1"))
        posted = await driver.posted(api, request)
        refused = await driver.press(posted, "approve", stranger=True)
        await driver.assert_refused(refused)
        await driver.callback_answer(await driver.press(posted, "approve"))
        done = await api.wait(request["id"])
        assert (done["status"], done["answered_by"]) == ("answered", f"telegram:{ALLOWED}")
        # Her configured name, not the one Telegram shows ("Alice (@alice)").
        await driver.assert_withdrawn(posted, "Approved by Alice Example via Telegram")
        entries = await api.journal(request["id"])
        answered = next(e for e in entries if e["event"] == "answered")
        assert answered["data"]["person"] == "alice"
        stranger = next(e for e in entries if e["event"] == "answer_refused")
        assert stranger["principal"] == f"telegram:{STRANGER}" and "person" not in stranger["data"]


async def test_another_tenants_person_is_never_resolved(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        # Gus may answer globex's questions; in acme he is a stranger, and nobody by name.
        request = await api.create(ask("p-2"))
        posted = await driver.posted(api, request)
        await driver.assert_refused(await driver.press(posted, "approve", user_id=GLOBEX_USER))
        refused = next(e for e in await api.journal(request["id"]) if e["event"] == "answer_refused")
        assert "person" not in refused["data"]


# -- assignment and four eyes in chat ----------------------------------------------------------


async def test_only_assigned_people_answer_in_telegram(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("a-1", assign_to=["bob"]))
        posted = await driver.posted(api, request)
        # Alice is on the allowlist, but the request is Bob's: refused as a stranger is, by tap,
        # by reply and for a form link.
        await driver.assert_refused(await driver.press(posted, "approve"))
        await driver.assert_refused(await driver.reply(posted, "approve"))
        assert await driver.open_form(posted) is None
        assert "not authorized" in driver.last_private.params["text"].lower()  # type: ignore[union-attr]
        reasons = [e["data"]["reason"] for e in await api.journal(request["id"]) if e["event"] == "answer_refused"]
        assert reasons == ["not_assigned"] * 3
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        await driver.callback_answer(await driver.press(posted, "approve", user_id=BOB_TG))
        done = await api.wait(request["id"])
        assert done["answered_by"] == f"telegram:{BOB_TG}"
        await driver.assert_withdrawn(posted, "Approved by Bob Builder via Telegram")


async def test_four_eyes_in_telegram(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        request = await api.create(ask("f-1", on_behalf_of="alice"))
        posted = await driver.posted(api, request)
        answer = await driver.callback_answer(await driver.press(posted, "approve"))
        assert "asked on your behalf" in answer.params["text"]
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        await driver.callback_answer(await driver.press(posted, "approve", user_id=BOB_TG))
        assert (await api.wait(request["id"]))["answered_by"] == f"telegram:{BOB_TG}"


async def test_telegram_reaches_assigned_people_in_their_private_chat(sqlite_url: str) -> None:
    async with telegram(sqlite_url) as (driver, api):
        driver.tg.started.add(ALLOWED)  # Alice has started the bot; Bob never did
        request = await api.create(ask("dm-1", assign_to=["group:oncall"]))
        await api.app[DISPATCHER].idle()
        rows = {r.target: r for r in await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])}
        assert set(rows) == {str(CHAT), str(ALLOWED), str(BOB_TG)}
        assert rows[str(ALLOWED)].status == "sent"
        # Telegram lets no bot write first: Bob's private copy fails, the group's message still reaches him.
        assert rows[str(BOB_TG)].status == "failed"
        private = Posted(request_id=request["id"], target=str(ALLOWED), ref=rows[str(ALLOWED)].ref)
        await driver.callback_answer(await driver.press(private, "approve"))
        assert (await api.wait(request["id"]))["answered_by"] == f"telegram:{ALLOWED}"
        await driver.assert_withdrawn(private, "Approved by Alice Example via Telegram")
        group = Posted(request_id=request["id"], target=str(CHAT), ref=rows[str(CHAT)].ref)
        await driver.assert_withdrawn(group, "Approved by Alice Example via Telegram")


async def test_telegram_escalation_reaches_the_steps_people_who_may_then_answer(sqlite_url: str) -> None:
    import time

    async with telegram(sqlite_url) as (driver, api):
        driver.tg.started.update({ALLOWED, BOB_TG})
        request = await api.create(ask("esc-tg", timeout_seconds=600, assign_to=["alice"],
                                       escalation=[{"after_seconds": 120, "to": ["bob"]}]))
        await api.app[DISPATCHER].idle()
        service = api.app[SERVICE]

        async def targets() -> dict[str, DeliveryRecord]:
            await api.app[DISPATCHER].idle()
            rows = await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request["id"])
            return {r.target: r for r in rows}

        assert set(await targets()) == {str(CHAT), str(ALLOWED)}
        group = Posted(request_id=request["id"], target=str(CHAT), ref=(await targets())[str(CHAT)].ref)
        # Before the step, Bob's tap in the group is refused as a stranger's.
        await driver.callback_answer(await driver.press(group, "approve", user_id=BOB_TG))
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        service.clock = lambda: time.time() + 121
        await service.sweep()
        rows = await targets()
        assert set(rows) == {str(CHAT), str(ALLOWED), str(BOB_TG)} and rows[str(BOB_TG)].status == "sent"
        private = Posted(request_id=request["id"], target=str(BOB_TG), ref=rows[str(BOB_TG)].ref)
        await driver.callback_answer(await driver.press(private, "approve", user_id=BOB_TG))
        assert (await api.wait(request["id"]))["answered_by"] == f"telegram:{BOB_TG}"
        await driver.assert_withdrawn(private, "Approved by Bob Builder via Telegram")


async def _targets(api: Api, request_id: str) -> dict[str, DeliveryRecord]:
    await api.app[DISPATCHER].idle()
    return {r.target: r for r in await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id)}


async def test_telegram_direct_falls_back_to_the_group_when_no_private_chat_takes_it(sqlite_url: str) -> None:
    async with telegram(sqlite_url, assigned_delivery="direct") as (driver, api):
        driver.tg.started.add(ALLOWED)  # Alice started the bot, Bob never did
        mine = await api.create(ask("fb-a", assign_to=["alice"]))
        assert {t: r.status for t, r in (await _targets(api, mine["id"])).items()} == {str(ALLOWED): "sent"}
        bobs = await api.create(ask("fb-b", assign_to=["bob"]))
        rows = await _targets(api, bobs["id"])
        # Telegram refused the private chat for good: the group gets it, and the journal says why.
        assert {t: r.status for t, r in rows.items()} == {str(BOB_TG): "failed", str(CHAT): "sent"}
        fallback = [e for e in await api.journal(bobs["id"]) if e["event"] == "delivery_fallback"]
        assert [e["data"] for e in fallback] == [{"target": str(CHAT), "instead_of": [str(BOB_TG)]}]
        group = Posted(request_id=bobs["id"], target=str(CHAT), ref=rows[str(CHAT)].ref)
        await driver.assert_refused(await driver.press(group, "approve"))  # still Bob's request
        await driver.callback_answer(await driver.press(group, "approve", user_id=BOB_TG))
        assert (await api.wait(bobs["id"]))["answered_by"] == f"telegram:{BOB_TG}"


async def test_a_telegram_tenant_without_a_group_is_reached_in_private_chats_only(sqlite_url: str) -> None:
    async with telegram(sqlite_url, acme_chats=(), assigned_delivery="direct") as (driver, api):
        driver.tg.started.add(ALLOWED)
        request = await api.create(ask("pc-1", assign_to=["alice"]))
        rows = await _targets(api, request["id"])
        assert {t: r.status for t, r in rows.items()} == {str(ALLOWED): "sent"}
        private = Posted(request_id=request["id"], target=str(ALLOWED), ref=rows[str(ALLOWED)].ref)
        await driver.callback_answer(await driver.press(private, "approve"))
        assert (await api.wait(request["id"]))["answered_by"] == f"telegram:{ALLOWED}"
        await driver.assert_withdrawn(private, "Approved by Alice Example via Telegram")
        # Nobody to reach: an unassigned request is taken and posted nowhere in Telegram.
        unassigned = await api.create(ask("pc-2"))
        assert await _targets(api, unassigned["id"]) == {}
        assert not [e for e in await api.journal(unassigned["id"]) if e["event"] == "delivery_fallback"]


async def test_a_telegram_tenant_without_a_group_needs_direct_delivery(sqlite_url: str) -> None:
    with pytest.raises(ConfigError, match='tenants acme have no chat_ids: with assigned_delivery = "room"'):
        async with telegram(sqlite_url, acme_chats=(), assigned_delivery="room"):
            pass

"""A person asking again for their form link (a second tap, a delivery tried again) gets the live link they
hold, not a second one (core/links.py ``mint_link(reuse=True)``, core/store/links.py): one row, one
``link_minted``; never someone else's link, another tenant's, or a used one. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Api, base_config, running_app, settings_from, sweeper_held

from handraise.core.appkeys import SERVICE, STORE
from handraise.core.errors import AlreadyAnsweredError, ExpiredError, LinkUsedError, NotFoundError
from handraise.core.service import RequestService

BOT = "telegram:bot"


@pytest.fixture
async def api(storage_url: str) -> AsyncIterator[Api]:
    config = base_config(storage_url)
    config["tenants"][0]["people"] = [{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}]
    async with running_app(settings_from(config)) as a:
        yield a


async def ask(api: Api, uid: str, **extra: Any) -> str:
    request = await api.create({"unique_id": uid, "message_for_user": "Ship it?", "kind": "approval",
                                "timeout_seconds": 600, **extra})
    return str(request["id"])


async def tap(service: RequestService, request_id: str, person: str, *, recipient: str | None = None,
              principal: str = BOT, tenant_id: str = "acme") -> str:
    """What a chat connector does on a person's tap: their personal link, held or minted."""
    minted = await service.mint_link(tenant_id=tenant_id, request_id=request_id, principal=principal,
                                     recipient=recipient or f"chat of {person}", for_principal=person, reuse=True)
    assert minted.url == service.link_url(minted.link_id)
    return minted.url


async def minted(api: Api, request_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in await api.journal(request_id) if e["event"] == "link_minted"]


def token(url: str) -> str:
    return url.rsplit("/f/", 1)[1]


async def test_two_taps_by_one_person_give_one_link_that_answers_once(api: Api) -> None:
    service = api.app[SERVICE]
    request_id = await ask(api, "again")
    first = await tap(service, request_id, "telegram:42")
    assert await tap(service, request_id, "telegram:42") == first
    assert [(m["for"], m["recipient"]) for m in await minted(api, request_id)] == [("telegram:42",
                                                                                    "chat of telegram:42")]
    # The form behind it is as before: it answers once, as that person, then it is dead.
    link, _ = await service.open_link(token(first))
    assert link.answers_as == "telegram:42"
    done = await service.submit_link(token=token(first), response={"decision": "approve"})
    assert (done.status, done.resolved_by) == ("answered", "telegram:42")
    with pytest.raises(LinkUsedError):
        await service.open_link(token(first))
    # Asked again once the request is answered: the refusal a late person got before, no link at all.
    with pytest.raises(AlreadyAnsweredError):
        await tap(service, request_id, "telegram:42")
    assert len(await minted(api, request_id)) == 1


async def test_another_person_recipient_or_minter_gets_a_link_of_their_own(api: Api) -> None:
    service = api.app[SERVICE]
    request_id = await ask(api, "others")
    alices = await tap(service, request_id, "telegram:42")
    others = [await tap(service, request_id, "telegram:43"),
              await tap(service, request_id, "telegram:42", recipient="another chat"),
              await tap(service, request_id, "telegram:42", principal="slack:bot")]
    assert len({alices, *others}) == 4
    assert len(await minted(api, request_id)) == 4
    link, _ = await service.open_link(token(others[0]))
    assert link.answers_as == "telegram:43"  # never Alice's link handed to Bob
    # An agent's explicit mint stays a fresh link each call, even for the same person.
    explicit = [await service.mint_link(tenant_id="acme", request_id=request_id, principal=BOT,
                                        recipient="chat of telegram:42", for_principal="telegram:42")
                for _ in range(2)]
    assert len({alices, *(m.url for m in explicit)}) == 3
    # Each tap still finds its own.
    assert await tap(service, request_id, "telegram:42") == alices


async def test_another_tenants_link_is_never_found(api: Api) -> None:
    service, store = api.app[SERVICE], api.app[STORE]
    request_id = await ask(api, "tenants")
    await tap(service, request_id, "telegram:42")
    with pytest.raises(NotFoundError):
        await tap(service, request_id, "telegram:42", tenant_id="globex")
    async with store.transaction() as conn:
        assert await store.links.live(conn, tenant_id="globex", request_id=request_id, principal="telegram:42",
                                      recipient="chat of telegram:42", created_by=BOT) is None
        assert await store.links.live(conn, tenant_id="acme", request_id=request_id, principal="telegram:42",
                                      recipient="chat of telegram:42", created_by=BOT) is not None
    assert len(await minted(api, request_id)) == 1


async def test_a_link_for_nobody_in_particular_is_held_too(api: Api) -> None:
    # A webhook's link names no person: a retried delivery finds it all the same (NULL matches NULL).
    service = api.app[SERVICE]
    request_id = await ask(api, "nobody")
    urls = {(await service.mint_link(tenant_id="acme", request_id=request_id, principal="webhooks:pager",
                                     recipient="webhook pager", reuse=True)).url for _ in range(2)}
    assert len(urls) == 1 and len(await minted(api, request_id)) == 1
    link, _ = await service.open_link(token(urls.pop()))
    assert link.principal is None


async def test_after_a_vote_through_the_link_the_next_tap_is_a_new_link(api: Api) -> None:
    service = api.app[SERVICE]
    request_id = await ask(api, "quorum", approvals_required=2)
    first = await tap(service, request_id, "person:alice")
    view = await service.submit_link(token=token(first), response={"decision": "approve"})
    assert view.status == "pending"  # one vote of two
    again = await tap(service, request_id, "person:alice")
    assert again != first  # the used link is never handed back
    with pytest.raises(LinkUsedError):
        await service.open_link(token(first))
    assert await tap(service, request_id, "person:alice") == again
    assert len(await minted(api, request_id)) == 2


async def test_taps_at_once_share_one_link(api: Api) -> None:
    # Each mint reads, then inserts; without the lock (PostgreSQL) or the one writer (SQLite) several
    # would miss each other's link and insert one each.
    service = api.app[SERVICE]
    request_id = await ask(api, "race")
    urls = await asyncio.gather(*(tap(service, request_id, "telegram:42") for _ in range(8)))
    assert len(set(urls)) == 1
    assert len(await minted(api, request_id)) == 1


async def test_a_tap_past_the_deadline_before_the_sweep_expires_it_and_mints_nothing(api: Api) -> None:
    service = api.app[SERVICE]
    request_id = await ask(api, "late")
    async with sweeper_held(api):
        service.clock = lambda: time.time() + 3600
        for _ in range(2):  # the first applies the deadline, the second finds it applied
            with pytest.raises(ExpiredError):
                await tap(service, request_id, "telegram:42")
    events = [e["event"] for e in await api.journal(request_id)]
    assert events.count("expired") == 1 and "link_minted" not in events


async def test_a_deadline_passing_between_the_read_and_the_mint_mints_nothing(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    service = api.app[SERVICE]
    request_id = await ask(api, "between")
    read = service.get

    async def read_then_the_deadline(**kwargs: Any) -> Any:
        view = await read(**kwargs)
        service.clock = lambda: view.expires_at + 1
        return view

    async with sweeper_held(api):
        monkeypatch.setattr(service, "get", read_then_the_deadline)
        with pytest.raises(ExpiredError):
            await tap(service, request_id, "telegram:42")
        monkeypatch.undo()
    events = [e["event"] for e in await api.journal(request_id)]
    assert events.count("expired") == 1 and "link_minted" not in events


async def test_a_link_under_a_label_the_recipient_had_before_is_found(api: Api) -> None:
    # A connector that renamed how it labels a person (Telegram's "telegram chat <id>" for a private chat,
    # now "telegram user <id>") still hands back the live link stored under the old label.
    service = api.app[SERVICE]
    request_id = await ask(api, "relabelled")
    old = await tap(service, request_id, "telegram:42", recipient="telegram chat 42")
    again = await service.mint_link(tenant_id="acme", request_id=request_id, principal=BOT,
                                    recipient="telegram user 42", for_principal="telegram:42", reuse=True,
                                    known_as=("telegram chat 42",))
    assert again.url == old
    # Never another person's link under either label.
    other = await service.mint_link(tenant_id="acme", request_id=request_id, principal=BOT,
                                    recipient="telegram user 43", for_principal="telegram:43", reuse=True,
                                    known_as=("telegram chat 42",))
    assert other.url != old
    assert [m["recipient"] for m in await minted(api, request_id)] == ["telegram chat 42", "telegram user 43"]

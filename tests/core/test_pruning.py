"""Pruning of spent rows by the sweeper, on both stores: what a finished request left behind (chat button
tokens, chat message refs, one-time links, connector state about it) goes after the retention; a pending
request's rows, recent rows and state about no request stay."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from conftest import Api, base_config, running_app, settings_from, sweeper_held

from sqlalchemy import text

from handraise.core.appkeys import INBOX, SERVICE, STORE
from handraise.core.chatrefs import ChatRefs
from handraise.core.errors import NotFoundError
from handraise.core.store.units import scalar


def chat_refs(api: Api) -> ChatRefs:
    return ChatRefs(records=api.app[STORE].chat_refs, clock=time.time)


async def leave_traces(api: Api, request_id: str) -> dict[str, Any]:
    """Every kind of row a chat connector and the web channel leave about a request."""
    token, = await chat_refs(api).create_actions(tenant_id="acme", request_id=request_id, channel="telegram",
                                                 values=[{"decision": "approve"}])
    await chat_refs(api).remember_message(channel="telegram", message_key=f"1:{request_id}", tenant_id="acme",
                                          request_id=request_id)
    link = await api.app[SERVICE].mint_link(tenant_id="acme", request_id=request_id, principal="operator:op-1")
    await api.app[STORE].state.set("ratings", f"telegram:{request_id}:42", "ann-1", request_id=request_id)
    return {"token": token, "key": f"1:{request_id}", "link": link.url.rsplit("/f/", 1)[1],
            "state": f"telegram:{request_id}:42"}


async def traces_left(api: Api, traces: dict[str, Any]) -> dict[str, bool]:
    try:
        await api.app[SERVICE].find_link(traces["link"])
        link = True
    except NotFoundError:
        link = False
    refs = chat_refs(api)
    return {
        "chat_action": await refs.resolve_action(token=traces["token"], channel="telegram") is not None,
        "message_ref": await refs.lookup_message(channel="telegram", message_key=traces["key"]) is not None,
        "link": link,
        "state": await api.app[STORE].state.get("ratings", traces["state"]) is not None,
    }


ALL = {"chat_action": True, "message_ref": True, "link": True, "state": True}
NONE = {"chat_action": False, "message_ref": False, "link": False, "state": False}


async def two_requests(api: Api) -> tuple[dict[str, Any], dict[str, Any]]:
    live = await api.create({"unique_id": "live", "message_for_user": "Still open?", "timeout_seconds": 600})
    done = await api.create({"unique_id": "done", "message_for_user": "Answered?", "timeout_seconds": 600})
    traces = (await leave_traces(api, live["id"]), await leave_traces(api, done["id"]))
    assert (await api.submit("done", "yes"))[0] == 200
    return traces


async def test_old_rows_of_finished_requests_go_and_live_ones_stay(storage_url: str) -> None:
    # The app's own sweeper is held: on the clock moved 8 days on, a tick of its own expires the live
    # request (overdue then), and on PostgreSQL that can commit between this pass's deletes (each sees
    # what is committed when it runs): the live request's link and state would go, the counts be 2.
    async with running_app(settings_from(base_config(storage_url))) as api, sweeper_held(api):
        service = api.app[SERVICE]
        await api.app[STORE].state.set("telegram.sync", "position", "42")  # about no request: never pruned
        live, done = await two_requests(api)

        # Within the retention (7 days by default) nothing goes.
        assert set((await service.prune_spent(force=True)).values()) == {0}
        assert await traces_left(api, done) == ALL

        # Past it: the finished request's rows go, the pending one's stay, whatever their age.
        service.clock = lambda: time.time() + 8 * 86400
        pruned = await service.prune_spent(force=True)
        assert pruned == {"chat_actions": 1, "message_refs": 1, "links": 1, "kv_state": 1, "inbox_signins": 0,
                          "inbox_sessions": 0, "oidc_logins": 0}
        assert await traces_left(api, done) == NONE
        assert await traces_left(api, live) == ALL
        assert await api.app[STORE].state.get("telegram.sync", "position") == "42"
        # A pass deletes at most its limit per table, oldest first.
        assert set((await api.app[STORE].prune_spent(before=time.time() + 9 * 86400, now=time.time(), limit=0)).values()) == {0}


async def test_the_sweeper_prunes_after_the_retention(storage_url: str) -> None:
    settings = settings_from(base_config(storage_url, limits={"sweep_interval_seconds": 0.1,
                                                              "spent_retention_seconds": 1}))
    async with running_app(settings) as api:
        live, done = await two_requests(api)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while await traces_left(api, done) != NONE:
            assert loop.time() < deadline, await traces_left(api, done)
            await asyncio.sleep(0.1)
        assert await traces_left(api, live) == ALL


async def test_pruning_reads_through_the_age_indexes(tmp_path: Any) -> None:
    import sqlite3

    from sqlalchemy.dialects import sqlite

    from handraise.core.store.pruning import _PRUNE

    async with running_app(settings_from(base_config(f"sqlite:///{tmp_path / 'p.db'}"))) as api:
        path = api.app[STORE].sqlite_path
    conn = sqlite3.connect(str(path))
    try:
        for name, stmt in _PRUNE.items():
            compiled = stmt.compile(dialect=sqlite.dialect())
            given = {**compiled.params, "before": 1e9, "limit": 1000}
            params = [given[k] if given.get(k) is not None else 0 for k in compiled.positiontup or []]
            plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + str(compiled), params))
            index = {"chat_actions": "ix_chat_actions_created", "message_refs": "ix_message_refs_created",
                     "links": "ix_links_created", "kv_state": "ix_kv_state_request_updated",
                     "inbox_signins": "ix_inbox_signins_expires", "inbox_sessions": "ix_inbox_sessions_expires",
                     "oidc_logins": "ix_oidc_logins_expires"}[name]
            assert index in plan, (name, plan)
    finally:
        conn.close()


async def test_expired_inbox_sign_ins_and_sessions_go_after_the_retention(storage_url: str) -> None:
    # The app's own sweeper is held: the counts asserted are this test's prune's, and only prune_spent's
    # once-a-minute bookkeeping (set before its first await) keeps a tick's prune on the moved clock from
    # taking the rows first.
    async with running_app(settings_from(base_config(storage_url))) as api, sweeper_held(api):
        inbox, service, store = api.app[INBOX], api.app[SERVICE], api.app[STORE]
        used = await inbox.mint(tenant_id="acme", name="olga", created_by="key:test")
        token, session = await inbox.redeem(used.url.rsplit("/", 1)[1])
        unused = await inbox.mint(tenant_id="acme", name="piotr", created_by="key:test")
        retention = api.app[SERVICE].settings.limits.spent_retention_seconds

        async def counts() -> tuple[int, int]:
            async with store.reader() as conn:
                return (await conn.run(scalar, text("SELECT count(*) FROM inbox_signins")),
                        await conn.run(scalar, text("SELECT count(*) FROM inbox_sessions")))

        # The sign-in links' ends pass first: they go, the live session stays (it no longer needs its link).
        service.clock = lambda: unused.expires_at + retention + 1
        pruned = await service.prune_spent(force=True)
        assert (pruned["inbox_signins"], pruned["inbox_sessions"]) == (2, 0)
        assert await counts() == (0, 1)
        inbox.clock = lambda: session.created_at + 60
        assert (await inbox.session(token)) is not None
        # Past the session's absolute end and the retention: it goes too, and its cookie names nobody.
        service.clock = lambda: session.expires_at + retention + 1
        assert (await service.prune_spent(force=True))["inbox_sessions"] == 1
        assert await counts() == (0, 0)
        assert await inbox.session(token) is None
        # The journal keeps what happened.
        events = [e.event for e in await store.journal.entries(tenant_id="acme")]
        assert events.count("inbox_link_minted") == 2 and "inbox_signed_in" in events

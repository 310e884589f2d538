"""Quorum on the hosted form and in the inbox: the tally on the page, a vote counted and said so,
one person's second vote refused, and a proposal several people approve shown read-only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from conftest import Api, base_config, settings_from, web_app
from handraise.core.appkeys import SERVICE

from .test_http import fetch, post
from .test_inbox_http import person_key, signed_in_as

PEOPLE = [{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}, {"id": "dave", "name": "Dave"}]
PROPOSAL = {"proposal": {"replicas": 3}, "proposal_schema": {
    "type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}}, "required": ["replicas"]}}


@pytest.fixture
async def api(sqlite_url: str) -> AsyncIterator[Api]:
    config = base_config(sqlite_url)
    config["tenants"][0]["people"] = PEOPLE
    config["tenants"][0]["keys"] += [person_key(p["id"]) for p in PEOPLE]
    async with web_app(settings_from(config)) as a:
        yield a


async def link_for(api: Api, request_id: str, person: str) -> str:
    minted = await api.app[SERVICE].mint_link(tenant_id="acme", request_id=request_id, principal="telegram:bot",
                                              recipient=person, for_principal=f"person:{person}")
    return "/f/" + minted.token


async def ask(api: Api, uid: str, **extra: Any) -> dict[str, Any]:
    return await api.create({"unique_id": uid, "message_for_user": "Scale the web tier?", "kind": "approval",
                             "timeout_seconds": 300, "approvals_required": 2, **extra})


async def test_the_form_shows_the_tally_counts_a_vote_and_the_inbox_refuses_a_second(api: Api) -> None:
    request = await ask(api, "f-1", **PROPOSAL)
    alices = await link_for(api, request["id"], "alice")
    page = await fetch(api, alices)
    assert "0 of 2 approved. Still expected: Alice, Bob, Dave." in page.text
    # Two people approve one version: the proposal is shown, not offered for editing.
    assert 'name="proposal.replicas"' not in page.html
    assert "Replicas: 3" in page.text and "approves it as proposed" in page.text
    page = await post(api, alices, [("decision", "approve")])
    assert page.status == 200 and "your vote was counted" in page.text.lower()
    assert "1 of 2 approved: Alice. Still expected: Bob, Dave." in page.text
    assert (await fetch(api, alices)).status == 410  # a personal link works once
    async with signed_in_as(api, "alice") as alice:  # Alice again, in the inbox
        path = f"/inbox/r/{request['id']}"
        status, html, _ = await alice.get(path)
        assert "1 of 2 approved: Alice" in html and "approves it as proposed" in html
        status, html, _ = await alice.post(path, {"decision": "reject"})
        assert status == 403 and "You voted already" in html
    async with signed_in_as(api, "dave") as dave:
        assert (await dave.get(path))[0] == 200  # the page holds the form's CSRF token
        status, _, _ = await dave.post(path, {"decision": "approve"})
        assert status == 303
    done = await api.wait(request["id"])
    assert done["response"]["decision"] == "approve" and done["response"]["edited"] is False
    assert [(v["person"], v["channel"]) for v in done["response"]["votes"]] == [("alice", "web"),
                                                                               ("dave", "inbox")]


async def test_one_approver_still_edits_on_the_form(api: Api) -> None:
    request = await ask(api, "f-2", **{**PROPOSAL, "approvals_required": 1})
    page = await fetch(api, await link_for(api, request["id"], "bob"))
    assert 'name="proposal.replicas"' in page.html and "0 of 1" not in page.text

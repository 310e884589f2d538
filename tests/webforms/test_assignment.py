"""Assignment and four eyes over HTTP: every new field checked at create with a clear 422, and the
refusals of the API, the hosted form (personal and plain links) and the operator inbox."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import OPERATOR_KEY, OTHER_AGENT_KEY, Api, base_config, settings_from, web_app
from handraise.core.appkeys import SERVICE

from .test_http import fetch, mint, post
from .test_inbox_http import person_key, signed_in, signed_in_as

ALICE = {"id": "alice", "name": "Alice Example", "telegram": 4242, "groups": ["oncall"]}
BOB = {"id": "bob", "name": "Bob Builder", "telegram": 77, "groups": ["oncall"]}
CAROL = {"id": "carol", "name": "Carol", "groups": ["finance"]}
GUS = {"id": "gus", "name": "Gus"}


@contextlib.asynccontextmanager
async def people_app(tmp_path: Path, *, globex_people: bool = True) -> AsyncIterator[Api]:
    config = base_config(f"sqlite:///{tmp_path / 'assign.db'}")
    config["tenants"][0]["people"] = [ALICE, BOB, CAROL]
    config["tenants"][0]["keys"] += [person_key(p["id"]) for p in (ALICE, BOB, CAROL)]
    if globex_people:
        config["tenants"][1]["people"] = [GUS]
        config["tenants"][1]["keys"].append(person_key("gus"))
    async with web_app(settings_from(config)) as api:
        yield api


def approval(**extra: Any) -> dict[str, Any]:
    return {"unique_id": f"a-{secrets.token_hex(6)}", "message_for_user": "Deploy to production?",
            "kind": "approval", "timeout_seconds": 300, **extra}


async def personal_link(api: Api, request_id: str, principal: str) -> str:
    """A link minted for one person, as a chat connector mints it (its path, /f/<token>)."""
    minted = await api.app[SERVICE].mint_link(tenant_id="acme", request_id=request_id, principal="telegram:bot",
                                              recipient=principal, for_principal=principal)
    return "/f/" + minted.token


# -- create ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "field", "message"), [
    ({"assign_to": ["dave"]}, "assign_to", "dave is not one of this tenant's people"),
    ({"assign_to": ["gus"]}, "assign_to", "gus is not one of this tenant's people"),  # globex's
    ({"assign_to": ["alice", "group:nobody"]}, "assign_to", "nobody of this tenant is in group nobody"),
    ({"assign_to": []}, "assign_to", "at least 1 item"),
    ({"assign_to": ["bad name"]}, "assign_to.0", "must name a person (alice) or a group (group:oncall)"),
    ({"assign_to": ["group:"]}, "assign_to.0", "must name a person"),
    ({"assign_to": "alice"}, "assign_to", "valid list"),
    ({"assign_to": ["alice"] * 51}, "assign_to", "at most 50"),
    ({"on_behalf_of": "dave"}, "on_behalf_of", "dave is not one of this tenant's people"),
    ({"on_behalf_of": "group:oncall"}, "on_behalf_of", "must be a person's id"),
    ({"on_behalf_of": 7}, "on_behalf_of", "valid string"),
    ({"on_behalf_of": "alice", "kind": "input"}, "on_behalf_of", "applies to approvals only"),
    ({"on_behalf_of": "alice", "assign_to": ["alice"]}, "assign_to", "names only alice, who may not approve"),
])
async def test_every_new_field_is_checked_at_create(tmp_path: Path, extra: dict[str, Any], field: str,
                                                     message: str) -> None:
    async with people_app(tmp_path) as api:
        status, body = await api.call("POST", "/v1/requests", json=approval(**extra))
        assert status == 422, body
        assert body["error"] == "validation_error"
        assert any(f["field"] == field and message in f["message"] for f in body["details"]["fields"]), body


async def test_a_tenant_without_people_cannot_assign(tmp_path: Path) -> None:
    async with people_app(tmp_path, globex_people=False) as api:
        status, body = await api.call("POST", "/v1/requests", json=approval(assign_to=["gus"]), key=OTHER_AGENT_KEY)
        assert status == 422
        assert body["details"]["fields"] == [{"field": "assign_to",
                                              "message": "this tenant lists no people ([[tenants.people]] "
                                                         "in the config)"}]


async def test_assignment_is_part_of_the_request_and_of_its_body(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        body = approval(assign_to=["group:oncall", "carol"], on_behalf_of="alice")
        created = await api.create(body)
        assert (created["assign_to"], created["on_behalf_of"]) == (["group:oncall", "carol"], "alice")
        # The same body again is the same request; another assignment is another body.
        assert (await api.call("POST", "/v1/requests", json=body))[0] == 200
        status, again = await api.call("POST", "/v1/requests", json={**body, "assign_to": ["carol"]})
        assert (status, again["error"]) == (409, "conflict")
        plain = await api.create(approval())
        assert "assign_to" not in plain and "on_behalf_of" not in plain
        created_entry = (await api.journal(created["id"]))[0]
        assert created_entry["data"]["assign_to"] == ["group:oncall", "carol"]
        assert created_entry["data"]["on_behalf_of"] == "alice"


# -- the API -----------------------------------------------------------------------------------


async def test_an_answer_key_that_is_nobody_cannot_answer_an_assigned_request(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["alice"]))
        status, body = await api.call("POST", "/api/human-feedback/submit", key=OPERATOR_KEY,
                                      json={"unique_id": created["unique_id"], "response": {"decision": "approve"}})
        assert (status, body["error"]) == (403, "not_assigned"), body
        assert (await api.call("GET", f"/v1/requests/{created['id']}"))[1]["status"] == "pending"
        refused = [e for e in await api.journal(created["id"]) if e["event"] == "answer_refused"]
        assert [(e["principal"], e["data"]["reason"]) for e in refused] == [("operator:op-1", "not_assigned")]


# -- the hosted form ---------------------------------------------------------------------------


async def test_form_links_of_people_not_assigned_are_refused(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["group:oncall"]))
        # Carol's personal link, and a plain link that is nobody's: refused before the form shows.
        for path in (await personal_link(api, created["id"], "person:carol"), await mint(api, created["id"])):
            page = await fetch(api, path)
            assert page.status == 403, page.text
            assert "assigned to other people" in page.text
            assert 'name="decision"' not in page.html
        # Bob's personal link (through Telegram) takes his answer, as his.
        bobs = await personal_link(api, created["id"], "telegram:77")
        assert (await post(api, bobs, [("decision", "approve")])).status == 200
        done = await api.wait(created["id"])
        assert (done["status"], done["answered_by"], done["answered_via"]) == ("answered", "telegram:77", "telegram")
        answered = next(e for e in await api.journal(created["id"]) if e["event"] == "answered")
        assert answered["data"]["person"] == "bob"


async def _person_link(api: Api, request_id: str, body: Any, *, key: str | None = None) -> tuple[int, Any]:
    """Mint a link for ``body["person"]`` with that person's own key (a link that names a person is
    handed only to them); with the operator's key when the body names nobody of the tenant."""
    person = body.get("person") if isinstance(body, dict) else None
    if key is None:
        key = person_key(person)["key"] if person in ("alice", "bob", "carol") else OPERATOR_KEY
    return await api.call("POST", f"/v1/requests/{request_id}/links", key=key, json=body)


async def test_an_operator_mints_a_link_personal_to_an_assigned_person(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["group:oncall"]))
        status, minted = await _person_link(api, created["id"], {"person": "bob"})
        assert status == 201, minted
        path = minted["url"][len("http://127.0.0.1:8080"):]
        page = await fetch(api, path)
        assert page.status == 200 and 'name="decision"' in page.html
        assert (await post(api, path, [("decision", "approve")])).status == 200
        done = await api.wait(created["id"])
        assert (done["answered_by"], done["answered_via"]) == ("person:bob", "web")
        minted_entry = next(e for e in await api.journal(created["id"]) if e["event"] == "link_minted")
        assert (minted_entry["data"]["for"], minted_entry["data"]["recipient"]) == ("person:bob", "bob")
        answered = next(e for e in await api.journal(created["id"]) if e["event"] == "answered")
        assert answered["data"]["person"] == "bob"
        # Late: the request is answered, no link is minted for anyone.
        status, body = await _person_link(api, created["id"], {"person": "alice"})
        assert status == 409 and body["error"] == "already_answered"


@pytest.mark.parametrize(("body", "message"), [
    ({"person": "carol"}, "carol may not answer this request"),  # not assigned
    ({"person": "zed"}, "zed is not one of this tenant's people"),
    ({"person": "gus"}, "gus is not one of this tenant's people"),  # globex's
    ({"person": "group:oncall"}, "must be a person's id"),
    ({"person": ""}, "must be a person's id"),
    ({"person": 7}, ""),
    ({"person": "bob", "for": "alice"}, "unknown field"),
])
async def test_a_personal_link_for_someone_who_may_not_answer_is_refused(tmp_path: Path, body: dict[str, Any],
                                                                        message: str) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["group:oncall"]))
        status, data = await _person_link(api, created["id"], body)
        assert status == 422 and data["error"] == "validation_error", data
        assert any(message in f["message"] for f in data["details"]["fields"]), data
        assert [e for e in await api.journal(created["id"]) if e["event"] == "link_minted"] == []


async def test_another_tenants_operator_mints_nothing_for_this_tenants_request(tmp_path: Path) -> None:
    from conftest import OTHER_OPERATOR_KEY

    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["alice"]))
        # gus's own key, of globex: acme's request is not there for it.
        status, data = await _person_link(api, created["id"], {"person": "gus"}, key=person_key("gus")["key"])
        assert status == 404 and data["error"] == "not_found"
        # globex's operator, bound to nobody, names nobody at all.
        status, data = await _person_link(api, created["id"], {"person": "gus"}, key=OTHER_OPERATOR_KEY)
        assert status == 403 and data["error"] == "person_not_bound"


async def test_an_escalated_person_may_be_sent_a_link_once_their_step_is_reached(tmp_path: Path) -> None:
    import time

    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["alice"], escalation=[{"after_seconds": 60, "to": ["carol"]}]))
        assert (await _person_link(api, created["id"], {"person": "carol"}))[0] == 422
        api.app[SERVICE].clock = lambda: time.time() + 61
        await api.app[SERVICE].sweep()
        assert (await _person_link(api, created["id"], {"person": "carol"}))[0] == 201


async def test_a_personal_link_without_assignment_is_anyones_person(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval())
        status, minted = await _person_link(api, created["id"], {"person": "carol", "recipient": "Carol at home"})
        assert status == 201
        entry = next(e for e in await api.journal(created["id"]) if e["event"] == "link_minted")
        assert (entry["data"]["for"], entry["data"]["recipient"]) == ("person:carol", "Carol at home")


async def test_four_eyes_on_the_form(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(on_behalf_of="alice"))
        alices = await personal_link(api, created["id"], "telegram:4242")
        page = await post(api, alices, [("decision", "approve")])
        assert page.status == 403, page.text
        assert "on your behalf" in page.text
        assert (await api.call("GET", f"/v1/requests/{created['id']}"))[1]["status"] == "pending"
        refused = [e for e in await api.journal(created["id"]) if e["event"] == "answer_refused"]
        assert [(e["data"]["reason"], e["data"]["person"]) for e in refused] == [("four_eyes", "alice")]
        # She may still reject what was asked on her behalf.
        rejects = await personal_link(api, created["id"], "telegram:4242")
        assert (await post(api, rejects, [("decision", "reject"), ("reason", "not now")])).status == 200
        assert (await api.wait(created["id"]))["response"] == {"decision": "reject", "reason": "not now"}


# -- the inbox ---------------------------------------------------------------------------------


async def test_inbox_sessions_answer_as_their_person(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(assign_to=["bob"], on_behalf_of="alice"))
        path = f"/inbox/r/{created['id']}"
        async with signed_in_as(api, "carol") as carol:
            status, text, _ = await carol.get(path)
            assert status == 200 and "assigned to" in text and 'name="decision"' not in text
            status, text, _ = await carol.post(path, {"decision": "approve"})
            assert status == 403 and "assigned to other people" in text
        async with signed_in_as(api, "bob") as bob:
            status, text, _ = await bob.get(path)
            assert 'name="decision"' in text
            status, _, headers = await bob.post(path, {"decision": "approve"})
            assert status == 303, text
        done = await api.wait(created["id"])
        assert (done["status"], done["answered_by"], done["answered_via"]) == ("answered", "person:bob", "inbox")
        async with signed_in_as(api, "bob") as bob:
            status, text, _ = await bob.get(path)
            assert "Approved by Bob Builder" in text  # his name, not his sign-in name


async def test_the_inbox_lists_only_what_the_session_may_answer(tmp_path: Path) -> None:
    import json

    async with people_app(tmp_path) as api:
        bobs = await api.create(approval(assign_to=["bob"]))
        oncall = await api.create(approval(assign_to=["group:oncall"]))
        open_to_all = await api.create(approval())
        for name, expected in (("bob", [open_to_all, oncall, bobs]), ("alice", [open_to_all, oncall]),
                               ("carol", [open_to_all]), ("ops", [open_to_all])):
            async with (signed_in(api, name) if name == "ops" else signed_in_as(api, name)) as browser:
                status, body, _ = await browser.get("/inbox/api/pending")
                assert status == 200
                assert [c["id"] for c in json.loads(body)["requests"]] == [r["id"] for r in expected], name
                status, html, _ = await browser.get("/inbox")
                assert f"({len(expected)}) Inbox" in html and f"/inbox/favicon/{len(expected)}.svg" in html
                # A card the live list would add says whether it is this session's to answer.
                status, body, _ = await browser.get(f"/inbox/api/requests/{bobs['id']}")
                assert status == 200 and json.loads(body)["may_answer"] is (name == "bob")
                # The request's own page still says whose it is.
                assert (await browser.get(f"/inbox/r/{bobs['id']}"))[0] == 200


async def test_four_eyes_in_the_inbox(tmp_path: Path) -> None:
    async with people_app(tmp_path) as api:
        created = await api.create(approval(on_behalf_of="alice"))
        path = f"/inbox/r/{created['id']}"
        async with signed_in_as(api, "alice") as alice:
            status, text, _ = await alice.get(path)
            assert status == 200
            status, text, _ = await alice.post(path, {"decision": "approve"})
            assert status == 403 and "on your behalf" in text
            assert (await api.call("GET", f"/v1/requests/{created['id']}"))[1]["status"] == "pending"
        async with signed_in_as(api, "carol") as carol:
            assert (await carol.post(path, {"decision": "approve"}))[0] == 303
        assert (await api.wait(created["id"]))["answered_by"] == "person:carol"

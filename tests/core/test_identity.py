"""A person is proven, never asserted (DESIGN invariant 10), tried as an attacker with ordinary keys would,
on SQLite and PostgreSQL: a key acts only as the person it is bound to; a sign-in or link naming a
person goes only to that person's own key or own channel; quorum, four eyes and assignment count
proven people; every refusal is a 403 with its own code, journaled; results name who decided."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from conftest import AGENT_KEY, OPERATOR_KEY, OTHER_OPERATOR_KEY, READER_KEY, Api, base_config, running_app, settings_from
from sse import streams

from handraise.core.api import RequestView
from handraise.core.appkeys import CONNECTORS, INBOX, SERVICE, STORE
from handraise.core.config import PersonSettings
from handraise.core.connectors import Connector
from handraise.core.personal import PrivateNote

PEOPLE = [
    {"id": "alice", "name": "Alice Aldridge", "telegram": 101, "groups": ["oncall"]},
    {"id": "bob", "name": "Bob Builder", "telegram": 202, "groups": ["oncall"]},
    {"id": "carol", "name": "Carol", "groups": ["oncall"]},
]
# Each person's own answer key, bound to them.
OWN = {p["id"]: f"{p['id']}-own-key-0123456789" for p in PEOPLE}
ADMIN_KEY = "admin-key-0123456789abcdef"
FORWARD_KEY = "forward-key-0123456789abcdef"


def identity_config(storage_url: str) -> dict[str, Any]:
    config = base_config(storage_url)
    acme = config["tenants"][0]
    acme["people"] = PEOPLE
    acme["keys"] += [{"id": f"{pid}-own", "key": key, "scopes": ["answer", "read"], "person": pid}
                     for pid, key in OWN.items()]
    acme["keys"] += [{"id": "admin-1", "key": ADMIN_KEY, "scopes": ["admin"]},
                     {"id": "fwd-1", "key": FORWARD_KEY, "scopes": ["ask", "forward"]}]
    config["tenants"][1]["people"] = [{"id": "gus", "name": "Gus", "telegram": 909}]
    return config


class PrivateConnector(Connector):
    """A connector that reaches people privately on their telegram identity and records each note."""

    name: ClassVar[str] = "telegram"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.notes: list[tuple[str, str, PrivateNote]] = []
        self.refuse = False

    def targets(self, tenant_id: str) -> list[str]:
        return ["room"] if tenant_id == "acme" else []

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        return {"message": 1}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        return None

    async def send_private(self, person: PersonSettings, *, tenant_id: str, note: PrivateNote) -> bool:
        if self.refuse:
            return False
        self.notes.append((tenant_id, str(person.telegram), note))
        return True


@pytest.fixture
async def iapi(storage_url: str) -> AsyncIterator[Api]:
    async with running_app(settings_from(identity_config(storage_url)),
                           connector_classes=[PrivateConnector]) as api:
        yield api


def approval(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Wire 50k to ACME Ltd?", "kind": "approval",
            "timeout_seconds": 600, "channels": [], **extra}


async def refusals(api: Api) -> list[dict[str, Any]]:
    rows = await api.app[STORE].journal_entries(tenant_id="acme")
    return [{"event": e.event, "principal": e.principal, **e.public_data()} for e in rows
            if e.event in ("access_refused", "answer_refused")]


async def signin_as(api: Api, url: str) -> str:
    """Open a sign-in link (as the browser's POST does): the principal of the session it made."""
    _, session = await api.app[INBOX].redeem(url.rsplit("/", 1)[1])
    return session.principal


# -- the attacks of issue 28 -------------------------------------------------------------------


async def test_a_key_cannot_sign_in_as_another_person(iapi: Api) -> None:
    # bob's key asks for a sign-in named alice, then for one that is alice: both refused.
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"name": "alice"}, key=OWN["bob"])
    assert (status, body["error"]) == (403, "person_mismatch")
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"person": "alice"}, key=OWN["bob"])
    assert (status, body["error"]) == (403, "person_mismatch")
    # A key bound to nobody names nobody: neither alice's id nor her display name.
    for body_sent in ({"person": "alice"}, {"name": "alice"}, {"name": "Alice Aldridge"}, {"name": "BOB"}):
        status, body = await iapi.call("POST", "/v1/inbox/links", json=body_sent, key=OPERATOR_KEY)
        assert (status, body["error"]) == (403, "person_not_bound"), body_sent
    journaled = [(r["event"], r["reason"], r["principal"]) for r in await refusals(iapi)]
    assert journaled[:2] == [("access_refused", "person_mismatch", "person:bob")] * 2
    assert journaled[2:] == [("access_refused", "person_not_bound", "operator:op-1")] * 4
    # Nothing was minted by any of them.
    minted = [e for e in await iapi.app[STORE].journal_entries(tenant_id="acme") if e.event == "inbox_link_minted"]
    assert minted == []


async def test_a_key_signs_in_only_as_its_own_person(iapi: Api) -> None:
    for sent in ({"person": "alice"}, {}):  # a bound key's sign-in is its person's, named or not
        status, body = await iapi.call("POST", "/v1/inbox/links", json=sent, key=OWN["alice"])
        assert status == 201 and body["person"] == "alice", body
        assert await signin_as(iapi, body["url"]) == "person:alice"
    # A plain operator session stays nobody.
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"name": "night shift"}, key=OPERATOR_KEY)
    assert status == 201 and "person" not in body
    assert await signin_as(iapi, body["url"]) == "operator:night shift"


async def test_four_eyes_holds_against_any_key(iapi: Api) -> None:
    req = await iapi.create(approval("fe-1", on_behalf_of="bob"))
    # A key bound to nobody could be bob: its approval counts for no one.
    status, body = await iapi.submit("fe-1", {"decision": "approve"}, key=OPERATOR_KEY)
    assert (status, body["error"]) == (403, "person_required")
    status, body = await iapi.submit("fe-1", {"decision": "approve"}, key=OWN["bob"])
    assert (status, body["error"]) == (403, "four_eyes")
    # bob cannot borrow a session or a link in alice's name to approve his own request.
    assert (await iapi.call("POST", "/v1/inbox/links", json={"person": "alice"}, key=OWN["bob"]))[0] == 403
    status, body = await iapi.call("POST", f"/v1/requests/{req['id']}/links", json={"person": "alice"},
                                   key=OWN["bob"])
    assert (status, body["error"]) == (403, "person_mismatch")
    assert (await iapi.call("GET", f"/v1/requests/{req['id']}"))[1]["status"] == "pending"
    status, body = await iapi.submit("fe-1", {"decision": "approve"}, key=OWN["alice"])
    assert status == 200
    done = await iapi.wait(req["id"])
    assert done["answered_by"] == "person:alice"
    assert done["answered_by_person"] == {"id": "alice", "name": "Alice Aldridge"}
    reasons = [(r["reason"], r.get("person")) for r in await refusals(iapi) if r["event"] == "answer_refused"]
    assert reasons == [("person_required", None), ("four_eyes", "bob")]


async def test_a_key_bound_to_nobody_may_still_reject_and_answer_what_needs_no_person(iapi: Api) -> None:
    await iapi.create(approval("fe-2", on_behalf_of="bob"))
    status, body = await iapi.submit("fe-2", {"decision": "reject", "reason": "not now"}, key=OPERATOR_KEY)
    assert status == 200 and body["request"]["answered_by_person"] is None
    req = await iapi.create({"unique_id": "free-1", "message_for_user": "Colour?", "channels": []})
    assert (await iapi.submit("free-1", "blue", key=OPERATOR_KEY))[0] == 200
    done = await iapi.wait(req["id"])
    assert (done["answered_by"], done["answered_by_person"]) == ("operator:op-1", None)


async def test_a_quorum_is_never_filled_by_one_key(iapi: Api) -> None:
    req = await iapi.create(approval("q-1", approvals_required=2))
    assert (await iapi.submit("q-1", {"decision": "approve"}, key=OWN["alice"]))[0] == 200
    # Any key bound to nobody: refused, whatever it calls itself.
    status, body = await iapi.submit("q-1", {"decision": "approve"}, key=OPERATOR_KEY)
    assert (status, body["error"]) == (403, "person_required")
    # alice's key minting a "carol" or a "bob" session: refused.
    for sent in ({"person": "carol"}, {"name": "bob"}):
        status, body = await iapi.call("POST", "/v1/inbox/links", json=sent, key=OWN["alice"])
        assert status == 403 and body["error"] in ("person_mismatch", "person_not_bound"), (sent, body)
    # An unbound key's session named bob is refused at the mint.
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"name": "bob"}, key=OPERATOR_KEY)
    assert (status, body["error"]) == (403, "person_not_bound")
    # alice voting again through another route is one person: her second vote changes nothing.
    status, body = await iapi.submit("q-1", {"decision": "approve"}, key=OWN["alice"])
    assert status == 200 and body["request"]["status"] == "pending"
    assert (await iapi.submit("q-1", {"decision": "approve"}, key=OWN["carol"]))[0] == 200
    done = await iapi.wait(req["id"])
    assert [(v["person"], v["name"], v["principal"]) for v in done["response"]["votes"]] == [
        ("alice", "Alice Aldridge", "person:alice"), ("carol", "Carol", "person:carol")]
    assert done["answered_by_person"] == {"id": "carol", "name": "Carol"}


async def test_an_assignment_counts_only_its_proven_people(iapi: Api) -> None:
    await iapi.create(approval("as-1", assign_to=["alice"]))
    for key in (OPERATOR_KEY, OWN["bob"]):
        status, body = await iapi.submit("as-1", {"decision": "approve"}, key=key)
        assert (status, body["error"]) == (403, "not_assigned")
    assert (await iapi.submit("as-1", {"decision": "approve"}, key=OWN["alice"]))[0] == 200


# -- request links -----------------------------------------------------------------------------


async def test_a_link_that_answers_as_a_person_goes_only_to_their_own_key(iapi: Api) -> None:
    req = await iapi.create(approval("ln-1"))
    path = f"/v1/requests/{req['id']}/links"
    for key, code in ((OPERATOR_KEY, "person_not_bound"), (OWN["bob"], "person_mismatch")):
        status, body = await iapi.call("POST", path, json={"person": "alice"}, key=key)
        assert (status, body["error"]) == (403, code)
    # An agent's forward key never names anyone, delivered or not.
    fwd = await iapi.create(approval("ln-fwd"), key=FORWARD_KEY)
    for sent in ({"person": "alice"}, {"person": "alice", "deliver": True}):
        status, body = await iapi.call("POST", f"/v1/requests/{fwd['id']}/links", json=sent, key=FORWARD_KEY)
        assert (status, body["error"]) == (403, "person_not_bound")
    status, body = await iapi.call("POST", path, json={"person": "alice"}, key=OWN["alice"])
    assert status == 201
    token = body["url"].rsplit("/", 1)[1]
    view = await iapi.app[SERVICE].submit_link(token=token, response={"decision": "approve"})
    assert (view.resolved_by, view.resolved_person) == ("person:alice", {"id": "alice", "name": "Alice Aldridge"})
    reasons = [(r["reason"], r["route"], r["for"]) for r in await refusals(iapi)]
    assert reasons == [("person_not_bound", "request_link", "person:alice"),
                       ("person_mismatch", "request_link", "person:alice")] + [
                       ("person_not_bound", "request_link", "person:alice")] * 2


async def test_links_and_sign_ins_delivered_to_the_persons_own_channel(iapi: Api) -> None:
    connector = iapi.app[CONNECTORS]["telegram"]
    req = await iapi.create(approval("dl-1", on_behalf_of="bob"))
    # Any answer key may have alice's link sent to alice: it is never returned to the caller.
    status, body = await iapi.call("POST", f"/v1/requests/{req['id']}/links",
                                   json={"person": "alice", "deliver": True}, key=OPERATOR_KEY)
    assert status == 202 and body["delivered_to"] == "telegram" and "url" not in body
    (tenant, telegram, note), = connector.notes
    assert (tenant, telegram) == ("acme", "101") and "Wire 50k" in note.text
    view = await iapi.app[SERVICE].submit_link(token=note.url.rsplit("/", 1)[1], response={"decision": "approve"})
    assert view.resolved_person == {"id": "alice", "name": "Alice Aldridge"}
    # The same for a sign-in: bob's key sends alice her own sign-in; only she holds it.
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"person": "alice", "deliver": True},
                                   key=OWN["bob"])
    assert status == 202 and body == {"delivered_to": "telegram", "person": "alice",
                                      "expires_at": body["expires_at"]}
    assert await signin_as(iapi, connector.notes[-1][2].url) == "person:alice"
    entries = await iapi.app[STORE].journal_entries(tenant_id="acme")
    minted = [e.public_data() for e in entries if e.event == "inbox_link_minted"]
    assert minted[-1]["for"] == "person:alice" and minted[-1]["private"] is True
    sent = [(e.principal, e.public_data()) for e in entries if e.event == "sent_privately"]
    assert sent[-1] == ("person:bob", {"signin_id": minted[-1]["signin_id"], "for": "person:alice",
                                       "channel": "telegram", "person": "bob"})  # bob had it sent
    assert sent[0][1]["channel"] == "telegram" and "link_id" in sent[0][1]


async def test_delivery_that_reaches_nobody_hands_out_nothing(iapi: Api) -> None:
    req = await iapi.create(approval("dl-2"))
    # carol has no identity on any channel this server runs.
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"person": "carol", "deliver": True},
                                   key=OPERATOR_KEY)
    assert status == 422 and body["details"]["fields"][0]["field"] == "person"
    iapi.app[CONNECTORS]["telegram"].refuse = True
    status, body = await iapi.call("POST", f"/v1/requests/{req['id']}/links",
                                   json={"person": "alice", "deliver": True}, key=OPERATOR_KEY)
    assert (status, body["error"]) == (502, "not_delivered") and "url" not in body["message"]
    failed = [e.public_data() for e in await iapi.app[STORE].journal_entries(tenant_id="acme")
              if e.event == "not_delivered"]
    assert failed == [{"link_id": failed[0]["link_id"], "for": "person:alice", "channels": ["telegram"]}]


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("sent", "field"), [
    ({"person": "zed"}, "person"),  # nobody of acme
    ({"person": "gus"}, "person"),  # globex's person, a stranger here
    ({"person": "Alice!"}, "person"),  # not a person id at all
    ({"person": "alice", "deliver": "yes"}, "deliver"),
    ({"person": "alice", "extra": 1}, "extra"),
])
async def test_bad_person_names_are_a_422_and_store_nothing(iapi: Api, sent: dict[str, Any], field: str) -> None:
    req = await iapi.create(approval(f"bad-{abs(hash(str(sent))) % 10**8}"))
    for path in ("/v1/inbox/links", f"/v1/requests/{req['id']}/links"):
        status, body = await iapi.call("POST", path, json=sent, key=OWN["alice"])
        assert status == 422, (path, body)
        assert [f["field"] for f in body["details"]["fields"]] == [field], body
    events = {e.event for e in await iapi.app[STORE].journal_entries(tenant_id="acme")}
    assert not events & {"inbox_link_minted", "link_minted", "access_refused"}


async def test_another_tenants_key_cannot_name_this_tenants_people(iapi: Api) -> None:
    status, body = await iapi.call("POST", "/v1/inbox/links", json={"person": "alice"}, key=OTHER_OPERATOR_KEY)
    assert status == 422 and "alice is not one of this tenant's people" in body["details"]["fields"][0]["message"]
    req = await iapi.create(approval("xt-1"))
    status, body = await iapi.call("POST", f"/v1/requests/{req['id']}/links", json={"person": "alice"},
                                   key=OTHER_OPERATOR_KEY)
    assert status == 422 and req["id"] not in str(body)  # nothing said of acme's request
    status, _ = await iapi.call("POST", f"/v1/requests/{req['id']}/links", json={"person": "gus"},
                                key=OTHER_OPERATOR_KEY)
    assert status == 403  # gus is globex's, but op-2 is bound to nobody: refused before the request is read


# -- who decided, everywhere ---------------------------------------------------------------------


async def test_the_deciding_person_is_named_in_get_wait_events_and_the_channel_principal_kept(iapi: Api) -> None:
    service = iapi.app[SERVICE]
    async with streams() as start:
        reader = await start(iapi, READER_KEY)
        req = await iapi.create(approval("who-1", assign_to=["alice"]))
        assert (await reader.next())[0] == "request.created"
        # Alice taps in Telegram: the principal is her Telegram id, the person is Alice.
        await service.submit(tenant_id="acme", request_id=req["id"], response={"decision": "approve"},
                             principal="telegram:101", channel="telegram")
        event, resolved = await reader.next()
    expected = {"id": "alice", "name": "Alice Aldridge"}
    assert event == "request.resolved" and resolved["answered_by"] == "telegram:101"
    assert resolved["answered_by_person"] == expected
    done = await iapi.wait(req["id"])
    assert (done["answered_by"], done["answered_by_person"]) == ("telegram:101", expected)
    status, got = await iapi.call("GET", f"/v1/requests/{req['id']}", key=READER_KEY)
    assert got["answered_by_person"] == expected


async def test_the_deciding_person_is_kept_as_it_stood(iapi: Api) -> None:
    """A later change of the config does not rewrite who decided."""
    req = await iapi.create(approval("who-2"))
    await iapi.app[SERVICE].submit(tenant_id="acme", request_id=req["id"], response={"decision": "reject"},
                                   principal="telegram:202", channel="telegram")
    iapi.app[SERVICE].settings.tenants[0].people[1].name = "Robert"
    try:
        assert (await iapi.wait(req["id"]))["answered_by_person"] == {"id": "bob", "name": "Bob Builder"}
    finally:
        iapi.app[SERVICE].settings.tenants[0].people[1].name = "Bob Builder"


# -- keys --------------------------------------------------------------------------------------


async def test_an_admin_key_makes_keys_bound_to_a_person(iapi: Api) -> None:
    status, made = await iapi.call("POST", "/v1/keys", json={"scopes": ["answer", "read"], "person": "bob",
                                                             "id": "bob-phone"}, key=ADMIN_KEY)
    assert status == 201 and (made["id"], made["person"], made["scopes"]) == ("bob-phone", "bob", ["answer", "read"])
    assert made["key"].startswith("hr_")
    await iapi.create(approval("k-1"))
    for _ in range(50):  # a key just made works within the keyring's reload (about a second)
        status, body = await iapi.submit("k-1", {"decision": "approve"}, key=made["key"])
        if status != 401:
            break
        await asyncio.sleep(0.1)
    assert status == 200 and body["request"]["answered_by"] == "person:bob"
    status, listing = await iapi.call("GET", "/v1/keys", key=ADMIN_KEY)
    assert status == 200 and {"id": "bob-phone", "person": "bob"}.items() <= next(
        k for k in listing["keys"] if k["id"] == "bob-phone").items()
    assert all("key" not in k and "key_sha256" not in k for k in listing["keys"])
    status, _ = await iapi.call("POST", "/v1/keys/bob-phone/revoke", key=ADMIN_KEY)
    assert status == 200
    events = [(e.event, e.public_data().get("key_id")) for e in await iapi.app[STORE].journal_entries(tenant_id="acme")
              if e.event.startswith("key_")]
    assert events == [("key_created", "bob-phone"), ("key_revoked", "bob-phone")]


@pytest.mark.parametrize(("sent", "status", "field"), [
    ({"scopes": ["ask"], "person": "bob"}, 422, "scopes"),  # an agent's key acts for no person
    ({"scopes": ["ask", "admin"]}, 422, "scopes"),  # an agent never makes keys
    ({"scopes": ["answer"], "person": "gus"}, 422, "person"),  # another tenant's person
    ({"scopes": ["answer"], "person": "zed"}, 422, "person"),
    ({"scopes": ["answer"], "id": "op-1"}, 409, None),  # a config key's id
    ({"scopes": ["root"]}, 422, "scopes.0"),
    ({"scopes": []}, 422, "scopes"),
    ({"scopes": ["answer"], "id": "has space"}, 422, "id"),
])
async def test_bad_keys_are_refused_and_nothing_is_stored(iapi: Api, sent: dict[str, Any], status: int,
                                                          field: str | None) -> None:
    got, body = await iapi.call("POST", "/v1/keys", json=sent, key=ADMIN_KEY)
    assert got == status, body
    if field is not None:
        assert field in [f["field"] for f in body["details"]["fields"]], body
    assert await iapi.app[STORE].list_api_keys() == []


async def test_only_an_admin_key_manages_keys(iapi: Api) -> None:
    for key in (AGENT_KEY, OPERATOR_KEY, OWN["alice"], READER_KEY):
        assert (await iapi.call("POST", "/v1/keys", json={"scopes": ["answer"]}, key=key))[0] == 403
        assert (await iapi.call("GET", "/v1/keys", key=key))[0] == 403
    assert (await iapi.call("POST", "/v1/keys", json={"scopes": ["answer"]}, key=None))[0] == 401


def test_the_config_binds_only_answering_keys_to_people_of_the_tenant(tmp_path: Any) -> None:
    config = identity_config(f"sqlite:///{tmp_path / 'c.db'}")
    config["tenants"][0]["keys"][0]["person"] = "alice"  # agent-1: an ask key
    with pytest.raises(Exception, match="an ask key acts for no person"):
        settings_from(config)
    config = identity_config(f"sqlite:///{tmp_path / 'c.db'}")
    config["tenants"][0]["keys"][1]["person"] = "gus"
    with pytest.raises(Exception, match="gus is not one of tenant acme's people"):
        settings_from(config)

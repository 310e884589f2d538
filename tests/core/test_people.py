"""A tenant's people: config checks, who a principal is (never across tenants), allowlists that name
people and groups, and the names people read whatever channel a person used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import base_config, settings_from

from handraise.bots.email.connector import EmailConnector
from handraise.bots.slack.connector import SlackConnector
from handraise.bots.telegram import TelegramConnector
from handraise.core.config import Settings, load_settings
from handraise.core.errors import ConfigError
from handraise.core.names import display_name
from handraise.core.people import expand, person_of

ALICE = {"id": "alice", "name": "Alice Example", "telegram": 4242, "slack": "U0ALICE", "matrix": "@alice:hs.example",
         "email": "Alice@Example.org", "groups": ["oncall", "leads"]}
BOB = {"id": "bob", "telegram": 77, "groups": ["oncall"]}
# Globex lists a person with Alice's Telegram id: in acme that id is still Alice, in globex it is Gus.
GUS = {"id": "gus", "name": "Gus", "telegram": 4242, "email": "gus@globex.example"}


def people_settings(tmp_path: Path, **extra: Any) -> Settings:
    config = base_config(f"sqlite:///{tmp_path / 'p.db'}", **extra)
    config["tenants"][0]["people"] = [ALICE, BOB]
    config["tenants"][1]["people"] = [GUS]
    return settings_from(config)


# -- config -------------------------------------------------------------------------------


@pytest.mark.parametrize(("people", "needle"), [
    ([{"id": "alice"}, {"id": "alice"}], "tenants[0].people: person id 'alice' appears twice"),
    ([{"id": "alice", "telegram": 1}, {"id": "bob", "telegram": 1}],
     "tenants[0].people: telegram 1 is given for both alice and bob: one identity belongs to one person"),
    ([{"id": "a", "email": "A@x.org"}, {"id": "b", "email": "a@X.org"}], "email a@x.org is given for both a and b"),
    ([{"id": "group:x"}], "tenants[0].people[0].id"),
    ([{"id": "9lives"}], "tenants[0].people[0].id"),
    ([{"id": "alice", "groups": ["on call"]}], "not group names"),
    ([{"id": "alice", "slack": "alice"}], "tenants[0].people[0].slack"),
    ([{"id": "alice", "matrix": "alice"}], "tenants[0].people[0].matrix"),
    ([{"id": "alice", "email": "alice"}], "tenants[0].people[0].email"),
    ([{"id": "alice", "pager": "1"}], "tenants[0].people[0].pager: unknown key"),
])
def test_people_are_checked_in_one_line(tmp_path: Path, people: list[dict[str, Any]], needle: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[[tenants]]\nid = 'acme'\npeople = [" + ", ".join(_inline(p) for p in people) + "]\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value)


def _inline(table: dict[str, Any]) -> str:
    """A TOML inline table (JSON's strings, numbers and lists read the same in TOML)."""
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + "}"


def test_the_same_identity_in_two_tenants_is_two_people(tmp_path: Path) -> None:
    settings = people_settings(tmp_path)  # loads: acme's alice and globex's gus share a Telegram id
    assert person_of(settings, "acme", "telegram:4242").id == "alice"  # type: ignore[union-attr]
    assert person_of(settings, "globex", "telegram:4242").id == "gus"  # type: ignore[union-attr]


# -- who a principal is ---------------------------------------------------------------------


@pytest.mark.parametrize(("principal", "person"), [
    ("telegram:4242", "alice"),
    ("slack:T0TEAM/U0ALICE", "alice"),
    ("matrix:@alice:hs.example", "alice"),
    ("email:ALICE@example.ORG", "alice"),
    ("person:alice", "alice"),  # her own key, her sign-in, a link sent to her own channel
    ("operator:alice", None),  # a key or inbox session merely named like her is nobody
    ("person:bob", "bob"),
    ("telegram:77", "bob"),
    ("telegram:6666", None),
    ("slack:T0TEAM/U0BOB", None),
    ("email:gus@globex.example", None),  # globex's person, never acme's
    ("link:lnk_1", None),
    ("agent:agent-1", None),
    ("operator:op-1", None),
    ("telegram:", None),
    ("", None),
])
def test_a_principal_is_one_of_the_tenants_people(tmp_path: Path, principal: str, person: str | None) -> None:
    found = person_of(people_settings(tmp_path), "acme", principal)
    assert (found.id if found else None) == person


def test_references_expand_to_people_and_report_the_unknown(tmp_path: Path) -> None:
    settings = people_settings(tmp_path)
    found = expand(settings, "acme", ["bob", "group:oncall", "carol", "group:nobody", "gus"])
    assert found.people == ("bob", "alice")
    assert found.unknown == ("carol", "group:nobody", "gus")  # gus is globex's
    assert expand(settings, "globex", ["alice"]).unknown == ("alice",)


def test_names_people_read_are_the_persons_whatever_the_channel(tmp_path: Path) -> None:
    settings = people_settings(tmp_path)
    for principal in ("telegram:4242", "slack:T1/U0ALICE", "email:alice@example.org", "person:alice"):
        assert display_name(settings, "acme", principal) == "Alice Example"
    assert display_name(settings, "acme", "telegram:77") == "bob"  # no name configured: the id
    assert display_name(settings, "globex", "telegram:4242") == "Gus"
    assert display_name(settings, "acme", "telegram:6666") is None


# -- allowlists that name people and groups ------------------------------------------------


def _telegram(tmp_path: Path, allowed: list[Any]) -> Any:
    settings = people_settings(tmp_path, telegram={
        "token": "123:abc", "tenants": {"acme": {"chat_ids": [-100], "allowed_user_ids": allowed}}})
    return TelegramConnector.load_settings(settings)


def test_a_telegram_allowlist_names_people_and_groups(tmp_path: Path) -> None:
    loaded = _telegram(tmp_path, [42, "group:oncall", "alice"])
    assert loaded.tenants["acme"].allowed() == {"42", "4242", "77"}
    assert loaded.tenants["acme"].resolved_people() == ["42", "4242", "77"]


@pytest.mark.parametrize(("allowed", "needle"), [
    (["carol"], "telegram.tenants.acme: carol: not a person of this tenant"),
    (["gus"], "telegram.tenants.acme: gus: not a person of this tenant"),  # globex's, never acme's
    (["group:nobody"], "telegram.tenants.acme: group:nobody: no person of this tenant is in that group"),
    (["bad name"], "telegram.tenants.acme.allowed_user_ids"),
])
def test_unknown_names_in_an_allowlist_are_refused_at_load(tmp_path: Path, allowed: list[Any], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _telegram(tmp_path, allowed)
    assert needle in str(caught.value)


def test_a_person_without_an_identity_on_the_channel_is_refused_at_load(tmp_path: Path) -> None:
    settings = people_settings(tmp_path, slack={
        "bot_token": "xoxb-1", "signing_secret": "s", "tenants": {"acme": {"channel": "C0ROOM", "allowed_user_ids": [
            "U0RAW", "bob"]}}})
    with pytest.raises(ConfigError, match="slack.tenants.acme: bob: nobody it names has a slack identity"):
        SlackConnector.load_settings(settings)
    settings.slack["tenants"]["acme"]["allowed_user_ids"] = ["U0RAW", "group:oncall"]  # type: ignore[index]
    # A group counts whoever in it has a Slack id.
    assert SlackConnector.load_settings(settings).tenants["acme"].allowed() == {"U0RAW", "U0ALICE"}


def test_email_recipients_may_name_people(tmp_path: Path) -> None:
    settings = people_settings(tmp_path, email={
        "from": "Handraise <hr@example.org>", "smtp": {"host": "127.0.0.1", "port": 25, "security": "none"},
        "tenants": {"acme": {"recipients": ["ops@example.org", "alice", "group:leads"]},
                    "globex": {"recipients": ["gus"]}}})
    loaded = EmailConnector.load_settings(settings)
    # Alice is mailed once (named, and in leads), at her address in lower case.
    assert loaded.tenants["acme"].places() == ["ops@example.org", "alice@example.org"]
    assert loaded.tenants["globex"].places() == ["gus@globex.example"]
    assert loaded.tenant_of("alice@example.org") == "acme"


def test_two_tenants_naming_one_address_through_people_are_refused(tmp_path: Path) -> None:
    settings = people_settings(tmp_path, email={
        "from": "hr@example.org", "smtp": {"host": "127.0.0.1", "port": 25, "security": "none"},
        "tenants": {"acme": {"recipients": ["alice"]}, "globex": {"recipients": ["alice@example.org"]}}})
    with pytest.raises(ConfigError, match="email.tenants: recipient alice@example.org is configured for tenants"):
        EmailConnector.load_settings(settings)


def test_a_matrix_allowlist_names_people(tmp_path: Path) -> None:
    from handraise.bots.matrix.connector import MatrixConnector

    settings = people_settings(tmp_path, matrix={
        "homeserver": "http://127.0.0.1:8008", "user_id": "@bot:hs.example", "access_token": "t",
        "tenants": {"acme": {"room_ids": ["!room:hs.example"], "allowed_users": ["@raw:hs.example", "alice"]}}})
    assert MatrixConnector.load_settings(settings).tenants["acme"].allowed() == {"@raw:hs.example",
                                                                                 "@alice:hs.example"}
    settings.matrix["tenants"]["acme"]["allowed_users"] = ["bob"]  # type: ignore[index]
    with pytest.raises(ConfigError, match="matrix.tenants.acme: bob: nobody it names has a matrix identity"):
        MatrixConnector.load_settings(settings)

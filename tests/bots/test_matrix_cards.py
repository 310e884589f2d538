"""The Matrix bot's pure parts: settings, card text, reading answers, power levels; no homeserver."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest

from handraise.bots.matrix import MatrixConnector
from handraise.bots.matrix.cards import (
    FORM_KEY,
    answer_text,
    card_content,
    link_closed_content,
    link_content,
    outcome_content,
    reaction_vote,
)
from handraise.bots.matrix.connector import level_needed, message_key, power_of
from conftest import base_config, settings_from
from handraise.core.api import RequestView
from handraise.core.errors import ConfigError
from handraise.core.schema import APPROVAL_SCHEMA
from tests.bots.offline import NO_CORE

BOT = "@bot:example.org"


def matrix_section(**overrides: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "homeserver": "https://matrix.example.org/", "user_id": BOT, "access_token": "syt_secret",
        "tenants": {"acme": {"room_ids": ["!room:example.org"], "allowed_users": ["@alice:example.org"]}},
    }
    section.update(overrides)
    return section


def load(section: dict[str, Any]) -> Any:
    return MatrixConnector.load_settings(settings_from(base_config("sqlite:///unused.db", matrix=section)))


def view(**fields: Any) -> RequestView:
    defaults: dict[str, Any] = dict(
        id="req_1", tenant_id="acme", unique_id="u1", status="pending", message_for_user="Which one?",
        schema=None, kind="input", sensitive=False, run_id=None, channels=["matrix"], created_at=1_700_000_000.0,
        expires_at=1_700_000_600.0, created_by="agent:agent-1")
    defaults.update(fields)
    return RequestView(**defaults)


# -- settings ---------------------------------------------------------------------


def test_settings_load_and_normalise() -> None:
    settings = load(matrix_section())
    assert settings.homeserver == "https://matrix.example.org"
    assert settings.access_token.get_secret_value() == "syt_secret"
    assert "syt_secret" not in repr(settings)
    assert settings.room_tenants() == {"!room:example.org": "acme"}


@pytest.mark.parametrize(("overrides", "message"), [
    ({"access_token": None}, "exactly one of access_token or password"),
    ({"password": "hunter2hunter2"}, "exactly one of access_token or password"),
    ({"user_id": "bot"}, "matrix.user_id"),
    ({"homeserver": "matrix.example.org"}, "matrix.homeserver"),
    ({"room_id": "!x:y"}, "matrix.room_id: unknown key"),
    ({"tenants": {"acme": {"room_ids": ["#alias:example.org"]}}}, "not a room id"),
    ({"tenants": {"acme": {"room_ids": ["!r:x"], "allowed_users": ["@alice"]}}}, "not a Matrix user id"),
    ({"tenants": {"acme": {"room_ids": ["!r:x"]}, "globex": {"room_ids": ["!r:x"]}}},
     "configured for tenants acme and globex"),
])
def test_settings_refuse_mistakes_naming_the_key(overrides: dict[str, Any], message: str) -> None:
    section = matrix_section(**overrides)
    section = {k: v for k, v in section.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        load(section)


def test_a_tenant_that_does_not_exist_is_a_config_error() -> None:
    app_settings = settings_from(base_config("sqlite:///unused.db", matrix=matrix_section(
        tenants={"initech": {"room_ids": ["!r:x"]}})))
    with pytest.raises(ConfigError, match="matrix.tenants.initech"):
        MatrixConnector(settings=MatrixConnector.load_settings(app_settings), **NO_CORE, http=None,
                        log=logging.getLogger("test"), app_settings=app_settings)


def test_targets_and_allowlist_are_per_tenant() -> None:
    app_settings = settings_from(base_config("sqlite:///unused.db", matrix=matrix_section(
        tenants={"acme": {"room_ids": ["!a:x"], "allowed_users": ["@alice:x"]},
                 "globex": {"room_ids": ["!g:x"], "allowed_users": ["@gina:x"]}})))
    connector = MatrixConnector(settings=MatrixConnector.load_settings(app_settings), **NO_CORE, http=None,
                                log=logging.getLogger("test"), app_settings=app_settings)
    assert connector.targets("acme") == ["!a:x"] and connector.targets("globex") == ["!g:x"]
    assert connector.targets("default") == []
    assert connector.may_answer("acme", "@alice:x") and not connector.may_answer("globex", "@alice:x")


# -- reading answers ------------------------------------------------------------------


def test_reply_fallback_quote_is_stripped() -> None:
    content = {"body": "> <@bot:x> ❓ Question\n> Which one?\n\nport: 80\nenv: stable",
               "m.relates_to": {"m.in_reply_to": {"event_id": "$card"}}}
    assert answer_text(content) == "port: 80\nenv: stable"


def test_a_quote_that_is_not_a_reply_fallback_is_kept() -> None:
    assert answer_text({"body": "> 5 please"}) == "> 5 please"


def test_html_only_answer_drops_the_mx_reply() -> None:
    content = {"body": "", "format": "org.matrix.custom.html",
               "formatted_body": "<mx-reply><blockquote>port: 1</blockquote></mx-reply>port: 8080<br>env: "
                                 "canary &amp; more",
               "m.relates_to": {"m.in_reply_to": {"event_id": "$card"}}}
    assert answer_text(content) == "port: 8080\nenv: canary & more"


@pytest.mark.parametrize(("key", "vote"), [("👍", "👍"), ("👍️", "👍"), ("👍🏽", "👍"), ("👎", "👎"),
                                           ("🎉", None), ("+1", None), (None, None)])
def test_reaction_votes(key: Any, vote: str | None) -> None:
    assert reaction_vote(key) == vote


def test_message_keys_are_bound_to_their_room() -> None:
    assert message_key("!a:x", "$e") != message_key("!b:x", "$e")
    assert message_key("!a:x", "$e").startswith("$e@")


# -- power levels ---------------------------------------------------------------------


def _state(version: str, creator: str, levels: dict[str, Any] | None, **create: Any) -> list[dict[str, Any]]:
    events = [{"type": "m.room.create", "state_key": "", "sender": creator,
               "content": {"room_version": version, **create}}]
    if levels is not None:
        events.append({"type": "m.room.power_levels", "state_key": "", "sender": creator, "content": levels})
    return events


def test_v12_creators_have_power_the_levels_do_not_list() -> None:
    state = _state("12", BOT, {"users": {"@mod:x": 50}, "redact": 50})
    assert power_of(BOT, state) == math.inf
    assert power_of("@mod:x", state) == 50
    assert power_of("@other:x", state) == 0
    extra = _state("12", "@owner:x", {"users": {}}, additional_creators=[BOT])
    assert power_of(BOT, extra) == math.inf


def test_v10_power_comes_from_the_users_map() -> None:
    state = _state("10", "@owner:x", {"users": {"@owner:x": 100, BOT: 20}, "users_default": 5, "redact": 30,
                                     "events": {"m.room.redaction": 40}})
    assert power_of(BOT, state) == 20
    assert power_of("@someone:x", state) == 5
    assert level_needed(state, event_type="m.room.redaction", redact=True) == 40
    assert level_needed(state, event_type="m.room.message") == 0
    assert power_of(BOT, _state("10", BOT, None)) == 100


# -- cards ----------------------------------------------------------------------------


def test_sensitive_card_holds_no_question_and_no_link() -> None:
    content = card_content(view(sensitive=True, message_for_user="Your bank PIN"))
    assert "PIN" not in content["body"] and "PIN" not in content["formatted_body"]
    # Everyone in the room reads the card: a link there would let any member answer.
    assert "/f/" not in content["body"] and "href" not in content["formatted_body"]
    assert f"react {FORM_KEY} to this message" in content["body"] and "direct message" in content["body"]
    # An m.text (m.notice is silenced by default push rules), mentioning no one unless asked to.
    assert content["msgtype"] == "m.text" and content["m.mentions"] == {}
    asked = card_content(view(sensitive=True, message_for_user="@room PIN"), people=["@alice:example.org"])
    assert asked["m.mentions"] == {"user_ids": ["@alice:example.org"]} and "@alice:example.org" in asked["body"]


@pytest.mark.parametrize(("schema", "kind", "line"), [
    (None, "input", "To answer, reply to this message with your answer."),
    ({"type": "boolean"}, "input", "To answer, reply yes or no, or react 👍 / 👎."),
    ({"type": "string", "enum": ["canary", "stable"]}, "choice", "To answer, reply with one of: canary, stable."),
    ({"type": "integer", "minimum": 1, "maximum": 10}, "input", "To answer, reply with integer from 1 to 10."),
    (APPROVAL_SCHEMA, "approval", "To answer, reply approve or reject"),
])
def test_single_value_cards_say_how_to_answer_in_one_line(schema: Any, kind: str, line: str) -> None:
    content = card_content(view(schema=schema, kind=kind))
    assert line in content["body"]
    assert "<table>" not in content["formatted_body"]


def test_untrusted_text_is_escaped_in_the_table() -> None:
    schema = {"type": "object", "properties": {
        "pick": {"type": "string", "enum": ["<b>bold</b>", "a&b"], "title": "<i>Pick</i>"},
        "code": {"type": "string", "pattern": "^<[a-z]+>$"}}}
    formatted = card_content(view(schema=schema, message_for_user="<script>x</script>"))["formatted_body"]
    for raw in ("<b>bold</b>", "<i>Pick</i>", "<script>", "^<[a-z]+>$"):
        assert raw not in formatted
    # A pattern is never shown: people read "in a set format" (or the field's description).
    assert "&lt;b&gt;bold&lt;/b&gt;, a&amp;b" in formatted and "in a set format" in formatted
    assert "[a-z]" not in formatted


def test_outcome_edit_replaces_the_card() -> None:
    answered = view(status="answered", resolved_by="link:lnk_1", resolved_channel="web", resolved_at=1_700_000_100.0)
    edit = outcome_content(answered, card_event_id="$card")
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$card"}
    assert "Answered via the web form" in edit["m.new_content"]["body"]
    assert edit["body"].startswith("* ")
    by_matrix = view(status="answered", resolved_by="matrix:@alice:x", resolved_channel="matrix",
                     resolved_at=1_700_000_100.0)
    assert "Answered by @alice:x via Matrix" in outcome_content(by_matrix, card_event_id="$c")["m.new_content"]["body"]
    secret = outcome_content(view(status="expired", sensitive=True, message_for_user="PIN?",
                                  resolved_at=1_700_000_600.0), card_event_id="$c")
    assert "PIN" not in secret["m.new_content"]["body"] and "Expired" in secret["m.new_content"]["body"]


def test_a_reply_of_ones_own_that_starts_with_a_quote_mark_is_kept() -> None:
    reply = {"m.relates_to": {"m.in_reply_to": {"event_id": "$card"}}}
    assert answer_text({**reply, "body": "> 5 ms is fine"}) == "> 5 ms is fine"
    assert answer_text({**reply, "body": "> <@bot:h> Question\n\nyes"}) == "yes"


def test_a_form_with_a_secret_field_is_answered_only_in_the_form() -> None:
    schema = {"type": "object", "properties": {"user": {"type": "string"},
                                               "password": {"type": "string", "format": "password"}}}
    content = card_content(view(schema=schema, message_for_user="Log in"))
    assert "password: …" not in content["body"] and "secret text" not in content["body"]
    assert "answered only in the form" in content["body"]


def test_an_approval_outcome_says_the_decision_and_the_reason() -> None:
    done = view(kind="approval", schema=APPROVAL_SCHEMA, status="answered",
                response={"decision": "reject", "reason": "too risky"}, resolved_by="matrix:@alice:h",
                resolved_channel="matrix")
    body = outcome_content(done, card_event_id="$card")["m.new_content"]["body"]
    assert "❌ Rejected by @alice:h via Matrix" in body and "Reason: too risky" in body


def test_a_personal_link_message_holds_the_link_and_loses_it_at_the_end() -> None:
    url = 'https://h/f/tok"<x>'
    sent = link_content(url, view(message_for_user="Deploy <now>?"))
    assert sent["msgtype"] == "m.text" and url in sent["body"] and "Deploy <now>?" in sent["body"]
    assert 'href="https://h/f/tok&quot;&lt;x&gt;"' in sent["formatted_body"] and "<now>" not in sent["formatted_body"]
    secret = link_content(url, view(sensitive=True, message_for_user="Your PIN"))
    assert "PIN" not in secret["body"] and "PIN" not in secret["formatted_body"]
    closed = link_closed_content(view(status="cancelled", resolved_at=1_700_000_100.0), event_id="$dm")
    assert closed["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$dm"}
    assert "/f/" not in str(closed) and "Cancelled" in closed["m.new_content"]["body"]


def test_allowed_users_may_name_the_tenants_people_and_groups() -> None:
    config = base_config("sqlite:///unused.db", matrix=matrix_section(
        tenants={"acme": {"room_ids": ["!a:x"], "allowed_users": ["group:oncall", "@carol:x"]}}))
    config["tenants"][0]["people"] = [
        {"id": "alice", "name": "Alice Example", "matrix": "@alice:x", "groups": ["oncall"]},
        {"id": "bob", "name": "Bob", "groups": ["oncall"]}]  # no Matrix identity: not allowed here
    app_settings = settings_from(config)
    connector = MatrixConnector(settings=MatrixConnector.load_settings(app_settings), **NO_CORE, http=None,
                                log=logging.getLogger("test"), app_settings=app_settings)
    assert connector.may_answer("acme", "@alice:x") and connector.may_answer("acme", "@carol:x")
    assert not connector.may_answer("acme", "bob") and not connector.may_answer("acme", "group:oncall")
    # Cards and reminders mention Matrix ids, never a person's name.
    assert connector._people("acme") == ["@alice:x", "@carol:x"]
    with pytest.raises(ConfigError, match="matrix.tenants.acme: dave: not a person of this tenant"):
        load(matrix_section(tenants={"acme": {"room_ids": ["!a:x"], "allowed_users": ["dave"]}}))

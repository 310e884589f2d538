"""Labelled choices on every messenger: buttons and cards show the title, the answer holds the value."""

from __future__ import annotations

from typing import Any

from handraise.bots.matrix.cards import card_content, how_to_answer
from handraise.bots.slack.blocks import modal_view, plan_buttons
from handraise.bots.telegram.messages import button_choices, presentation
from handraise.core.api import RequestView
from handraise.core.schema import check_schema

CITY = {"type": "string", "oneOf": [{"const": "ber", "title": "Berlin"}, {"const": "lis", "title": "Lisbon"}]}
EXTRAS = {"type": "object", "properties": {"extras": {"type": "array", "items": {
    "type": "string", "anyOf": [{"const": "desk", "title": "A desk"}, {"const": "mon", "title": "Second monitor"}]}}}}


def request(schema: dict[str, Any], channel: str) -> RequestView:
    return RequestView(
        id="req_x", tenant_id="acme", unique_id="u1", status="pending", message_for_user="Where?",
        schema=check_schema(schema), kind="input", sensitive=False, run_id=None, channels=[channel],
        created_at=1_000_000.0, expires_at=1_003_600.0, created_by="agent:a1")


def test_telegram_buttons_show_titles_and_answer_values() -> None:
    view = request(CITY, "telegram")
    assert presentation(view) == "enum"
    assert [(label, value) for label, value in button_choices(view)] == [("Berlin", "ber"), ("Lisbon", "lis")]


def test_slack_buttons_and_modal_options_show_titles_and_answer_values() -> None:
    plans = plan_buttons(request(CITY, "slack"))
    assert [(p.label, p.intent) for p in plans[:2]] == [("Berlin", {"answer": "ber"}), ("Lisbon", {"answer": "lis"})]
    modal = modal_view(request(EXTRAS, "slack"), private_metadata="tok")
    options = [b for b in modal["blocks"] if b["type"] == "input"][0]["element"]["options"]
    assert [o["text"]["text"] for o in options] == ["A desk", "Second monitor"]


def test_matrix_cards_name_the_titles() -> None:
    view = request(CITY, "matrix")
    assert how_to_answer(view) == "To answer, reply with one of: Berlin, Lisbon."
    body = card_content(view)["body"]
    assert "Berlin" in body and "ber," not in body

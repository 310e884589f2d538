"""The Slack connector's Block Kit: buttons per kind, the modal per widget, reading a submission back,
errors onto blocks, outcomes, and escaping of the agent's text."""

from __future__ import annotations

from typing import Any

import zoneinfo

import pytest

from handraise.core import wording
from handraise.bots.slack.blocks import (
    FORM_INTENT,
    MODAL_INTENT,
    block_errors,
    message_content,
    modal_view,
    outcome_text,
    plan_buttons,
    reminder_text,
    read_answer,
)
from handraise.core.api import RequestView
from handraise.core.schema import check_schema
from tests.bots.slack_helpers import option_value, options_value, text_value

CREATED = 1_000_000.0


def request(schema: dict[str, Any] | None = None, *, kind: str = "input", sensitive: bool = False,
            message: str = "Which one?", **extra: Any) -> RequestView:
    return RequestView(
        id="req_x", tenant_id="acme", unique_id="u1", status=extra.pop("status", "pending"),
        message_for_user=message, schema=check_schema(schema, kind=kind), kind=kind, sensitive=sensitive,
        run_id=None, channels=["slack"], created_at=CREATED, expires_at=CREATED + 3600, created_by="agent:a1",
        **extra)


def inputs(view: RequestView) -> dict[str, dict[str, Any]]:
    modal = modal_view(view, private_metadata="tok")
    return {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}


def labels(view: RequestView) -> list[str]:
    return [p.label for p in plan_buttons(view)]


# -- buttons --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "kind", "expected"), [
    ({"type": "boolean"}, "input", ["Yes", "No", "Open form"]),
    (None, "approval", ["Approve", "Reject", "Answer here", "Open form"]),
    ({"type": "string", "enum": list("abcde")}, "choice", ["a", "b", "c", "d", "e", "Open form"]),
    ({"type": "string", "enum": list("abcdef")}, "choice", ["Answer here", "Open form"]),
    (None, "input", ["Answer here", "Open form"]),
    ({"type": "integer"}, "input", ["Answer here", "Open form"]),
    ({"type": "object", "properties": {"ok": {"type": "boolean"}}}, "input", ["Answer here", "Open form"]),
    ({"type": "string", "format": "password"}, "input", ["Open form"]),
])
def test_buttons_per_kind(schema: dict[str, Any] | None, kind: str, expected: list[str]) -> None:
    assert labels(request(schema, kind=kind)) == expected


def test_every_sensitive_request_gets_only_open_form() -> None:
    for schema, kind in (({"type": "boolean"}, "input"), (None, "approval"), (None, "input")):
        assert [p.intent for p in plan_buttons(request(schema, kind=kind, sensitive=True))] == [FORM_INTENT]


def test_button_intents_and_clipped_labels() -> None:
    long_choice = "x" * 100
    plans = plan_buttons(request({"type": "string", "enum": [long_choice, "b"]}))
    assert plans[0].intent == {"answer": long_choice}
    text, blocks = message_content(request({"type": "string", "enum": [long_choice, "b"]}),
                                   [(p, f"tok{i}") for i, p in enumerate(plans)])
    button = blocks[1]["elements"][0]
    assert len(button["text"]["text"]) == 75 and button["text"]["text"].endswith("…")
    assert [e["action_id"] for e in blocks[1]["elements"]] == ["hr_0", "hr_1", "hr_2"]
    assert [e["value"] for e in blocks[1]["elements"]] == ["tok0", "tok1", "tok2"]
    assert plan_buttons(request(None, kind="approval"))[2].intent == MODAL_INTENT


# -- the message text -----------------------------------------------------------------------------


def test_the_agents_text_cannot_ping_or_link() -> None:
    view = request(message="<!channel> deploy & tell <@U0BOSS> <https://evil.example|docs>")
    text, blocks = message_content(view, [])
    shown = blocks[0]["text"]["text"]
    assert shown == "&lt;!channel&gt; deploy &amp; tell &lt;@U0BOSS&gt; &lt;https://evil.example|docs&gt;"
    assert "<" not in text and "<!channel>" not in text


def test_long_text_is_clipped_to_slacks_limit_without_a_broken_entity() -> None:
    view = request(message="<>&" * 2500)
    _, blocks = message_content(view, [])
    shown = blocks[0]["text"]["text"]
    assert len(shown) <= 3000 and shown.endswith("…")
    assert shown[:-1].endswith(("&lt;", "&gt;", "&amp;"))


def test_deadline_context_shows_a_local_date_and_never_a_frozen_countdown() -> None:
    # A "59 min left" posted once would stay 59 min forever: only the deadline, which Slack renders
    # in each reader's zone, with the tenant's zone as the fallback.
    _, blocks = message_content(request(), [], tz=zoneinfo.ZoneInfo("Europe/Berlin"))
    context = blocks[-1]["elements"][0]["text"]
    assert "left" not in context
    assert f"<!date^{int(CREATED + 3600)}^{{date_short_pretty}} at {{time}}|" in context
    assert context.endswith(" CET>") or context.endswith(" CEST>")


def test_reminder_rounds_the_time_left_up() -> None:
    view = request()
    assert "2 min left" in reminder_text(view, now=view.expires_at - 61)
    assert "1 min left" in reminder_text(view, now=view.expires_at - 60)


# -- the modal ------------------------------------------------------------------------------------


def test_choices_beyond_slacks_limits() -> None:
    many = [f"c{i}" for i in range(12)]
    huge = [f"h{i}" for i in range(150)]
    view = request({"type": "object", "properties": {
        "pick": {"type": "array", "items": {"type": "string", "enum": many}, "maxItems": 3},
        "lots": {"type": "array", "items": {"type": "string", "enum": huge}},
        "one": {"type": "string", "enum": huge},
    }})
    blocks = inputs(view)
    assert blocks["pick"]["element"]["type"] == "multi_static_select"
    assert blocks["pick"]["element"]["max_selected_items"] == 3
    assert blocks["lots"]["element"]["type"] == "plain_text_input"
    assert blocks["one"]["element"]["type"] == "plain_text_input"
    assert "one of:" in blocks["one"]["hint"]["text"]
    answer = read_answer(view, {
        "pick": options_value([11, 0], "multi_static_select"),
        "lots": text_value("h3, h140"),
        "one": text_value("H7"),
    })
    assert answer == {"pick": ["c11", "c0"], "lots": ["h3", "h140"], "one": "h7"}


def test_defaults_fill_the_modal() -> None:
    view = request({"type": "object", "properties": {
        "name": {"type": "string", "default": "Ada"},
        "count": {"type": "integer", "default": 4},
        "ratio": {"type": "number", "minimum": 0.5, "maximum": 2.0, "default": 1.5},
        "ok": {"type": "boolean", "default": False},
        "size": {"type": "string", "enum": ["S", "M"], "default": "M"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["b"]},
        "day": {"type": "string", "format": "date", "default": "2026-03-04"},
        "at": {"type": "string", "format": "time", "default": "08:30"},
        "when": {"type": "string", "format": "date-time", "default": "2026-01-02T14:30:00Z"},
        "trip": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2,
                 "default": ["2026-05-01", "2026-05-03"]},
    }})
    blocks = inputs(view)
    assert blocks["name"]["element"]["initial_value"] == "Ada"
    assert blocks["count"]["element"]["initial_value"] == "4"
    assert blocks["ratio"]["element"] == {"type": "number_input", "action_id": "value",
                                         "is_decimal_allowed": True, "min_value": "0.5",
                                         "max_value": "2", "initial_value": "1.5"}
    assert blocks["ok"]["element"]["initial_option"]["value"] == "false"
    assert blocks["size"]["element"]["initial_option"]["text"]["text"] == "M"
    assert [o["value"] for o in blocks["tags"]["element"]["initial_options"]] == ["1"]
    assert blocks["day"]["element"]["initial_date"] == "2026-03-04"
    assert blocks["at"]["element"]["initial_time"] == "08:30"
    assert blocks["when"]["element"]["initial_date_time"] == 1767364200
    assert blocks["trip"]["element"]["initial_date"] == "2026-05-01"
    assert blocks["trip:end"]["element"]["initial_date"] == "2026-05-03"
    assert blocks["trip"]["label"]["text"] == "Trip (start)" and blocks["trip:end"]["label"]["text"] == "Trip (end)"


def test_reading_a_submission_ignores_what_the_modal_never_offered() -> None:
    view = request({"type": "object", "properties": {
        "size": {"type": "string", "enum": ["S", "M"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "ok": {"type": "boolean"},
        "n": {"type": "integer"},
    }})
    answer = read_answer(view, {
        "size": option_value(7),
        "tags": options_value([1, 9]),
        "ok": option_value("maybe"),
        "n": text_value("   "),
        "extra": text_value("x"),
    })
    assert answer == {"tags": ["b"]}
    assert read_answer(view, "not a dict") == {}  # type: ignore[arg-type]
    assert read_answer(request({"type": "integer"}), {}) is None
    assert read_answer(request(None), {}) == ""
    assert read_answer(request({"type": "integer"}), {"answer": text_value("12", "number_input")}) == 12


def test_errors_land_on_their_blocks() -> None:
    view = request({"type": "object", "properties": {
        "name": {"type": "string"},
        "trip": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
    }})
    errors = block_errors(view, [
        {"field": "trip.1", "message": "is not a valid date (YYYY-MM-DD)"},
        {"field": "trip.0", "message": "is not a valid date (YYYY-MM-DD)"},
        {"field": "name", "message": "is required"},
        {"field": "name", "message": "is required"},
        {"field": "nickname", "message": "is not a field of this form"},
        {"field": "", "message": "must be a set of fields"},
    ])
    assert errors == {
        "trip:end": "is not a valid date (YYYY-MM-DD)",
        "trip": "is not a valid date (YYYY-MM-DD)",
        "name": "is required; nickname: is not a field of this form; must be a set of fields",
    }
    assert block_errors(request({"type": "integer"}), [{"field": "", "message": "must be a whole number"}]) == {
        "answer": "must be a whole number"}


# -- outcomes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("view", "expected"), [
    (request(None, kind="approval", status="answered", response={"decision": "approve"},
             resolved_by="slack:T1/U0ALICE", resolved_channel="slack"), "✅ *Approved by <@U0ALICE> via Slack*"),
    (request(None, kind="approval", status="answered", response={"decision": "reject", "reason": "too <b>"},
             resolved_by="slack:T1/U0ALICE", resolved_channel="slack"),
     "❌ *Rejected by <@U0ALICE> via Slack*\nReason: *too &lt;b&gt;*"),
    (request(None, kind="approval", sensitive=True, status="answered", response={"decision": "reject"},
             resolved_by="slack:T1/U0ALICE", resolved_channel="slack"), "✅ *Answered by <@U0ALICE> via Slack*"),
    (request({"type": "boolean"}, status="answered", response=True, resolved_by="telegram:42",
             resolved_channel="telegram"), "✅ *Answered by Telegram user 42 via Telegram*\nAnswer: *yes*"),
    (request({"type": "string", "enum": ["<b>", "c"]}, status="answered", response="<b>",
             resolved_by="operator:op-1", resolved_channel="api"),
     "✅ *Answered by operator op-1 via the API*\nAnswer: *&lt;b&gt;*"),
    (request({"type": "boolean"}, status="answered", response=None, response_purged=True,
             resolved_by="link:lnk_1", resolved_channel="web"), "✅ *Answered via the web form*"),
    (request(None, kind="approval", status="expired"), "⌛ *Expired*"),
    (request(None, status="cancelled"), "🚫 *Cancelled*"),
])
def test_outcomes(view: RequestView, expected: str) -> None:
    who = "<@U0ALICE>" if (view.resolved_by or "").startswith("slack:") else None
    assert outcome_text(wording.outcome(view, who=who)) == expected

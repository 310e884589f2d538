"""Block Kit for Handraise requests: the message and its buttons, the modal built from the schema,
and the way back from a submitted modal to a typed answer and per-block errors."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace
from typing import Any

from handraise.core import proposals, wording
from handraise.core.api import RequestView
from handraise.core.schema import FieldSpec, coerce_field, describe_field, fields

# Every interactive element of ours has an action_id with this prefix, so one Bolt listener routes them.
ACTION_PREFIX = "hr_"
ACTIONS_BLOCK = "hr_actions"
# The rating buttons of an answered request's message (RFC 0056 annotations of its run).
RATING_BLOCK = "hr_rating"
LINK_ACTION = "hr_link"
MODAL_CALLBACK = "hr_modal"
# The block of a primitive (or free-text) answer; object fields use their own names.
ROOT_BLOCK = "answer"
VALUE_ACTION = "value"
# Field names cannot contain ":" (core/schema.py), so "<name>:end" never collides with a field's block.
RANGE_END = ":end"

# What a button token stands for (the value kept server-side by create_chat_actions).
MODAL_INTENT: dict[str, Any] = {"modal": True}
FORM_INTENT: dict[str, Any] = {"form": True}

# An enum with at most this many choices is answered with buttons on the message.
MAX_QUICK_CHOICES = 5

# Block Kit limits (api.slack.com/reference/block-kit).
_SECTION_TEXT = 3000
_BUTTON_TEXT = 75
_OPTION_TEXT = 75
_LABEL = 2000
_HINT = 2000
_INPUT_LENGTH = 3000
_RADIO_MAX = 5
_CHECKBOXES_MAX = 10
_SELECT_MAX = 100
_ERROR_TEXT = 500

_MISSING = object()


@dataclass(frozen=True)
class ButtonPlan:
    """One button on the request's message, before its token is minted."""

    label: str
    intent: dict[str, Any]
    style: str | None = None
    confirm: dict[str, Any] | None = None


def answer_intent(value: Any) -> dict[str, Any]:
    return {"answer": value}


def form_only(view: RequestView) -> bool:
    """Sensitive requests, and forms with masked input Slack cannot mask, are answered only in the web form."""
    return wording.form_only(view)


def quick_spec(view: RequestView) -> FieldSpec | None:
    """The single field a tap can answer (a boolean, or an enum of at most five choices), if any."""
    if view.schema is None or view.schema.get("type") == "object":
        return None
    spec = fields(view.schema)[0]
    if spec.widget == "boolean" or (spec.widget == "enum" and len(spec.choices) <= MAX_QUICK_CHOICES):
        return spec
    return None


def plan_buttons(view: RequestView) -> list[ButtonPlan]:
    """The message's buttons: quick answers, "Answer here" for the modal, always "Open form"."""
    plans: list[ButtonPlan] = []
    if not form_only(view):
        quick = quick_spec(view)
        if view.kind == "approval":
            plans.append(ButtonPlan("Approve", answer_intent({"decision": "approve"}), style="primary"))
            plans.append(ButtonPlan("Reject", answer_intent({"decision": "reject"}), style="danger",
                                    confirm=_confirm_reject()))
            # The modal is where a reason goes.
            plans.append(ButtonPlan("Answer here", MODAL_INTENT))
        elif quick is not None and quick.widget == "boolean":
            plans.append(ButtonPlan("Yes", answer_intent(True), style="primary"))
            plans.append(ButtonPlan("No", answer_intent(False)))
        elif quick is not None:
            plans.extend(ButtonPlan(quick.choice_title(choice), answer_intent(choice)) for choice in quick.choices)
        else:
            plans.append(ButtonPlan("Answer here", MODAL_INTENT, style="primary"))
    plans.append(ButtonPlan("Open form", FORM_INTENT))
    return plans


def _confirm_reject() -> dict[str, Any]:
    return {
        "title": _plain("Reject this request?"),
        "text": _plain("The agent will be told that you rejected it."),
        "confirm": _plain("Reject"),
        "deny": _plain("Cancel"),
        "style": "danger",
    }


# --------------------------------------------------------------------------- message


def message_content(view: RequestView, buttons: list[tuple[ButtonPlan, str]], *, tz: dt.tzinfo = dt.UTC,
                    tally: str = "") -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and blocks of a pending request's message; ``buttons`` pairs plans with tokens;
    ``tally``: a quorum request's votes so far (core.quorum)."""
    blocks: list[dict[str, Any]] = [_question_section(view)]
    if tally:
        blocks.append({"type": "context", "elements": [_mrkdwn(_escape(tally))]})
    if buttons:
        blocks.append({
            "type": "actions",
            "block_id": ACTIONS_BLOCK,
            "elements": [_button(index, plan, token) for index, (plan, token) in enumerate(buttons)],
        })
    blocks.append(_deadline_context(view, tz=tz))
    return _fallback_text(view), blocks


def outcome_content(view: RequestView, outcome: wording.Outcome, *, rating_tokens: list[str] | None = None
                    ) -> tuple[str, list[dict[str, Any]]]:
    """A terminal request's message: the question and its outcome; no answer buttons, but the rating
    buttons 1..5 when ``rating_tokens`` (one per rating, in order) are given."""
    blocks = [_question_section(view), {"type": "context", "elements": [_mrkdwn(outcome_text(outcome))]}]
    if rating_tokens:
        blocks.append({"type": "context", "elements": [_mrkdwn(wording.text("rate_prompt"))]})
        blocks.append({
            "type": "actions",
            "block_id": RATING_BLOCK,
            "elements": [{"type": "button", "action_id": f"{ACTION_PREFIX}rate_{n}", "text": _plain(str(n)),
                          "value": token} for n, token in enumerate(rating_tokens, start=1)],
        })
    # The notification text: the headline only (the answer shows in the blocks).
    return f"{outcome.icon} {outcome.headline}", blocks


def reminder_text(view: RequestView, *, now: float, tz: dt.tzinfo = dt.UTC) -> str:
    return f"{wording.ICONS['reminder']} {wording.reminder(view, now=now, tz=tz)}"


def form_link_content(url: str) -> tuple[str, list[dict[str, Any]]]:
    return link_content(wording.text("link"), url=url, button="Open form")


def link_content(text: str, *, url: str, button: str) -> tuple[str, list[dict[str, Any]]]:
    """A message that hands one person a link of their own: ``text`` (what a notification shows: never the
    link) and a section whose button opens it (a tap on it reaches the app as LINK_ACTION, ignored)."""
    blocks = [{
        "type": "section",
        "text": _mrkdwn(_mrkdwn_clip(text, _SECTION_TEXT)),
        "accessory": {"type": "button", "action_id": LINK_ACTION, "text": _plain(_clip(button, _BUTTON_TEXT)),
                      "url": url, "style": "primary"},
    }]
    return text, blocks


def outcome_text(outcome: wording.Outcome) -> str:
    """The outcome in mrkdwn: the emoji and headline in bold (the name is a mention), then the answer."""
    lines = [f"{outcome.icon} *{outcome.headline}*"]
    lines += [f"{_escape(title)}: *{_mrkdwn_clip(value, 200)}*" for title, value in outcome.lines]
    return "\n".join(lines)


def _question_section(view: RequestView) -> dict[str, Any]:
    if view.sensitive:
        text = ("🔒 *A private answer is requested.* Open the form to see the question and answer it; "
                "replies in Slack are not accepted.")
    else:
        heading = "*Approval requested*\n" if view.kind == "approval" else ""
        proposed = wording.proposal_text(view)
        tail = f"\n\n{_escape(proposed)}" if proposed else ""
        text = heading + _mrkdwn_clip(view.message_for_user, _SECTION_TEXT - len(heading) - len(tail)) + tail
    return {"type": "section", "text": _mrkdwn(text)}


def _fallback_text(view: RequestView) -> str:
    # The notification preview: a sensitive request's question stays out of it.
    if view.sensitive:
        return "A private answer is requested"
    return _mrkdwn_clip(" ".join(view.message_for_user.split()), 150)


def _deadline_context(view: RequestView, *, tz: dt.tzinfo = dt.UTC) -> dict[str, Any]:
    expires = int(view.expires_at)
    # Slack renders <!date^…> in the reader's own time zone; the part after | is the fallback, in the
    # tenant's. No "N min left": a posted message would freeze it there.
    when = f"<!date^{expires}^{{date_short_pretty}} at {{time}}|{wording.when(view.expires_at, tz)}>"
    return {"type": "context", "elements": [_mrkdwn(f"{wording.ICONS['pending']} Answer by {when}")]}


def _button(index: int, plan: ButtonPlan, token: str) -> dict[str, Any]:
    # action_ids must be unique within a block; the token alone says what the button means.
    element: dict[str, Any] = {"type": "button", "action_id": f"{ACTION_PREFIX}{index}",
                               "text": _plain(_clip(plan.label, _BUTTON_TEXT)), "value": token}
    if plan.style:
        element["style"] = plan.style
    if plan.confirm:
        element["confirm"] = plan.confirm
    return element


# --------------------------------------------------------------------------- modal


def form_view(view: RequestView) -> RequestView:
    """The request as its modal draws and reads it: an approval with a proposal shows the proposal's
    fields filled in and editable (``proposal.<name>``, ``proposals.form_schema``) before the decision,
    so the approver may approve with edits here as on the form; not repeated read-only above them."""
    if not proposals.editable(view):
        return view  # none, or several approvers approve it as proposed: read-only above
    assert view.proposal is not None and view.proposal_schema is not None
    schema = proposals.form_schema(proposal=view.proposal, proposal_schema=view.proposal_schema)
    return replace(view, schema=schema, proposal=None, proposal_schema=None)


def modal_view(view: RequestView, *, private_metadata: str, tz: dt.tzinfo = dt.UTC) -> dict[str, Any]:
    """The modal for a request (as :func:`form_view` draws it): one input block per field, block ids
    named after the fields."""
    view = form_view(view)
    approval = view.kind == "approval"
    blocks: list[dict[str, Any]] = [_question_section(view), _deadline_context(view, tz=tz)]
    for spec in fields(view.schema, sensitive=view.sensitive):
        blocks.extend(_input_blocks(spec, approval=approval))
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK,
        "private_metadata": private_metadata,
        "title": _plain("Approval" if approval else "Answer"),
        "submit": _plain("Submit"),
        "close": _plain("Cancel"),
        "blocks": blocks,
    }


def notice_view(title: str, text: str) -> dict[str, Any]:
    """A modal that only says something (what a submission is replaced with when it cannot be taken)."""
    return {"type": "modal", "title": _plain(_clip(title, 24)), "close": _plain("Close"),
            "blocks": [{"type": "section", "text": _mrkdwn(_escape(text))}]}


def block_id(spec: FieldSpec) -> str:
    return spec.name or ROOT_BLOCK


def _input_blocks(spec: FieldSpec, *, approval: bool) -> list[dict[str, Any]]:
    if spec.widget == "date_range":
        start, end = _range_default(spec.default)
        return [
            _input_block(spec, block_id(spec), f"{spec.title} (start)", _datepicker(start)),
            _input_block(spec, block_id(spec) + RANGE_END, f"{spec.title} (end)", _datepicker(end)),
        ]
    return [_input_block(spec, block_id(spec), spec.title, _element(spec, approval=approval))]


def _input_block(spec: FieldSpec, bid: str, label: str, element: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "input", "block_id": bid, "label": _plain(_clip(label, _LABEL)),
                             "element": element, "optional": not spec.required}
    hint = spec.description or (describe_field(spec) if _has_bounds(spec) else "")
    if hint:
        block["hint"] = _plain(_clip(hint, _HINT))
    return block


def _has_bounds(spec: FieldSpec) -> bool:
    return any(v is not None for v in (spec.min_length, spec.max_length, spec.pattern, spec.minimum, spec.maximum,
                                       spec.exclusive_minimum, spec.exclusive_maximum, spec.multiple_of,
                                       spec.min_items, spec.max_items)) or (
        spec.widget in ("enum", "multi_enum") and len(spec.choices) > _SELECT_MAX)


def _element(spec: FieldSpec, *, approval: bool) -> dict[str, Any]:
    widget = spec.widget
    default = spec.default
    if widget in ("integer", "number"):
        element: dict[str, Any] = {"type": "number_input", "action_id": VALUE_ACTION,
                                   "is_decimal_allowed": widget == "number"}
        if _is_number(spec.minimum):
            element["min_value"] = _number_text(spec.minimum)
        if _is_number(spec.maximum):
            element["max_value"] = _number_text(spec.maximum)
        if _is_number(default):
            element["initial_value"] = _number_text(default)
        return element
    if widget == "boolean":
        options = [_option("Yes", "true"), _option("No", "false")]
        element = {"type": "radio_buttons", "action_id": VALUE_ACTION, "options": options}
        if isinstance(default, bool):
            element["initial_option"] = options[0 if default else 1]
        return element
    if widget == "enum":
        options = [_option(_choice_label(spec.choice_title(c), approval), str(i)) for i, c in enumerate(spec.choices)]
        if len(options) <= _RADIO_MAX:
            element = {"type": "radio_buttons", "action_id": VALUE_ACTION, "options": options}
        elif len(options) <= _SELECT_MAX:
            element = {"type": "static_select", "action_id": VALUE_ACTION, "options": options,
                       "placeholder": _plain("Choose…")}
        else:
            # Beyond Slack's 100 options the choice is typed; core matches it to a choice.
            return _text_input(spec, multiline=False)
        if isinstance(default, str) and default in spec.choices:
            element["initial_option"] = options[spec.choices.index(default)]
        return element
    if widget == "multi_enum":
        options = [_option(spec.choice_title(c), str(i)) for i, c in enumerate(spec.choices)]
        if len(options) <= _CHECKBOXES_MAX:
            element = {"type": "checkboxes", "action_id": VALUE_ACTION, "options": options}
        elif len(options) <= _SELECT_MAX:
            element = {"type": "multi_static_select", "action_id": VALUE_ACTION, "options": options,
                       "placeholder": _plain("Choose…")}
            if spec.max_items:
                element["max_selected_items"] = spec.max_items
        else:
            return _text_input(spec, multiline=False)
        if isinstance(default, list):
            chosen = [options[spec.choices.index(c)] for c in default if c in spec.choices]
            if chosen:
                element["initial_options"] = chosen
        return element
    if widget == "date":
        return _datepicker(default if isinstance(default, str) else None)
    if widget == "time":
        element = {"type": "timepicker", "action_id": VALUE_ACTION}
        if isinstance(default, str) and len(default) >= 5 and default[2] == ":":
            element["initial_time"] = default[:5]
        return element
    if widget == "date-time":
        element = {"type": "datetimepicker", "action_id": VALUE_ACTION}
        epoch = _epoch(default)
        if epoch is not None:
            element["initial_date_time"] = epoch
        return element
    if widget == "email":
        return _with_initial({"type": "email_text_input", "action_id": VALUE_ACTION}, default)
    if widget == "uri":
        return _with_initial({"type": "url_text_input", "action_id": VALUE_ACTION}, default)
    return _text_input(spec, multiline=widget == "textarea")


def _text_input(spec: FieldSpec, *, multiline: bool) -> dict[str, Any]:
    element: dict[str, Any] = {"type": "plain_text_input", "action_id": VALUE_ACTION, "multiline": multiline}
    if spec.widget in ("text", "textarea"):
        # Only lengths Slack accepts; core checks the rest on submission.
        if spec.min_length and spec.min_length <= _INPUT_LENGTH:
            element["min_length"] = spec.min_length
        if spec.max_length and spec.max_length <= _INPUT_LENGTH:
            element["max_length"] = spec.max_length
    return _with_initial(element, spec.default)


def _with_initial(element: dict[str, Any], default: Any) -> dict[str, Any]:
    if isinstance(default, str) and default:
        element["initial_value"] = default
    return element


def _datepicker(initial: str | None) -> dict[str, Any]:
    element: dict[str, Any] = {"type": "datepicker", "action_id": VALUE_ACTION}
    if initial:
        try:
            element["initial_date"] = dt.date.fromisoformat(initial).isoformat()
        except ValueError:
            pass
    return element


def _range_default(default: Any) -> tuple[str | None, str | None]:
    if isinstance(default, list) and len(default) == 2 and all(isinstance(d, str) for d in default):
        return default[0], default[1]
    return None, None


def _epoch(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(parsed.timestamp()) if parsed.tzinfo is not None else None


def _choice_label(choice: str, approval: bool) -> str:
    return choice.capitalize() if approval else choice


# --------------------------------------------------------------------------- submission


def read_answer(view: RequestView, values: dict[str, Any]) -> Any:
    """The typed answer in a submitted modal's ``state.values``, shaped for ``view.schema``.

    Fields left empty are absent, so core says "is required" where it matters. An approval's edited
    proposal comes back as core takes it (``{"decision", "reason"?, "proposal"?}``).
    """
    form = form_view(view)
    if form is not view:
        return proposals.from_form(read_answer(form, values), proposal=view.proposal, posted=None)
    specs = fields(view.schema, sensitive=view.sensitive)
    values = values if isinstance(values, dict) else {}
    if view.schema is None or view.schema.get("type") != "object":
        value = _read_field(specs[0], values)
        if value is _MISSING:
            return "" if view.schema is None else None
        return value
    answer: dict[str, Any] = {}
    for spec in specs:
        value = _read_field(spec, values)
        if value is not _MISSING:
            answer[spec.name] = value
    return answer


def _state(values: dict[str, Any], bid: str) -> dict[str, Any]:
    block = values.get(bid)
    state = block.get(VALUE_ACTION) if isinstance(block, dict) else None
    return state if isinstance(state, dict) else {}


def _read_field(spec: FieldSpec, values: dict[str, Any]) -> Any:
    bid = block_id(spec)
    state = _state(values, bid)
    widget = spec.widget
    if widget == "date_range":
        given = [d for d in (state.get("selected_date"), _state(values, bid + RANGE_END).get("selected_date")) if d]
        return given or _MISSING
    if widget == "boolean":
        chosen = (state.get("selected_option") or {}).get("value")
        return {"true": True, "false": False}.get(chosen, _MISSING)
    if widget == "enum" and "selected_option" in state:
        option = state.get("selected_option") or {}
        return _choice(spec, option.get("value"))
    if widget == "multi_enum" and "selected_options" in state:
        picked = [_choice(spec, o.get("value")) for o in state.get("selected_options") or [] if isinstance(o, dict)]
        picked = [p for p in picked if p is not _MISSING]
        return picked or _MISSING
    if widget == "date":
        return state.get("selected_date") or _MISSING
    if widget == "time":
        return state.get("selected_time") or _MISSING
    if widget == "date-time":
        stamp = state.get("selected_date_time")
        if not isinstance(stamp, (int, float)) or isinstance(stamp, bool):
            return _MISSING
        return dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = state.get("value")
    if not isinstance(text, str) or not text.strip():
        return _MISSING
    # Typed text (and number_input's string) becomes the field's type as in every other channel.
    return coerce_field(spec, text)


def _choice(spec: FieldSpec, value: Any) -> Any:
    try:
        index = int(value)
    except (TypeError, ValueError):
        return _MISSING
    return spec.choices[index] if 0 <= index < len(spec.choices) else _MISSING


def block_errors(view: RequestView, details: list[dict[str, Any]]) -> dict[str, str]:
    """Core's field errors as ``{block_id: message}`` for ``response_action: "errors"``."""
    view = form_view(view)
    specs = fields(view.schema, sensitive=view.sensitive)
    by_name = {spec.name: spec for spec in specs}
    first = block_id(specs[0])
    out: dict[str, list[str]] = {}
    for detail in details:
        path = str(detail.get("field") or "")
        message = str(detail.get("message") or "is not valid")
        head, _, rest = path.partition(".")
        # A field whose name has a dot (a proposal's ``proposal.<name>``) before a part of one.
        spec = (by_name.get(path) or by_name.get(head)) if path else None
        if spec is None:
            bid = first
            if path:
                message = f"{path}: {message}"
        else:
            bid = block_id(spec)
            if spec.widget == "date_range" and rest == "1":
                bid += RANGE_END
        out.setdefault(bid, [])
        if message not in out[bid]:
            out[bid].append(message)
    return {bid: _clip("; ".join(messages), _ERROR_TEXT) for bid, messages in out.items()}


# --------------------------------------------------------------------------- text


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}


def _option(label: str, value: str) -> dict[str, Any]:
    return {"text": _plain(_clip(label, _OPTION_TEXT)), "value": value}


def _escape(text: str) -> str:
    # The three characters Slack's mrkdwn needs escaped; the rest of the human's text is shown as written.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mrkdwn_clip(text: str, limit: int) -> str:
    """``text`` escaped for mrkdwn and cut to ``limit`` characters without splitting an entity."""
    escaped = _escape(text)
    if len(escaped) <= limit:
        return escaped
    raw = text[: limit - 1]
    while len(_escape(raw)) > limit - 1:
        raw = raw[: len(raw) - max(1, (len(_escape(raw)) - limit + 1) // 5)]
    return _escape(raw) + "…"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)

"""What a Telegram message about a request says and which buttons it carries: pure functions, no I/O.

Every sentence comes from ``core.wording``; this module fits it to Telegram (its 4,096 UTF-16 unit
limit, inline keyboards, how a request is asked).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.schema import fields

MAX_TEXT = 4096  # Telegram's limit, in UTF-16 code units
MAX_BUTTON_CHOICES = 8
SENSITIVE_TEXT = wording.text("sensitive_question") + " Open it with the button below; replies in this chat are deleted."
CUT_NOTE = "[The question is cut here: the form shows all of it.]"


def presentation(view: RequestView) -> str:
    """How a request is asked in Telegram: sensitive, form_only, approval, boolean, enum, free_text or form."""
    if view.sensitive:
        return "sensitive"
    if wording.form_only(view):
        return "form_only"
    if view.kind == "approval":
        return "approval"
    schema = view.schema
    if schema is None:
        return "free_text"
    if schema.get("type") == "boolean":
        return "boolean"
    spec = fields(schema)[0] if schema.get("type") != "object" else None
    if spec is not None and spec.widget == "enum" and len(spec.choices) <= MAX_BUTTON_CHOICES:
        return "enum"
    return "form"


def button_choices(view: RequestView) -> list[tuple[str, Any]]:
    """(label, value) of the buttons that answer directly."""
    style = presentation(view)
    if style == "approval":
        return [("✅ Approve", {"decision": "approve"}), ("❌ Reject", {"decision": "reject"})]
    if style == "boolean":
        return [("Yes", True), ("No", False)]
    if style == "enum":
        # A labelled choice shows its title; the answer holds the value.
        spec = fields(view.schema)[0]
        return [(_label(spec.choice_title(v)), v) for v in spec.choices]
    return []


def hint_text(view: RequestView, style: str, *, tz: dt.tzinfo = dt.UTC) -> str:
    until = wording.deadline(view, tz)
    if style in ("sensitive", "form_only"):
        return f"Open the form to answer. {until}" if style == "form_only" else until
    if style == "approval":
        proposed = wording.proposal_text(view)
        return (f"{proposed}\n" if proposed else "") + f"Tap Approve or Reject, or {wording.how_to_reply(view)}. {until}"
    if style in ("boolean", "enum"):
        return f"Tap your answer. {until}"
    if style == "free_text":
        return f"Reply to this message with your answer. {until}"
    if view.schema is not None and view.schema.get("type") == "object":
        lines = [f"• {line}" for line in wording.field_lines(view)]
        return f"To answer, {wording.how_to_reply(view)}, or open the form.\n" + "\n".join(lines) + f"\n{until}"
    return f"To answer, {wording.how_to_reply(view)}, or open the form. {until}"


def compose_text(view: RequestView, *, hint: str, outcome: str | None) -> tuple[str, bool]:
    """The message text within Telegram's limit; True when the question had to be cut."""
    body = SENSITIVE_TEXT if view.sensitive else view.message_for_user
    tail_parts = [p for p in (outcome if outcome is not None else hint,) if p]
    tail = "\n\n" + "\n".join(tail_parts) if tail_parts else ""
    if utf16_len(body) + utf16_len(tail) <= MAX_TEXT:
        return body + tail, False
    note = "\n\n" + CUT_NOTE
    room = MAX_TEXT - utf16_len(tail) - utf16_len(note) - 1
    if room < 200:  # an enormous hint (a long form): keep the question, shorten the hint
        tail = cut_utf16(tail, MAX_TEXT // 2) + "…"
        room = MAX_TEXT - utf16_len(tail) - utf16_len(note) - 1
    return cut_utf16(body, room) + "…" + note + tail, True


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def cut_utf16(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` UTF-16 code units, never splitting a character."""
    if utf16_len(text) <= limit:
        return text
    out, used = [], 0
    for ch in text:
        size = 2 if ord(ch) > 0xFFFF else 1
        if used + size > limit:
            break
        out.append(ch)
        used += size
    return "".join(out)


def _label(text: str) -> str:
    return text if len(text) <= 60 else text[:59] + "…"


def answer_rows(choices: list[tuple[str, Any]], tokens: list[str]) -> list[list[InlineKeyboardButton]]:
    """The answer buttons, two to a row when every label is short, one per row otherwise."""
    buttons = [InlineKeyboardButton(label, callback_data=token) for (label, _), token in zip(choices, tokens)]
    per_row = 2 if all(len(label) <= 20 for label, _ in choices) else 1
    return [buttons[i:i + per_row] for i in range(0, len(buttons), per_row)]


def form_button(link: str, style: str) -> list[InlineKeyboardButton]:
    """The row that opens the hosted form (an approval's form also takes a reason)."""
    return [InlineKeyboardButton("Open form (add a reason)" if style == "approval" else "Open form", url=link)]


def rating_keyboard(tokens: list[str]) -> InlineKeyboardMarkup:
    """One row of buttons 1..5 under an answered request's outcome."""
    return InlineKeyboardMarkup([[InlineKeyboardButton(str(n), callback_data=token)
                                  for n, token in enumerate(tokens, start=1)]])

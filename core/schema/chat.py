"""Chat text read as an answer: coercion of typed values and ``field: value`` lines (never raises)."""

from __future__ import annotations

import datetime as dt
import math
import re

from handraise.core.schema.fields import FieldSpec, field_spec, fields
from handraise.core.schema.shapes import is_approval
from handraise.core.schema.validation import FieldError

# --------------------------------------------------------------------------- coercion

_TRUE_WORDS = frozenset({"yes", "y", "true", "1", "👍", "✅"})
_FALSE_WORDS = frozenset({"no", "n", "false", "0", "👎", "❌"})
# Words that decide an approval in chat, alone (a reason may follow a separator). Anything else,
# "ok, let me look first" or "no idea, asking @bob", decides nothing.
APPROVE_PHRASES = frozenset({"approve", "approved", "i approve", "yes", "y", "ok", "okay", "lgtm", "accept",
                             "accepted", "go ahead", "ship it", "👍", "✅"})
REJECT_PHRASES = frozenset({"reject", "rejected", "i reject", "no", "n", "deny", "denied", "decline", "declined",
                            "👎", "❌"})
_DECISION_EMOJI = {"👍": "approve", "✅": "approve", "👎": "reject", "❌": "reject"}
# Words that mean nothing but a decision, so a comma may follow them ("approve, thanks").
_STRONG_PHRASES = frozenset({"approve", "approved", "i approve", "lgtm", "reject", "rejected", "i reject",
                             "deny", "denied", "decline", "declined"})
# Between a decision and its reason: a colon, a dash, or "because".
# Fixed-width alternatives only: no \s* around them, so a long run of spaces costs linear time.
_DECISION_SEPARATOR = re.compile(r":|\s[-–—]\s|\n|\bbecause\b", re.IGNORECASE)
# A template's placeholder for a value ("name: …") is not a value.
_PLACEHOLDERS = frozenset({"…", "...", "<value>"})
# Skin-tone modifiers and the emoji variation selector ride along with 👍/👎.
_EMOJI_NOISE_CHARS = "".join(map(chr, range(0x1F3FB, 0x1F400))) + "\ufe0f"
_EMOJI_NOISE = re.compile(f"[{_EMOJI_NOISE_CHARS}]")
_INTEGER = re.compile(r"[+-]?\d+(?:\.0*)?")
# Unambiguous on purpose ("\d+\.?\d*" backtracks quadratically on "111…x").
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DATE_LOOSE = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})")
_RANGE_GLUE = re.compile(r"(?:\s|from|to|till|until|through|thru|and|\.\.\.?|…|–|—|-|,|;)*", re.IGNORECASE)
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d{1,9})?))?")
_CLOCK_12 = re.compile(r"(\d{1,2})(?::(\d{2}))?\s*([ap])\.?\s*m\.?", re.IGNORECASE)
_APPROVAL_LINES = re.compile(r"\s*(?:[-*•]\s*)?\**(?:decision|reason)\**\s*:", re.IGNORECASE)


def coerce_text(schema: dict | None, text: str) -> object:
    """Turn one chat reply into the typed answer for ``schema``; never raises.

    Unreadable text comes back as (stripped) text, so ``validate_answer`` tells
    the human what is wrong. An object schema reads ``field: value`` lines
    (see ``parse_field_lines``); an approval also reads "approve because …".
    """
    if not isinstance(text, str):
        return text
    if schema is None:
        return text.strip()
    if is_approval(schema):
        return _coerce_approval(schema, text)
    if schema.get("type") == "object":
        return parse_field_lines(schema, text)[0]
    return coerce_field(schema, text)


def coerce_field(spec_or_subschema: FieldSpec | dict, text: str) -> object:
    """Turn chat text into the typed value of one field (a ``FieldSpec`` or its subschema)."""
    if not isinstance(text, str):
        return text
    spec = spec_or_subschema
    if not isinstance(spec, FieldSpec):
        if not isinstance(spec, dict):
            return text
        spec = field_spec("", spec, required=True, sensitive=False, root=False)
    widget = spec.widget
    if widget == "password":
        # A secret is taken exactly as typed; only the line break a chat adds goes.
        return text.rstrip("\r\n")
    value = text.strip()
    if widget == "integer":
        return _to_integer(value)
    if widget == "number":
        return _to_number(value)
    if widget == "boolean":
        word = _EMOJI_NOISE.sub("", value).casefold()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        return value
    if widget == "enum":
        return _match_choice(spec.choices, value, spec.choice_titles)
    if widget == "multi_enum":
        return _to_choices(spec.choices, value, spec.choice_titles)
    if widget == "date":
        return _to_date(value)
    if widget == "date_range":
        return _to_date_range(value)
    if widget == "time":
        return _to_time(value)
    if widget == "date-time":
        return _to_datetime(value)
    return value


def _to_integer(value: str) -> object:
    if _INTEGER.fullmatch(value):
        try:
            return int(value.split(".", 1)[0])
        except ValueError:  # more digits than Python converts
            return value
    # "2.5" for an integer field: a number, so the validator says "whole number"; "1e300" one past 2**53 - 1,
    # which the validator refuses as it does the same number sent as JSON.
    return _to_number(value)


def _to_number(value: str) -> object:
    if not _NUMBER.fullmatch(value):
        return value
    try:
        if re.fullmatch(r"[+-]?\d+", value):
            return int(value)
        number = float(value)
    except ValueError:
        return value
    # Past the double range ("1e999") is no number JSON can carry: the text stays, so "Enter a number".
    return number if math.isfinite(number) else value


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _squash(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.casefold())


def _match_choice(choices: tuple[str, ...], value: str, titles: tuple[str, ...] = ()) -> str:
    """The choice ``value`` names: a value, else a choice's label (a person may type either)."""
    if value in choices:
        return value
    labelled = len(titles) == len(choices)
    for key in (_fold, _squash):
        hits = [choice for choice in choices if key(choice) == key(value) and key(value)]
        if not hits and labelled:
            hits = [choice for choice, title in zip(choices, titles) if key(title) == key(value) and key(value)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            return value
    if set(choices) == {"approve", "reject"}:
        decision = parse_decision(value)
        if decision and not decision[1]:
            return decision[0]
    return value


def _to_choices(choices: tuple[str, ...], value: str, titles: tuple[str, ...] = ()) -> list[str]:
    if not value:
        return []
    whole = _match_choice(choices, value, titles)
    if whole in choices:
        return [whole]
    return [_match_choice(choices, part.strip(), titles) for part in re.split(r"[,;\n]", value) if part.strip()]


def _to_date(value: str) -> str:
    match = _DATE_LOOSE.fullmatch(value)
    if not match:
        return value
    try:
        return dt.date(int(match[1]), int(match[2]), int(match[3])).isoformat()
    except ValueError:
        return value


def _to_date_range(value: str) -> object:
    found = list(_DATE_LOOSE.finditer(value))
    if not found:
        return value
    glue = _DATE_LOOSE.sub(" ", value)
    if not _RANGE_GLUE.fullmatch(glue):
        return value
    return [_to_date(match[0]) for match in found]


def _to_time(value: str) -> str:
    match = _CLOCK.fullmatch(value)
    if match:
        text = f"{int(match[1]):02d}:{match[2]}"
        return f"{text}:{match[3]}" if match[3] else text
    match = _CLOCK_12.fullmatch(value)
    if match:
        hour, minute = int(match[1]), int(match[2] or 0)
        if 1 <= hour <= 12 and minute < 60:
            hour = hour % 12 + (12 if match[3].lower() == "p" else 0)
            return f"{hour:02d}:{minute:02d}"
    return value


def _to_datetime(value: str) -> str:
    try:
        parsed = dt.datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return value
    if parsed.tzinfo is None:
        return value
    text = parsed.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def parse_decision(text: str) -> tuple[str, str] | None:
    """("approve" | "reject", reason) when ``text`` is a decision phrase on its own, optionally
    followed by a separator and a reason ("reject: too risky"); None for anything else."""
    if not isinstance(text, str):
        return None
    text = _EMOJI_NOISE.sub("", text).strip()
    for emoji, decision in _DECISION_EMOJI.items():
        if text.startswith(emoji):  # nothing casual starts with 👍: the rest is the reason
            rest = text[len(emoji):].lstrip(" \t\n:,.!;—–-")
            if rest[:7].casefold() == "because":
                rest = rest[7:]
            return decision, rest.strip()
    parts = _DECISION_SEPARATOR.split(text, maxsplit=1)
    if len(parts) == 1 and "," in text:
        # "approve, thanks" decides; "ok, let me look first" and "no idea, asking @bob" do not.
        head, _, rest = text.partition(",")
        if " ".join(head.casefold().split()) in _STRONG_PHRASES:
            parts = [head, rest]
    head = " ".join(parts[0].casefold().split()).rstrip(".!")
    reason = parts[1].strip() if len(parts) > 1 else ""
    for phrases, decision in ((APPROVE_PHRASES, "approve"), (REJECT_PHRASES, "reject")):
        if head in phrases:
            return decision, reason
    return None


def _coerce_approval(schema: dict, text: str) -> object:
    if _APPROVAL_LINES.match(text):
        return parse_field_lines(schema, text)[0]
    found = parse_decision(text)
    if found is None:
        return text.strip()
    decision, reason = found
    return {"decision": decision, "reason": reason} if reason else {"decision": decision}


# --------------------------------------------------------------------------- field lines

# The key starts with a non-space so the leading \s* cannot trade characters
# with it: a line of spaces must not cost quadratic backtracking.
_KEY_LINE = re.compile(r"^\s*(?P<key>[^:\s][^:\n]{0,79}?)[ \t]*:(?!//)[ \t]?(?P<value>.*)$")
_KEYISH = re.compile(r"[-*•\s]*\**[^\W\d][\w .\-]{0,39}\**")
_MAX_LINE_ERRORS = 10


def _line_key(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.casefold())


def parse_field_lines(schema: dict, text: str) -> tuple[dict, list[FieldError]]:
    """Read ``field: value`` lines for an object schema into typed values.

    Names match a property name or its title, ignoring case, spaces, ``-``/``_``,
    bullets and markdown emphasis. A line that does not start with ``key:``
    continues the previous field's value (joined with a newline); one before
    any field is an error. A ``key:`` naming no field is "unknown field"; a
    field given twice keeps its first value. An empty value counts as not given.
    A one-field form also takes a bare value without its name. Only reading
    errors are returned: call ``validate_answer`` on the dict for the rest.
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {}, [FieldError("", "this question takes one value, not field: value lines")]
    specs = fields(schema)
    if not isinstance(text, str):
        return {}, [FieldError("", "expected field: value lines")]
    lookup: dict[str, FieldSpec] = {}
    for spec in specs:
        if _line_key(spec.name):
            lookup.setdefault(_line_key(spec.name), spec)
    for spec in specs:
        if _line_key(spec.title):
            lookup.setdefault(_line_key(spec.title), spec)

    raw: dict[str, list[str]] = {}
    errors: list[FieldError] = []
    stray_lines = 0
    unknown = 0
    current: str | None = None  # the field collecting continuation lines
    skipping = False  # inside an unknown or repeated field's lines
    for number, line in enumerate(text.splitlines(), start=1):
        match = _KEY_LINE.match(line)
        if match:
            spec = lookup.get(_line_key(match["key"]))
            if spec is not None:
                if spec.name in raw:
                    errors.append(FieldError(spec.name, "is given more than once; the first value counts"))
                    current, skipping = None, True
                else:
                    raw[spec.name] = [match["value"]]
                    current, skipping = spec.name, False
                continue
            if _KEYISH.fullmatch(match["key"]):
                known = ", ".join(s.name for s in specs)
                name = match["key"].strip().strip("-*•").strip().strip("*").strip()
                errors.append(FieldError(name, f"unknown field; the fields are: {known}"))
                unknown += 1
                current, skipping = None, True
                continue
        if current is not None:
            raw[current].append(line)
        elif skipping or not line.strip():
            continue
        else:
            stray_lines += 1
            if stray_lines <= _MAX_LINE_ERRORS:
                errors.append(FieldError("", f"line {number} is not a 'field: value' line"))

    if not raw and not unknown and len(specs) == 1 and text.strip():
        # A one-field form answered with just the value.
        raw[specs[0].name] = [text]
        errors = []

    typed: dict[str, object] = {}
    for spec in specs:
        if spec.name not in raw:
            continue
        value = "\n".join(raw[spec.name]).strip()
        if value and value not in _PLACEHOLDERS:
            typed[spec.name] = coerce_field(spec, value)
    return typed, errors

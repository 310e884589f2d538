"""A schema's fields as channels show them: widget, bounds, choices, and one line of words per field."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from handraise.core.schema.shapes import (
    TEXTAREA_FROM,
    choice_titles,
    choice_values,
    is_date_range,
    labelled_choices,
    node_type,
)
from handraise.core.schema.messages import number_text
from handraise.core.schema.validation import plural

# --------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class FieldSpec:
    """One answerable field, normalised for every renderer (form, modal, card, buttons)."""

    name: str
    title: str
    description: str
    widget: str
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    masked: bool = False
    default: Any = dataclass_field(default=None, hash=False, compare=False)
    exclusive_minimum: int | float | None = None
    exclusive_maximum: int | float | None = None
    multiple_of: int | float | None = None
    # Multi-select bounds; a date range always has 2 and 2.
    min_items: int | None = None
    max_items: int | None = None
    # What a person reads for each of ``choices`` (a labelled choice's title, else the value itself).
    choice_titles: tuple[str, ...] = ()

    def choice_title(self, value: str) -> str:
        """The label of one choice's value (the value itself when it has none)."""
        if value in self.choices and len(self.choice_titles) == len(self.choices):
            return self.choice_titles[self.choices.index(value)]
        return value

    @property
    def code_length(self) -> int | None:
        """The digit count of a one-time code (a text field whose pattern is a fixed number of digits)."""
        if self.widget not in ("text", "password") or not self.pattern:
            return None
        return code_length(self.pattern)


# "^[0-9]{6}$" or "^\d{6}$" (and "^[0-9][0-9]…$"): exactly that many digits, anchored at both ends.
_CODE_PATTERN = re.compile(r"\^(?:(?:\[0-9\]|\\d)\{(\d{1,2})\}|((?:\[0-9\]|\\d){4,12}))\$")


def code_length(pattern: str) -> int | None:
    """How many digits ``pattern`` asks for when it is exactly a fixed run of digits (4 to 12), else None."""
    match = _CODE_PATTERN.fullmatch(pattern)
    if match is None:
        return None
    if match[1] is not None:
        length = int(match[1])
    else:
        length = match[2].count("[0-9]") + match[2].count("\\d")
    return length if 4 <= length <= 12 else None


def fields(schema: dict | None, *, sensitive: bool = False) -> list[FieldSpec]:
    """The fields of a checked schema, in order; a primitive root is one field named ""."""
    if schema is None:
        return [FieldSpec(name="", title="Answer", description="", widget="textarea", required=True, masked=sensitive)]
    if schema.get("type") == "object":
        required = set(schema.get("required", []))
        return [
            field_spec(name, sub, required=name in required, sensitive=sensitive, root=False)
            for name, sub in schema.get("properties", {}).items()
        ]
    return [field_spec("", schema, required=True, sensitive=sensitive, root=True)]


def _humanize(name: str) -> str:
    words = re.sub(r"[_\-]+", " ", name).strip()
    return words[:1].upper() + words[1:] if words else name


# Masking hides what is typed; choices (buttons, checkboxes) have nothing to hide.
_MASKABLE = frozenset({"text", "textarea", "password", "enum", "date", "time", "date-time", "email", "uri", "integer", "number"})


def _widget(node: dict, *, root: bool) -> str:
    kind = node_type(node)
    if kind == "boolean":
        return "boolean"
    if kind in ("integer", "number"):
        return kind
    if kind == "array":
        return "date_range" if is_date_range(node) else "multi_enum"
    if "enum" in node or labelled_choices(node) is not None:
        return "enum"
    fmt = node.get("format")
    if fmt == "password" or node.get("writeOnly") is True:
        return "password"
    if fmt in ("date", "time", "date-time", "email", "uri"):
        return fmt
    max_length = node.get("maxLength")
    if isinstance(max_length, int) and max_length > TEXTAREA_FROM:
        return "textarea"
    if root and max_length is None and "pattern" not in node:
        return "textarea"
    return "text"


def field_spec(name: str, node: dict, *, required: bool, sensitive: bool, root: bool) -> FieldSpec:
    widget = _widget(node, root=root)
    choices: tuple[str, ...] = ()
    titles: tuple[str, ...] = ()
    if widget == "enum":
        choices, titles = tuple(choice_values(node)), tuple(choice_titles(node))
    elif widget == "multi_enum":
        items = node.get("items", {})
        choices, titles = tuple(choice_values(items)), tuple(choice_titles(items))
    masked = widget == "password" or (sensitive and widget in _MASKABLE)
    title = node.get("title") or (_humanize(name) if name else "Answer")
    return FieldSpec(
        name=name,
        title=title,
        description=node.get("description", ""),
        widget=widget,
        required=required,
        choices=choices,
        minimum=node.get("minimum"),
        maximum=node.get("maximum"),
        min_length=node.get("minLength"),
        max_length=node.get("maxLength"),
        pattern=node.get("pattern"),
        masked=masked,
        default=copy.deepcopy(node.get("default")),
        exclusive_minimum=node.get("exclusiveMinimum"),
        exclusive_maximum=node.get("exclusiveMaximum"),
        multiple_of=node.get("multipleOf"),
        min_items=node.get("minItems"),
        max_items=node.get("maxItems"),
        choice_titles=titles,
    )


def _length_words(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        if low == high:
            return f"exactly {plural(low, 'character')}"
        return f"{low}–{high} characters"
    if low is not None:
        return f"at least {plural(low, 'character')}"
    if high is not None:
        return f"at most {plural(high, 'character')}"
    return ""


def describe_field(spec: FieldSpec) -> str:
    """The field's type, format and bounds in words, for chat cards."""
    widget = spec.widget
    if widget in ("text", "textarea", "password"):
        if spec.code_length is not None:
            return f"a {spec.code_length}-digit code"
        parts = ["secret text" if widget == "password" else "text"]
        length = _length_words(spec.min_length, spec.max_length)
        if length:
            parts.append(length)
        # People read the description (or the error's sentence), never the regular expression.
        if spec.pattern and not spec.description:
            parts.append("in a set format")
        return ", ".join(parts)
    if widget in ("integer", "number"):
        text = widget
        if spec.minimum is not None and spec.maximum is not None:
            text += f" from {number_text(spec.minimum)} to {number_text(spec.maximum)}"
        elif spec.minimum is not None:
            text += f", at least {number_text(spec.minimum)}"
        elif spec.maximum is not None:
            text += f", at most {number_text(spec.maximum)}"
        if spec.exclusive_minimum is not None:
            text += f", greater than {number_text(spec.exclusive_minimum)}"
        if spec.exclusive_maximum is not None:
            text += f", less than {number_text(spec.exclusive_maximum)}"
        if spec.multiple_of is not None:
            text += f", a multiple of {number_text(spec.multiple_of)}"
        return text
    if widget == "boolean":
        return "yes or no"
    if widget == "enum":
        return "one of: " + ", ".join(spec.choice_titles or spec.choices)
    if widget == "multi_enum":
        low, high = spec.min_items, spec.max_items
        if low and high:
            count = str(low) if low == high else f"{low}–{high}"
        elif low:
            count = f"at least {low}"
        elif high:
            count = f"up to {high}"
        else:
            count = "any"
        return f"choose {count} of: " + ", ".join(spec.choice_titles or spec.choices)
    if widget == "date_range":
        return "date range: two dates (YYYY-MM-DD to YYYY-MM-DD)"
    return {
        "date": "date (YYYY-MM-DD)",
        "time": "time (HH:MM)",
        "date-time": "date and time with a zone (e.g. 2026-01-02T14:30:00Z)",
        "email": "email address",
        "uri": "URL (e.g. https://example.com/page)",
    }.get(widget, widget)

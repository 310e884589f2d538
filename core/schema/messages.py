"""What is wrong with an answer, in one sentence about the answer: the one wording of every validation message.

The API's 422 details, the hosted form (server and script alike), the inbox and every chat
connector show these sentences; nothing else words a validation problem. A sentence never
quotes the value (it may be secret) and never shows the schema: a pattern is explained by the
field's ``errorMessage`` (our documented extension keyword: the sentence to show when the
pattern does not match), else a one-time code's digit count, else the field's
``description``, else a generic "doesn't have the expected format".

Every sentence is an English msgid of the catalogue (core/i18n.py); pass ``t`` to word it
in another language.
"""

from __future__ import annotations

import gettext
from typing import Any

from handraise.core.schema.shapes import choice_titles, is_date_range, labelled_choices, node_type
from handraise.core.text import MAX_EXACT_INTEGER

__all__ = ["ENGLISH", "PRIORITY", "code_digits", "number_text", "problem"]

ENGLISH = gettext.NullTranslations()

# When one field has several problems, the first of these is the one shown: a person fixes one
# thing at a time, and the form's script checks in this same order.
PRIORITY = ("required", "type", "not_finite", "enum", "format", "pattern", "minLength", "maxLength",
            "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
            "uniqueItems", "date_order")


def number_text(value: Any) -> str:
    """A bound as people read it: 3.0 as "3"; a float past the exact integers keeps its exponent (1e+300), never
    three hundred digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_EXACT_INTEGER:
        return str(int(value))
    return str(value)


def code_digits(node: dict) -> int | None:
    """The digit count when ``node`` asks for a one-time code (see fields.code_length)."""
    from handraise.core.schema.fields import code_length

    pattern = node.get("pattern")
    return code_length(pattern) if isinstance(pattern, str) else None


def _range(node: dict, t: gettext.NullTranslations) -> str:
    whole = node_type(node) == "integer"
    low, high = node.get("minimum"), node.get("maximum")
    values = {"low": number_text(low), "high": number_text(high)}
    if low is not None and high is not None:
        return (t.gettext("Enter a whole number from %(low)s to %(high)s.") if whole
                else t.gettext("Enter a number from %(low)s to %(high)s.")) % values
    if low is not None:
        return (t.gettext("Enter a whole number of at least %(low)s.") if whole
                else t.gettext("Enter a number of at least %(low)s.")) % values
    if high is None:
        return _type(node_type(node), node, t)
    return (t.gettext("Enter a whole number of at most %(high)s.") if whole
            else t.gettext("Enter a number of at most %(high)s.")) % values


def _required(node: dict, t: gettext.NullTranslations) -> str:
    kind = node_type(node)
    if is_date_range(node):
        return t.gettext("Enter a start date and an end date.")
    if kind == "array":
        return t.gettext("Choose at least one.")
    if kind == "boolean" or "enum" in node or labelled_choices(node) is not None:
        return t.gettext("Choose an answer.")
    return t.gettext("Enter an answer.")


def _type(expected: Any, node: dict, t: gettext.NullTranslations) -> str:
    if is_date_range(node):
        return t.gettext("Enter two dates: a start and an end.")
    return {
        "string": t.gettext("Enter text."),
        "integer": t.gettext("Enter a whole number."),
        "number": t.gettext("Enter a number."),
        "boolean": t.gettext("Choose yes or no."),
        "object": t.gettext("Fill in the form's fields."),
        "array": t.gettext("Choose from the list."),
    }.get(expected if isinstance(expected, str) else "", t.gettext("This answer has the wrong kind of value."))


def _format(expected: Any, t: gettext.NullTranslations) -> str:
    return {
        "date": t.gettext("Enter a date like 2026-01-31."),
        "time": t.gettext("Enter a time like 14:30."),
        "date-time": t.gettext("Enter a date and time with a zone, like 2026-01-31T14:30:00Z."),
        "email": t.gettext("Enter an email address like name@example.com."),
        "uri": t.gettext("Enter a web address like https://example.com/page."),
    }.get(expected if isinstance(expected, str) else "", t.gettext("This doesn't have the expected format."))


def _pattern(node: dict, t: gettext.NullTranslations) -> str:
    custom = node.get("errorMessage")
    if isinstance(custom, str) and custom.strip():
        return custom.strip()
    digits = code_digits(node)
    if digits is not None:
        return t.gettext("Enter the %(n)d-digit code.") % {"n": digits}
    description = node.get("description")
    if isinstance(description, str) and description.strip():
        return t.gettext("This doesn't have the expected format: %(description)s") % {
            "description": description.strip()}
    return t.gettext("This doesn't have the expected format.")


def problem(keyword: str, node: dict | None = None, expected: Any = None, *,
            t: gettext.NullTranslations = ENGLISH) -> str:
    """The sentence for one problem.

    ``keyword`` is the JSON-schema keyword that failed, or one of ours (``not_finite``,
    ``too_big``, ``control_characters``, ``not_unicode``, ``bad_name``, ``date_order``,
    ``unknown_field``, ``approval``, ``empty``, ``pattern_unsupported``); ``node`` is the
    field's (sub)schema and ``expected`` the keyword's value.
    """
    node = node if isinstance(node, dict) else {}
    if keyword == "required":
        return _required(node, t)
    if keyword == "empty":
        return t.gettext("Enter an answer.")
    if keyword == "type":
        return _type(expected, node, t)
    if keyword == "not_finite":
        return t.gettext("Enter a number.")
    if keyword in ("enum", "oneOf", "anyOf", "const"):
        if node_type(node) == "array" and isinstance(node.get("items"), dict):
            node = node["items"]
        return t.gettext("Choose one of: %(choices)s.") % {"choices": ", ".join(choice_titles(node))}
    if keyword == "format":
        return _format(expected, t)
    if keyword == "pattern":
        return _pattern(node, t)
    if keyword == "minLength":
        if expected == 1:
            return t.gettext("Enter an answer.")
        return t.ngettext("Use at least %(n)d character.", "Use at least %(n)d characters.", expected) % {
            "n": expected}
    if keyword == "maxLength":
        return t.ngettext("Use at most %(n)d character.", "Use at most %(n)d characters.", expected) % {
            "n": expected}
    if keyword in ("minimum", "maximum"):
        return _range(node, t)
    if keyword == "exclusiveMinimum":
        return t.gettext("Enter a number greater than %(n)s.") % {"n": number_text(expected)}
    if keyword == "exclusiveMaximum":
        return t.gettext("Enter a number less than %(n)s.") % {"n": number_text(expected)}
    if keyword == "multipleOf":
        return t.gettext("Enter a multiple of %(n)s.") % {"n": number_text(expected)}
    if keyword in ("minItems", "maxItems") and is_date_range(node):
        return t.gettext("Enter two dates: a start and an end.")
    if keyword == "minItems":
        if expected == 1:
            return t.gettext("Choose at least one.")
        return t.gettext("Choose at least %(n)d.") % {"n": expected}
    if keyword == "maxItems":
        return t.gettext("Choose at most %(n)d.") % {"n": expected}
    if keyword == "uniqueItems":
        return t.gettext("Choose each option only once.")
    if keyword == "date_order":
        return t.gettext("Put the start date on or before the end date.")
    if keyword == "unknown_field":
        return t.gettext("This form has no such field.")
    if keyword == "approval":
        return t.gettext("Answer approve or reject (a reason may follow).")
    if keyword == "too_big":
        return t.gettext("Enter a number between -%(n)s and %(n)s.") % {"n": "9007199254740991"}
    if keyword == "control_characters":
        return t.gettext("Remove the invisible control characters; only line breaks and tabs may stay.")
    if keyword == "not_unicode":
        return t.gettext("This text has characters that can't be read; type it again.")
    if keyword == "bad_name":
        return t.gettext("This answer names a field in characters that can't be read.")
    if keyword == "pattern_unsupported":
        return t.gettext("This answer can't be checked against the question's format, so it was not taken.")
    return t.gettext("This answer isn't valid.")

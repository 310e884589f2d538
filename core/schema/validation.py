"""An answer checked against its request's schema: field errors in schema order, never quoting the value."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from handraise.core.schema.formats import FORMAT_CHECKER
from handraise.core.schema.patterns import PatternError, pattern_cost, pattern_search
from handraise.core.schema.shapes import is_approval, is_date_range
from handraise.core.text import MAX_EXACT_INTEGER, text_problem
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

# Past this many RE2 steps (a few milliseconds) an answer is checked in a worker thread:
# RE2 releases the GIL while it matches, so the event loop keeps serving everyone else.
OFF_LOOP_STEPS = 2_000_000

# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class FieldError:
    """One problem with an answer: ``field`` is the property ("" for a primitive root)."""

    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


# --------------------------------------------------------------------------- validate_answer


def validate_answer(schema: dict | None, value: object) -> list[FieldError]:
    """Check an answer against a checked schema; an empty list means valid.

    Without a schema the answer is free text: a non-empty string.
    """
    if schema is None:
        if not isinstance(value, str):
            return [FieldError("", "must be text")]
        problem = text_problem(value, prose=True)
        if problem:
            return [FieldError("", problem)]
        if not value.strip():
            return [FieldError("", "must not be empty")]
        return []
    try:
        return schema_errors(schema, value)
    except RecursionError:
        return [FieldError("", "is nested too deeply")]


async def validate_answer_off_loop(schema: dict | None, value: object) -> list[FieldError]:
    """``validate_answer`` for a server: an answer whose patterns would take noticeable time is checked off the loop."""
    if schema is not None and match_steps(schema, value) > OFF_LOOP_STEPS:
        return await asyncio.to_thread(validate_answer, schema, value)
    return validate_answer(schema, value)


def match_steps(schema: dict, value: object) -> int:
    """A bound on the RE2 work of checking ``value``: the largest pattern's program times the text's length."""
    patterns = [node["pattern"] for node in _nodes(schema) if isinstance(node.get("pattern"), str)]
    if not patterns:
        return 0
    return max(pattern_cost(p, _text_length(value)) for p in patterns)


def _nodes(schema: dict) -> Iterator[dict]:
    yield schema
    properties = schema.get("properties")
    if isinstance(properties, dict):
        yield from (node for node in properties.values() if isinstance(node, dict))


def _text_length(value: object) -> int:
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def _pattern(validator: Any, pattern: str, instance: object, schema: dict) -> Iterator[ValidationError]:
    # jsonschema's own "pattern" runs Python's re, which backtracks; this one runs RE2.
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = pattern_search(pattern, instance)
    except PatternError:
        # Only a schema stored before patterns were checked for RE2 gets here: refuse, never skip.
        yield ValidationError("cannot be checked against this question's pattern", validator="pattern_unsupported")
        return
    if not matched:
        yield ValidationError(f"does not match the pattern {pattern}")


# Draft 2020-12 with RE2 patterns and our formats: every answer, default and chat reply goes through it.
AnswerValidator = validators.extend(Draft202012Validator, {"pattern": _pattern})


def schema_errors(schema: dict, value: object) -> list[FieldError]:
    validator = AnswerValidator(schema, format_checker=FORMAT_CHECKER)
    found: list[tuple[tuple[int, str], FieldError, bool]] = []
    unfit: dict[str, str] = {}
    bad_names: dict[str, str] = {}
    # NaN, integers past 2**53 and text with control characters or lone surrogates have no place
    # in an answer (jsonschema's multipleOf cannot even take NaN): each is reported here and
    # validated as null, whose errors are then dropped.
    if _has_unfit(value):
        value = _without_unfit(value, "", unfit, bad_names)
    for path, message in (unfit | bad_names).items():
        found.append((_order(schema, path), FieldError(path, message), path in unfit))
    seen_required: set[str] = set()
    for error in validator.iter_errors(value):
        path = ".".join(str(p) for p in error.absolute_path)
        if path in unfit:
            continue
        if error.validator == "required":
            if path in seen_required or not isinstance(error.instance, dict):
                continue
            seen_required.add(path)
            for name in error.validator_value:
                if name not in error.instance:
                    name_path = f"{path}.{name}" if path else name
                    found.append((_order(schema, name_path), FieldError(name_path, "is required"), False))
            continue
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = error.schema.get("properties", {})
            for name in error.instance:
                if name not in known:
                    name_path = f"{path}.{name}" if path else str(name)
                    found.append((_order(schema, name_path), FieldError(name_path, "is not a field of this form"), False))
            continue
        found.append((_order(schema, path), FieldError(path, _message(error, schema)), error.validator == "type"))
    found.extend(
        (_order(schema, e.field), e, False) for e in _date_range_errors(schema, value, {f.field for _, f, _ in found})
    )
    # One complaint per field when its type is wrong: "must be a number" says it all.
    typed = {f.field for _, f, is_type in found if is_type}
    result: list[FieldError] = []
    seen: set[FieldError] = set()
    for _, error, is_type in sorted(found, key=lambda item: item[0]):
        if (error.field in typed and not is_type) or error in seen:
            continue
        seen.add(error)
        result.append(error)
    return result


def _order(schema: dict, path: str) -> tuple[int, str]:
    """Sort key: the root first, then fields in the schema's order."""
    properties = schema.get("properties")
    names = list(properties) if isinstance(properties, dict) else []
    head = path.split(".", 1)[0]
    if not path:
        rank = 0
    elif head in names:
        rank = names.index(head) + 1
    else:
        rank = len(names) + 1
    return (rank, path)


def _unfit(item: object) -> str | None:
    """Why a JSON leaf cannot be an answer at all (no canonical form, or not text), or None."""
    if isinstance(item, str):
        return text_problem(item, prose=True)
    if isinstance(item, float):
        return None if math.isfinite(item) else "must be a finite number"
    if isinstance(item, int) and not isinstance(item, bool) and not -MAX_EXACT_INTEGER <= item <= MAX_EXACT_INTEGER:
        return f"is too large to be exact (at most {MAX_EXACT_INTEGER} either way)"
    return None


def _has_unfit(value: object) -> bool:
    # Iterative: an answer nested a thousand deep must not blow the stack here.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if any(isinstance(key, str) and text_problem(key, prose=False) for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif _unfit(item):
            return True
    return False


def _without_unfit(value: object, path: str, leaves: dict[str, str], names: dict[str, str]) -> object:
    """``value`` with each unfit leaf as null (its problem in ``leaves``) and names that are not text dropped."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and text_problem(key, prose=False):
                # Reported at the object: the name itself must not reach a message or the journal.
                names[path] = "has a field name that is not plain text"
                continue
            out[key] = _without_unfit(item, f"{path}.{key}" if path else str(key), leaves, names)
        return out
    if isinstance(value, list):
        return [_without_unfit(item, f"{path}.{index}" if path else str(index), leaves, names)
                for index, item in enumerate(value)]
    problem = _unfit(value)
    if problem:
        leaves[path] = problem
        return None
    return value


def _date_range_errors(schema: dict, value: object, failed: set[str]) -> list[FieldError]:
    if not isinstance(value, dict) or schema.get("type") != "object":
        return []
    errors = []
    for name, sub in schema.get("properties", {}).items():
        if not is_date_range(sub) or name in failed or f"{name}.0" in failed or f"{name}.1" in failed:
            continue
        pair = value.get(name)
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(d, str) for d in pair)):
            continue
        try:
            start, end = dt.date.fromisoformat(pair[0]), dt.date.fromisoformat(pair[1])
        except ValueError:
            continue
        if start > end:
            errors.append(FieldError(name, "the start date must not be after the end date"))
    return errors


_TYPE_MESSAGES = {
    "string": "must be text",
    "integer": "must be a whole number",
    "number": "must be a number",
    "boolean": "must be yes or no",
    "object": "must be a set of fields",
    "array": "must be a list of choices",
}
_FORMAT_MESSAGES = {
    "date": "is not a valid date (YYYY-MM-DD)",
    "time": "is not a valid time (HH:MM or HH:MM:SS)",
    "date-time": "is not a valid date and time (YYYY-MM-DDTHH:MM:SS with a zone, e.g. 2026-01-02T14:30:00Z)",
    "email": "is not a valid email address",
    "uri": "is not a valid URL (e.g. https://example.com/page)",
}


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _message(error: ValidationError, root: dict) -> str:
    keyword, expected, sub = error.validator, error.validator_value, error.schema
    if keyword == "type":
        if not error.absolute_path and is_approval(root):
            return "must be approve or reject (optionally with a reason)"
        if isinstance(sub, dict) and is_date_range(sub):
            return "must be two dates: a start and an end"
        return _TYPE_MESSAGES.get(expected, "has the wrong type")
    if keyword == "enum":
        return "must be one of: " + ", ".join(str(choice) for choice in expected)
    if keyword == "minLength":
        return "must not be empty" if expected == 1 else f"must be at least {plural(expected, 'character')}"
    if keyword == "maxLength":
        return f"must be at most {plural(expected, 'character')}"
    if keyword == "pattern":
        return f"must match the pattern {expected}"
    if keyword == "pattern_unsupported":
        return error.message
    if keyword == "format":
        return _FORMAT_MESSAGES.get(expected, f"is not a valid {expected}")
    if keyword == "minimum":
        return f"must be at least {number_text(expected)}"
    if keyword == "maximum":
        return f"must be at most {number_text(expected)}"
    if keyword == "exclusiveMinimum":
        return f"must be greater than {number_text(expected)}"
    if keyword == "exclusiveMaximum":
        return f"must be less than {number_text(expected)}"
    if keyword == "multipleOf":
        return f"must be a multiple of {number_text(expected)}"
    if keyword in ("minItems", "maxItems") and isinstance(sub, dict) and is_date_range(sub):
        return "must be two dates: a start and an end"
    if keyword == "minItems":
        return "choose at least one" if expected == 1 else f"choose at least {expected}"
    if keyword == "maxItems":
        return f"choose at most {expected}"
    if keyword == "uniqueItems":
        return "must not repeat a choice"
    return "is not valid"

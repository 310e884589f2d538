"""An answer checked against its request's schema: field errors in schema order, never quoting the value."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import gettext
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from handraise.core.jsontext import dumps_unicode
from handraise.core.schema.formats import FORMAT_CHECKER
from handraise.core.schema.messages import ENGLISH, problem
from handraise.core.schema.patterns import MAX_PROGRAM_SIZE, PatternError, pattern_cost, pattern_search
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
    # The keyword that failed (messages.PRIORITY ranks them); not part of the API's view.
    keyword: str = dataclass_field(default="", compare=False)

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


# --------------------------------------------------------------------------- validate_answer


def validate_answer(schema: dict | None, value: object, *,
                    t: gettext.NullTranslations = ENGLISH) -> list[FieldError]:
    """Check an answer against a checked schema; an empty list means valid.

    Without a schema the answer is free text: a non-empty string. Messages are sentences
    (core/schema/messages.py), in English unless ``t`` translates them.
    """
    if schema is None:
        if not isinstance(value, str):
            return [FieldError("", problem("type", {}, "string", t=t), "type")]
        unreadable = text_problem(value, prose=True)
        if unreadable:
            return [FieldError("", problem(_text_keyword(unreadable), t=t), "type")]
        if not value.strip():
            return [FieldError("", problem("empty", t=t), "required")]
        return []
    try:
        return schema_errors(schema, value, t=t)
    except RecursionError:
        return [FieldError("", problem("too_deep", t=t), "type")]


async def validate_answer_off_loop(schema: dict | None, value: object, *,
                                   t: gettext.NullTranslations = ENGLISH) -> list[FieldError]:
    """``validate_answer`` for a server: an answer whose patterns would take noticeable time is checked off the loop."""
    if schema is not None and _may_take_long(value) and match_steps(schema, value) > OFF_LOOP_STEPS:
        return await asyncio.to_thread(validate_answer, schema, value, t=t)
    return validate_answer(schema, value, t=t)


def _may_take_long(value: object) -> bool:
    """Whether any pattern could take more than OFF_LOOP_STEPS on ``value``: no compiled pattern exceeds
    MAX_PROGRAM_SIZE, so a short answer never can (and its patterns need not be looked at)."""
    length = len(value) if value.__class__ is str else _text_length(value)  # type: ignore[arg-type]
    return MAX_PROGRAM_SIZE * max(length, 1) > OFF_LOOP_STEPS


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


def _validator(schema: dict) -> Any:
    """An ``AnswerValidator`` for ``schema``, built once per schema (by its JSON text): building one is most
    of the work of checking a short answer."""
    try:
        text = dumps_unicode(schema)
    except (TypeError, ValueError, RecursionError):
        return AnswerValidator(schema, format_checker=FORMAT_CHECKER)
    return _validator_for(text)


@functools.lru_cache(maxsize=256)
def _validator_for(text: str) -> Any:
    # Built from the text: its own copy of the schema, whatever the caller's becomes. At most 8 KB each
    # (max_schema_bytes).
    return AnswerValidator(json.loads(text), format_checker=FORMAT_CHECKER)


def schema_errors(schema: dict, value: object, *, t: gettext.NullTranslations = ENGLISH) -> list[FieldError]:
    validator = _validator(schema)
    found: list[tuple[tuple[int, str], FieldError, bool]] = []
    unfit: dict[str, str] = {}
    bad_names: dict[str, str] = {}
    # NaN, numbers past 2**53 - 1 and text with control characters or lone surrogates have no place
    # in an answer (jsonschema's multipleOf cannot even take NaN): each is reported here and
    # validated as null, whose errors are then dropped. The dicts hold messages.problem keywords.
    if _has_unfit(value):
        value = _without_unfit(value, "", unfit, bad_names)
    for path, keyword in (unfit | bad_names).items():
        found.append((_order(schema, path), FieldError(path, problem(keyword, t=t), keyword), path in unfit))
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
                    node = error.schema.get("properties", {}).get(name)
                    found.append((_order(schema, name_path),
                                  FieldError(name_path, problem("required", node, t=t), "required"), False))
            continue
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = error.schema.get("properties", {})
            for name in error.instance:
                if name not in known:
                    name_path = f"{path}.{name}" if path else str(name)
                    found.append((_order(schema, name_path),
                                  FieldError(name_path, problem("unknown_field", t=t), "unknown_field"), False))
            continue
        found.append((_order(schema, path), FieldError(path, _message(error, schema, t), str(error.validator)),
                      error.validator == "type"))
    found.extend(
        (_order(schema, e.field), e, False)
        for e in _date_range_errors(schema, value, {f.field for _, f, _ in found}, t)
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
    """Why a JSON leaf cannot be an answer at all (no canonical form, or not text): a messages keyword, or None."""
    if isinstance(item, str):
        unreadable = text_problem(item, prose=True)
        return _text_keyword(unreadable) if unreadable else None
    if isinstance(item, float):
        if not math.isfinite(item):
            return "not_finite"
        # One rule for every number, however it is spelled (9007199254740992, 9007199254740992.0, 1e17, 1e300):
        # beyond 2**53 - 1 a double no longer holds every integer, and canonical JSON would spell 1e17 as an
        # integer it refuses.
        return None if -MAX_EXACT_INTEGER <= item <= MAX_EXACT_INTEGER else "too_big"
    if isinstance(item, int) and not isinstance(item, bool) and not -MAX_EXACT_INTEGER <= item <= MAX_EXACT_INTEGER:
        return "too_big"
    return None


def _text_keyword(unreadable: str) -> str:
    # core/text.py says why text is unfit; the person reads messages.py's sentence for it.
    return "not_unicode" if "Unicode" in unreadable else "control_characters"


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
    """``value`` with each unfit leaf as null (its problem's keyword in ``leaves``) and names that are not text dropped."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and text_problem(key, prose=False):
                # Reported at the object: the name itself must not reach a message or the journal.
                names[path] = "bad_name"
                continue
            out[key] = _without_unfit(item, f"{path}.{key}" if path else str(key), leaves, names)
        return out
    if isinstance(value, list):
        return [_without_unfit(item, f"{path}.{index}" if path else str(index), leaves, names)
                for index, item in enumerate(value)]
    keyword = _unfit(value)
    if keyword:
        leaves[path] = keyword
        return None
    return value


def _date_range_errors(schema: dict, value: object, failed: set[str],
                       t: gettext.NullTranslations) -> list[FieldError]:
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
            errors.append(FieldError(name, problem("date_order", sub, t=t), "date_order"))
    return errors


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _message(error: ValidationError, root: dict, t: gettext.NullTranslations) -> str:
    """The sentence for one of jsonschema's errors (core/schema/messages.py words every one)."""
    keyword, expected, sub = error.validator, error.validator_value, error.schema
    if keyword == "type" and not error.absolute_path and is_approval(root):
        return problem("approval", t=t)
    return problem(str(keyword), sub if isinstance(sub, dict) else {}, expected, t=t)

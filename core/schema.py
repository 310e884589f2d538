"""The form-schema subset: refuse what humans cannot answer, validate answers, describe fields.

Every channel (hosted form, Telegram, Matrix, Slack) goes through this module, so a
value typed in chat and a value posted from a form meet the same checks and messages.

Decisions worth knowing:

* ``format: time`` accepts a wall-clock time as a human means it (``14:30``,
  ``14:30:05``, what ``<input type=time>`` submits) as well as an RFC 3339
  ``full-time`` with an offset. ``date-time`` stays strict RFC 3339 (zone
  required), because an instant without a zone is ambiguous to the agent.
* ``email`` is checked more strictly than jsonschema's "contains an @", and
  ``uri`` must be an absolute URI (RFC 3986, via the format-nongpl extra) that
  is not ``javascript:``/``data:``/``vbscript:`` and, for http(s)/ftp, names a host.
* Messages never quote the submitted value: a sensitive answer must not leak
  through an error message.
* Kinds: "input" (any schema in the subset, or none for free text),
  "approval" (always ``APPROVAL_SCHEMA``), "choice" (a string enum or boolean,
  answered with buttons).
* Patterns must compile with Python ``re``, and the classic catastrophic shape
  ``(a+)+`` is refused, since ``re`` has no timeout.
* Coercion of chat text never raises: unreadable text stays text and the
  validator's message tells the human what is wrong.
* ``parse_field_lines``: a line ``name: value`` starts a field when ``name``
  matches a property name or title; a following line that does not start like
  ``key:`` continues the previous value (multi-line text). A ``key:`` line whose
  key is not a field is reported as an unknown field.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import math
import re
import unicodedata
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from handraise.core.errors import InvalidSchemaError

log = logging.getLogger(__name__)

__all__ = [
    "APPROVAL_SCHEMA",
    "FORMAT_CHECKER",
    "FORMATS",
    "KINDS",
    "MAX_FIELDS",
    "MAX_SCHEMA_BYTES",
    "WIDGETS",
    "FieldError",
    "FieldSpec",
    "check_schema",
    "coerce_field",
    "coerce_text",
    "describe_field",
    "fields",
    "parse_field_lines",
    "validate_answer",
]

MAX_FIELDS = 20
MAX_SCHEMA_BYTES = 8192

# "choice" is an input whose answer is picked from buttons: a string enum or a boolean.
KINDS = ("input", "approval", "choice")
FORMATS = ("date", "time", "date-time", "email", "uri", "password")
WIDGETS = (
    "text", "textarea", "password", "integer", "number", "boolean", "enum",
    "multi_enum", "date_range", "date", "time", "date-time", "email", "uri",
)

APPROVAL_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"], "title": "Decision"},
        "reason": {"type": "string", "title": "Reason", "maxLength": 2000},
    },
    "required": ["decision"],
    "additionalProperties": False,
}

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "writeOnly", "readOnly", "$comment"})
# Every draft from 06 on agrees with 2020-12 on the keywords of the subset.
_META_SCHEMAS = frozenset({
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-06/schema",
})
_PRIMITIVE_TYPES = ("string", "integer", "number", "boolean")
_STRING_KEYWORDS = frozenset({"type", "enum", "minLength", "maxLength", "pattern", "format"})
_NUMBER_KEYWORDS = frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_OBJECT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
_MULTI_KEYWORDS = frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"})
_RANGE_KEYWORDS = frozenset({"type", "items", "minItems", "maxItems"})
_MAX_NAME_LENGTH = 100
_NESTED_REPEAT = re.compile(r"\((?:\\.|[^()\\])*(?<!\\)[+*]\)(?:[+*]|\{\d*,)")
# A plain string longer than this is answered in a text area rather than a line.
_TEXTAREA_FROM = 200


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class FieldError:
    """One problem with an answer: ``field`` is the property ("" for a primitive root)."""

    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


# --------------------------------------------------------------------------- formats


def _build_format_checker() -> FormatChecker:
    # Draft 2020-12's own checkers: the class-wide FormatChecker registry holds
    # draft 3's "time" (HH:MM:SS only) under the same name.
    library = Draft202012Validator.FORMAT_CHECKER.checkers
    # These come from the format-nongpl extra; without it jsonschema silently
    # accepts anything, which would let bad dates resume an agent.
    missing = [name for name in ("date", "time", "date-time", "uri") if name not in library]
    if missing:
        raise ImportError(
            f"jsonschema cannot check formats {', '.join(missing)}; install 'jsonschema[format-nongpl]'"
        )
    checker = FormatChecker(formats=())
    for name in ("date", "date-time"):
        checker.checkers[name] = library[name]
    library_time, time_raises = library["time"]
    library_uri, uri_raises = library["uri"]

    @checker.checks("time")
    def _is_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if _WALL_TIME.fullmatch(value):
            return True
        try:
            return bool(library_time(value))
        except time_raises:
            return False

    @checker.checks("email")
    def _is_email(value: object) -> bool:
        if not isinstance(value, str):
            return True
        return _is_email_address(value)

    @checker.checks("uri")
    def _is_uri(value: object) -> bool:
        if not isinstance(value, str):
            return True
        try:
            if not library_uri(value):
                return False
            parts = urlsplit(value)
        except (ValueError, *uri_raises):
            return False
        scheme = parts.scheme.lower()
        if scheme in ("javascript", "data", "vbscript"):
            return False
        if scheme in ("http", "https", "ftp", "ftps", "ws", "wss") and not parts.hostname:
            return False
        return True

    return checker


_WALL_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d(:([0-5]\d|60)(\.\d{1,9})?)?")
_EMAIL_LOCAL = re.compile(r"[^@\s\"(),:;<>\[\\\]]{1,64}")
_EMAIL_LABEL = re.compile(r"(?!-)[^\W_](?:[\w-]{0,61}[^\W_])?(?<!-)", re.UNICODE)


def _is_email_address(value: str) -> bool:
    local, at, domain = value.rpartition("@")
    if not at or not _EMAIL_LOCAL.fullmatch(local) or local.startswith(".") or local.endswith("."):
        return False
    if ".." in local or len(domain) > 253:
        return False
    labels = domain.split(".")
    if len(labels) < 2 or not all(_EMAIL_LABEL.fullmatch(label) for label in labels):
        return False
    # The top-level domain is letters (or an IDN "xn--" label), never all digits.
    return not labels[-1].isdigit()


FORMAT_CHECKER = _build_format_checker()


# --------------------------------------------------------------------------- check_schema


def check_schema(
    schema: dict | None,
    *,
    kind: str = "input",
    max_fields: int = MAX_FIELDS,
    max_bytes: int = MAX_SCHEMA_BYTES,
) -> dict | None:
    """Return the effective schema for a new request, or raise ``InvalidSchemaError``.

    ``kind`` "approval" has a fixed schema (``APPROVAL_SCHEMA``): a caller may
    omit it or send exactly that schema, anything else is refused. ``kind``
    None means "input". The result is a deep copy the caller may keep.
    """
    if kind is None:
        kind = "input"
    if kind not in KINDS:
        raise InvalidSchemaError(f"kind {kind!r} is not supported; use one of: {', '.join(KINDS)}")
    if kind == "approval":
        if schema is None or schema == APPROVAL_SCHEMA:
            return copy.deepcopy(APPROVAL_SCHEMA)
        raise InvalidSchemaError(
            "kind 'approval' has a fixed schema ({decision: approve | reject, reason?}); send no schema"
        )
    if schema is None:
        if kind == "choice":
            raise InvalidSchemaError("kind 'choice' needs a schema: a string enum or a boolean")
        return None
    if not isinstance(schema, dict):
        raise InvalidSchemaError("schema must be a JSON object")
    size = _json_size(schema)
    if size > max_bytes:
        raise InvalidSchemaError(f"schema is {size} bytes; at most {max_bytes}")
    _check_root(schema, max_fields=max_fields)
    if kind == "choice" and _node_type(schema) not in ("boolean",) and not (
        _node_type(schema) == "string" and "enum" in schema
    ):
        raise InvalidSchemaError("kind 'choice' needs a schema that is a string enum or a boolean")
    return copy.deepcopy(schema)


def _json_size(schema: dict) -> int:
    try:
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidSchemaError(f"schema is not plain JSON: {e}") from None
    return len(text.encode("utf-8", "surrogatepass"))


def _node_type(node: dict) -> Any:
    # A bare {"enum": [...]} is the DESIGN's "string enum".
    if "type" not in node and "enum" in node:
        return "string"
    return node.get("type")


def _fail(loc: str, message: str) -> InvalidSchemaError:
    return InvalidSchemaError(f"{loc}: {message}")


def _check_root(schema: dict, *, max_fields: int) -> None:
    if "$schema" in schema and schema["$schema"] not in _META_SCHEMAS:
        raise _fail("schema", f"$schema {schema['$schema']!r} is not supported; use draft 2020-12")
    node = {k: v for k, v in schema.items() if k != "$schema"}
    kind = _check_type(node, "schema")
    if kind == "object":
        properties = node.get("properties")
        if isinstance(properties, dict) and len(properties) > max_fields:
            raise InvalidSchemaError(f"schema has {len(properties)} fields; at most {max_fields}")
        _check_object(node)
    elif kind == "array":
        raise _fail("schema", "an array answer is only supported as a field of an object schema")
    else:
        _check_primitive(node, "schema", kind)
    _check_default(node, "schema")


def _check_type(node: Any, loc: str) -> str:
    if not isinstance(node, dict):
        raise _fail(loc, "must be a JSON object schema (true/false schemas are not supported)")
    kind = _node_type(node)
    if kind is None:
        raise _fail(loc, "keyword 'type' is required (string, integer, number, boolean or object)")
    if isinstance(kind, list):
        raise _fail(loc, "a list of types is not supported; give one type")
    if kind not in (*_PRIMITIVE_TYPES, "object", "array"):
        raise _fail(loc, f"type {kind!r} is not supported")
    return kind


def _check_keywords(node: dict, loc: str, allowed: frozenset[str]) -> None:
    for key in node:
        if key not in allowed and key not in _ANNOTATIONS:
            raise _fail(loc, f"keyword {key!r} is not supported")
    for key in ("title", "description", "$comment"):
        if key in node and not isinstance(node[key], str):
            raise _fail(loc, f"{key} must be a string")
    for key in ("writeOnly", "readOnly"):
        if key in node and not isinstance(node[key], bool):
            raise _fail(loc, f"{key} must be true or false")
    if "examples" in node and not isinstance(node["examples"], list):
        raise _fail(loc, "examples must be a list")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_bounds(node: dict, loc: str, low: str, high: str) -> None:
    if low in node and high in node and node[low] > node[high]:
        raise _fail(loc, f"{low} ({node[low]}) is greater than {high} ({node[high]})")


def _check_primitive(node: dict, loc: str, kind: str) -> None:
    if kind == "string":
        _check_keywords(node, loc, _STRING_KEYWORDS)
        _check_string(node, loc)
    elif kind in ("integer", "number"):
        if "enum" in node:
            raise _fail(loc, "non-string enums are not supported; use a string enum")
        _check_keywords(node, loc, _NUMBER_KEYWORDS)
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if key in node and not _is_finite_number(node[key]):
                raise _fail(loc, f"{key} must be a number")
        if "multipleOf" in node and node["multipleOf"] <= 0:
            raise _fail(loc, "multipleOf must be greater than 0")
        _check_bounds(node, loc, "minimum", "maximum")
    elif kind == "boolean":
        if "enum" in node:
            raise _fail(loc, "non-string enums are not supported; use a string enum")
        _check_keywords(node, loc, frozenset({"type"}))
    else:  # pragma: no cover - _check_type limits the kinds
        raise _fail(loc, f"type {kind!r} is not supported")


def _check_string(node: dict, loc: str) -> None:
    if "enum" in node:
        enum = node["enum"]
        if not isinstance(enum, list) or not enum:
            raise _fail(loc, "enum must be a non-empty list of strings")
        if not all(isinstance(choice, str) for choice in enum):
            raise _fail(loc, "non-string enums are not supported; enum must list strings")
        if any(not choice.strip() for choice in enum):
            raise _fail(loc, "enum choices must not be empty")
        if len(set(enum)) != len(enum):
            raise _fail(loc, "enum lists a choice twice")
    for key in ("minLength", "maxLength"):
        if key in node and not _is_count(node[key]):
            raise _fail(loc, f"{key} must be a non-negative integer")
    _check_bounds(node, loc, "minLength", "maxLength")
    if "pattern" in node:
        pattern = node["pattern"]
        if not isinstance(pattern, str):
            raise _fail(loc, "pattern must be a string")
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as e:
            raise _fail(loc, f"pattern does not compile: {e}") from None
        # Python's re has no timeout: "(a+)+" against "aaaa…b" would stall the
        # event loop for every tenant. Refuse the classic shape outright.
        if _NESTED_REPEAT.search(pattern):
            raise _fail(loc, "pattern repeats a repetition, like (a+)+, which can take exponential time")
    if "format" in node and node["format"] not in FORMATS:
        raise _fail(loc, f"format {node['format']!r} is not supported; use one of: {', '.join(FORMATS)}")


def _check_object(node: dict) -> None:
    _check_keywords(node, "schema", _OBJECT_KEYWORDS)
    properties = node.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise _fail("schema", "an object schema needs 'properties' with at least one field")
    if "additionalProperties" in node and node["additionalProperties"] is not False:
        raise _fail("schema", "additionalProperties must be false or absent")
    for name, sub in properties.items():
        _check_field_name(name)
        loc = f"properties.{name}"
        kind = _check_type(sub, loc)
        if kind == "object":
            raise _fail(loc, "nested objects are not supported")
        if kind == "array":
            _check_array(sub, loc)
        else:
            _check_primitive(sub, loc, kind)
        _check_default(sub, loc)
    required = node.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise _fail("schema", "required must be a list of field names")
    if len(set(required)) != len(required):
        raise _fail("schema", "required names a field twice")
    for name in required:
        if name not in properties:
            raise _fail("schema", f"required names {name!r}, which is not a property")


def _check_field_name(name: str) -> None:
    if not name or not name.strip():
        raise _fail("properties", "a field name must not be empty")
    if len(name) > _MAX_NAME_LENGTH:
        raise _fail("properties", f"field name is longer than {_MAX_NAME_LENGTH} characters")
    # Chat channels read "name: value" lines, so a colon or a line break in a
    # name could never be typed back.
    if ":" in name or any(unicodedata.category(ch).startswith("C") for ch in name):
        raise _fail("properties", f"field name {name!r} must not contain ':' or control characters")


def _check_array(node: dict, loc: str) -> None:
    items = node.get("items")
    if not isinstance(items, dict):
        raise _fail(loc, _ARRAY_SHAPES)
    item_loc = f"{loc}.items"
    if "enum" in items:
        _check_keywords(node, loc, _MULTI_KEYWORDS)
        if _check_type(items, item_loc) != "string":
            raise _fail(item_loc, "non-string enums are not supported; use a string enum")
        _check_keywords(items, item_loc, frozenset({"type", "enum"}))
        _check_string(items, item_loc)
        for key in ("minItems", "maxItems"):
            if key in node and not _is_count(node[key]):
                raise _fail(loc, f"{key} must be a non-negative integer")
        _check_bounds(node, loc, "minItems", "maxItems")
        if "uniqueItems" in node and not isinstance(node["uniqueItems"], bool):
            raise _fail(loc, "uniqueItems must be true or false")
    elif items.get("format") == "date":
        _check_keywords(node, loc, _RANGE_KEYWORDS)
        if _check_type(items, item_loc) != "string":
            raise _fail(item_loc, "a date range's items must be strings of format 'date'")
        _check_keywords(items, item_loc, frozenset({"type", "format"}))
        if node.get("minItems") != 2 or node.get("maxItems") != 2:
            raise _fail(loc, "an array of dates must be a date range: minItems 2 and maxItems 2")
    else:
        raise _fail(loc, _ARRAY_SHAPES)


_ARRAY_SHAPES = (
    "arrays must be a multi-select (items: a string enum) or a date range "
    "(items: strings of format 'date', minItems 2, maxItems 2)"
)


def _check_default(node: dict, loc: str) -> None:
    if "default" not in node:
        return
    problems = _schema_errors(node, node["default"])
    if problems:
        raise _fail(loc, f"default {problems[0].message}")


# --------------------------------------------------------------------------- validate_answer


def validate_answer(schema: dict | None, value: object) -> list[FieldError]:
    """Check an answer against a checked schema; an empty list means valid.

    Without a schema the answer is free text: a non-empty string.
    """
    if schema is None:
        if not isinstance(value, str):
            return [FieldError("", "must be text")]
        if not value.strip():
            return [FieldError("", "must not be empty")]
        return []
    try:
        return _schema_errors(schema, value)
    except RecursionError:
        return [FieldError("", "is nested too deeply")]


def _schema_errors(schema: dict, value: object) -> list[FieldError]:
    validator = Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    found: list[tuple[tuple[int, str], FieldError, bool]] = []
    non_finite: set[str] = set()
    # jsonschema's multipleOf cannot take NaN; such a value is reported here
    # and validated as null, whose errors are then dropped.
    value = _without_non_finite(value, "", non_finite)
    for path in non_finite:
        found.append((_order(schema, path), FieldError(path, "must be a finite number"), True))
    seen_required: set[str] = set()
    for error in validator.iter_errors(value):
        path = ".".join(str(p) for p in error.absolute_path)
        if path in non_finite:
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


def _without_non_finite(value: object, path: str, found: set[str]) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        found.add(path)
        return None
    if isinstance(value, dict) and _has_non_finite(value):
        return {
            key: _without_non_finite(item, f"{path}.{key}" if path else str(key), found)
            for key, item in value.items()
        }
    if isinstance(value, list) and _has_non_finite(value):
        return [
            _without_non_finite(item, f"{path}.{index}" if path else str(index), found)
            for index, item in enumerate(value)
        ]
    return value


def _has_non_finite(value: object) -> bool:
    # Iterative: an answer nested a thousand deep must not blow the stack here.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _date_range_errors(schema: dict, value: object, failed: set[str]) -> list[FieldError]:
    if not isinstance(value, dict) or schema.get("type") != "object":
        return []
    errors = []
    for name, sub in schema.get("properties", {}).items():
        if not _is_date_range(sub) or name in failed or f"{name}.0" in failed or f"{name}.1" in failed:
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


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _message(error: ValidationError, root: dict) -> str:
    keyword, expected, sub = error.validator, error.validator_value, error.schema
    if keyword == "type":
        if not error.absolute_path and _is_approval(root):
            return "must be approve or reject (optionally with a reason)"
        if isinstance(sub, dict) and _is_date_range(sub):
            return "must be two dates: a start and an end"
        return _TYPE_MESSAGES.get(expected, "has the wrong type")
    if keyword == "enum":
        return "must be one of: " + ", ".join(str(choice) for choice in expected)
    if keyword == "minLength":
        return "must not be empty" if expected == 1 else f"must be at least {_plural(expected, 'character')}"
    if keyword == "maxLength":
        return f"must be at most {_plural(expected, 'character')}"
    if keyword == "pattern":
        return f"must match the pattern {expected}"
    if keyword == "format":
        return _FORMAT_MESSAGES.get(expected, f"is not a valid {expected}")
    if keyword == "minimum":
        return f"must be at least {_number_text(expected)}"
    if keyword == "maximum":
        return f"must be at most {_number_text(expected)}"
    if keyword == "exclusiveMinimum":
        return f"must be greater than {_number_text(expected)}"
    if keyword == "exclusiveMaximum":
        return f"must be less than {_number_text(expected)}"
    if keyword == "multipleOf":
        return f"must be a multiple of {_number_text(expected)}"
    if keyword in ("minItems", "maxItems") and isinstance(sub, dict) and _is_date_range(sub):
        return "must be two dates: a start and an end"
    if keyword == "minItems":
        return "choose at least one" if expected == 1 else f"choose at least {expected}"
    if keyword == "maxItems":
        return f"choose at most {expected}"
    if keyword == "uniqueItems":
        return "must not repeat a choice"
    return "is not valid"


def _is_date_range(node: Any) -> bool:
    return (
        isinstance(node, dict)
        and node.get("type") == "array"
        and isinstance(node.get("items"), dict)
        and node["items"].get("format") == "date"
    )


def _is_approval(schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return False
    decision = schema.get("properties", {}).get("decision")
    return isinstance(decision, dict) and decision.get("enum") == ["approve", "reject"]


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


def fields(schema: dict | None, *, sensitive: bool = False) -> list[FieldSpec]:
    """The fields of a checked schema, in order; a primitive root is one field named ""."""
    if schema is None:
        return [FieldSpec(name="", title="Answer", description="", widget="textarea", required=True, masked=sensitive)]
    if schema.get("type") == "object":
        required = set(schema.get("required", []))
        return [
            _spec(name, sub, required=name in required, sensitive=sensitive, root=False)
            for name, sub in schema.get("properties", {}).items()
        ]
    return [_spec("", schema, required=True, sensitive=sensitive, root=True)]


def _humanize(name: str) -> str:
    words = re.sub(r"[_\-]+", " ", name).strip()
    return words[:1].upper() + words[1:] if words else name


# Masking hides what is typed; choices (buttons, checkboxes) have nothing to hide.
_MASKABLE = frozenset({"text", "textarea", "password", "enum", "date", "time", "date-time", "email", "uri", "integer", "number"})


def _widget(node: dict, *, root: bool) -> str:
    kind = _node_type(node)
    if kind == "boolean":
        return "boolean"
    if kind in ("integer", "number"):
        return kind
    if kind == "array":
        return "date_range" if _is_date_range(node) else "multi_enum"
    if "enum" in node:
        return "enum"
    fmt = node.get("format")
    if fmt == "password" or node.get("writeOnly") is True:
        return "password"
    if fmt in ("date", "time", "date-time", "email", "uri"):
        return fmt
    max_length = node.get("maxLength")
    if isinstance(max_length, int) and max_length > _TEXTAREA_FROM:
        return "textarea"
    if root and max_length is None and "pattern" not in node:
        return "textarea"
    return "text"


def _spec(name: str, node: dict, *, required: bool, sensitive: bool, root: bool) -> FieldSpec:
    widget = _widget(node, root=root)
    choices: tuple[str, ...] = ()
    if widget == "enum":
        choices = tuple(node.get("enum", ()))
    elif widget == "multi_enum":
        choices = tuple(node.get("items", {}).get("enum", ()))
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
    )


def _length_words(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        if low == high:
            return f"exactly {_plural(low, 'character')}"
        return f"{low}–{high} characters"
    if low is not None:
        return f"at least {_plural(low, 'character')}"
    if high is not None:
        return f"at most {_plural(high, 'character')}"
    return ""


def describe_field(spec: FieldSpec) -> str:
    """The field's type, format and bounds in words, for chat cards."""
    widget = spec.widget
    if widget in ("text", "textarea", "password"):
        parts = ["secret text" if widget == "password" else "text"]
        length = _length_words(spec.min_length, spec.max_length)
        if length:
            parts.append(length)
        if spec.pattern:
            parts.append(f"matching {spec.pattern}")
        return ", ".join(parts)
    if widget in ("integer", "number"):
        text = widget
        if spec.minimum is not None and spec.maximum is not None:
            text += f" from {_number_text(spec.minimum)} to {_number_text(spec.maximum)}"
        elif spec.minimum is not None:
            text += f", at least {_number_text(spec.minimum)}"
        elif spec.maximum is not None:
            text += f", at most {_number_text(spec.maximum)}"
        if spec.exclusive_minimum is not None:
            text += f", greater than {_number_text(spec.exclusive_minimum)}"
        if spec.exclusive_maximum is not None:
            text += f", less than {_number_text(spec.exclusive_maximum)}"
        if spec.multiple_of is not None:
            text += f", a multiple of {_number_text(spec.multiple_of)}"
        return text
    if widget == "boolean":
        return "yes or no"
    if widget == "enum":
        return "one of: " + ", ".join(spec.choices)
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
        return f"choose {count} of: " + ", ".join(spec.choices)
    if widget == "date_range":
        return "date range: two dates (YYYY-MM-DD to YYYY-MM-DD)"
    return {
        "date": "date (YYYY-MM-DD)",
        "time": "time (HH:MM)",
        "date-time": "date and time with a zone (e.g. 2026-01-02T14:30:00Z)",
        "email": "email address",
        "uri": "URL (e.g. https://example.com/page)",
    }.get(widget, widget)


# --------------------------------------------------------------------------- coercion

_TRUE_WORDS = frozenset({"yes", "y", "true", "1", "👍", "✅"})
_FALSE_WORDS = frozenset({"no", "n", "false", "0", "👎", "❌"})
_APPROVE_WORDS = ("approved", "approve", "accepted", "accept", "okay", "yes", "lgtm", "ok", "y")
_REJECT_WORDS = ("rejected", "reject", "declined", "decline", "denied", "deny", "no", "n")
_APPROVE_EMOJI = ("👍", "✅")
_REJECT_EMOJI = ("👎", "❌")
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
_WORD_GAP = re.compile(r"[\s:,.!;—–-]*(?:because\b[\s:,]*)?", re.IGNORECASE)


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
    if _is_approval(schema):
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
        spec = _spec("", spec, required=True, sensitive=False, root=False)
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
        return _match_choice(spec.choices, value)
    if widget == "multi_enum":
        return _to_choices(spec.choices, value)
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
    # "2.5" for an integer field: a number, so the validator says "whole number".
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
    return number if math.isfinite(number) else value


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _squash(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.casefold())


def _match_choice(choices: tuple[str, ...], value: str) -> str:
    if value in choices:
        return value
    for key in (_fold, _squash):
        hits = [choice for choice in choices if key(choice) == key(value) and key(value)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            return value
    if set(choices) == {"approve", "reject"}:
        decision = _approval_word(value)
        if decision and not decision[1]:
            return decision[0]
    return value


def _to_choices(choices: tuple[str, ...], value: str) -> list[str]:
    if not value:
        return []
    whole = _match_choice(choices, value)
    if whole in choices:
        return [whole]
    return [_match_choice(choices, part.strip()) for part in re.split(r"[,;\n]", value) if part.strip()]


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


def _approval_word(text: str) -> tuple[str, str] | None:
    """("approve" | "reject", the rest) when ``text`` starts with a decision word."""
    text = text.strip()
    for emojis, decision in ((_APPROVE_EMOJI, "approve"), (_REJECT_EMOJI, "reject")):
        for emoji in emojis:
            if text.startswith(emoji):
                rest = text[len(emoji):].lstrip(_EMOJI_NOISE_CHARS)
                return decision, _WORD_GAP.sub("", rest, count=1).strip()
    for words, decision in ((_APPROVE_WORDS, "approve"), (_REJECT_WORDS, "reject")):
        for word in words:
            if text[: len(word)].casefold() != word:
                continue
            after = text[len(word): len(word) + 1]
            if after and (after.isalnum() or after == "_"):
                continue
            return decision, _WORD_GAP.sub("", text[len(word):], count=1).strip()
    return None


def _coerce_approval(schema: dict, text: str) -> object:
    if _APPROVAL_LINES.match(text):
        return parse_field_lines(schema, text)[0]
    found = _approval_word(text)
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
        if value:
            typed[spec.name] = coerce_field(spec, value)
    return typed, errors

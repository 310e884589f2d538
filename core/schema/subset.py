"""The form-schema subset: the keywords and shapes a human can answer, refused at create with the reason."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import unicodedata
from typing import Any

from handraise.core.errors import InvalidSchemaError
from handraise.core.jsontext import dumps_unicode
from handraise.core.schema.shapes import (
    APPROVAL_SCHEMA,
    FORMATS,
    KINDS,
    MAX_FIELDS,
    MAX_SCHEMA_BYTES,
    choice_values,
    node_type,
)
from handraise.core.schema.patterns import PatternError, compile_pattern
from handraise.core.schema.validation import OFF_LOOP_STEPS, match_steps, schema_errors
from handraise.core.text import MAX_EXACT_INTEGER, has_lone_surrogate, text_problem

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
# errorMessage: our extension, the sentence a person reads when the answer does not match the pattern.
_STRING_KEYWORDS = frozenset({"type", "enum", "oneOf", "anyOf", "minLength", "maxLength", "pattern", "format",
                              "errorMessage"})
_OPTION_KEYWORDS = frozenset({"const", "title", "description"})
_NUMBER_KEYWORDS = frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_OBJECT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
_MULTI_KEYWORDS = frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"})
_RANGE_KEYWORDS = frozenset({"type", "items", "minItems", "maxItems"})
_MAX_NAME_LENGTH = 100


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
    _check_plain(schema)
    _check_root(schema, max_fields=max_fields)
    if kind == "choice" and node_type(schema) not in ("boolean",) and not (
        node_type(schema) == "string" and choice_values(schema)
    ):
        raise InvalidSchemaError("kind 'choice' needs a schema that is a string enum or a boolean")
    return copy.deepcopy(schema)


async def check_schema_off_loop(schema: dict | None, *, kind: str = "input", max_fields: int = MAX_FIELDS,
                                max_bytes: int = MAX_SCHEMA_BYTES) -> dict | None:
    """``check_schema`` for a server: a ``default`` whose pattern would take noticeable time is checked off the
    loop, and a schema that passed before (agents ask the same question again and again) is not checked again."""
    try:
        key = (dumps_unicode(schema), kind, max_fields, max_bytes)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: check_schema says why
        key = None
    effective_text = _PASSED.get(key) if key is not None else None
    if effective_text is not None:
        # A fresh copy for each caller, as check_schema's own result is.
        return _scan_json(effective_text, 0)[0]
    if isinstance(schema, dict) and _default_steps(schema) > OFF_LOOP_STEPS:
        effective = await asyncio.to_thread(check_schema, schema, kind=kind, max_fields=max_fields,
                                            max_bytes=max_bytes)
    else:
        effective = check_schema(schema, kind=kind, max_fields=max_fields, max_bytes=max_bytes)
    if key is not None:
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        _PASSED[key] = dumps_unicode(effective)
    return effective


# Schemas that passed check_schema: (the schema's JSON text, kind, max_fields, max_bytes) -> the effective
# schema's JSON text (a refusal is never kept: it is checked again, and refused again, each time).
_PASSED: dict[tuple[str, str, int, int], str] = {}
_PASSED_MAX = 256  # at most 8 KB each way (max_schema_bytes): a few MB at worst
_scan_json = json.JSONDecoder().scan_once


def _default_steps(schema: dict) -> int:
    properties = schema.get("properties")
    nodes = [schema, *(properties.values() if isinstance(properties, dict) else ())]
    return max((match_steps(node, node["default"]) for node in nodes if isinstance(node, dict) and "default" in node),
               default=0)


def _check_plain(schema: dict) -> None:
    """Every value has a canonical JSON form and every string is text: else 422, never a 500 later."""
    stack: list[tuple[Any, str]] = [(schema, "schema")]
    while stack:
        item, loc = stack.pop()
        if isinstance(item, dict):
            for key, member in item.items():
                # Control characters in a name are refused with the name's own rules, below.
                if not isinstance(key, str) or has_lone_surrogate(key):
                    raise _fail(loc, "a keyword or field name is not valid Unicode text")
                # Named as the other refusals name places: "schema.maximum", "properties.age.maximum".
                stack.append((member, "properties" if (loc, key) == ("schema", "properties") else f"{loc}.{key}"))
        elif isinstance(item, list):
            stack.extend((member, f"{loc}.{index}") for index, member in enumerate(item))
        elif isinstance(item, str):
            problem = text_problem(item, prose=True)
            if problem:
                raise _fail(loc, problem)
        elif isinstance(item, float) and not math.isfinite(item):
            raise _fail(loc, "must be a finite number")
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_EXACT_INTEGER:
            raise _fail(loc, f"is too large to be exact in JSON (at most {MAX_EXACT_INTEGER} either way)")


def _json_size(schema: dict) -> int:
    try:
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidSchemaError(f"schema is not plain JSON: {e}") from None
    return len(text.encode("utf-8", "surrogatepass"))


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
    kind = node_type(node)
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
    labelled = [key for key in ("oneOf", "anyOf") if key in node]
    if labelled:
        _check_labelled(node, loc, labelled)
    if "errorMessage" in node and (not isinstance(node["errorMessage"], str) or not node["errorMessage"].strip()):
        raise _fail(loc, "errorMessage must be a non-empty string")
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
            compile_pattern(pattern)
        except PatternError as e:
            raise _fail(loc, str(e)) from None
    if "format" in node and node["format"] not in FORMATS:
        raise _fail(loc, f"format {node['format']!r} is not supported; use one of: {', '.join(FORMATS)}")


def _check_labelled(node: dict, loc: str, keys: list[str]) -> None:
    """Labelled choices: oneOf (or anyOf) of {"const": "<value>", "title": "<label>"}, instead of an enum."""
    if len(keys) > 1 or "enum" in node:
        raise _fail(loc, "give the choices once: enum, or oneOf/anyOf of {const, title}")
    options = node[keys[0]]
    where = f"{loc}.{keys[0]}"
    if not isinstance(options, list) or not options:
        raise _fail(where, "must be a non-empty list of {const, title} choices")
    values = []
    for option in options:
        if not isinstance(option, dict) or "const" not in option:
            raise _fail(where, "each choice must be an object with const (the value) and title (the label)")
        for key in option:
            if key not in _OPTION_KEYWORDS:
                raise _fail(where, f"keyword {key!r} is not supported in a choice; use const, title, description")
        value = option["const"]
        if not isinstance(value, str) or not value.strip():
            raise _fail(where, "each const must be a non-empty string")
        for key in ("title", "description"):
            if key in option and not isinstance(option[key], str):
                raise _fail(where, f"a choice's {key} must be a string")
        values.append(value)
    if len(set(values)) != len(values):
        raise _fail(where, "lists a choice twice")


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
    if "enum" in items or any(key in items for key in ("oneOf", "anyOf")):
        _check_keywords(node, loc, _MULTI_KEYWORDS)
        if _check_type(items, item_loc) != "string":
            raise _fail(item_loc, "non-string enums are not supported; use a string enum")
        _check_keywords(items, item_loc, frozenset({"type", "enum", "oneOf", "anyOf"}))
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
    "arrays must be a multi-select (items: a string enum, or oneOf/anyOf of {const, title}) or a date range "
    "(items: strings of format 'date', minItems 2, maxItems 2)"
)


def _check_default(node: dict, loc: str) -> None:
    if "default" not in node:
        return
    problems = schema_errors(node, node["default"])
    if problems:
        raise _fail(loc, f"default does not fit the field: {problems[0].message}")

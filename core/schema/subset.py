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
    labelled_choices,
    node_type,
)
from handraise.core.schema.patterns import PatternError, compile_pattern
from handraise.core.schema.validation import OFF_LOOP_STEPS, match_steps, plural, schema_errors
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


# A refusal lists at most this many problems in details.fields (as many as a form may have fields); its
# message says how many there were in all. The walk itself is bounded by the size limit, checked first.
MAX_PROBLEMS = 20
# An echoed keyword, type or name is shown up to this many characters: a schema may be 8 KB of one string.
_SHOWN_CHARS = 60

# A place in the schema: the keys and indexes from its root ("properties", "code", "pattern").
Path = tuple[str | int, ...]


# --------------------------------------------------------------------------- check_schema


def check_schema(
    schema: dict | None,
    *,
    kind: str = "input",
    max_fields: int = MAX_FIELDS,
    max_bytes: int = MAX_SCHEMA_BYTES,
    name: str = "schema",
) -> dict | None:
    """Return the effective schema for a new request, or raise ``InvalidSchemaError``.

    ``kind`` "approval" has a fixed schema (``APPROVAL_SCHEMA``): a caller may
    omit it or send exactly that schema, anything else is refused. ``kind``
    None means "input". The result is a deep copy the caller may keep.

    A refusal names every problem found (up to ``MAX_PROBLEMS``) in its ``fields``, each at its place
    in the request body: ``name`` (the body field that holds the schema) then the path within the
    schema, as ``schema.properties.code.pattern``; its message is the first of them.
    """
    if kind is None:
        kind = "input"
    if kind not in KINDS:
        message = f"kind {_shown(kind)} is not supported; use one of: {', '.join(KINDS)}"
        raise InvalidSchemaError(message, fields=[{"field": "kind", "message": message}])
    problems = _Problems(name)
    if kind == "approval":
        if schema is None or schema == APPROVAL_SCHEMA:
            return copy.deepcopy(APPROVAL_SCHEMA)
        raise problems.at((), "kind 'approval' has a fixed schema ({decision: approve | reject, reason?}); "
                              "send no schema").refusal()
    if schema is None:
        if kind == "choice":
            raise problems.at((), "kind 'choice' needs a schema: a string enum or a boolean").refusal()
        return None
    if not isinstance(schema, dict):
        raise problems.at((), "must be a JSON object").refusal()
    # Refused whole, before anything is walked: the walk below is bounded by this size.
    size = _json_size(schema, problems)
    if size > max_bytes:
        raise problems.at((), f"is {size} bytes; at most {max_bytes}").refusal()
    _check_plain(schema, problems)
    if problems:  # values with no canonical form: the checks below could not even compare them
        raise problems.refusal()
    _check_root(schema, problems, max_fields=max_fields)
    if kind == "choice" and not _is_choice(schema):
        problems.at((), "kind 'choice' needs a schema that is a string enum or a boolean")
    if problems:
        raise problems.refusal()
    return copy.deepcopy(schema)


async def check_schema_off_loop(schema: dict | None, *, kind: str = "input", max_fields: int = MAX_FIELDS,
                                max_bytes: int = MAX_SCHEMA_BYTES, name: str = "schema") -> dict | None:
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
                                            max_bytes=max_bytes, name=name)
    else:
        effective = check_schema(schema, kind=kind, max_fields=max_fields, max_bytes=max_bytes, name=name)
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


def _is_choice(schema: dict) -> bool:
    """A boolean, or a string with choices (met also beside other problems: its enum may be anything)."""
    kind = node_type(schema)
    enum = schema.get("enum")
    return kind == "boolean" or (kind == "string" and (
        labelled_choices(schema) is not None or (isinstance(enum, list) and bool(enum))))


# --------------------------------------------------------------------------- problems


class _Problems:
    """Every problem found in one schema, each at its place, in the order the walk met them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found: list[tuple[Path, str]] = []

    def at(self, path: Path, message: str) -> _Problems:
        if (path, message) not in self.found:
            self.found.append((path, message))
        return self

    def __len__(self) -> int:
        return len(self.found)

    def refusal(self) -> InvalidSchemaError:
        fields = [{"field": self.field(path), "message": message} for path, message in self.found[:MAX_PROBLEMS]]
        text = f"{fields[0]['field']}: {fields[0]['message']}"
        more = len(self.found) - 1
        if more:
            listed = "each in details.fields" if len(self.found) <= MAX_PROBLEMS else \
                f"details.fields lists the first {MAX_PROBLEMS}"
            text += f" (and {plural(more, 'more problem')}: {listed})"
        return InvalidSchemaError(text, fields=fields)

    def field(self, path: Path) -> str:
        """The place as the API names body fields: ``schema.properties.code.pattern``, ``schema.enum.0``."""
        return ".".join([self.name, *(_part(step) for step in path)])


def _part(step: str | int) -> str:
    text = str(step)
    if not text.isprintable():  # a keyword with a control character in it: escaped, never sent raw
        text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    return text if len(text) <= _MAX_NAME_LENGTH else text[:_MAX_NAME_LENGTH - 1] + "…"


def _shown(value: Any) -> str:
    """A value the schema gave, as a refusal quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 1] + "…"


def _check_plain(schema: dict, problems: _Problems) -> None:
    """Every value has a canonical JSON form and every string is text: else 422, never a 500 later."""
    stack: list[tuple[Any, Path]] = [(schema, ())]
    while stack:
        item, path = stack.pop()
        children: list[tuple[Any, Path]] = []
        if isinstance(item, dict):
            for key, member in item.items():
                # Control characters in a name are refused with the name's own rules, below.
                if not isinstance(key, str) or has_lone_surrogate(key):
                    problems.at(path, "a keyword or field name is not valid Unicode text")
                else:
                    children.append((member, (*path, key)))
        elif isinstance(item, list):
            children = [(member, (*path, index)) for index, member in enumerate(item)]
        elif isinstance(item, str):
            problem = text_problem(item, prose=True)
            if problem:
                problems.at(path, problem)
        elif isinstance(item, float) and not math.isfinite(item):
            problems.at(path, "must be a finite number")
        elif isinstance(item, (int, float)) and not isinstance(item, bool) and abs(item) > MAX_EXACT_INTEGER:
            # 1e300 as well as 2**53: the rule answers follow (core/schema/validation.py), so no bound or
            # default can name a number no answer may be.
            problems.at(path, f"is too large to be exact in JSON (at most {MAX_EXACT_INTEGER} either way)")
        stack.extend(reversed(children))  # met in the schema's order


def _json_size(schema: dict, problems: _Problems) -> int:
    try:
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise problems.at((), f"is not plain JSON: {_cut(str(e))}").refusal() from None
    return len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str) -> str:
    return text if len(text) <= 2 * _SHOWN_CHARS else text[:2 * _SHOWN_CHARS - 1] + "…"


# --------------------------------------------------------------------------- the subset, node by node


def _check_root(schema: dict, problems: _Problems, *, max_fields: int) -> None:
    # A frozenset cannot even be asked about an object or a list (unhashable): only text can name a draft.
    if "$schema" in schema and (not isinstance(schema["$schema"], str) or schema["$schema"] not in _META_SCHEMAS):
        problems.at(("$schema",), f"$schema {_shown(schema['$schema'])} is not supported; use draft 2020-12")
    node = {k: v for k, v in schema.items() if k != "$schema"}
    before = len(problems)
    kind = _check_type(node, (), problems)
    if kind is None:
        return
    if kind == "object":
        properties = node.get("properties")
        if isinstance(properties, dict) and len(properties) > max_fields:
            problems.at(("properties",), f"{len(properties)} fields; at most {max_fields}")
        _check_object(node, problems)
    elif kind == "array":
        problems.at((), "an array answer is only supported as a field of an object schema")
    else:
        _check_primitive(node, (), kind, problems)
    if len(problems) == before:
        _check_default(node, (), problems)


# Every keyword some shape of the subset takes: one outside them all is refused whatever the node's type.
_ANY_KEYWORDS = (_ANNOTATIONS | _STRING_KEYWORDS | _NUMBER_KEYWORDS | _OBJECT_KEYWORDS | _MULTI_KEYWORDS
                 | _RANGE_KEYWORDS)


def _check_type(node: Any, path: Path, problems: _Problems) -> str | None:
    """The node's type, or None (with the problem) when the subset has no such node."""
    if not isinstance(node, dict):
        problems.at(path, "must be a JSON object schema (true/false schemas are not supported)")
        return None
    kind = node_type(node)
    if kind is None:
        problems.at(path, "keyword 'type' is required (string, integer, number, boolean or object)")
    elif isinstance(kind, list):
        problems.at((*path, "type"), "a list of types is not supported; give one type")
    elif kind not in (*_PRIMITIVE_TYPES, "object", "array"):
        problems.at((*path, "type"), f"type {_shown(kind)} is not supported")
    else:
        return kind
    # Whatever type was meant, these keywords ($ref, $defs, if, not …) would be refused: say so now.
    _check_keywords(node, path, _ANY_KEYWORDS, problems)
    return None


def _check_keywords(node: dict, path: Path, allowed: frozenset[str], problems: _Problems) -> None:
    for key in node:
        if key not in allowed and key not in _ANNOTATIONS:
            problems.at((*path, key), f"keyword {_shown(key)} is not supported")
    for key in ("title", "description", "$comment"):
        if key in node and not isinstance(node[key], str):
            problems.at((*path, key), f"{key} must be a string")
    for key in ("writeOnly", "readOnly"):
        if key in node and not isinstance(node[key], bool):
            problems.at((*path, key), f"{key} must be true or false")
    if "examples" in node and not isinstance(node["examples"], list):
        problems.at((*path, "examples"), "examples must be a list")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_bounds(node: dict, path: Path, low: str, high: str, problems: _Problems) -> None:
    # Compared only when both are numbers: a bad one has its own problem.
    if _is_finite_number(node.get(low)) and _is_finite_number(node.get(high)) and node[low] > node[high]:
        problems.at((*path, low), f"{low} ({node[low]}) is greater than {high} ({node[high]})")


def _check_primitive(node: dict, path: Path, kind: str, problems: _Problems) -> None:
    if kind == "string":
        _check_keywords(node, path, _STRING_KEYWORDS, problems)
        _check_string(node, path, problems)
        return
    if "enum" in node:
        problems.at((*path, "enum"), "non-string enums are not supported; use a string enum")
    if kind in ("integer", "number"):
        _check_keywords(node, path, _NUMBER_KEYWORDS | {"enum"}, problems)
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if key in node and not _is_finite_number(node[key]):
                problems.at((*path, key), f"{key} must be a number")
        if _is_finite_number(node.get("multipleOf")) and node["multipleOf"] <= 0:
            problems.at((*path, "multipleOf"), "multipleOf must be greater than 0")
        _check_bounds(node, path, "minimum", "maximum", problems)
    else:  # boolean: _check_type limits the kinds
        _check_keywords(node, path, frozenset({"type", "enum"}), problems)


def _check_string(node: dict, path: Path, problems: _Problems) -> None:
    labelled = [key for key in ("oneOf", "anyOf") if key in node]
    if labelled:
        _check_labelled(node, path, labelled, problems)
    if "errorMessage" in node and (not isinstance(node["errorMessage"], str) or not node["errorMessage"].strip()):
        problems.at((*path, "errorMessage"), "errorMessage must be a non-empty string")
    if "enum" in node:
        _check_enum(node["enum"], (*path, "enum"), problems)
    for key in ("minLength", "maxLength"):
        if key in node and not _is_count(node[key]):
            problems.at((*path, key), f"{key} must be a non-negative integer")
    _check_bounds(node, path, "minLength", "maxLength", problems)
    if "pattern" in node:
        pattern = node["pattern"]
        if not isinstance(pattern, str):
            problems.at((*path, "pattern"), "pattern must be a string")
        else:
            try:
                compile_pattern(pattern)
            except PatternError as e:
                problems.at((*path, "pattern"), str(e))
    if "format" in node and node["format"] not in FORMATS:
        problems.at((*path, "format"),
                    f"format {_shown(node['format'])} is not supported; use one of: {', '.join(FORMATS)}")


def _check_enum(enum: Any, path: Path, problems: _Problems) -> None:
    if not isinstance(enum, list) or not enum:
        problems.at(path, "enum must be a non-empty list of strings")
        return
    for index, choice in enumerate(enum):
        if not isinstance(choice, str):
            problems.at((*path, index), "non-string enums are not supported; enum must list strings")
        elif not choice.strip():
            problems.at((*path, index), "enum choices must not be empty")
    strings = [choice for choice in enum if isinstance(choice, str)]
    if len(set(strings)) != len(strings):
        problems.at(path, "enum lists a choice twice")


def _check_labelled(node: dict, path: Path, keys: list[str], problems: _Problems) -> None:
    """Labelled choices: oneOf (or anyOf) of {"const": "<value>", "title": "<label>"}, instead of an enum."""
    if len(keys) > 1 or "enum" in node:
        problems.at(path, "give the choices once: enum, or oneOf/anyOf of {const, title}")
        return
    options = node[keys[0]]
    where = (*path, keys[0])
    if not isinstance(options, list) or not options:
        problems.at(where, "must be a non-empty list of {const, title} choices")
        return
    values = []
    for index, option in enumerate(options):
        at = (*where, index)
        if not isinstance(option, dict) or "const" not in option:
            problems.at(at, "each choice must be an object with const (the value) and title (the label)")
            continue
        for key in option:
            if key not in _OPTION_KEYWORDS:
                problems.at((*at, key),
                            f"keyword {_shown(key)} is not supported in a choice; use const, title, description")
        value = option["const"]
        if not isinstance(value, str) or not value.strip():
            problems.at((*at, "const"), "each const must be a non-empty string")
        else:
            values.append(value)
        for key in ("title", "description"):
            if key in option and not isinstance(option[key], str):
                problems.at((*at, key), f"a choice's {key} must be a string")
    if len(set(values)) != len(values):
        problems.at(where, "lists a choice twice")


def _check_object(node: dict, problems: _Problems) -> None:
    _check_keywords(node, (), _OBJECT_KEYWORDS, problems)
    properties = node.get("properties")
    if not isinstance(properties, dict) or not properties:
        problems.at(("properties",), "an object schema needs 'properties' with at least one field")
        properties = None
    if "additionalProperties" in node and node["additionalProperties"] is not False:
        problems.at(("additionalProperties",), "additionalProperties must be false or absent")
    for name, sub in (properties or {}).items():
        if _check_field_name(name, problems):
            _check_field(sub, ("properties", name), problems)
    required = node.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        problems.at(("required",), "required must be a list of field names")
        return
    if len(set(required)) != len(required):
        problems.at(("required",), "required names a field twice")
    for index, name in enumerate(required):
        if properties is not None and name not in properties:
            problems.at(("required", index), f"required names {_shown(name)}, which is not a property")


def _check_field(node: Any, path: Path, problems: _Problems) -> None:
    before = len(problems)
    kind = _check_type(node, path, problems)
    if kind == "object":
        problems.at(path, "nested objects are not supported")
    elif kind == "array":
        _check_array(node, path, problems)
    elif kind is not None:
        _check_primitive(node, path, kind, problems)
    if len(problems) == before:  # a default is checked against a field the subset takes, never a broken one
        _check_default(node, path, problems)


def _check_field_name(name: str, problems: _Problems) -> bool:
    """Whether ``name`` may name a field; a problem at ``properties`` (the name may not be sayable) when not."""
    if not name or not name.strip():
        problems.at(("properties",), "a field name must not be empty")
    elif len(name) > _MAX_NAME_LENGTH:
        problems.at(("properties",), f"field name {_shown(name)} is longer than {_MAX_NAME_LENGTH} characters")
    # Chat channels read "name: value" lines, so a colon or a line break in a
    # name could never be typed back.
    elif ":" in name or any(unicodedata.category(ch).startswith("C") for ch in name):
        problems.at(("properties",), f"field name {_shown(name)} must not contain ':' or control characters")
    else:
        return True
    return False


def _check_array(node: dict, path: Path, problems: _Problems) -> None:
    items = node.get("items")
    if not isinstance(items, dict):
        problems.at((*path, "items") if "items" in node else path, _ARRAY_SHAPES)
        return
    item_path = (*path, "items")
    if "enum" in items or any(key in items for key in ("oneOf", "anyOf")):
        _check_keywords(node, path, _MULTI_KEYWORDS, problems)
        item_kind = _check_type(items, item_path, problems)
        if item_kind is not None and item_kind != "string":
            problems.at((*item_path, "type"), "non-string enums are not supported; use a string enum")
        elif item_kind is not None:
            _check_keywords(items, item_path, frozenset({"type", "enum", "oneOf", "anyOf"}), problems)
            _check_string(items, item_path, problems)
        for key in ("minItems", "maxItems"):
            if key in node and not _is_count(node[key]):
                problems.at((*path, key), f"{key} must be a non-negative integer")
        _check_bounds(node, path, "minItems", "maxItems", problems)
        if "uniqueItems" in node and not isinstance(node["uniqueItems"], bool):
            problems.at((*path, "uniqueItems"), "uniqueItems must be true or false")
    elif items.get("format") == "date":
        _check_keywords(node, path, _RANGE_KEYWORDS, problems)
        item_kind = _check_type(items, item_path, problems)
        if item_kind is not None and item_kind != "string":
            problems.at((*item_path, "type"), "a date range's items must be strings of format 'date'")
        _check_keywords(items, item_path, frozenset({"type", "format"}), problems)
        if node.get("minItems") != 2 or node.get("maxItems") != 2:
            problems.at(path, "an array of dates must be a date range: minItems 2 and maxItems 2")
    else:
        problems.at(item_path, _ARRAY_SHAPES)


_ARRAY_SHAPES = (
    "arrays must be a multi-select (items: a string enum, or oneOf/anyOf of {const, title}) or a date range "
    "(items: strings of format 'date', minItems 2, maxItems 2)"
)


def _check_default(node: dict, path: Path, problems: _Problems) -> None:
    if "default" not in node:
        return
    found = schema_errors(node, node["default"])
    if found:
        problems.at((*path, "default"), f"default does not fit the field: {found[0].message}")

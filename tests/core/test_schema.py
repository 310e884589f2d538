"""The form-schema subset: what is refused, how answers are judged, described and read from chat."""

from __future__ import annotations

import copy
import json
import time

import pytest

from handraise.core.errors import InvalidSchemaError, ValidationFailedError
from handraise.core.schema import (
    APPROVAL_SCHEMA,
    FORMAT_CHECKER,
    MAX_FIELDS,
    MAX_SCHEMA_BYTES,
    FieldError,
    FieldSpec,
    check_schema,
    coerce_field,
    coerce_text,
    describe_field,
    fields,
    parse_field_lines,
    validate_answer,
)

RELEASE = {
    "type": "object",
    "properties": {
        "channel": {"type": "string", "enum": ["canary", "stable"], "title": "Channel"},
        "version": {"type": "string", "minLength": 5, "title": "Version"},
        "confirm": {"type": "boolean", "title": "Confirm the rollout"},
    },
    "required": ["channel", "version", "confirm"],
}

DATE_RANGE = {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2}
MULTI = {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "uniqueItems": True}

EVERYTHING = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 40, "title": "Full name", "description": "as on the ID"},
        "notes": {"type": "string", "maxLength": 1000},
        "otp": {"type": "string", "pattern": "^[0-9]{6}$", "writeOnly": True},
        "secret": {"type": "string", "format": "password"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "multipleOf": 0.25},
        "ok": {"type": "boolean"},
        "size": {"enum": ["S", "M", "L"]},
        "colours": MULTI,
        "period": DATE_RANGE,
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "time"},
        "when": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
    },
    "required": ["name", "count"],
    "additionalProperties": False,
}


def refused(schema, **kwargs) -> str:
    with pytest.raises(InvalidSchemaError) as info:
        check_schema(schema, **kwargs)
    return info.value.message


# --------------------------------------------------------------------------- check_schema: accepted


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "string", "minLength": 1, "maxLength": 5},
        {"type": "string", "pattern": "^[0-9]{6}$", "writeOnly": True},
        {"type": "string", "pattern": "^([a-z0-9]+-)*[a-z0-9]+$"},
        {"type": "string", "pattern": "^(\\+)+$"},
        # Nested repetitions are fine: RE2 matches them in linear time (tests/core/test_patterns.py).
        {"type": "string", "pattern": "^(a+)+$"},
        {"type": "string", "pattern": "(ab+){2,}"},
        {"type": "string", "enum": ["a", "b"]},
        {"enum": ["a", "b"]},
        {"type": "string", "format": "date"},
        {"type": "string", "format": "time"},
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "email"},
        {"type": "string", "format": "uri"},
        {"type": "string", "format": "password"},
        {"type": "integer"},
        {"type": "integer", "minimum": 1, "maximum": 10, "multipleOf": 1},
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5, "multipleOf": 0.5},
        {"type": "boolean"},
        {"type": "boolean", "title": "t", "description": "d", "default": True, "examples": [True], "readOnly": False, "$comment": "c"},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"},
        RELEASE,
        EVERYTHING,
        {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 2}}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False, "required": []},
        {"type": "object", "properties": {"a": {"type": "string", "title": "Ä ü 名前"}}, "title": "Form", "description": "d"},
    ],
)
def test_supported_schemas_are_returned_as_an_equal_copy(schema):
    result = check_schema(schema)
    assert result == schema
    assert result is not schema
    result["mutated"] = True
    assert "mutated" not in schema


def test_no_schema_is_free_text():
    assert check_schema(None) is None
    assert check_schema(None, kind="input") is None


def test_kind_none_means_input():
    assert check_schema({"type": "integer"}, kind=None) == {"type": "integer"}


# --------------------------------------------------------------------------- check_schema: refused


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"oneOf": [{"type": "string"}]}, "schema: keyword 'type' is required"),
        ({"type": "string", "oneOf": []}, "schema.oneOf: must be a non-empty list of {const, title} choices"),
        ({"type": "object", "properties": {"x": {"type": "string", "oneOf": []}}}, "properties.x.oneOf: must be a non-empty list"),
        ({"type": "object", "properties": {"x": {"type": "string", "anyOf": []}}}, "properties.x.anyOf: must be a non-empty list"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/y"}}}, "properties.x: keyword 'type' is required"),
        ({"type": "object", "properties": {"x": {"type": "string", "$ref": "#"}}}, "schema.properties.x.$ref: keyword '$ref' is not supported"),
        ({"type": "string", "$defs": {}}, "schema.$defs: keyword '$defs' is not supported"),
        ({"type": "string", "const": "a"}, "keyword 'const' is not supported"),
        ({"type": "string", "frobnicate": 1}, "keyword 'frobnicate' is not supported"),
        ({"type": "string", "minimum": 1}, "keyword 'minimum' is not supported"),
        ({"type": "integer", "maxLength": 1}, "keyword 'maxLength' is not supported"),
        ({"type": "boolean", "minimum": 0}, "keyword 'minimum' is not supported"),
        ({"type": "object", "properties": {"x": {"type": "object", "properties": {}}}}, "properties.x: nested objects are not supported"),
        ({"type": "null"}, "type 'null' is not supported"),
        ({"type": "banana"}, "type 'banana' is not supported"),
        ({"type": ["string", "null"]}, "a list of types is not supported"),
        ({"type": "string", "format": "ipv4"}, "format 'ipv4' is not supported"),
        ({"type": "string", "format": "hostname"}, "format 'hostname' is not supported"),
        ({"type": "integer", "enum": [1, 2]}, "non-string enums are not supported"),
        ({"enum": ["a", 1]}, "non-string enums are not supported"),
        ({"type": "boolean", "enum": [True]}, "non-string enums are not supported"),
        ({"enum": []}, "enum must be a non-empty list"),
        ({"enum": "a"}, "enum must be a non-empty list"),
        ({"enum": ["a", "a"]}, "enum lists a choice twice"),
        ({"enum": ["a", " "]}, "enum choices must not be empty"),
        ({"type": "string", "pattern": "("}, "pattern does not compile"),
        ({"type": "string", "pattern": "[z-a]"}, "pattern does not compile"),
        ({"type": "string", "pattern": 5}, "pattern must be a string"),
        ({"type": "string", "pattern": "^(?=a)"}, "pattern uses a lookahead"),
        ({"type": "string", "pattern": "(a)\\1"}, "pattern uses a backreference"),
        ({"type": "string", "minLength": -1}, "minLength must be a non-negative integer"),
        ({"type": "string", "maxLength": 1.5}, "maxLength must be a non-negative integer"),
        ({"type": "string", "maxLength": True}, "maxLength must be a non-negative integer"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength (5) is greater than maxLength (2)"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, "minimum (5) is greater than maximum (1)"),
        ({"type": "integer", "minimum": "1"}, "minimum must be a number"),
        ({"type": "number", "maximum": True}, "maximum must be a number"),
        ({"type": "number", "multipleOf": 0}, "multipleOf must be greater than 0"),
        ({"type": "number", "multipleOf": -2}, "multipleOf must be greater than 0"),
        ({"type": "string", "title": 5}, "title must be a string"),
        ({"type": "string", "description": None}, "description must be a string"),
        ({"type": "string", "writeOnly": "yes"}, "writeOnly must be true or false"),
        ({"type": "string", "examples": "a"}, "examples must be a list"),
        ({"type": "string", "minLength": 5, "default": "abc"}, "schema.default: default does not fit the field: Use at least 5 characters."),
        ({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}, "schema.properties.n.default: default does not fit the field: Enter a whole number."),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"}, "$schema"),
        ({"type": "array", "items": {"enum": ["a"]}}, "an array answer is only supported as a field of an object schema"),
        ({"type": "object"}, "an object schema needs 'properties' with at least one field"),
        ({"type": "object", "properties": {}}, "an object schema needs 'properties' with at least one field"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}, "additionalProperties must be false or absent"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}, "additionalProperties must be false or absent"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required names 'b', which is not a property"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"}, "required must be a list of field names"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "a"]}, "required names a field twice"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {}}, "keyword 'patternProperties' is not supported"),
        ({"type": "object", "properties": {"": {"type": "string"}}}, "a field name must not be empty"),
        ({"type": "object", "properties": {"a:b": {"type": "string"}}}, "must not contain ':'"),
        ({"type": "object", "properties": {"a\nb": {"type": "string"}}}, "control characters"),
        ({"type": "object", "properties": {"x" * 101: {"type": "string"}}}, "longer than 100 characters"),
        ({"type": "object", "properties": {"a": True}}, "properties.a: must be a JSON object schema"),
        ({"type": "object", "properties": {"d": {"type": "array", "items": {"type": "string", "format": "date"}}}}, "properties.d: an array of dates must be a date range"),
        ({"type": "object", "properties": {"d": {**DATE_RANGE, "maxItems": 3}}}, "minItems 2 and maxItems 2"),
        ({"type": "object", "properties": {"d": {**DATE_RANGE, "uniqueItems": True}}}, "keyword 'uniqueItems' is not supported"),
        ({"type": "object", "properties": {"d": {**DATE_RANGE, "items": {"type": "string", "format": "date", "minLength": 1}}}}, "schema.properties.d.items.minLength: keyword 'minLength' is not supported"),
        ({"type": "object", "properties": {"d": {"type": "array", "items": {"type": "string"}}}}, "arrays must be a multi-select"),
        ({"type": "object", "properties": {"d": {"type": "array"}}}, "arrays must be a multi-select"),
        ({"type": "object", "properties": {"d": {"type": "array", "items": [{"type": "string"}]}}}, "arrays must be a multi-select"),
        ({"type": "object", "properties": {"d": {"type": "array", "items": {"type": "integer", "enum": [1]}}}}, "non-string enums are not supported"),
        ({"type": "object", "properties": {"d": {"type": "array", "items": {"enum": ["a"], "format": "date"}}}}, "schema.properties.d.items.format: keyword 'format' is not supported"),
        ({"type": "object", "properties": {"d": {**MULTI, "minItems": 3, "maxItems": 1}}}, "minItems (3) is greater than maxItems (1)"),
        ({"type": "object", "properties": {"d": {**MULTI, "uniqueItems": "yes"}}}, "uniqueItems must be true or false"),
        ({"type": "object", "properties": {"d": {**MULTI, "contains": {}}}}, "keyword 'contains' is not supported"),
        ({"type": "object", "properties": {"d": {**MULTI, "prefixItems": []}}}, "keyword 'prefixItems' is not supported"),
        ({"type": "string", "if": {}, "then": {}}, "keyword 'if' is not supported"),
        ({"type": "string", "not": {}}, "keyword 'not' is not supported"),
    ],
)
def test_unsupported_constructs_are_refused_saying_what_and_where(schema, message):
    assert message in refused(schema)


def test_refusal_is_a_422_invalid_schema():
    with pytest.raises(ValidationFailedError) as info:
        check_schema({"type": "string", "oneOf": []})
    assert info.value.status == 422
    assert info.value.code == "invalid_schema"


@pytest.mark.parametrize("schema", ["string", ["type"], 5, True, False])
def test_a_schema_that_is_not_an_object_is_refused(schema):
    assert refused(schema) == "schema: must be a JSON object"


def test_twenty_fields_is_the_limit():
    twenty = {"type": "object", "properties": {f"f{i}": {"type": "boolean"} for i in range(MAX_FIELDS)}}
    assert check_schema(twenty) == twenty
    twenty_one = {"type": "object", "properties": {f"f{i}": {"type": "boolean"} for i in range(MAX_FIELDS + 1)}}
    assert refused(twenty_one) == "schema.properties: 21 fields; at most 20"


def test_the_field_limit_can_be_configured():
    three = {"type": "object", "properties": {f"f{i}": {"type": "boolean"} for i in range(3)}}
    assert refused(three, max_fields=2) == "schema.properties: 3 fields; at most 2"


def _schema_of_bytes(size: int) -> dict:
    schema = {"type": "string", "description": ""}
    base = len(json.dumps(schema, separators=(",", ":")).encode())
    schema["description"] = "x" * (size - base)
    return schema


def test_eight_kilobytes_is_the_limit():
    exactly = _schema_of_bytes(MAX_SCHEMA_BYTES)
    assert check_schema(exactly) == exactly
    assert refused(_schema_of_bytes(9000)) == "schema: is 9000 bytes; at most 8192"


def test_the_size_limit_counts_utf8_bytes_and_can_be_configured():
    schema = {"type": "string", "description": "é" * 100}  # 2 bytes each
    size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode())
    assert size > 200
    assert refused(schema, max_bytes=200) == f"schema: is {size} bytes; at most 200"


def test_a_huge_schema_is_refused_by_size_before_it_is_walked():
    huge = {"type": "object", "properties": {f"f{i}": {"type": "string", "oneOf": []} for i in range(5000)}}
    assert refused(huge).startswith("schema: is ")


def test_a_schema_with_non_json_values_is_refused():
    assert "not plain JSON" in refused({"type": "number", "minimum": float("nan")})
    assert "not plain JSON" in refused({"type": "string", "default": object()})


# --------------------------------------------------------------------------- kinds


def test_approval_gets_the_fixed_schema():
    assert check_schema(None, kind="approval") == APPROVAL_SCHEMA
    assert check_schema(copy.deepcopy(APPROVAL_SCHEMA), kind="approval") == APPROVAL_SCHEMA
    result = check_schema(None, kind="approval")
    result["properties"]["decision"]["enum"].append("maybe")
    assert APPROVAL_SCHEMA["properties"]["decision"]["enum"] == ["approve", "reject"]


def test_approval_with_a_schema_of_its_own_is_refused():
    assert "kind 'approval' has a fixed schema" in refused({"type": "string"}, kind="approval")


def test_choice_needs_a_string_enum_or_boolean():
    assert check_schema({"enum": ["a", "b"]}, kind="choice") == {"enum": ["a", "b"]}
    assert check_schema({"type": "boolean"}, kind="choice") == {"type": "boolean"}
    assert "kind 'choice' needs a schema" in refused(None, kind="choice")
    assert "string enum or a boolean" in refused({"type": "string"}, kind="choice")
    assert "string enum or a boolean" in refused(RELEASE, kind="choice")


def test_an_unknown_kind_is_refused():
    assert refused(None, kind="poll") == "kind 'poll' is not supported; use one of: input, approval, choice"


# --------------------------------------------------------------------------- validate_answer


def test_valid_answers_have_no_errors():
    assert validate_answer(RELEASE, {"channel": "stable", "version": "1.2.3", "confirm": True}) == []
    assert validate_answer(APPROVAL_SCHEMA, {"decision": "approve"}) == []
    assert validate_answer(APPROVAL_SCHEMA, {"decision": "reject", "reason": "too risky"}) == []
    assert validate_answer(EVERYTHING, {
        "name": "Ada", "notes": "n", "otp": "123456", "secret": "p", "count": 3, "ratio": 0.5, "ok": False,
        "size": "M", "colours": ["red", "blue"], "period": ["2026-01-02", "2026-01-02"], "day": "2026-02-28",
        "at": "14:30", "when": "2026-01-02T14:30:00Z", "mail": "ada@example.org", "site": "https://example.com/a?b=c",
    }) == []


def test_free_text_must_be_a_non_empty_string():
    assert validate_answer(None, "hello") == []
    assert validate_answer(None, "") == [FieldError("", "Enter an answer.")]
    assert validate_answer(None, "  \n ") == [FieldError("", "Enter an answer.")]
    assert validate_answer(None, None) == [FieldError("", "Enter text.")]
    assert validate_answer(None, 5) == [FieldError("", "Enter text.")]
    assert validate_answer(None, {"a": 1}) == [FieldError("", "Enter text.")]


def test_missing_required_fields_carry_their_names():
    assert validate_answer(RELEASE, {"channel": "stable"}) == [
        FieldError("version", "Enter an answer."),
        FieldError("confirm", "Choose an answer."),
    ]


def test_errors_come_in_field_order_with_human_messages():
    errors = validate_answer(RELEASE, {"confirm": "yes", "version": "1.2", "channel": "beta"})
    assert [e.to_json() for e in errors] == [
        {"field": "channel", "message": "Choose one of: canary, stable."},
        {"field": "version", "message": "Use at least 5 characters."},
        {"field": "confirm", "message": "Choose yes or no."},
    ]


@pytest.mark.parametrize(
    "schema, value, message",
    [
        ({"type": "string"}, 5, "Enter text."),
        ({"type": "integer"}, "3", "Enter a whole number."),
        ({"type": "integer"}, 2.5, "Enter a whole number."),
        ({"type": "integer"}, True, "Enter a whole number."),
        ({"type": "number"}, "x", "Enter a number."),
        ({"type": "number"}, float("nan"), "Enter a number."),
        ({"type": "number", "multipleOf": 0.5}, float("inf"), "Enter a number."),
        ({"type": "boolean"}, "yes", "Choose yes or no."),
        ({"type": "boolean"}, 1, "Choose yes or no."),
        ({"type": "string", "minLength": 1}, "", "Enter an answer."),
        ({"type": "string", "minLength": 5}, "abc", "Use at least 5 characters."),
        ({"type": "string", "maxLength": 1}, "ab", "Use at most 1 character."),
        ({"type": "string", "maxLength": 40}, "x" * 41, "Use at most 40 characters."),
        ({"type": "string", "pattern": "^[0-9]{6}$"}, "12345", "Enter the 6-digit code."),
        ({"enum": ["canary", "stable"]}, "beta", "Choose one of: canary, stable."),
        ({"type": "integer", "minimum": 1}, 0, "Enter a whole number of at least 1."),
        ({"type": "integer", "maximum": 10}, 11, "Enter a whole number of at most 10."),
        ({"type": "number", "minimum": 1.5}, 1, "Enter a number of at least 1.5."),
        ({"type": "number", "exclusiveMinimum": 0}, 0, "Enter a number greater than 0."),
        ({"type": "number", "exclusiveMaximum": 1}, 1, "Enter a number less than 1."),
        ({"type": "integer", "multipleOf": 5}, 7, "Enter a multiple of 5."),
        ({"type": "number", "maximum": 2.0}, 3, "Enter a number of at most 2."),
        ({"type": "string", "format": "date"}, "2026-02-30", "Enter a date like 2026-01-31."),
        ({"type": "string", "format": "email"}, "nope", "Enter an email address like name@example.com."),
    ],
)
def test_primitive_root_errors_have_the_empty_field_name(schema, value, message):
    check_schema(schema)
    assert validate_answer(schema, value) == [FieldError("", message)]


def test_a_wrong_type_gives_one_message_per_field():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "multipleOf": 2}}}
    assert validate_answer(schema, {"n": "x"}) == [FieldError("n", "Enter a whole number.")]


def test_a_non_object_answer_to_a_form():
    assert validate_answer(RELEASE, "stable") == [FieldError("", "Fill in the form's fields.")]
    assert validate_answer(RELEASE, None) == [FieldError("", "Fill in the form's fields.")]


def test_approval_messages():
    assert validate_answer(APPROVAL_SCHEMA, "sure") == [
        FieldError("", "Answer approve or reject (a reason may follow).")
    ]
    assert validate_answer(APPROVAL_SCHEMA, {}) == [FieldError("decision", "Choose an answer.")]
    assert validate_answer(APPROVAL_SCHEMA, {"decision": "maybe", "why": "x"}) == [
        FieldError("decision", "Choose one of: approve, reject."),
        FieldError("why", "This form has no such field."),
    ]
    assert validate_answer(APPROVAL_SCHEMA, {"decision": "approve", "reason": "x" * 2001}) == [
        FieldError("reason", "Use at most 2000 characters.")
    ]


def test_messages_never_quote_the_answer():
    secret = "hunter2-very-secret"
    schemas = [
        {"type": "string", "pattern": "^[0-9]+$", "writeOnly": True},
        {"type": "string", "maxLength": 3},
        {"type": "string", "format": "email"},
        {"type": "integer"},
        {"enum": ["a"]},
    ]
    for schema in schemas:
        errors = validate_answer(schema, secret)
        assert errors
        assert all(secret not in e.message for e in errors)


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    "fmt, good, bad",
    [
        ("date", ["2026-01-02", "2024-02-29"], ["2026-02-30", "2026-1-2", "20260102", "2026-13-01", "tomorrow", "2023-02-29"]),
        ("time", ["14:30", "00:00", "23:59:59", "14:30:00Z", "14:30:00.5+02:00"], ["24:00", "14:60", "1:00", "2pm", "14:30:00+25:00", "noon"]),
        ("date-time", ["2026-01-02T14:30:00Z", "2026-01-02T14:30:00+02:00", "2026-01-02T14:30:00.123Z"],
         ["2026-01-02T14:30:00", "2026-01-02", "2026-02-30T00:00:00Z", "2026-01-02 14:30", "yesterday"]),
        ("email", ["ada@example.org", "a.b+c@sub.example.co.uk", "ü@exämple.de"],
         ["nope", "a@b", "@example.org", "a b@example.org", "a@@example.org", "a@example..org", "a@-example.org", "a@example.123", ".a@example.org"]),
        ("uri", ["https://example.com", "https://example.com/a?b=c#d", "mailto:ada@example.org", "urn:isbn:0451450523", "ftp://files.example.com/x"],
         ["example.com", "/relative/path", "https://", "http:///nohost", "javascript:alert(1)", "data:text/html,x", "http://ex ample.com", ""]),
    ],
)
def test_every_format_is_really_enforced(fmt, good, bad):
    schema = {"type": "string", "format": fmt}
    for value in good:
        assert validate_answer(schema, value) == [], value
    for value in bad:
        errors = validate_answer(schema, value)
        assert len(errors) == 1 and errors[0].message.startswith("Enter a"), value


def test_format_checkers_come_from_the_optional_libraries():
    # Without the format-nongpl extra jsonschema would pass these silently.
    assert set(FORMAT_CHECKER.checkers) >= {"date", "time", "date-time", "email", "uri"}
    assert not FORMAT_CHECKER.conforms("2026-01-02T14:30:00", "date-time")
    assert not FORMAT_CHECKER.conforms("not a uri", "uri")
    assert not FORMAT_CHECKER.conforms("25:00:00Z", "time")


def test_password_format_is_masking_not_checking():
    assert validate_answer({"type": "string", "format": "password"}, "anything at all") == []


def test_format_messages_per_format():
    assert validate_answer({"type": "string", "format": "time"}, "x") == [FieldError("", "Enter a time like 14:30.")]
    assert "with a zone" in validate_answer({"type": "string", "format": "date-time"}, "x")[0].message
    assert validate_answer({"type": "string", "format": "uri"}, "x")[0].message.startswith("Enter a web address")


# --------------------------------------------------------------------------- arrays


def test_date_range_must_be_two_ordered_dates():
    schema = {"type": "object", "properties": {"period": DATE_RANGE}, "required": ["period"]}
    assert validate_answer(schema, {"period": ["2026-01-02", "2026-01-05"]}) == []
    assert validate_answer(schema, {"period": ["2026-01-02", "2026-01-02"]}) == []
    assert validate_answer(schema, {"period": ["2026-01-05", "2026-01-02"]}) == [
        FieldError("period", "Put the start date on or before the end date.")
    ]
    assert validate_answer(schema, {"period": ["2026-01-05"]}) == [FieldError("period", "Enter two dates: a start and an end.")]
    assert validate_answer(schema, {"period": ["2026-01-01", "2026-01-02", "2026-01-03"]}) == [
        FieldError("period", "Enter two dates: a start and an end.")
    ]
    assert validate_answer(schema, {"period": "2026-01-02"}) == [FieldError("period", "Enter two dates: a start and an end.")]
    assert validate_answer(schema, {"period": ["2026-01-02", "soon"]}) == [
        FieldError("period.1", "Enter a date like 2026-01-31.")
    ]
    assert validate_answer(schema, {"period": ["2026-01-02", 5]}) == [FieldError("period.1", "Enter text.")]


def test_multi_select_errors_name_the_item_by_index():
    schema = {"type": "object", "properties": {"colours": {**MULTI, "minItems": 1, "maxItems": 2}}}
    assert validate_answer(schema, {"colours": ["red"]}) == []
    assert validate_answer(schema, {"colours": []}) == [FieldError("colours", "Choose at least one.")]
    assert validate_answer(schema, {"colours": ["red", "green", "blue"]}) == [FieldError("colours", "Choose at most 2.")]
    assert validate_answer(schema, {"colours": ["red", "red"]}) == [FieldError("colours", "Choose each option only once.")]
    assert validate_answer(schema, {"colours": ["red", "pink"]}) == [FieldError("colours.1", "Choose one of: red, green, blue.")]
    assert validate_answer(schema, {"colours": "red"}) == [FieldError("colours", "Choose from the list.")]


def test_min_items_above_one():
    schema = {"type": "object", "properties": {"c": {**MULTI, "minItems": 2}}}
    assert validate_answer(schema, {"c": ["red"]}) == [FieldError("c", "Choose at least 2.")]


def test_additional_properties_absent_follows_json_schema():
    assert validate_answer(RELEASE, {"channel": "stable", "version": "1.2.3", "confirm": True, "extra": 1}) == []


def test_validate_survives_hostile_values():
    deep: list = []
    node = deep
    for _ in range(5000):
        node.append([])
        node = node[0]
    assert validate_answer({"type": "string"}, deep)
    assert validate_answer(RELEASE, {1: "a", "channel": "stable", "version": "12345", "confirm": True}) == []
    many = {"type": "object", "properties": {"c": MULTI}}
    # CPU time of this process, not wall time: a quadratic check of 20,000 items costs minutes of
    # CPU whatever else the machine is doing, while other processes' load does not count here.
    started = time.process_time()
    errors = validate_answer(many, {"c": ["pink"] * 20000})
    assert time.process_time() - started < 5
    assert errors[0] == FieldError("c", "Choose each option only once.")


# --------------------------------------------------------------------------- fields and describe_field


def test_fields_of_an_object_schema_follow_property_order():
    specs = fields(EVERYTHING)
    assert [s.name for s in specs] == list(EVERYTHING["properties"])
    by_name = {s.name: s for s in specs}
    assert {name: s.widget for name, s in by_name.items()} == {
        "name": "text", "notes": "textarea", "otp": "password", "secret": "password", "count": "integer",
        "ratio": "number", "ok": "boolean", "size": "enum", "colours": "multi_enum", "period": "date_range",
        "day": "date", "at": "time", "when": "date-time", "mail": "email", "site": "uri",
    }
    name = by_name["name"]
    assert (name.title, name.description, name.required, name.min_length, name.max_length) == ("Full name", "as on the ID", True, 2, 40)
    assert by_name["count"].required and by_name["count"].default == 3
    assert (by_name["count"].minimum, by_name["count"].maximum) == (1, 10)
    ratio = by_name["ratio"]
    assert (ratio.exclusive_minimum, ratio.exclusive_maximum, ratio.multiple_of) == (0, 1, 0.25)
    assert by_name["otp"].pattern == "^[0-9]{6}$"
    assert by_name["otp"].masked and by_name["secret"].masked
    assert not by_name["name"].masked
    assert by_name["size"].choices == ("S", "M", "L")
    assert by_name["colours"].choices == ("red", "green", "blue")
    assert (by_name["period"].min_items, by_name["period"].max_items) == (2, 2)
    assert by_name["notes"].title == "Notes"
    assert not by_name["notes"].required


def test_fields_of_a_primitive_root_is_one_unnamed_field():
    [spec] = fields({"type": "string", "pattern": "^[0-9]{6}$", "title": "Code"})
    assert (spec.name, spec.title, spec.widget, spec.required) == ("", "Code", "text", True)
    [spec] = fields({"type": "string"})
    assert (spec.title, spec.widget) == ("Answer", "textarea")
    [spec] = fields({"type": "boolean"})
    assert spec.widget == "boolean"


def test_fields_without_schema_is_a_free_text_area():
    assert fields(None) == [FieldSpec(name="", title="Answer", description="", widget="textarea", required=True)]
    assert fields(None, sensitive=True)[0].masked


def test_sensitive_masks_every_typed_field_but_not_choices():
    specs = {s.name: s for s in fields(EVERYTHING, sensitive=True)}
    for name in ("name", "notes", "otp", "secret", "count", "ratio", "size", "day", "at", "when", "mail", "site"):
        assert specs[name].masked, name
    for name in ("ok", "colours", "period"):
        assert not specs[name].masked, name


def test_approval_fields():
    decision, reason = fields(APPROVAL_SCHEMA)
    assert (decision.widget, decision.choices, decision.required) == ("enum", ("approve", "reject"), True)
    assert (reason.widget, reason.max_length, reason.required) == ("textarea", 2000, False)


def test_field_spec_is_frozen_and_hashable():
    spec = fields(RELEASE)[0]
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    assert hash(spec) == hash(fields(RELEASE)[0])
    with_list_default = fields({"type": "object", "properties": {"c": {**MULTI, "default": ["red"]}}})[0]
    assert hash(with_list_default)


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "string", "minLength": 5, "maxLength": 40}, "text, 5–40 characters"),
        ({"type": "string", "minLength": 5}, "text, at least 5 characters"),
        ({"type": "string", "maxLength": 1}, "text, at most 1 character"),
        ({"type": "string", "minLength": 6, "maxLength": 6}, "text, exactly 6 characters"),
        ({"type": "string", "pattern": "^[0-9]{6}$"}, "a 6-digit code"),
        ({"type": "string"}, "text"),
        ({"type": "string", "format": "password", "minLength": 8}, "secret text, at least 8 characters"),
        ({"enum": ["canary", "stable"]}, "one of: canary, stable"),
        ({"type": "integer", "minimum": 1, "maximum": 10}, "integer from 1 to 10"),
        ({"type": "integer", "minimum": 1}, "integer, at least 1"),
        ({"type": "number", "maximum": 2.5}, "number, at most 2.5"),
        ({"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}, "number, greater than 0, a multiple of 0.5"),
        ({"type": "number", "exclusiveMaximum": 1.0}, "number, less than 1"),
        ({"type": "integer"}, "integer"),
        ({"type": "boolean"}, "yes or no"),
        ({"type": "string", "format": "date"}, "date (YYYY-MM-DD)"),
        ({"type": "string", "format": "time"}, "time (HH:MM)"),
        ({"type": "string", "format": "date-time"}, "date and time with a zone (e.g. 2026-01-02T14:30:00Z)"),
        ({"type": "string", "format": "email"}, "email address"),
        ({"type": "string", "format": "uri"}, "URL (e.g. https://example.com/page)"),
    ],
)
def test_describe_field(schema, words):
    assert describe_field(fields(schema)[0]) == words


@pytest.mark.parametrize(
    "array, words",
    [
        (DATE_RANGE, "date range: two dates (YYYY-MM-DD to YYYY-MM-DD)"),
        (MULTI, "choose any of: red, green, blue"),
        ({**MULTI, "minItems": 1}, "choose at least 1 of: red, green, blue"),
        ({**MULTI, "maxItems": 2}, "choose up to 2 of: red, green, blue"),
        ({**MULTI, "minItems": 1, "maxItems": 2}, "choose 1–2 of: red, green, blue"),
        ({**MULTI, "minItems": 2, "maxItems": 2}, "choose 2 of: red, green, blue"),
    ],
)
def test_describe_array_fields(array, words):
    assert describe_field(fields({"type": "object", "properties": {"a": array}})[0]) == words


# --------------------------------------------------------------------------- coercion


@pytest.mark.parametrize(
    "schema, text, expected",
    [
        (None, "  some free text \n", "some free text"),
        ({"type": "integer"}, "3", 3),
        ({"type": "integer"}, " -42 ", -42),
        ({"type": "integer"}, "+7", 7),
        ({"type": "integer"}, "3.0", 3),
        ({"type": "integer"}, "2.5", 2.5),
        ({"type": "integer"}, "three", "three"),
        ({"type": "integer"}, "9" * 5000, "9" * 5000),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "number"}, "3", 3),
        ({"type": "number"}, ".5", 0.5),
        ({"type": "number"}, "1e3", 1000.0),
        ({"type": "number"}, "1e999", "1e999"),
        ({"type": "number"}, "nan", "nan"),
        ({"type": "number"}, "inf", "inf"),
        ({"type": "number"}, "1,5", "1,5"),
        ({"type": "boolean"}, "yes", True),
        ({"type": "boolean"}, "Y", True),
        ({"type": "boolean"}, "TRUE", True),
        ({"type": "boolean"}, "1", True),
        ({"type": "boolean"}, "👍", True),
        ({"type": "boolean"}, "👍🏽", True),
        ({"type": "boolean"}, "👍️", True),
        ({"type": "boolean"}, "no", False),
        ({"type": "boolean"}, "N", False),
        ({"type": "boolean"}, "False", False),
        ({"type": "boolean"}, "0", False),
        ({"type": "boolean"}, "👎", False),
        ({"type": "boolean"}, "maybe", "maybe"),
        ({"enum": ["canary", "stable"]}, "Stable", "stable"),
        ({"enum": ["canary", "stable"]}, " CANARY ", "canary"),
        ({"enum": ["canary", "stable"]}, "beta", "beta"),
        ({"enum": ["Big Box", "small"]}, "big   box", "Big Box"),
        ({"enum": ["dry-run", "live"]}, "dry run", "dry-run"),
        ({"enum": ["A", "a"]}, "a", "a"),
        ({"enum": ["A", "a"]}, "A", "A"),
        ({"enum": ["Ab", "aB"]}, "ab", "ab"),
        ({"type": "string", "format": "date"}, "2026-01-02", "2026-01-02"),
        ({"type": "string", "format": "date"}, "2026-1-2", "2026-01-02"),
        ({"type": "string", "format": "date"}, "2026/01/02", "2026-01-02"),
        ({"type": "string", "format": "date"}, "2026-02-30", "2026-02-30"),
        ({"type": "string", "format": "date"}, "next friday", "next friday"),
        ({"type": "string", "format": "time"}, "9:05", "09:05"),
        ({"type": "string", "format": "time"}, "14:30:15", "14:30:15"),
        ({"type": "string", "format": "time"}, "2pm", "14:00"),
        ({"type": "string", "format": "time"}, "12:15 am", "00:15"),
        ({"type": "string", "format": "time"}, "12 p.m.", "12:00"),
        ({"type": "string", "format": "time"}, "13pm", "13pm"),
        ({"type": "string", "format": "date-time"}, "2026-01-02 14:30Z", "2026-01-02T14:30:00Z"),
        ({"type": "string", "format": "date-time"}, "2026-01-02T14:30:00+02:00", "2026-01-02T14:30:00+02:00"),
        ({"type": "string", "format": "date-time"}, "2026-01-02 14:30", "2026-01-02 14:30"),
        ({"type": "string", "format": "email"}, " ada@example.org ", "ada@example.org"),
        ({"type": "string", "format": "password"}, " pass word \n", " pass word "),
        ({"type": "string", "writeOnly": True}, "  x", "  x"),
        ({"type": "string"}, "  hello  ", "hello"),
    ],
)
def test_coerce_text_for_primitive_roots(schema, text, expected):
    result = coerce_text(schema, text)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("red, blue", ["red", "blue"]),
        ("Red;GREEN", ["red", "green"]),
        ("red\nblue", ["red", "blue"]),
        ("red, pink", ["red", "pink"]),
        ("red,,", ["red"]),
        ("", []),
    ],
)
def test_coerce_multi_select(text, expected):
    assert coerce_field(MULTI, text) == expected


def test_multi_select_choice_with_a_comma_matches_whole():
    assert coerce_field({"type": "array", "items": {"enum": ["Yes, please", "No"]}}, "yes, please") == ["Yes, please"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-01-02 to 2026-01-05", ["2026-01-02", "2026-01-05"]),
        ("2026-01-02..2026-01-05", ["2026-01-02", "2026-01-05"]),
        ("2026-01-02, 2026-01-05", ["2026-01-02", "2026-01-05"]),
        ("from 2026-01-02 until 2026-01-05", ["2026-01-02", "2026-01-05"]),
        ("2026-01-02 – 2026-01-05", ["2026-01-02", "2026-01-05"]),
        ("2026-01-02 - 2026-01-05", ["2026-01-02", "2026-01-05"]),
        ("2026-1-2 to 2026/1/5", ["2026-01-02", "2026-01-05"]),
        ("2026-01-02", ["2026-01-02"]),
        ("next week", "next week"),
        ("2026-01-02 or maybe 2026-01-05", "2026-01-02 or maybe 2026-01-05"),
    ],
)
def test_coerce_date_range(text, expected):
    assert coerce_field(DATE_RANGE, text) == expected


def test_coerced_chat_values_pass_validation():
    schema = {"type": "object", "properties": {"period": DATE_RANGE, "colours": MULTI}}
    value = {"period": coerce_field(DATE_RANGE, "2026-01-02 to 2026-01-05"), "colours": coerce_field(MULTI, "Red, blue")}
    assert validate_answer(schema, value) == []


def test_bad_chat_text_still_gets_the_validators_message():
    schema = {"type": "integer", "minimum": 1}
    assert validate_answer(schema, coerce_text(schema, "lots")) == [FieldError("", "Enter a whole number.")]
    assert validate_answer(schema, coerce_text(schema, "2.5")) == [FieldError("", "Enter a whole number.")]
    assert validate_answer(DATE_RANGE_FORM, coerce_text(DATE_RANGE_FORM, "period: soon")) == [
        FieldError("period", "Enter two dates: a start and an end.")
    ]


DATE_RANGE_FORM = {"type": "object", "properties": {"period": DATE_RANGE}}


def test_coerce_field_takes_a_field_spec():
    spec = fields(RELEASE)[0]
    assert coerce_field(spec, "CANARY") == "canary"
    assert coerce_field(fields(RELEASE)[2], "y") is True


@pytest.mark.parametrize(
    "text, expected",
    [
        ("approve", {"decision": "approve"}),
        ("Approved", {"decision": "approve"}),
        ("APPROVED!", {"decision": "approve"}),
        ("yes", {"decision": "approve"}),
        ("ok", {"decision": "approve"}),
        ("OK.", {"decision": "approve"}),
        ("okay", {"decision": "approve"}),
        ("lgtm", {"decision": "approve"}),
        ("👍", {"decision": "approve"}),
        ("👍🏻", {"decision": "approve"}),
        ("✅ ship it", {"decision": "approve", "reason": "ship it"}),
        ("reject", {"decision": "reject"}),
        ("Rejected", {"decision": "reject"}),
        ("no", {"decision": "reject"}),
        ("👎", {"decision": "reject"}),
        ("deny", {"decision": "reject"}),
        ("reject: tests are red", {"decision": "reject", "reason": "tests are red"}),
        ("Reject — breaks prod", {"decision": "reject", "reason": "breaks prod"}),
        ("approve because the canary is green", {"decision": "approve", "reason": "the canary is green"}),
        ("approve, thanks", {"decision": "approve", "reason": "thanks"}),
        ("👎 too risky\nsee the logs", {"decision": "reject", "reason": "too risky\nsee the logs"}),
        ("decision: approved\nreason: fine by me", {"decision": "approve", "reason": "fine by me"}),
        ("Decision: Reject", {"decision": "reject"}),
        ("maybe", "maybe"),
        ("nope", "nope"),
        ("okapi", "okapi"),
        ("approvement", "approvement"),
        ("", ""),
    ],
)
def test_coerce_approval(text, expected):
    assert coerce_text(APPROVAL_SCHEMA, text) == expected


def test_approval_coercion_results_validate():
    assert validate_answer(APPROVAL_SCHEMA, coerce_text(APPROVAL_SCHEMA, "reject: too risky")) == []
    assert validate_answer(APPROVAL_SCHEMA, coerce_text(APPROVAL_SCHEMA, "hmm")) == [
        FieldError("", "Answer approve or reject (a reason may follow).")
    ]


def test_coerce_text_of_an_object_schema_reads_field_lines():
    assert coerce_text(RELEASE, "channel: stable\nversion: 1.2.3\nconfirm: yes") == {
        "channel": "stable", "version": "1.2.3", "confirm": True
    }


@pytest.mark.parametrize("bad", [None, 5, b"bytes", ["list"]])
def test_coercion_never_raises_on_non_text(bad):
    assert coerce_text({"type": "integer"}, bad) is bad
    assert coerce_text(None, bad) is bad
    assert coerce_text(APPROVAL_SCHEMA, bad) is bad
    assert coerce_field(MULTI, bad) is bad


WEIRD_TEXT = {
    "control": "\x00\x01\x02",
    "invisible": "\u202e\u200b\ufeff",
    "math-digit": "𝟑",
    "emoji": "🙂" * 1000,
    "lone-surrogate": "\udcff",
    "huge": "x" * 1_000_000,
    "many-digits": "1" * 100_000,
    # Shapes that make a careless regex backtrack quadratically.
    "digits-then-letter": "1" * 100_000 + "x",
    "spaces-then-letter": " " * 100_000 + "x",
    "newlines": "\n" * 100_000,
    "decision-word-then-spaces": "decision" + " " * 100_000 + "x",
    "approve-then-spaces": "approve" + " " * 100_000 + "x",
    "bullets": "- " * 100_000,
    "long-key": ("k" * 79 + " ") * 1000 + ":",
    "dates": "2026-01-01 " * 10_000 + "x",
}


@pytest.mark.parametrize("text", list(WEIRD_TEXT.values()), ids=list(WEIRD_TEXT))
def test_coercion_never_raises_on_weird_text(text):
    started = time.monotonic()
    for schema in [None, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"enum": ["a"]},
                   {"type": "string", "format": "date"}, {"type": "string", "format": "time"},
                   {"type": "string", "format": "date-time"}, APPROVAL_SCHEMA, RELEASE]:
        result = coerce_text(schema, text)
        assert result is not None
        validate_answer(schema, result)
    for field_schema in (MULTI, DATE_RANGE):
        assert coerce_field(field_schema, text) is not None
    assert time.monotonic() - started < 3


def test_digits_of_other_scripts_are_numbers():
    # A human typing Arabic-Indic or full-width digits means the number.
    assert coerce_text({"type": "integer"}, "٣") == 3
    assert coerce_text({"type": "integer"}, "１２") == 12
    assert coerce_text({"type": "number"}, "٣.٥") == 3.5


# --------------------------------------------------------------------------- parse_field_lines


def test_field_lines_by_name_and_title_any_case_and_spacing():
    typed, errors = parse_field_lines(RELEASE, "CHANNEL: Stable\n  version :  1.2.3  \nConfirm the rollout: yes")
    assert errors == []
    assert typed == {"channel": "stable", "version": "1.2.3", "confirm": True}


@pytest.mark.parametrize(
    "line",
    ["confirm-the-rollout: yes", "confirm_the_rollout: yes", "ConfirmTheRollout: yes", "- confirm: yes", "* **Confirm**: yes", "• confirm: yes"],
)
def test_field_names_ignore_separators_bullets_and_emphasis(line):
    typed, errors = parse_field_lines(RELEASE, line)
    assert errors == []
    assert typed == {"confirm": True}


def test_unknown_fields_are_reported_by_name():
    typed, errors = parse_field_lines(RELEASE, "channel: canary\ncolour: red\nversion: 1.2.3")
    assert typed == {"channel": "canary", "version": "1.2.3"}
    assert errors == [FieldError("colour", "unknown field; the fields are: channel, version, confirm")]


def test_continuation_lines_join_the_previous_value():
    typed, errors = parse_field_lines(APPROVAL_SCHEMA, "decision: reject\nreason: the canary\nis failing\n\nsee https://ci.example.com/1")
    assert errors == []
    assert typed == {"decision": "reject", "reason": "the canary\nis failing\n\nsee https://ci.example.com/1"}


def test_values_keep_colons_and_urls():
    schema = {"type": "object", "properties": {"site": {"type": "string", "format": "uri"}, "at": {"type": "string", "format": "time"}}}
    typed, errors = parse_field_lines(schema, "site: https://example.com:8443/x\nat: 14:30")
    assert errors == []
    assert typed == {"site": "https://example.com:8443/x", "at": "14:30"}


def test_a_line_before_any_field_is_an_error():
    typed, errors = parse_field_lines(RELEASE, "Here you go\nchannel: canary")
    assert typed == {"channel": "canary"}
    assert errors == [FieldError("", "line 1 is not a 'field: value' line")]


def test_a_field_given_twice_keeps_the_first_and_says_so():
    typed, errors = parse_field_lines(RELEASE, "channel: canary\nchannel: stable")
    assert typed == {"channel": "canary"}
    assert errors == [FieldError("channel", "is given more than once; the first value counts")]


def test_an_empty_value_is_not_given():
    typed, errors = parse_field_lines(RELEASE, "channel:\nversion: 1.2.3")
    assert errors == []
    assert typed == {"version": "1.2.3"}
    assert FieldError("channel", "Choose an answer.") in validate_answer(RELEASE, typed)


def test_values_are_coerced_per_field():
    text = "\n".join([
        "name: Ada", "count: 4", "ratio: .75", "ok: no", "size: m", "colours: red, Blue",
        "period: 2026-01-02 to 2026-01-09", "day: 2026/3/4", "at: 9:15", "when: 2026-01-02 10:00Z",
    ])
    typed, errors = parse_field_lines(EVERYTHING, text)
    assert errors == []
    assert typed == {
        "name": "Ada", "count": 4, "ratio": 0.75, "ok": False, "size": "M", "colours": ["red", "blue"],
        "period": ["2026-01-02", "2026-01-09"], "day": "2026-03-04", "at": "09:15", "when": "2026-01-02T10:00:00Z",
    }
    assert validate_answer(EVERYTHING, typed) == []


def test_a_one_field_form_takes_a_bare_value():
    schema = {"type": "object", "properties": {"code": {"type": "integer"}}}
    assert parse_field_lines(schema, "123") == ({"code": 123}, [])
    assert parse_field_lines(schema, "code: 7") == ({"code": 7}, [])


def test_title_that_collides_with_another_name_loses_to_the_name():
    schema = {"type": "object", "properties": {"a": {"type": "string", "title": "b"}, "b": {"type": "string"}}}
    assert parse_field_lines(schema, "b: x") == ({"b": "x"}, [])


def test_field_lines_need_an_object_schema_and_text():
    assert parse_field_lines({"type": "string"}, "a: b")[1][0].field == ""
    assert parse_field_lines(RELEASE, None) == ({}, [FieldError("", "expected field: value lines")])


def test_field_lines_on_huge_and_weird_input():
    started = time.monotonic()
    typed, errors = parse_field_lines(RELEASE, "nonsense line\n" * 100_000 + "channel: stable")
    assert time.monotonic() - started < 5
    assert typed == {"channel": "stable"}
    assert len(errors) == 10  # reading errors are capped, not one per line
    typed, errors = parse_field_lines(RELEASE, "a" * 1_000_000)
    assert typed == {} and len(errors) == 1
    # Invisible characters around a choice still pick the canonical spelling;
    # free text keeps them as typed.
    typed, errors = parse_field_lines(RELEASE, "channel: \u202estable\x00\nversion: \u202e12345\x00")
    assert typed == {"channel": "stable", "version": "\u202e12345\x00"}
    # A NUL is no text on either store (issue 11): refused, naming the field, never echoed.
    assert validate_answer(RELEASE, {**typed, "confirm": True}) == [
        FieldError("version", "Remove the invisible control characters; only line breaks and tabs may stay.")]
    assert parse_field_lines(RELEASE, "channel: st\u200bable!")[0] == {"channel": "stable"}
    assert parse_field_lines(RELEASE, "channel: stab")[0] == {"channel": "stab"}
    assert parse_field_lines(RELEASE, "") == ({}, [])
    assert parse_field_lines(RELEASE, "🙂: 🙂") == ({}, [FieldError("", "line 1 is not a 'field: value' line")])


def test_field_error_json():
    assert FieldError("a", "is required").to_json() == {"field": "a", "message": "is required"}

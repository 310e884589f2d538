"""An invalid_schema refusal says where each problem is (``details.fields``), all of them at once, bounded.

An agent (often a model) fixing its own schema needs the place of every problem, not one per round trip:
each entry names the place as the API names body fields (``schema.properties.code.pattern``), with a
sentence that quotes nothing long from the schema.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest
from conftest import AGENT_KEY, Api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handraise.core.errors import InvalidSchemaError
from handraise.core.schema import MAX_SCHEMA_BYTES, check_schema
from handraise.core.schema.subset import MAX_PROBLEMS


def refusal(schema: Any, **kwargs: Any) -> InvalidSchemaError:
    with pytest.raises(InvalidSchemaError) as info:
        check_schema(schema, **kwargs)
    return info.value


def fields_of(schema: Any, **kwargs: Any) -> list[str]:
    return [f["field"] for f in refusal(schema, **kwargs).fields]


def form(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


TEXT = {"type": "string"}


# --------------------------------------------------------------------------- each kind of refusal, where it is


@pytest.mark.parametrize(("schema", "where", "words"), [
    # Keywords the subset does not take, remote and local $ref among them.
    ({"type": "string", "if": {}}, "schema.if", "keyword 'if' is not supported"),
    (form(x={"type": "string", "$ref": "https://example.com/s.json"}), "schema.properties.x.$ref", "keyword '$ref'"),
    (form(x={"type": "string", "$ref": "#/$defs/y"}), "schema.properties.x.$ref", "keyword '$ref'"),
    ({"type": "string", "$defs": {}}, "schema.$defs", "keyword '$defs'"),
    (form(d={"type": "array", "items": {"enum": ["a"]}, "contains": {}}), "schema.properties.d.contains",
     "keyword 'contains'"),
    # Patterns: RE2's missing constructs, too costly, not compiling.
    (form(code={"type": "string", "pattern": "^(?=a)"}), "schema.properties.code.pattern", "lookahead"),
    (form(code={"type": "string", "pattern": "(?:.{0,300}a){3}c"}), "schema.properties.code.pattern",
     "too complex"),
    ({"type": "string", "pattern": "("}, "schema.pattern", "does not compile"),
    # Limits.
    ({"type": "string", "description": "x" * MAX_SCHEMA_BYTES}, "schema", "bytes; at most"),
    (form(**{f"f{i}": TEXT for i in range(21)}), "schema.properties", "21 fields; at most 20"),
    # Types, formats, values.
    (form(a={"type": "null"}), "schema.properties.a.type", "type 'null' is not supported"),
    (form(a={"type": ["string", "null"]}), "schema.properties.a.type", "a list of types"),
    (form(a={"type": "object", "properties": {}}), "schema.properties.a", "nested objects"),
    (form(a=True), "schema.properties.a", "must be a JSON object schema"),
    (form(a={"title": "A"}), "schema.properties.a", "keyword 'type' is required"),
    ({"type": "string", "format": "ipv4"}, "schema.format", "format 'ipv4'"),
    ({"enum": ["a", 1]}, "schema.enum.1", "non-string enums"),
    ({"enum": ["a", " "]}, "schema.enum.1", "must not be empty"),
    ({"type": "integer", "enum": [1]}, "schema.enum", "non-string enums"),
    ({"type": "string", "oneOf": [{"const": "a"}, {"const": ""}]}, "schema.oneOf.1.const", "non-empty string"),
    ({"type": "string", "oneOf": [{"const": "a", "pattern": "x"}]}, "schema.oneOf.0.pattern", "in a choice"),
    ({"type": "integer", "minimum": "1"}, "schema.minimum", "must be a number"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "schema.minLength", "greater than maxLength"),
    (form(n={"type": "integer", "default": "x"}), "schema.properties.n.default", "default does not fit"),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"}, "schema.$schema", "draft 2020-12"),
    ({"$schema": {"draft": 7}, "type": "string"}, "schema.$schema", "draft 2020-12"),  # was a 500: unhashable
    # Object shape.
    ({**form(a=TEXT), "required": ["b"]}, "schema.required.0", "'b', which is not a property"),
    ({**form(a=TEXT), "additionalProperties": True}, "schema.additionalProperties", "false or absent"),
    ({"type": "object"}, "schema.properties", "needs 'properties'"),
    (form(**{"a:b": TEXT}), "schema.properties", "must not contain ':'"),
    (form(d={"type": "array", "items": {"type": "string"}}), "schema.properties.d.items", "multi-select"),
    (form(d={"type": "array", "items": {"enum": ["a"], "format": "date"}}), "schema.properties.d.items.format",
     "keyword 'format'"),
    # Values with no canonical JSON form, or not text.
    (form(n={"type": "integer", "maximum": 2**53}), "schema.properties.n.maximum", "too large to be exact"),
    (form(a={"type": "string", "title": "a\x00b"}), "schema.properties.a.title", "control characters"),
    ({"type": "string", "examples": ["\ud800"]}, "schema.examples.0", "not valid Unicode"),
    # Kinds.
    ({"type": "string"}, "schema", "kind 'approval' has a fixed schema"),
])
def test_each_refusal_names_where_the_problem_is(schema: Any, where: str, words: str) -> None:
    kind = "approval" if words.startswith("kind 'approval'") else "input"
    error = refusal(schema, kind=kind)
    assert error.code == "invalid_schema"
    assert [f["field"] for f in error.fields] == [where], error.fields
    assert words in error.fields[0]["message"]
    # The message says the same, the place first: a reader of the message alone learns where.
    assert error.message.startswith(f"{where}: {error.fields[0]['message']}")


def test_an_unknown_kind_names_the_kind_field() -> None:
    assert fields_of({"type": "string"}, kind="poll") == ["kind"]


def test_a_choice_with_a_broken_enum_gets_both_problems_never_a_500() -> None:
    assert fields_of({"enum": 5}, kind="choice") == ["schema.enum", "schema"]
    assert fields_of({"type": "integer", "minimum": "x"}, kind="choice") == ["schema.minimum", "schema"]


def test_every_problem_is_listed_at_once_in_the_schemas_order() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "(a)\\1", "format": "ipv4"},
            "n": {"type": "integer", "minimum": "one", "frobnicate": True},
            "remote": {"$ref": "https://example.com/schema.json"},
            "fine": {"type": "string"},
        },
        "required": ["code", "missing"],
    }
    error = refusal(schema)
    assert [f["field"] for f in error.fields] == [
        "schema.$schema",
        "schema.properties.code.pattern",
        "schema.properties.code.format",
        "schema.properties.n.frobnicate",
        "schema.properties.n.minimum",
        "schema.properties.remote",
        "schema.properties.remote.$ref",
        "schema.required.1",
    ]
    assert error.message.startswith("schema.$schema: $schema ")
    assert error.message.endswith("(and 7 more problems: each in details.fields)")


def test_a_default_is_not_checked_against_a_field_that_is_itself_refused() -> None:
    # minimum "1" cannot be compared with a number: checking the default against it would be a 500.
    assert fields_of(form(n={"type": "integer", "minimum": "1", "default": 5})) == ["schema.properties.n.minimum"]


def test_the_list_is_capped_and_the_message_counts_them_all() -> None:
    schema = form(**{f"f{i}": {"type": "string", "oneOf": [], "format": "ipv4"} for i in range(20)})
    error = refusal(schema)
    assert len(error.fields) == MAX_PROBLEMS
    assert error.fields[0] == {"field": "schema.properties.f0.oneOf",
                               "message": "must be a non-empty list of {const, title} choices"}
    assert error.message.endswith(f"(and 39 more problems: details.fields lists the first {MAX_PROBLEMS})")


def test_echoed_values_are_cut_short() -> None:
    long = "k" * 3000
    schema = {"type": "object", "properties": {
        "a": {"type": "string", long: 1},
        "b": {"type": long},
        "c": {"type": "string", "format": long},
        "d": {"type": "string", "pattern": "(" + "p" * 3000},
    }, "required": [long]}
    error = refusal(schema, max_bytes=100_000)  # past the size limit, only to see what each message quotes
    assert len(error.fields) == 5
    for entry in error.fields:
        assert len(entry["field"]) <= 130 and len(entry["message"]) <= 300, entry
        assert "k" * 200 not in entry["message"] and "p" * 200 not in entry["message"]
    assert error.fields[0]["field"] == "schema.properties.a." + "k" * 99 + "…"


def test_a_keyword_with_control_characters_is_named_escaped() -> None:
    assert fields_of({"type": "string", "x\x1b[31m": 1}) == ["schema.x\\u001b[31m"]


def test_the_body_field_holding_the_schema_names_the_places() -> None:
    assert fields_of({"type": "string", "if": {}}, name="proposal_schema") == ["proposal_schema.if"]


# Any keyword of the subset (and a few outside it) with any JSON value, nested: shapes a walk that goes on
# past the first problem meets values no earlier check has vetted.
_KEYWORDS = st.sampled_from(["type", "enum", "oneOf", "anyOf", "const", "minLength", "maxLength", "pattern",
                             "format", "minimum", "maximum", "multipleOf", "properties", "required", "items",
                             "minItems", "maxItems", "uniqueItems", "additionalProperties", "default", "title",
                             "examples", "writeOnly", "$schema", "$ref", "errorMessage", "a", "a:b"])
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.5, 2**60]),
                    st.sampled_from(["", " ", "a", "string", "integer", "number", "boolean", "object", "array",
                                     "date", "ipv4", "(", "(a)\\1", "^[0-9]+$", "\x00"]))
_SCHEMAS = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(_KEYWORDS, inner, max_size=5), max_leaves=30)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.dictionaries(_KEYWORDS, _SCHEMAS, max_size=6), kind=st.sampled_from(["input", "choice"]))
def test_any_schema_is_taken_or_refused_with_bounded_places(schema: dict, kind: str) -> None:
    try:
        check_schema(schema, kind=kind)
    except InvalidSchemaError as e:
        assert 1 <= len(e.fields) <= MAX_PROBLEMS
        assert all(f["field"] == "kind" or f["field"].startswith("schema") for f in e.fields)
        assert e.message.startswith(f"{e.fields[0]['field']}: ")


# --------------------------------------------------------------------------- over HTTP


def create(schema: Any) -> dict[str, Any]:
    return {"unique_id": f"se-{secrets.token_hex(6)}", "message_for_user": "Question?", "schema": schema}


async def test_a_422_invalid_schema_carries_details_fields(api: Api) -> None:
    schema = form(code={"type": "string", "pattern": "^(?=x)"}, when={"type": "string", "format": "ipv4"},
                  remote={"$ref": "https://example.com/x.json", "type": "string"})
    status, body = await api.call("POST", "/v1/requests", json=create(schema))
    assert status == 422 and body["error"] == "invalid_schema", body
    assert [f["field"] for f in body["details"]["fields"]] == [
        "schema.properties.code.pattern", "schema.properties.when.format", "schema.properties.remote.$ref"]
    assert body["message"].startswith("schema.properties.code.pattern: pattern uses a lookahead")
    # Nothing was created: the same unique_id with a fixed schema is a new request.
    fixed = create({"type": "string"})
    status, _ = await api.call("POST", "/v1/requests", json=fixed)
    assert status == 201


async def test_a_refused_proposal_schema_names_its_places(api: Api) -> None:
    body = {**create(None), "kind": "approval", "proposal": {"x": "a"},
            "proposal_schema": form(x={"type": "string", "pattern": "(a)\\1"}, y={"type": "string", "if": {}})}
    del body["schema"]
    status, data = await api.call("POST", "/v1/requests", json=body)
    assert status == 422, data
    assert [f["field"] for f in data["details"]["fields"]] == [
        "proposal_schema.properties.x.pattern", "proposal_schema.properties.y.if"]


def _many_problems() -> dict[str, Any]:
    """As many refused keywords as fit under the size limit: hundreds of problems."""
    schema: dict[str, Any] = {"type": "string"}
    index = 0
    while len(json.dumps(schema, separators=(",", ":"))) < MAX_SCHEMA_BYTES - 20:
        schema[f"k{index}"] = 0
        index += 1
    return schema


def _nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        node = {"type": "object", "properties": {"a": node}}
    return node


@pytest.mark.parametrize(("schema", "status", "listed"), [
    (_many_problems(), 422, MAX_PROBLEMS),
    ({"type": "object", "properties": {f"f{i}": TEXT for i in range(2000)}}, 422, 1),  # refused by its size
    ({"type": "string", "pattern": "(" * 4000}, 422, 1),
    ({"type": "string", "pattern": "(?:a{1000}){1000}" * 400}, 422, 1),
    (_nested(12), 422, 1),
    (_nested(40), 400, 0),  # past the JSON reader's depth: refused before any schema check
])
async def test_a_hostile_schema_gets_a_bounded_answer_fast(api: Api, schema: dict, status: int, listed: int) -> None:
    started = time.perf_counter()
    answer_status, body = await api.call("POST", "/v1/requests", json=create(schema), key=AGENT_KEY)
    assert time.perf_counter() - started < 5
    assert answer_status == status, body
    assert len(body.get("details", {}).get("fields", [])) == listed
    assert len(json.dumps(body)) < 8000

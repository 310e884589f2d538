"""A schema-aware fuzzer (Hypothesis) of create and submit against the real server: never a 5xx.

Schemas are drawn from the supported subset (and from just outside it: unknown
keywords, huge integers, control characters, lone surrogates, hostile patterns);
answers both from the schema (which must then be accepted) and from anywhere in JSON.
"""

from __future__ import annotations

import json
import secrets
import string
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import AGENT_KEY, OPERATOR_KEY, base_config, settings_from
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .served import served

BIG = 2**53
PATTERNS = ["^[0-9]{6}$", "^[a-z]+$", r"(\w+\s?)+$", "(a|aa)+$", "^([a-z0-9]+[-_.]?)+@example\\.com$", "(?=x)", "(a)\\1"]
NASTY_TEXT = st.sampled_from(["\x00", "\ud800", "\x1b[0m", "a\nb", "\t", "\u202e", "😀", "", " ", "\udfff\ud800"])
TEXT = st.one_of(st.text(max_size=20), NASTY_TEXT, st.text(alphabet=st.characters(codec=None), max_size=10))
NUMBER = st.one_of(st.integers(-BIG * 2, BIG * 2), st.floats(allow_nan=False, allow_infinity=False),
                   st.sampled_from([BIG, -BIG, BIG - 1, 10**30, 0.5, -0.0]))
JSON = st.recursive(st.none() | st.booleans() | NUMBER | TEXT,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                    max_leaves=12)
NAMES = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=8)
DATES = ["2026-01-01", "2026-12-31", "2025-02-28"]


def string_schema() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just("string")}, optional={
        "minLength": st.integers(0, 5), "maxLength": st.integers(5, 40), "pattern": st.sampled_from(PATTERNS),
        "format": st.sampled_from(["date", "time", "date-time", "email", "uri", "password"]),
        "title": TEXT, "writeOnly": st.booleans(),
    })


def number_schema() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.sampled_from(["integer", "number"])}, optional={
        "minimum": st.integers(-100, 0), "maximum": st.one_of(st.integers(1, 100), st.just(BIG)),
        "multipleOf": st.sampled_from([1, 0.5, 3]),
    })


FIELDS = st.one_of(
    string_schema(), number_schema(), st.just({"type": "boolean"}),
    st.builds(lambda choices: {"type": "string", "enum": choices}, st.lists(NAMES, min_size=1, max_size=4, unique=True)),
    st.builds(lambda choices: {"type": "array", "items": {"type": "string", "enum": choices}, "uniqueItems": True},
              st.lists(NAMES, min_size=1, max_size=4, unique=True)),
    st.just({"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2}),
)
OBJECTS = st.builds(
    lambda props, required, closed: {"type": "object", "properties": props,
                                     "required": [n for n in props if n in required],
                                     **({"additionalProperties": False} if closed else {})},
    st.dictionaries(NAMES, FIELDS, min_size=1, max_size=4), st.sets(NAMES), st.booleans())
SUBSET = st.one_of(string_schema(), number_schema(), st.just({"type": "boolean"}), OBJECTS)
# Just outside the subset, or not JSON Schema at all.
OUTSIDE = st.one_of(
    st.builds(lambda s, k, v: {**s, k: v}, SUBSET, st.sampled_from(["oneOf", "$ref", "default", "enum", "title"]),
              JSON),
    st.dictionaries(TEXT, JSON, max_size=4), JSON)


def answer_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Answers this schema accepts (strings with a pattern or format are left to the any-JSON case)."""
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "boolean":
        return st.booleans()
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
        step = schema.get("multipleOf", 1)
        return st.integers(int(low // step) + 1, int(high // step) - 1).map(lambda n: n * step) if high - low > 2 * step \
            else st.nothing()
    if kind == "string":
        if "pattern" in schema or "format" in schema:
            return st.nothing()
        return st.text(alphabet=string.ascii_letters, min_size=max(schema.get("minLength", 0), 1),
                       max_size=schema.get("maxLength", 40))
    if kind == "array":
        items = schema["items"]
        if "enum" in items:
            return st.lists(st.sampled_from(items["enum"]), min_size=1, unique=True)
        return st.just(sorted(DATES[:2]))
    if kind == "object":
        fields = {name: answer_for(sub) for name, sub in schema["properties"].items()}
        return st.fixed_dictionaries({n: s for n, s in fields.items() if n in schema.get("required", [])},
                                     optional={n: s for n, s in fields.items() if n not in schema.get("required", [])})
    return st.nothing()


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("fuzz") / "h.db"
    # Wrong answers on purpose, thousands of them: no attempt limit here (tests/core/test_attempts.py has it).
    config = base_config(f"sqlite:///{path}", limits={"max_failed_attempts": 1_000_000})
    with served(settings_from(config)) as url:
        yield url


@pytest.fixture(scope="module")
def http() -> Any:
    with requests.Session() as session:
        yield session


def _post(http: Any, url: str, key: str, body: Any) -> requests.Response:
    data = json.dumps(body, ensure_ascii=True).encode() if not isinstance(body, bytes) else body
    return http.post(url, data=data, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                     timeout=30)


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(schema=st.one_of(SUBSET, OUTSIDE), data=st.data())
def test_create_and_submit_never_fail_on_the_server(base_url: str, http: Any, schema: Any, data: Any) -> None:
    unique_id = f"fz-{secrets.token_hex(6)}"
    created = _post(http, f"{base_url}/v1/requests", AGENT_KEY,
                    {"unique_id": unique_id, "message_for_user": data.draw(TEXT.filter(str.strip) | st.just("Q?")),
                     "schema": schema})
    assert created.status_code in (201, 400, 422), created.text
    assert created.json()["error" if created.status_code >= 400 else "id"]
    if created.status_code != 201:
        return
    answers = [data.draw(JSON, label="any answer")]
    valid = data.draw(answer_for(created.json()["schema"] or {"type": "string"}) | st.just(None), label="valid")
    if valid is not None:
        answers.append(valid)
    for answer in answers:
        submitted = _post(http, f"{base_url}/api/human-feedback/submit", OPERATOR_KEY,
                          {"unique_id": unique_id, "response": answer})
        assert submitted.status_code in (200, 400, 409, 422), submitted.text
        if answer is valid and valid is not None and submitted.status_code != 409:
            assert submitted.status_code == 200, (schema, valid, submitted.text)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     JSON.map(lambda v: json.dumps(v).encode())))
def test_any_bytes_as_a_body_are_never_a_server_error(base_url: str, http: Any, raw: bytes) -> None:
    for path, key in (("/v1/requests", AGENT_KEY), ("/api/human-feedback/submit", OPERATOR_KEY)):
        response = _post(http, base_url + path, key, raw)
        assert response.status_code < 500, response.text
        assert response.json()["error"] in ("bad_request", "validation_error", "invalid_schema", "not_found",
                                             "invalid_answer")

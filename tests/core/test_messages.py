"""Every validation message a person reads, one by one, and labelled choices through every channel's parsing.

The sentences come from core/schema/messages.py; the API, the form and the chat connectors
all show them, so each is asserted here through validate_answer, as they reach people.
"""

from __future__ import annotations

import gettext

import pytest

from handraise.core.errors import InvalidSchemaError
from handraise.core.schema import check_schema, coerce_text, describe_field, fields, validate_answer
from handraise.core.schema.chat import parse_field_lines
from handraise.core.schema.messages import PRIORITY, problem


def one_message(schema: dict | None, value: object) -> str:
    errors = validate_answer(check_schema(schema) if schema is not None else None, value)
    assert len(errors) == 1, errors
    return errors[0].message


@pytest.mark.parametrize(("schema", "value", "message"), [
    # free text
    (None, "", "Enter an answer."),
    (None, 5, "Enter text."),
    # types
    ({"type": "string"}, 5, "Enter text."),
    ({"type": "integer"}, 2.5, "Enter a whole number."),
    ({"type": "integer"}, "seven", "Enter a whole number."),
    ({"type": "number"}, "x", "Enter a number."),
    ({"type": "number"}, float("nan"), "Enter a number."),
    ({"type": "boolean"}, "perhaps", "Choose yes or no."),
    # lengths
    ({"type": "string", "minLength": 1}, "", "Enter an answer."),
    ({"type": "string", "minLength": 3}, "ab", "Use at least 3 characters."),
    ({"type": "string", "maxLength": 1}, "ab", "Use at most 1 character."),
    ({"type": "string", "maxLength": 5}, "abcdef", "Use at most 5 characters."),
    # patterns: the field's errorMessage, a code's digits, the description, else generic
    ({"type": "string", "pattern": "^[A-Z]{2}$", "errorMessage": "Use a two-letter country code, like DE."},
     "Germany", "Use a two-letter country code, like DE."),
    ({"type": "string", "pattern": "^[0-9]{6}$"}, "12345", "Enter the 6-digit code."),
    ({"type": "string", "pattern": "^\\d{4}$", "description": "Ignored: a code says its digits"}, "1", "Enter the 4-digit code."),
    ({"type": "string", "pattern": "^[A-Z]{2}$", "description": "Two capital letters"}, "x",
     "This doesn't have the expected format: Two capital letters"),
    ({"type": "string", "pattern": "^[A-Z]{2}$"}, "x", "This doesn't have the expected format."),
    # bounds
    ({"type": "integer", "minimum": 1, "maximum": 40}, 0, "Enter a whole number from 1 to 40."),
    ({"type": "integer", "minimum": 1, "maximum": 40}, 41, "Enter a whole number from 1 to 40."),
    ({"type": "integer", "minimum": 1}, 0, "Enter a whole number of at least 1."),
    ({"type": "integer", "maximum": 10}, 11, "Enter a whole number of at most 10."),
    ({"type": "number", "minimum": 1.5}, 1, "Enter a number of at least 1.5."),
    ({"type": "number", "maximum": 2.0}, 3, "Enter a number of at most 2."),
    ({"type": "number", "minimum": 0.5, "maximum": 2}, 3, "Enter a number from 0.5 to 2."),
    ({"type": "number", "exclusiveMinimum": 0}, 0, "Enter a number greater than 0."),
    ({"type": "number", "exclusiveMaximum": 1}, 1, "Enter a number less than 1."),
    ({"type": "integer", "multipleOf": 5}, 7, "Enter a multiple of 5."),
    ({"type": "integer"}, 2**60, "Enter a number between -9007199254740991 and 9007199254740991."),
    # formats and dates
    ({"type": "string", "format": "date"}, "2026-02-30", "Enter a date like 2026-01-31."),
    ({"type": "string", "format": "time"}, "25:00", "Enter a time like 14:30."),
    ({"type": "string", "format": "date-time"}, "2026-01-02T14:30:00",
     "Enter a date and time with a zone, like 2026-01-31T14:30:00Z."),
    ({"type": "string", "format": "email"}, "ann@localhost", "Enter an email address like name@example.com."),
    ({"type": "string", "format": "uri"}, "example.com", "Enter a web address like https://example.com/page."),
    # choices
    ({"enum": ["canary", "stable"]}, "beta", "Choose one of: canary, stable."),
    ({"type": "string", "oneOf": [{"const": "ber", "title": "Berlin"}, {"const": "lis", "title": "Lisbon"}]},
     "Berlin", "Choose one of: Berlin, Lisbon."),
    # text that is not text
    ({"type": "string"}, "12\x0034", "Remove the invisible control characters; only line breaks and tabs may stay."),
])
def test_each_message_is_a_sentence_about_the_answer(schema: dict | None, value: object, message: str) -> None:
    said = one_message(schema, value)
    assert said == message
    assert said[0].isupper() and said.endswith((".", "s")), said
    # Never the schema: no regular expression, no keyword.
    for jargon in ("^", "$", "{", "pattern", "minLength", "enum", "schema"):
        assert jargon not in said, said


FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "size": {"type": "string", "enum": ["S", "L"]},
        "sure": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 2,
                 "maxItems": 2, "uniqueItems": True},
        "trip": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
    },
    "required": ["name", "size", "sure", "tags", "trip"],
    "additionalProperties": False,
}


def test_required_fields_say_what_to_do_for_their_kind() -> None:
    errors = {e.field: e.message for e in validate_answer(check_schema(FORM), {})}
    assert errors == {"name": "Enter an answer.", "size": "Choose an answer.", "sure": "Choose an answer.",
                      "tags": "Choose at least one.", "trip": "Enter a start date and an end date."}


@pytest.mark.parametrize(("tags", "message"), [
    (["a"], "Choose at least 2."),
    (["a", "b", "c"], "Choose at most 2."),
    (["a", "a"], "Choose each option only once."),
])
def test_multi_select_counts(tags: list[str], message: str) -> None:
    value = {"name": "x", "size": "S", "sure": True, "tags": tags, "trip": ["2026-01-01", "2026-01-02"]}
    assert [e.message for e in validate_answer(check_schema(FORM), value)] == [message]


def test_dates_of_a_range_are_ordered_and_unknown_fields_named() -> None:
    value = {"name": "x", "size": "S", "sure": True, "tags": ["a", "b"], "trip": ["2026-01-05", "2026-01-01"],
             "extra": 1}
    assert [(e.field, e.message) for e in validate_answer(check_schema(FORM), value)] == [
        ("trip", "Put the start date on or before the end date."), ("extra", "This form has no such field.")]
    value["trip"] = ["2026-01-05"]
    value.pop("extra")
    assert [e.message for e in validate_answer(check_schema(FORM), value)] == ["Enter two dates: a start and an end."]


def test_an_approval_says_approve_or_reject() -> None:
    assert one_message(None, 5) == "Enter text."
    assert [e.message for e in validate_answer(check_schema(None, kind="approval"), "yes")] == [
        "Answer approve or reject (a reason may follow)."]


def test_every_keyword_a_field_can_fail_has_a_rank_and_a_sentence() -> None:
    for keyword in PRIORITY:
        sentence = problem(keyword, {"type": "integer", "minimum": 1}, 1)
        assert sentence and sentence != problem("no such keyword"), keyword


def test_messages_go_through_the_catalogue() -> None:
    class Marked(gettext.NullTranslations):
        def gettext(self, message: str) -> str:
            return f"«{message}»"

    errors = validate_answer(check_schema({"type": "integer", "minimum": 1}), 0, t=Marked())
    assert errors[0].message == "«Enter a whole number of at least 1.»"
    # The API's answer stays English.
    assert validate_answer(check_schema({"type": "integer", "minimum": 1}), 0)[0].message.startswith("Enter")


# --------------------------------------------------------------------------- labelled choices

CITY = {"type": "string", "title": "Office",
        "oneOf": [{"const": "ber", "title": "Berlin"}, {"const": "lis", "title": "Lisbon"},
                  {"const": "home", "title": "From home"}]}
EXTRAS = {"type": "array", "uniqueItems": True,
          "items": {"type": "string", "anyOf": [{"const": "desk", "title": "A desk"},
                                                {"const": "mon", "title": "Second monitor"}]}}


def test_labelled_choices_are_in_the_subset_and_the_answer_holds_the_value() -> None:
    schema = check_schema({"type": "object", "properties": {"city": CITY, "extras": EXTRAS}, "required": ["city"]})
    assert validate_answer(schema, {"city": "lis", "extras": ["desk", "mon"]}) == []
    assert [e.message for e in validate_answer(schema, {"city": "Lisbon"})] == ["Choose one of: Berlin, Lisbon, From home."]
    assert [e.message for e in validate_answer(schema, {"city": "ber", "extras": ["A desk"]})] == [
        "Choose one of: A desk, Second monitor."]
    check_schema({"type": "string", "anyOf": [{"const": "a", "title": "A"}]}, kind="choice")
    # Bare labelled choices, as react-jsonschema-form writes them, are a string enum too.
    assert fields(check_schema({"oneOf": [{"const": "a", "title": "Alpha"}]}))[0].choice_titles == ("Alpha",)


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "string", "oneOf": []}, "must be a non-empty list"),
    ({"type": "string", "oneOf": [{"title": "No value"}]}, "const"),
    ({"type": "string", "oneOf": [{"const": 1, "title": "One"}]}, "non-empty string"),
    ({"type": "string", "oneOf": [{"const": "a"}, {"const": "a"}]}, "twice"),
    ({"type": "string", "oneOf": [{"const": "a", "title": 5}]}, "title must be a string"),
    ({"type": "string", "oneOf": [{"const": "a", "pattern": "x"}]}, "not supported in a choice"),
    ({"type": "string", "enum": ["a"], "oneOf": [{"const": "a"}]}, "give the choices once"),
    ({"type": "string", "oneOf": [{"const": "a"}], "anyOf": [{"const": "a"}]}, "give the choices once"),
    ({"type": "string", "errorMessage": ""}, "errorMessage must be a non-empty string"),
])
def test_malformed_labelled_choices_are_refused(schema: dict, why: str) -> None:
    with pytest.raises(InvalidSchemaError, match=why):
        check_schema(schema)


def test_chat_takes_the_label_or_the_value() -> None:
    schema = check_schema(CITY)
    for typed, value in (("Lisbon", "lis"), ("lisbon", "lis"), ("lis", "lis"), ("from home", "home"),
                         ("FROM-HOME", "home"), ("Paris", "Paris")):
        assert coerce_text(schema, typed) == value, typed
    form = check_schema({"type": "object", "properties": {"city": CITY, "extras": EXTRAS}})
    typed, errors = parse_field_lines(form, "Office: Berlin\nextras: A desk, second monitor")
    assert errors == [] and typed == {"city": "ber", "extras": ["desk", "mon"]}


def test_chat_cards_describe_labels_and_codes_never_a_regex() -> None:
    assert describe_field(fields(check_schema(CITY))[0]) == "one of: Berlin, Lisbon, From home"
    assert describe_field(fields(check_schema({"type": "object", "properties": {"x": EXTRAS}}))[0]) == (
        "choose any of: A desk, Second monitor")
    assert describe_field(fields(check_schema({"type": "string", "pattern": "^[0-9]{6}$"}))[0]) == "a 6-digit code"
    described = describe_field(fields(check_schema({"type": "string", "pattern": "^[A-Z]{2}$", "maxLength": 2}))[0])
    assert "^" not in described and "set format" in described

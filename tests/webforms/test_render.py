"""Unit tests of the form renderer: every field type drawn as accessible HTML, and posted form data read back."""

from __future__ import annotations

import re
from typing import Any

import pytest
from multidict import MultiDict

from handraise.core.schema import APPROVAL_SCHEMA, FieldError, check_schema, validate_answer
from handraise.webforms.pages import FormPage, Pages, time_left_text
from handraise.webforms.render import (
    CSRF_FIELD,
    OFFSET_PREFIX,
    RADIO_MAX,
    ROOT_NAME,
    field_views,
    form_specs,
    html_pattern,
    parse_form,
    split_errors,
)

from .html_tools import by_id, field_container, find, one, parse, visible_text, within

PAGES = Pages()


def render(schema: dict | None, *, kind: str = "input", sensitive: bool = False,
           posted: dict[str, list[str]] | None = None, errors: list[tuple[str, str]] = (),
           recipient: str | None = None, question: str = "What now?") -> str:
    effective = check_schema(schema, kind=kind)
    specs = form_specs(effective, sensitive=sensitive)
    by_field, general = split_errors(specs, [FieldError(f, m) for f, m in errors])
    views = field_views(specs, posted=posted, errors=by_field, keep_values=not sensitive,
                        approval=kind == "approval", schema=effective)
    return PAGES.form(FormPage(
        question=question, tenant_name="Acme Corp", asker_name="Deploy bot", recipient=recipient,
        seconds_left=299.2, expires_at=1_800_000_000, fields=views, general_errors=general, csrf="csrf-token-value",
        approval=kind == "approval", sensitive=sensitive))


def obj(**properties: Any) -> dict:
    required = [name for name, sub in properties.items() if sub.pop("_required", False)]
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def label_for(elements: list, control_id: str) -> str:
    return re.sub(r"\s+", " ", one(elements, "label", **{"for": control_id}).text).strip()


# --------------------------------------------------------------------------- the page


def test_page_shows_question_asker_time_left_and_csrf() -> None:
    html = render(None, recipient="Alice", question="Deploy <b>now</b>?\nSecond line")
    text = visible_text(html)
    assert "Acme Corp" in text and "Asked by Deploy bot for Alice" in text
    assert "agent" not in text
    assert by_id(html, "countdown").get("data-seconds-left") == "300"
    assert by_id(html, "countdown").text == "5 min 0 s"
    # Autoescaped: the question is text, never markup; its line break is kept.
    assert "Deploy &lt;b&gt;now&lt;/b&gt;?\nSecond line" in html
    assert not find(html, "b")
    assert one(html, "input", name=CSRF_FIELD).get("value") == "csrf-token-value"
    form = one(html, "form")
    assert form.get("method") == "post"


def test_page_has_no_inline_script_or_style_and_no_external_request() -> None:
    html = render(obj(a={"type": "string"}, b={"type": "string", "format": "date-time"}))
    elements = parse(html)
    scripts = find(elements, "script")
    assert scripts and all(s.get("src", "").startswith("/f/-/static/") and not s.text.strip() for s in scripts)
    assert not find(elements, "style")
    assert not any(e.has("style") or any(a.startswith("on") for a in e.attrs) for e in elements)
    urls = [e.get("src") or e.get("href") for e in elements if e.get("src") or e.get("href")]
    assert urls and all(u.startswith("/f/-/static/") for u in urls)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (0.2, "1 s"), (59, "59 s"), (60, "1 min 0 s"), (299.2, "5 min 0 s"),
    (3600, "1 h 0 min"), (3725, "1 h 2 min"), (86400 + 7200, "1 d 2 h"), (-5, "0 s"),
])
def test_time_left_text(seconds: float, text: str) -> None:
    assert time_left_text(seconds) == text


# --------------------------------------------------------------------------- each field type


def test_string_is_a_text_input_with_pattern_and_length() -> None:
    html = render(obj(code={"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$", "minLength": 8, "maxLength": 8,
                            "title": "Ticket", "description": "From the ticket's header", "_required": True}))
    elements = parse(html)
    control = one(elements, "input", name="code")
    assert control.get("type") == "text"
    assert control.has("required")
    assert control.get("minlength") == "8" and control.get("maxlength") == "8"
    assert control.get("pattern") == html_pattern("^[A-Z]{3}-[0-9]{4}$")
    # The label and its required mark; the description is help text the input points at.
    assert label_for(elements, control.get("id")) == "Ticket *"
    help_text = by_id(elements, f"{control.get('id')}-help")
    assert help_text.text == "From the ticket's header"
    assert f"{control.get('id')}-help" in control.get("aria-describedby").split()
    assert "Exactly 8 characters" in visible_text(html)


@pytest.mark.parametrize("pattern", ["^[0-9]{6}$", "^\\d{6}$", "^[0-9][0-9][0-9][0-9][0-9][0-9]$"])
def test_a_fixed_run_of_digits_is_a_one_time_code_input(pattern: str) -> None:
    html = render({"type": "string", "pattern": pattern, "title": "Code"})
    control = one(html, "input", name=ROOT_NAME)
    assert control.get("type") == "text"
    assert control.get("inputmode") == "numeric"
    assert control.get("autocomplete") == "one-time-code"
    assert control.get("size") == "8" and control.get("data-code-length") == "6"
    assert "code" in control.get("class").split()
    # Digits with spaces or dashes between them pass the browser's check; the server takes them out.
    allowed = re.compile(control.get("pattern"))
    assert allowed.fullmatch("123456") and allowed.fullmatch("123 456") and allowed.fullmatch("12-34-56")
    assert not allowed.fullmatch("12345") and not allowed.fullmatch("12345x")
    assert "6 digits" in visible_text(html)


@pytest.mark.parametrize("pattern", ["[0-9]{6}", "^[0-9]{6,8}$", "^[0-9]{3}$", "^[a-z]{6}$", "^[0-9]{6}x$"])
def test_other_patterns_are_not_codes(pattern: str) -> None:
    control = one(render({"type": "string", "pattern": pattern}), "input", name=ROOT_NAME)
    assert control.get("autocomplete") != "one-time-code" and not control.has("data-code-length")


def test_a_sensitive_code_is_masked_but_still_a_code() -> None:
    html = render({"type": "string", "pattern": "^[0-9]{6}$"}, sensitive=True, posted={ROOT_NAME: ["123456"]},
                  errors=[("", "is wrong")])
    control = one(html, "input", name=ROOT_NAME)
    assert control.get("type") == "password"
    assert control.get("inputmode") == "numeric" and control.get("autocomplete") == "one-time-code"
    assert control.get("value") is None and "123456" not in html


@pytest.mark.parametrize("typed", ["123456", "123 456", " 123-456 ", "12 34 56", "123\u2013456", "123.456"])
def test_a_pasted_code_loses_its_separators(typed: str) -> None:
    specs = form_specs({"type": "string", "pattern": "^[0-9]{6}$"}, sensitive=False)
    parsed = parse_form(specs, MultiDict([(ROOT_NAME, typed)]))
    assert parsed.value == "123456" and not parsed.errors
    assert validate_answer({"type": "string", "pattern": "^[0-9]{6}$"}, parsed.value) == []


def test_a_code_with_letters_is_left_for_the_validator() -> None:
    specs = form_specs({"type": "string", "pattern": "^[0-9]{6}$"}, sensitive=False)
    parsed = parse_form(specs, MultiDict([(ROOT_NAME, "12 34 5x")]))
    assert parsed.value == "12345x"
    assert validate_answer({"type": "string", "pattern": "^[0-9]{6}$"}, parsed.value)


@pytest.mark.parametrize(("sub", "shown"), [
    ({"type": "integer", "minimum": 1, "maximum": 40, "description": "Between 1 and 40"}, False),
    ({"type": "integer", "minimum": 1, "maximum": 40, "description": "How many guests"}, True),
    ({"type": "integer", "minimum": 1, "maximum": 40}, True),
    ({"type": "string", "maxLength": 20, "description": "Up to 20 letters"}, False),
])
def test_a_hint_the_description_already_gives_is_not_repeated(sub: dict, shown: bool) -> None:
    text = visible_text(render(obj(x=sub)))
    hint = "A whole number from 1 to 40" if sub["type"] == "integer" else "At most 20 characters"
    assert (hint in text) is shown


def test_html_pattern_keeps_json_schema_search_semantics() -> None:
    # JSON schema patterns search anywhere; HTML patterns must match the whole value.
    anywhere = re.compile(html_pattern("ab+c"))
    assert anywhere.fullmatch("xx abbc yy")
    assert not anywhere.fullmatch("ac")
    anchored = re.compile(html_pattern("^[0-9]{6}$"))
    assert anchored.fullmatch("123456") and not anchored.fullmatch("1234567")


def test_long_string_is_a_textarea() -> None:
    html = render(obj(notes={"type": "string", "maxLength": 1000}))
    area = one(html, "textarea", name="notes")
    assert area.get("maxlength") == "1000"
    assert not find(html, "input", name="notes")


@pytest.mark.parametrize("sub", [
    {"type": "string", "format": "password"},
    {"type": "string", "writeOnly": True},
])
def test_password_and_write_only_are_masked(sub: dict) -> None:
    control = one(render(obj(secret=sub)), "input", name="secret")
    assert control.get("type") == "password"
    assert control.get("autocomplete") == "off"


@pytest.mark.parametrize(("sub", "inputmode"), [
    ({"type": "string"}, None),
    ({"type": "string", "maxLength": 1000}, None),
    ({"type": "integer", "minimum": 0}, "numeric"),
    ({"type": "string", "format": "email"}, "email"),
    ({"type": "string", "format": "date"}, None),
])
def test_every_typed_field_of_a_sensitive_request_is_masked(sub: dict, inputmode: str | None) -> None:
    html = render(obj(value=sub), sensitive=True)
    control = one(html, "input", name="value")
    assert control.get("type") == "password"
    assert control.get("autocomplete") == "off"
    assert control.get("inputmode") == inputmode
    assert "Private answer." in visible_text(html)


def test_free_text_without_schema_is_a_textarea_named_answer() -> None:
    html = render(None)
    area = one(html, "textarea", name=ROOT_NAME)
    assert area.has("required")
    assert label_for(parse(html), area.get("id")) == "Answer *"


def test_free_text_of_a_sensitive_request_is_masked() -> None:
    control = one(render(None, sensitive=True), "input", name=ROOT_NAME)
    assert control.get("type") == "password" and control.get("autocomplete") == "off"


def test_integer_is_a_number_input_with_bounds() -> None:
    control = one(render(obj(count={"type": "integer", "minimum": 1, "maximum": 10})), "input", name="count")
    assert (control.get("type"), control.get("min"), control.get("max"), control.get("step")) == (
        "number", "1", "10", "1")


def test_integer_exclusive_bounds_become_inclusive_and_multiple_of_is_the_step() -> None:
    html = render(obj(n={"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100, "multipleOf": 5}))
    control = one(html, "input", name="n")
    assert (control.get("min"), control.get("max")) == ("1", "99")
    # min 1 is no multiple of 5: HTML would count steps from 1, so the server checks alone.
    assert control.get("step") == "1"
    control = one(render(obj(n={"type": "integer", "minimum": 0, "multipleOf": 5})), "input", name="n")
    assert control.get("step") == "5"


def test_number_is_a_number_input_with_any_step() -> None:
    control = one(render(obj(price={"type": "number", "minimum": 0.5})), "input", name="price")
    assert (control.get("type"), control.get("min"), control.get("step")) == ("number", "0.5", "any")
    assert "A number, at least 0.5" in visible_text(render(obj(price={"type": "number", "minimum": 0.5})))


def test_optional_boolean_is_a_checkbox() -> None:
    elements = parse(render(obj(agree={"type": "boolean", "title": "I agree"})))
    box = one(elements, "input", name="agree")
    assert box.get("type") == "checkbox" and box.get("value") == "true"
    assert label_for(elements, box.get("id")) == "I agree"


def test_required_boolean_is_yes_and_no_radios() -> None:
    elements = parse(render(obj(agree={"type": "boolean", "_required": True})))
    radios = find(elements, "input", name="agree")
    assert [(r.get("type"), r.get("value")) for r in radios] == [("radio", "true"), ("radio", "false")]
    assert all(r.has("required") for r in radios)
    assert [r.inside("label").text.strip() for r in radios] == ["Yes", "No"]
    assert radios[0].inside("fieldset") is not None


def test_short_enum_is_radio_buttons_in_a_fieldset() -> None:
    choices = [f"c{i}" for i in range(RADIO_MAX)]
    elements = parse(render(obj(pick={"type": "string", "enum": choices, "title": "Pick", "_required": True})))
    radios = find(elements, "input", name="pick")
    assert [r.get("value") for r in radios] == choices
    assert all(r.get("type") == "radio" and r.has("required") for r in radios)
    fieldset = radios[0].inside("fieldset")
    legend = within(elements, fieldset, "legend")[0]
    assert re.sub(r"\s+", " ", legend.text).strip() == "Pick *"


def test_long_enum_is_a_select() -> None:
    choices = [f"c{i}" for i in range(RADIO_MAX + 1)]
    elements = parse(render(obj(pick={"type": "string", "enum": choices})))
    select = one(elements, "select", name="pick")
    options = within(elements, select, "option")
    assert [o.get("value") for o in options] == ["", *choices]
    assert not find(elements, "input", name="pick")


def test_array_of_enum_is_checkboxes() -> None:
    html = render(obj(tags={"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]},
                            "minItems": 1, "maxItems": 2}))
    boxes = find(html, "input", name="tags")
    assert [(b.get("type"), b.get("value")) for b in boxes] == [("checkbox", "a"), ("checkbox", "b"),
                                                               ("checkbox", "c")]
    assert "Choose 1 to 2" in visible_text(html)


def test_date_range_is_two_date_inputs() -> None:
    elements = parse(render(obj(trip={"type": "array", "items": {"type": "string", "format": "date"},
                                      "minItems": 2, "maxItems": 2, "_required": True})))
    dates = find(elements, "input", name="trip")
    assert [d.get("type") for d in dates] == ["date", "date"]
    assert [label_for(elements, d.get("id")) for d in dates] == ["From", "To"]
    assert all(d.has("required") for d in dates)


@pytest.mark.parametrize(("fmt", "input_type"), [
    ("date", "date"), ("time", "time"), ("date-time", "datetime-local"), ("email", "email"), ("uri", "url"),
])
def test_formats_use_native_input_types(fmt: str, input_type: str) -> None:
    html = render(obj(value={"type": "string", "format": fmt}))
    assert one(html, "input", name="value").get("type") == input_type


def test_date_time_carries_a_hidden_zone_offset_and_says_utc_without_javascript() -> None:
    html = render(obj(when={"type": "string", "format": "date-time"}))
    hidden = one(html, "input", name=OFFSET_PREFIX + "when")
    assert hidden.get("type") == "hidden" and hidden.get("value") == ""
    assert hidden.get("data-offset-for") == one(html, "input", name="when").get("id")
    assert "Time in UTC" in visible_text(html)


def test_approval_is_approve_and_reject_buttons_with_an_optional_reason() -> None:
    elements = parse(render(None, kind="approval"))
    buttons = find(elements, "button", name="decision")
    assert [(b.get("type"), b.get("value"), b.text.strip()) for b in buttons] == [
        ("submit", "approve", "Approve"), ("submit", "reject", "Reject")]
    reason = one(elements, "textarea", name="reason")
    assert not reason.has("required")
    assert not find(elements, "button", **{"class": "primary"})
    assert not find(elements, "input", name="decision")


def test_primitive_schemas_post_as_answer() -> None:
    assert one(render({"type": "integer"}), "input", name=ROOT_NAME).get("type") == "number"
    radios = find(render({"type": "string", "enum": ["yes", "no"]}, kind="choice"), "input", name=ROOT_NAME)
    assert [r.get("value") for r in radios] == ["yes", "no"]
    radios = find(render({"type": "boolean"}, kind="choice"), "input", name=ROOT_NAME)
    assert [r.get("value") for r in radios] == ["true", "false"]


def test_field_names_are_property_names_whatever_they_hold() -> None:
    name = 'Full "name" <x> & ü'
    html = render(obj(**{name: {"type": "string"}}))
    assert one(html, "input", name=name).get("id") == "f0"


def test_untrusted_titles_descriptions_and_choices_are_escaped() -> None:
    html = render(obj(x={"type": "string", "enum": ["<script>alert(1)</script>", "b"],
                         "title": "<img src=x onerror=alert(1)>", "description": "<b>bold</b>"}))
    assert not find(html, "img") and not find(html, "b")
    assert len(find(html, "script")) == 1  # form.js only
    assert "&lt;script&gt;" in html


def test_defaults_are_prefilled_except_masked() -> None:
    html = render(obj(
        name={"type": "string", "default": "Ann"},
        n={"type": "integer", "default": 3},
        agree={"type": "boolean", "default": True},
        pick={"type": "string", "enum": ["a", "b"], "default": "b"},
        tags={"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "default": ["y"]},
        pin={"type": "string", "writeOnly": True, "default": "0000"},
    ))
    assert one(html, "input", name="name").get("value") == "Ann"
    assert one(html, "input", name="n").get("value") == "3"
    assert one(html, "input", name="agree").has("checked")
    assert [r.has("checked") for r in find(html, "input", name="pick")] == [False, True]
    assert [b.has("checked") for b in find(html, "input", name="tags")] == [False, True]
    assert one(html, "input", name="pin").get("value") is None
    assert "0000" not in html


# --------------------------------------------------------------------------- errors and re-rendering


def test_errors_sit_beside_their_field_with_aria_invalid() -> None:
    schema = obj(name={"type": "string", "_required": True}, age={"type": "integer"},
                 tags={"type": "array", "items": {"type": "string", "enum": ["a", "b"]}})
    html = render(schema, posted={"name": [""], "age": ["x"], "tags": ["a"]},
                  errors=[("name", "is required"), ("age", "must be a whole number"), ("tags.0", "must be one of")])
    elements = parse(html)
    age = one(elements, "input", name="age")
    assert age.get("aria-invalid") == "true"
    error = by_id(elements, f"{age.get('id')}-error")
    assert error.text == "must be a whole number"
    assert f"{age.get('id')}-error" in age.get("aria-describedby").split()
    # The error is inside the field's own container, next to its input.
    assert error.inside("div", data_field="age") is not None
    tags_error = within(elements, field_container(elements, "tags"), "p")
    assert any(p.text == "must be one of" for p in tags_error)
    assert all(b.get("aria-invalid") == "true" for b in find(elements, "input", name="tags"))
    # The first invalid field takes the focus; a summary links to each.
    assert one(elements, "input", name="name").has("autofocus") and not age.has("autofocus")
    summary = by_id(elements, "errors")
    assert summary.get("role") == "alert"
    links = [a.get("href") for a in within(elements, summary, "a")]
    assert links == ["#f0", "#f1", "#f2-0"]


def test_error_of_a_primitive_answer_sits_beside_it() -> None:
    html = render({"type": "integer", "minimum": 1}, posted={ROOT_NAME: ["0"]}, errors=[("", "must be at least 1")])
    control = one(html, "input", name=ROOT_NAME)
    assert control.get("aria-invalid") == "true"
    assert by_id(html, f"{control.get('id')}-error").text == "must be at least 1"
    assert control.get("value") == "0"


def test_re_render_keeps_values_but_never_a_masked_one() -> None:
    schema = obj(name={"type": "string"}, pin={"type": "string", "format": "password"},
                 note={"type": "string", "maxLength": 500}, pick={"type": "string", "enum": ["a", "b"]},
                 trip={"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
                 agree={"type": "boolean"})
    posted = {"name": ["Zoë <3"], "pin": ["s3cr3t-PIN"], "note": ["line 1\nline 2"], "pick": ["b"],
              "trip": ["2026-05-01", "2026-04-01"], "agree": ["true"]}
    html = render(schema, posted=posted, errors=[("trip", "the start date must not be after the end date")])
    assert one(html, "input", name="name").get("value") == "Zoë <3"
    assert one(html, "textarea", name="note").text == "line 1\nline 2"
    assert [r.has("checked") for r in find(html, "input", name="pick")] == [False, True]
    assert [d.get("value") for d in find(html, "input", name="trip")] == ["2026-05-01", "2026-04-01"]
    assert one(html, "input", name="agree").has("checked")
    assert one(html, "input", name="pin").get("value") is None
    assert "s3cr3t-PIN" not in html


def test_re_render_of_a_sensitive_request_echoes_nothing() -> None:
    schema = obj(code={"type": "string"}, pick={"type": "string", "enum": ["alpha", "beta"]},
                 tags={"type": "array", "items": {"type": "string", "enum": ["x1", "y1"]}})
    html = render(schema, sensitive=True, posted={"code": ["123456"], "pick": ["beta"], "tags": ["y1"]},
                  errors=[("code", "must match the pattern")])
    assert "123456" not in html
    assert not any(e.has("checked") for e in find(html, "input"))


def test_general_errors_are_listed_in_the_summary() -> None:
    html = render(obj(a={"type": "string"}), errors=[("zz", "is not a field of this form")])
    assert "zz: is not a field of this form" in visible_text(html)


# --------------------------------------------------------------------------- posted form → typed answer

EVERYTHING = obj(
    name={"type": "string", "maxLength": 40, "_required": True},
    notes={"type": "string", "maxLength": 1000},
    pin={"type": "string", "format": "password"},
    count={"type": "integer", "minimum": 0},
    price={"type": "number"},
    agree={"type": "boolean"},
    sure={"type": "boolean", "_required": True},
    size={"type": "string", "enum": ["S", "M", "L"]},
    country={"type": "string", "enum": ["de", "fr", "it", "es", "pt", "nl"]},
    tags={"type": "array", "items": {"type": "string", "enum": ["x", "y", "z"]}},
    trip={"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
    day={"type": "string", "format": "date"},
    at={"type": "string", "format": "time"},
    when={"type": "string", "format": "date-time"},
    email={"type": "string", "format": "email"},
    site={"type": "string", "format": "uri"},
)


def parse_posted(schema: dict | None, pairs: list[tuple[str, str]], *, kind: str = "input",
                 sensitive: bool = False) -> Any:
    effective = check_schema(schema, kind=kind)
    return parse_form(form_specs(effective, sensitive=sensitive), MultiDict(pairs), approval=kind == "approval")


def test_every_field_type_reads_back_as_the_typed_answer_the_api_takes() -> None:
    pairs = [
        (CSRF_FIELD, "t"), ("name", "  Ann  "), ("notes", "one\r\ntwo"), ("pin", " p4ss "), ("count", "7"),
        ("price", "2.50"), ("agree", "true"), ("sure", "false"), ("size", "M"), ("country", "fr"),
        ("tags", "x"), ("tags", "z"), ("trip", "2026-05-01"), ("trip", "2026-05-09"), ("day", "2026-01-02"),
        ("at", "14:30"), ("when", "2026-01-02T14:30"), (OFFSET_PREFIX + "when", "60"),
        ("email", "ann@example.com"), ("site", "https://example.com/x"), ("unknown", "ignored"),
    ]
    parsed = parse_posted(EVERYTHING, pairs)
    expected = {
        "name": "Ann", "notes": "one\ntwo", "pin": " p4ss ", "count": 7, "price": 2.5, "agree": True,
        "sure": False, "size": "M", "country": "fr", "tags": ["x", "z"], "trip": ["2026-05-01", "2026-05-09"],
        "day": "2026-01-02", "at": "14:30", "when": "2026-01-02T14:30:00+01:00", "email": "ann@example.com",
        "site": "https://example.com/x",
    }
    assert parsed.errors == []
    assert parsed.value == expected
    assert type(parsed.value["count"]) is int and type(parsed.value["price"]) is float
    assert validate_answer(check_schema(EVERYTHING), parsed.value) == []


def test_empty_optional_fields_are_absent_and_an_unticked_checkbox_is_false() -> None:
    parsed = parse_posted(EVERYTHING, [("name", "Ann"), ("sure", "true"), ("count", ""), ("trip", ""),
                                       ("trip", ""), ("when", ""), (OFFSET_PREFIX + "when", "60")])
    assert parsed.value == {"name": "Ann", "agree": False, "sure": True}
    assert validate_answer(check_schema(EVERYTHING), parsed.value) == []


def test_missing_required_fields_are_left_to_the_validator() -> None:
    parsed = parse_posted(EVERYTHING, [("name", "   ")])
    assert parsed.errors == []
    problems = validate_answer(check_schema(EVERYTHING), parsed.value)
    assert [(e.field, e.message) for e in problems] == [("name", "Enter an answer."), ("sure", "Choose an answer.")]


def test_a_value_of_the_wrong_type_fails_validation_naming_the_field() -> None:
    parsed = parse_posted(EVERYTHING, [("name", "Ann"), ("sure", "true"), ("count", "seven")])
    assert parsed.value["count"] == "seven"
    problems = validate_answer(check_schema(EVERYTHING), parsed.value)
    assert [(e.field, e.message) for e in problems] == [("count", "Enter a whole number.")]


def test_only_one_date_of_a_range_is_reported_as_not_a_range() -> None:
    parsed = parse_posted(EVERYTHING, [("name", "Ann"), ("sure", "true"), ("trip", "2026-05-01"), ("trip", "")])
    assert parsed.value["trip"] == ["2026-05-01"]
    problems = validate_answer(check_schema(EVERYTHING), parsed.value)
    assert [e.field for e in problems] == ["trip"]


@pytest.mark.parametrize(("offset", "expected"), [
    (None, "2026-01-02T14:30:00Z"),
    ("0", "2026-01-02T14:30:00Z"),
    ("-330", "2026-01-02T14:30:00-05:30"),
    ("not a number", "2026-01-02T14:30:00Z"),
    ("100000", "2026-01-02T14:30:00Z"),
])
def test_date_time_gets_the_browsers_zone_or_utc(offset: str | None, expected: str) -> None:
    pairs = [("when", "2026-01-02T14:30")] + ([(OFFSET_PREFIX + "when", offset)] if offset is not None else [])
    assert parse_posted(obj(when={"type": "string", "format": "date-time"}), pairs).value == {"when": expected}


def test_date_time_typed_with_a_zone_keeps_it() -> None:
    parsed = parse_posted(obj(when={"type": "string", "format": "date-time"}),
                          [("when", "2026-01-02T14:30:00+02:00"), (OFFSET_PREFIX + "when", "60")])
    assert parsed.value == {"when": "2026-01-02T14:30:00+02:00"}


def test_masked_date_time_is_taken_as_typed() -> None:
    parsed = parse_posted(obj(when={"type": "string", "format": "date-time"}),
                          [("when", "2026-01-02T14:30"), (OFFSET_PREFIX + "when", "60")], sensitive=True)
    # No zone is guessed for a value typed blind; the validator asks for one.
    assert parsed.value == {"when": "2026-01-02T14:30"}


def test_required_multi_select_with_nothing_ticked_is_an_empty_list() -> None:
    schema = obj(tags={"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "minItems": 1,
                       "_required": True})
    parsed = parse_posted(schema, [])
    assert parsed.value == {"tags": []}
    assert [e.message for e in validate_answer(check_schema(schema), parsed.value)] == ["Choose at least one."]


def test_a_field_posted_twice_counts_once() -> None:
    assert parse_posted(obj(a={"type": "string"}), [("a", "first"), ("a", "second")]).value == {"a": "first"}


def test_approval_reads_the_pressed_button_and_the_reason() -> None:
    parsed = parse_posted(None, [("reason", "Looks fine\r\n"), ("decision", "approve")], kind="approval")
    assert parsed.value == {"decision": "approve", "reason": "Looks fine"}
    assert validate_answer(APPROVAL_SCHEMA, parsed.value) == []
    assert parse_posted(None, [("reason", ""), ("decision", "reject")], kind="approval").value == {
        "decision": "reject"}


@pytest.mark.parametrize(("schema", "kind", "posted", "value"), [
    (None, "input", "free\r\ntext ", "free\ntext"),
    ({"type": "integer"}, "input", "42", 42),
    ({"type": "number"}, "input", "-1.25", -1.25),
    ({"type": "boolean"}, "choice", "false", False),
    ({"type": "string", "enum": ["red", "green"]}, "choice", "green", "green"),
    ({"type": "string", "format": "date"}, "input", "2026-02-03", "2026-02-03"),
])
def test_primitive_answers(schema: dict | None, kind: str, posted: str, value: Any) -> None:
    parsed = parse_posted(schema, [(ROOT_NAME, posted)], kind=kind)
    assert parsed.errors == [] and parsed.value == value
    assert validate_answer(check_schema(schema, kind=kind), value) == []


@pytest.mark.parametrize("pairs", [[], [(ROOT_NAME, "   ")], [("other", "x")]])
def test_an_empty_primitive_answer_is_required(pairs: list[tuple[str, str]]) -> None:
    parsed = parse_posted({"type": "string"}, pairs)
    assert parsed.value is None
    assert parsed.errors == [FieldError("", "Enter an answer.")]


def test_a_secret_is_taken_exactly_as_typed() -> None:
    parsed = parse_posted({"type": "string"}, [(ROOT_NAME, "  spaced secret ")], sensitive=True)
    # Masked text keeps core's coercion for its widget: a plain string is trimmed, a password kept.
    assert parsed.value == "spaced secret"
    parsed = parse_posted(obj(pw={"type": "string", "format": "password"}), [("pw", "  spaced secret ")])
    assert parsed.value == {"pw": "  spaced secret "}


def test_file_uploads_are_ignored() -> None:
    class Upload:
        filename = "x.txt"

    parsed = parse_form(form_specs(check_schema(obj(a={"type": "string"})), sensitive=False),
                        MultiDict([("a", Upload())]))
    assert parsed.value == {}


# --------------------------------------------------------------------------- labelled choices and the script's checks

LABELLED = {"type": "string", "title": "Office",
            "oneOf": [{"const": "ber", "title": "Berlin"}, {"const": "lis", "title": "Lisbon"}]}


def test_labelled_choices_show_titles_and_post_values() -> None:
    html = render(obj(city=dict(LABELLED), many={"type": "array", "items": {
        "type": "string", "anyOf": [{"const": f"v{i}", "title": f"Label {i}"} for i in range(3)]}},
        long={"type": "string", "oneOf": [{"const": f"c{i}", "title": f"Choice {i}"} for i in range(RADIO_MAX + 1)]}))
    elements = parse(html)
    radios = find(elements, "input", name="city")
    assert [r.get("value") for r in radios] == ["ber", "lis"]
    assert [r.inside("label").text.strip() for r in radios] == ["Berlin", "Lisbon"]
    assert [b.get("value") for b in find(elements, "input", name="many")] == ["v0", "v1", "v2"]
    assert "Label 1" in visible_text(html)
    options = find(elements, "option")
    assert ("c3", "Choice 3") in [(o.get("value"), o.text) for o in options]
    specs = form_specs(check_schema(obj(city=dict(LABELLED))), sensitive=False)
    assert parse_form(specs, MultiDict([("city", "lis")])).value == {"city": "lis"}


def test_each_field_carries_the_servers_sentences_for_the_script() -> None:
    schema = check_schema(obj(
        guests={"type": "integer", "minimum": 1, "maximum": 40, "_required": True},
        code={"type": "string", "pattern": "^[0-9]{6}$"},
        email={"type": "string", "format": "email"},
        tags={"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 2},
    ))
    views = {v.name: v for v in field_views(form_specs(schema, sensitive=False), schema=schema)}
    guests = views["guests"].data_attrs
    assert guests["data-kind"] == "integer" and guests["data-minimum"] == "1" and guests["data-maximum"] == "40"
    assert guests["data-msg-minimum"] == "Enter a whole number from 1 to 40." == guests["data-msg-maximum"]
    assert guests["data-msg-required"] == "Enter an answer." and guests["data-msg-type"] == "Enter a whole number."
    assert views["code"].data_attrs["data-msg-pattern"] == "Enter the 6-digit code."
    assert views["email"].data_attrs["data-msg-format"] == "Enter an email address like name@example.com."
    assert views["tags"].data_attrs["data-msg-minitems"] == "Choose at least 2."
    html = render(schema)
    box = field_container(parse(html), "guests")
    assert box.get("data-msg-minimum") == "Enter a whole number from 1 to 40." and box.get("data-label") == "Guests"
    # The summary is in the page, hidden, for the script to fill with the server's headings.
    summary = by_id(html, "errors")
    assert summary.has("hidden") and "2 answers need a change" in summary.get("data-headings")


def test_a_field_with_several_problems_shows_the_first_by_priority() -> None:
    specs = form_specs(check_schema(obj(n={"type": "integer", "minimum": 5, "multipleOf": 2})), sensitive=False)
    errors = [FieldError("n", "Enter a multiple of 2.", "multipleOf"),
              FieldError("n", "Enter a whole number of at least 5.", "minimum")]
    assert split_errors(specs, errors) == ({"n": ["Enter a whole number of at least 5."]}, [])

"""Between HTML forms and typed answers: how each schema field is drawn, and posted form data → the answer.

Form field names are the schema's property names; a primitive answer posts as
``answer``. Our own hidden fields contain a ``:`` (``handraise:csrf``), which no
property name may hold (core/schema.py refuses it), so they never collide with
a field. Posted strings become typed values through core's coercion, the same
code the chat channels use, so the answer equals what the API would receive.
"""

from __future__ import annotations

import gettext
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, Protocol

from handraise.core import proposals, wording
from handraise.core.schema import FieldError, FieldSpec, coerce_field, fields
from handraise.core.schema.messages import PRIORITY, number_text, problem

if TYPE_CHECKING:
    from handraise.core.api import RequestView

# English, the source language: what a caller that passes no translations gets.
ENGLISH = gettext.NullTranslations()

__all__ = [
    "CSRF_FIELD",
    "OFFSET_PREFIX",
    "RADIO_MAX",
    "ROOT_NAME",
    "FieldView",
    "FormData",
    "ParsedForm",
    "control_of",
    "field_views",
    "form_name",
    "form_specs",
    "html_pattern",
    "parse_form",
    "split_errors",
]

ROOT_NAME = "answer"
CSRF_FIELD = "handraise:csrf"
# The browser's UTC offset (minutes east) for a date-time field, filled in by form.js.
OFFSET_PREFIX = "handraise:offset:"
# Up to this many choices show as radio buttons; more become a select.
RADIO_MAX = 5

_CHOICE_WIDGETS = frozenset({"enum", "boolean", "multi_enum", "date_range"})
# What a person may type between a code's digits (SMS and mail show "123 456", "123-456").
_CODE_SEPARATORS = re.compile(r"[\s\-\u2010-\u2015.]+")
# Controls drawn as several inputs inside a fieldset.
_GROUP_CONTROLS = frozenset({"radio", "yes_no", "checkboxes", "date_range"})
_INPUT_TYPES = {"text": "text", "date": "date", "time": "time", "date-time": "datetime-local",
                "email": "email", "uri": "url"}
_MASKED_INPUTMODE = {"integer": "numeric", "number": "decimal", "email": "email", "uri": "url"}
_MASKED_PLACEHOLDER = {"date": "YYYY-MM-DD", "time": "HH:MM", "date-time": "YYYY-MM-DDTHH:MM:SSZ"}
_DATE = {"type": "string", "format": "date"}
_HAS_ZONE = re.compile(r"(?:[zZ]|[+-]\d{2}:?\d{2})$")
_MAX_OFFSET_MINUTES = 18 * 60


class FormData(Protocol):
    """What aiohttp's ``request.post()`` returns (a multidict): every value posted under a name."""

    def getall(self, key: str, default: Any = ...) -> list[Any]: ...

    def get(self, key: str, default: Any = ...) -> Any: ...


def answer_schema(view: RequestView) -> dict | None:
    """The schema a form draws for ``view``: an approval with a proposal adds the proposal's fields,
    filled in, as ``proposal.<name>`` (``proposals.from_form`` reads them back)."""
    if proposals.editable(view):
        assert view.proposal is not None and view.proposal_schema is not None
        return proposals.form_schema(proposal=view.proposal, proposal_schema=view.proposal_schema)
    return view.schema


def read_only_proposal(view: RequestView) -> tuple[str, ...]:
    """The lines of a proposal the form shows but does not let anyone edit (several approve it as
    proposed); () for one a form edits, or none."""
    if view.proposal is None or proposals.editable(view):
        return ()
    return tuple(wording.proposal_text(view).splitlines())


def form_specs(schema: dict | None, *, sensitive: bool) -> list[FieldSpec]:
    """The fields of a request's effective schema, as core describes them for every channel."""
    return fields(schema, sensitive=sensitive)


def form_name(spec: FieldSpec) -> str:
    return spec.name or ROOT_NAME


def control_of(spec: FieldSpec, *, approval: bool = False) -> str:
    """Which HTML control draws a field; ``parse_form`` reads it back by the same rule."""
    widget = spec.widget
    if approval and spec.name == "decision":
        return "approval"
    if spec.code_length is not None:
        return "code"
    if spec.masked and widget not in _CHOICE_WIDGETS:
        return "masked"
    if widget in ("integer", "number"):
        return "number"
    if widget == "boolean":
        # A lone checkbox cannot say "not answered", so a required yes/no asks explicitly.
        return "yes_no" if spec.required else "checkbox"
    if widget == "enum":
        return "radio" if len(spec.choices) <= RADIO_MAX else "select"
    if widget == "multi_enum":
        return "checkboxes"
    if widget == "date_range":
        return "date_range"
    if widget == "textarea":
        return "textarea"
    return "input"


def html_pattern(pattern: str) -> str:
    """A JSON-schema pattern (a search anywhere) as an HTML ``pattern`` (which must match the whole value)."""
    return f"[\\s\\S]*(?:{pattern})[\\s\\S]*"


@dataclass(frozen=True)
class FieldView:
    """One field as the template draws it."""

    spec: FieldSpec
    name: str
    # Property names may hold spaces and quotes, so HTML ids are positional: f0, f1, …
    id: str
    control: str
    input_type: str
    attrs: dict[str, str]
    values: tuple[str, ...]
    error: str
    hint: str
    autofocus: bool = False
    # What the page's script checks before sending, and the server's sentence for each problem.
    checks: dict[str, str] = dataclass_field(default_factory=dict)

    @property
    def value(self) -> str:
        return self.values[0] if self.values else ""

    @property
    def label(self) -> str:
        return self.spec.title

    @property
    def choices(self) -> list[tuple[str, str]]:
        """(value posted, text shown) of each choice: a labelled choice shows its title, posts its value."""
        return [(choice, self.spec.choice_title(choice)) for choice in self.spec.choices]

    @property
    def required(self) -> bool:
        return self.spec.required

    @property
    def help(self) -> str:
        return self.spec.description

    @property
    def described_by(self) -> str:
        ids = []
        if self.help:
            ids.append(f"{self.id}-help")
        if self.hint:
            ids.append(f"{self.id}-hint")
        if self.error:
            ids.append(f"{self.id}-error")
        return " ".join(ids)

    @property
    def is_group(self) -> bool:
        return self.control in _GROUP_CONTROLS

    @property
    def target_id(self) -> str:
        """The id an error summary links to: the field's (first) input."""
        return f"{self.id}-0" if self.is_group else self.id

    @property
    def offset_name(self) -> str:
        return OFFSET_PREFIX + self.name

    @property
    def data_attrs(self) -> dict[str, str]:
        """The container's ``data-*``: the field's name, label, summary target and the script's checks."""
        attrs = {"data-field": self.name, "data-label": self.label, "data-target": self.target_id}
        attrs.update({f"data-{key}": value for key, value in self.checks.items()})
        return attrs

    @property
    def masked(self) -> bool:
        return self.control == "masked" or (self.control == "code" and self.spec.masked)


def _rank(error: FieldError) -> int:
    return PRIORITY.index(error.keyword) if error.keyword in PRIORITY else len(PRIORITY)


def split_errors(specs: Sequence[FieldSpec], errors: Sequence[FieldError]) -> tuple[dict[str, list[str]], list[str]]:
    """Each field's one error to show (``tags.1`` belongs to ``tags``), and those that name no field.

    A field with several problems shows the first by ``messages.PRIORITY``, the order the
    page's script checks in, so both say the same.
    """
    by_field: dict[str, list[str]] = {}
    ranks: dict[str, int] = {}
    general: list[str] = []
    root = _is_root(specs)
    names = {spec.name for spec in specs}
    for error in errors:
        # A field named with a dot (an approval's "proposal.<name>") is matched whole first.
        head = error.field if error.field in names else error.field.split(".", 1)[0]
        name = ROOT_NAME if root else head if head in names and head else None
        if name is None:
            general.append(f"{error.field}: {error.message}" if error.field else error.message)
        elif name not in ranks or _rank(error) < ranks[name]:
            by_field[name], ranks[name] = [error.message], _rank(error)
    return by_field, general


def field_views(specs: Sequence[FieldSpec], *, posted: Mapping[str, Sequence[str]] | None = None,
                errors: Mapping[str, Sequence[str]] | None = None, keep_values: bool = True,
                approval: bool = False, translations: gettext.NullTranslations = ENGLISH,
                schema: dict | None = None) -> list[FieldView]:
    """The template's view of each field.

    ``posted`` holds what the human sent (re-rendering after a 422); None shows
    the schema's defaults. A masked field never shows a value, and with
    ``keep_values`` False (a sensitive request) no field does. ``schema`` (the
    request's) gives the page's script its checks, worded as the server words them.
    """
    errors = errors or {}
    views: list[FieldView] = []
    focused = False
    for index, spec in enumerate(specs):
        name = form_name(spec)
        control = control_of(spec, approval=approval)
        if not keep_values or control == "masked" or (control == "code" and spec.masked):
            values: tuple[str, ...] = ()
        elif posted is not None:
            values = tuple(posted.get(name, ()))
        else:
            values = _default_values(spec)
        error = "; ".join(errors.get(name, ()))
        # The first invalid field takes the focus, which works with JavaScript off.
        autofocus = bool(error) and not focused
        focused = focused or autofocus
        views.append(FieldView(
            spec=spec, name=name, id=f"f{index}", control=control, input_type=_input_type(spec, control),
            attrs=_attrs(spec, control), values=values, error=error,
            hint=_approval_hint(translations) if approval and spec.name == "reason" else _hint(spec, control,
                                                                                                    translations),
            autofocus=autofocus,
            checks={} if approval else client_checks(spec, node_of(schema, spec), control, translations),
        ))
    return views


def node_of(schema: dict | None, spec: FieldSpec) -> dict:
    """The (sub)schema a field comes from: its property, the root, or {} for free text."""
    if schema is None:
        return {}
    if spec.name and isinstance(schema.get("properties"), dict):
        node = schema["properties"].get(spec.name)
        return node if isinstance(node, dict) else {}
    return schema


def client_checks(spec: FieldSpec, node: dict, control: str,
                  t: gettext.NullTranslations = ENGLISH) -> dict[str, str]:
    """The ``data-*`` the page's script reads: each bound, and the server's sentence for breaking it.

    Sentences come from core's messages.problem with the field's own schema, so a problem the
    script finds reads exactly as the one the server would report.
    """
    checks: dict[str, str] = {"kind": spec.widget, "control": control}

    def say(keyword: str, expected: Any = None) -> None:
        checks[f"msg-{keyword.lower()}"] = problem(keyword, node, expected, t=t)

    if spec.required or spec.widget == "date_range":
        say("required")
    if spec.widget in ("integer", "number"):
        say("type", spec.widget)
        for keyword, value in (("minimum", spec.minimum), ("maximum", spec.maximum),
                               ("exclusiveMinimum", spec.exclusive_minimum),
                               ("exclusiveMaximum", spec.exclusive_maximum), ("multipleOf", spec.multiple_of)):
            if value is not None:
                checks[keyword.lower()] = number_text(value)
                say(keyword, value)
    if spec.widget in ("date", "time", "date-time", "email", "uri"):
        say("format", spec.widget)
    if spec.pattern:
        say("pattern")
    for keyword, value in (("minLength", spec.min_length), ("maxLength", spec.max_length)):
        if value is not None and spec.widget in ("text", "textarea", "password"):
            checks[keyword.lower()] = str(value)
            say(keyword, value)
    if spec.widget == "multi_enum":
        for keyword, value in (("minItems", spec.min_items), ("maxItems", spec.max_items)):
            if value is not None:
                checks[keyword.lower()] = str(value)
                say(keyword, value)
    if spec.widget == "date_range":
        say("minItems", 2)
        say("date_order")
    return checks


def _is_root(specs: Sequence[FieldSpec]) -> bool:
    return len(specs) == 1 and specs[0].name == ""


def _default_values(spec: FieldSpec) -> tuple[str, ...]:
    default = spec.default
    if default is None:
        return ()
    if isinstance(default, bool):
        return ("true" if default else "false",)
    if isinstance(default, list):
        return tuple(str(item) for item in default)
    if isinstance(default, (int, float)):
        return (number_text(default),)
    return (str(default),)


def _input_type(spec: FieldSpec, control: str) -> str:
    if control == "masked" or (control == "code" and spec.masked):
        return "password"
    if control == "number":
        return "number"
    return _INPUT_TYPES.get(spec.widget, "text")


def _attrs(spec: FieldSpec, control: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    widget = spec.widget
    if control in ("input", "textarea", "masked") and widget in ("text", "textarea", "password"):
        if spec.min_length is not None:
            attrs["minlength"] = str(spec.min_length)
        if spec.max_length is not None:
            attrs["maxlength"] = str(spec.max_length)
        if spec.pattern:
            attrs["pattern"] = html_pattern(spec.pattern)
    if control == "number":
        attrs.update(_number_attrs(spec))
    if control == "masked":
        attrs["autocomplete"] = "off"
        attrs["autocapitalize"] = "off"
        attrs["spellcheck"] = "false"
        if widget in _MASKED_INPUTMODE:
            attrs["inputmode"] = _MASKED_INPUTMODE[widget]
        if widget in _MASKED_PLACEHOLDER:
            attrs["placeholder"] = _MASKED_PLACEHOLDER[widget]
    if control == "textarea":
        attrs["rows"] = "5"
    if control == "code":
        attrs.update(_code_attrs(spec))
    return attrs


def _code_attrs(spec: FieldSpec) -> dict[str, str]:
    """A one-time code: the digit keypad, the SMS autofill, sized to the code; spaces and dashes may be pasted."""
    length = spec.code_length or 0
    return {
        "inputmode": "numeric",
        "autocomplete": "one-time-code",
        "autocapitalize": "off",
        "spellcheck": "false",
        # The server takes the separators out before it checks the digits (parse_form).
        "pattern": f"[\\s.\\-]*(?:[0-9][\\s.\\-]*){{{length}}}",
        "maxlength": str(length * 2 + 2),
        "size": str(length + 2),
        "data-code-length": str(length),
    }


def _number_attrs(spec: FieldSpec) -> dict[str, str]:
    integer = spec.widget == "integer"
    low, high = spec.minimum, spec.maximum
    # For whole numbers an exclusive bound is an inclusive one a step further in.
    if integer and spec.exclusive_minimum is not None:
        bound = math.floor(spec.exclusive_minimum) + 1
        low = bound if low is None else max(low, bound)
    if integer and spec.exclusive_maximum is not None:
        bound = math.ceil(spec.exclusive_maximum) - 1
        high = bound if high is None else min(high, bound)
    attrs: dict[str, str] = {}
    if low is not None:
        attrs["min"] = number_text(low)
    if high is not None:
        attrs["max"] = number_text(high)
    step = spec.multiple_of
    # HTML counts steps from ``min``; JSON schema from 0. When they disagree the server checks alone.
    if step is not None and (low is None or _is_multiple(low, step)) and (not integer or float(step).is_integer()):
        attrs["step"] = number_text(step)
    else:
        attrs["step"] = "1" if integer else "any"
    return attrs


def _is_multiple(value: float, step: float) -> bool:
    quotient = value / step
    return math.isclose(quotient, round(quotient), abs_tol=1e-9)


def _length_hint(low: int | None, high: int | None, t: gettext.NullTranslations) -> str:
    if low is not None and high is not None:
        if low == high:
            return t.ngettext("Exactly %(n)d character", "Exactly %(n)d characters", high) % {"n": high}
        return t.gettext("%(low)d to %(high)d characters") % {"low": low, "high": high}
    if low:
        return t.ngettext("At least %(n)d character", "At least %(n)d characters", low) % {"n": low}
    if high is not None:
        return t.ngettext("At most %(n)d character", "At most %(n)d characters", high) % {"n": high}
    return ""


def _number_hint(spec: FieldSpec, t: gettext.NullTranslations) -> str:
    integer = spec.widget == "integer"
    low, high = spec.minimum, spec.maximum
    values = {"low": number_text(low), "high": number_text(high)}
    if low is not None and high is not None:
        words = (t.gettext("A whole number from %(low)s to %(high)s") if integer
                 else t.gettext("A number from %(low)s to %(high)s")) % values
    elif low is not None:
        words = (t.gettext("A whole number, at least %(low)s") if integer
                 else t.gettext("A number, at least %(low)s")) % values
    elif high is not None:
        words = (t.gettext("A whole number, at most %(high)s") if integer
                 else t.gettext("A number, at most %(high)s")) % values
    else:
        words = t.gettext("A whole number") if integer else t.gettext("A number")
    if spec.exclusive_minimum is not None:
        words += t.gettext(", more than %(n)s") % {"n": number_text(spec.exclusive_minimum)}
    if spec.exclusive_maximum is not None:
        words += t.gettext(", less than %(n)s") % {"n": number_text(spec.exclusive_maximum)}
    if spec.multiple_of is not None:
        words += t.gettext(", in steps of %(n)s") % {"n": number_text(spec.multiple_of)}
    return words


def _choice_count_hint(low: int | None, high: int | None, t: gettext.NullTranslations) -> str:
    if low and high:
        if low == high:
            return t.gettext("Choose %(n)d") % {"n": low}
        return t.gettext("Choose %(low)d to %(high)d") % {"low": low, "high": high}
    if low:
        return t.gettext("Choose at least %(n)d") % {"n": low}
    if high:
        return t.gettext("Choose up to %(n)d") % {"n": high}
    return ""


def _approval_hint(t: gettext.NullTranslations) -> str:
    return t.gettext("Optional; most useful when you reject")


def _hint(spec: FieldSpec, control: str, t: gettext.NullTranslations = ENGLISH) -> str:
    """What the field takes, in a few words, unless its description already says as much."""
    hint = _plain_hint(spec, control, t)
    return "" if _said_already(hint, spec.description) else hint


def _said_already(hint: str, description: str) -> bool:
    # "Between 1 and 40" then "A whole number from 1 to 40" says it twice: a description that
    # names every number of the hint makes the hint redundant.
    numbers = re.findall(r"\d+(?:\.\d+)?", hint)
    if not hint or not description or not numbers:
        return False
    said = set(re.findall(r"\d+(?:\.\d+)?", description))
    return all(n in said for n in numbers)


def _plain_hint(spec: FieldSpec, control: str, t: gettext.NullTranslations) -> str:
    widget = spec.widget
    if control == "code":
        length = spec.code_length or 0
        return t.ngettext("%(n)d digit", "%(n)d digits", length) % {"n": length}
    if widget in ("integer", "number"):
        return _number_hint(spec, t)
    if widget in ("text", "textarea", "password"):
        return _length_hint(spec.min_length, spec.max_length, t)
    if widget == "multi_enum":
        return _choice_count_hint(spec.min_items, spec.max_items, t)
    if widget == "date_range":
        return t.gettext("A start date and an end date")
    if widget == "date-time":
        # form.js replaces this with the browser's own zone; without JavaScript the time is read as UTC.
        if control == "masked":
            return t.gettext("With a zone, e.g. 2026-01-02T14:30:00Z")
        return t.gettext("Time in UTC")
    return ""


# --------------------------------------------------------------------------- posted form → answer


@dataclass(frozen=True)
class ParsedForm:
    """The typed answer read from a posted form, what was posted (to re-render), and reading errors."""

    value: Any
    posted: dict[str, list[str]]
    errors: list[FieldError]


def parse_form(specs: Sequence[FieldSpec], form: FormData, *, approval: bool = False, schema: dict | None = None,
               translations: gettext.NullTranslations = ENGLISH) -> ParsedForm:
    """Read the posted fields into the typed answer; names that are not fields are ignored.

    A field left empty is absent from the answer, so core's validator says it
    is required for a required one. A primitive answer left empty has no
    validator message of its own, so it is reported here, in the same words.
    """
    posted: dict[str, list[str]] = {}
    answer: dict[str, Any] = {}
    for spec in specs:
        name = form_name(spec)
        strings = [_newlines(v) for v in form.getall(name, []) if isinstance(v, str)]
        posted[name] = strings
        control = control_of(spec, approval=approval)
        offset = form.get(OFFSET_PREFIX + name) if control == "input" and spec.widget == "date-time" else None
        found, value = _read_field(spec, control, strings, offset if isinstance(offset, str) else None)
        if found:
            answer[spec.name] = value
    if _is_root(specs):
        if "" not in answer:
            message = problem("required", node_of(schema, specs[0]), t=translations)
            return ParsedForm(value=None, posted=posted, errors=[FieldError("", message, "required")])
        return ParsedForm(value=answer[""], posted=posted, errors=[])
    return ParsedForm(value=answer, posted=posted, errors=[])


def _newlines(text: str) -> str:
    # Browsers submit a textarea's line breaks as CRLF; an API caller would send "\n".
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_field(spec: FieldSpec, control: str, strings: list[str], offset: str | None) -> tuple[bool, Any]:
    widget = spec.widget
    if widget == "multi_enum":
        chosen = [s for s in strings if s]
        if not chosen:
            # Nothing ticked is "none" for a required multi-select (minItems then speaks), absent otherwise.
            return (True, []) if spec.required else (False, None)
        return True, chosen
    if widget == "date_range":
        dates = [s.strip() for s in strings if s.strip()]
        if not dates:
            return False, None
        return True, [coerce_field(_DATE, d) for d in dates]
    if control == "checkbox":
        return True, bool(strings) and coerce_field(spec, strings[0]) is True
    first = strings[0] if strings else ""
    if not first.strip():
        return False, None
    if control == "code":
        # "123 456" and "123-456" as pasted from a message are the code 123456.
        first = _CODE_SEPARATORS.sub("", first)
    if control == "input" and widget == "date-time":
        first = _with_zone(first.strip(), offset)
    return True, coerce_field(spec, first)


def _with_zone(local: str, offset: str | None) -> str:
    """``<input type=datetime-local>`` sends a wall time; add the zone the browser reported, else UTC."""
    if _HAS_ZONE.search(local):
        return local
    minutes: int | None = None
    if offset is not None:
        try:
            minutes = int(offset.strip())
        except ValueError:
            minutes = None
    if minutes is None or abs(minutes) > _MAX_OFFSET_MINUTES:
        return local + "Z"
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"{local}{sign}{hours:02d}:{rest:02d}"

"""What text Handraise takes from outside: valid Unicode, without control characters (prose keeps line breaks and tabs).

PostgreSQL refuses NUL in a text column and SQLite keeps it, so the same input
would be a 500 on one store and a stored oddity on the other; a lone surrogate
has no UTF-8 form and no canonical JSON. Both are refused where text comes in:
the JSON reader (``core/http/middleware.py``), the API's models (the types
below), schemas and answers (``core/schema``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

__all__ = ["MAX_EXACT_INTEGER", "Label", "Prose", "has_lone_surrogate", "label", "prose", "text_problem"]

# Integers beyond 2**53 - 1 lose precision in JSON parsers that read numbers as doubles
# (RFC 8785, I-JSON), so canonical JSON has no form for them.
MAX_EXACT_INTEGER = 2**53 - 1

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls and DEL; prose keeps tab, line feed and carriage return.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_PROSE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The same rules as JSON Schema patterns, for the OpenAPI document (surrogates cannot be said there).
LABEL_PATTERN = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
PROSE_PATTERN = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"


def has_lone_surrogate(value: str) -> bool:
    return not value.isascii() and _LONE_SURROGATE.search(value) is not None


def text_problem(value: str, *, prose: bool) -> str | None:
    """Why ``value`` is not acceptable text (a message that never quotes it), or None."""
    if value.isascii() and value.isprintable():  # most text: no surrogate, no control character
        return None
    if has_lone_surrogate(value):
        return "is not valid Unicode text"
    if (_CONTROL_IN_PROSE if prose else _CONTROL).search(value):
        return "must not contain control characters" + (" other than line breaks and tabs" if prose else "")
    return None


def _label(value: str) -> str:
    problem = text_problem(value, prose=False)
    if problem:
        raise ValueError(problem)
    return value


def _prose(value: str) -> str:
    problem = text_problem(value, prose=True)
    if problem:
        raise ValueError(problem)
    return value


def label(*, min_length: int | None = None, max_length: int | None = None) -> Any:
    """One line of text (an id, a name, a recipient) as a pydantic type, its lengths checked first."""
    return Annotated[str, StringConstraints(min_length=min_length, max_length=max_length), AfterValidator(_label),
                     Field(json_schema_extra={"pattern": LABEL_PATTERN})]


def prose(*, min_length: int | None = None, max_length: int | None = None) -> Any:
    """Text a person reads or writes (a question, a note, a correction): line breaks and tabs allowed."""
    return Annotated[str, StringConstraints(min_length=min_length, max_length=max_length), AfterValidator(_prose),
                     Field(json_schema_extra={"pattern": PROSE_PATTERN})]


Label = label()
Prose = prose()

"""What a user reads about input pydantic refused: one place for an HTTP body's ``details.fields``
and a config file's one line, so both say the same thing the same way and never echo the value."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

# pydantic's own prefixes for errors raised inside a validator: the sentence after them is ours.
_PREFIXES = ("Value error, ", "Assertion failed, ")


def message(error: Mapping[str, Any], *, config: bool = False) -> str:
    """One of pydantic's errors (an item of ``ValidationError.errors()``) in the words a user reads.

    The API keeps pydantic's sentence ("String should have at most 10 characters"); a config file
    reads as a rule ("must have at most 10 characters", "must be a whole number"). Neither repeats
    the refused input: it may be a secret.
    """
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key" if config else "unknown field"
    if kind == "missing":
        return "is required"
    text = str(error["msg"])
    for prefix in _PREFIXES:
        text = text.removeprefix(prefix)
    if not config:
        return text
    if text.startswith("Input should be "):
        text = "must be " + text.removeprefix("Input should be ")
    elif text.startswith("String should "):
        text = "must " + text.removeprefix("String should ")
    elif text.startswith(("List should ", "Dictionary should ")):
        text = "must " + text.split(" should ", 1)[1]
    return text.replace("a valid integer, unable to parse string as an integer", "a whole number") \
               .replace("a valid boolean, unable to interpret input", "true or false")


def field_problems(error: ValidationError) -> list[dict[str, str]]:
    """Every error as ``{"field", "message"}``, the API's ``details.fields``, in the API's field names."""
    out = []
    for e in error.errors():
        loc = [str(p) for p in e["loc"]]
        # The model calls it form_schema (pydantic reserves ``schema``); the API calls it schema.
        name = "schema" if loc[:1] == ["form_schema"] else ".".join(loc) or "(body)"
        out.append({"field": name, "message": message(e)})
    return out


def joined(fields: Iterable[Mapping[str, str]]) -> str:
    """``field: message; field: message``: the one-line summary of per-field problems."""
    return "; ".join(f"{f['field']}: {f['message']}" for f in fields)


def config_problem(error: ValidationError, *,
                   section: tuple[str | int, ...] = ()) -> tuple[tuple[str | int, ...], str]:
    """The first error of a config table: where it is (``section`` first) and what is wrong."""
    first = error.errors()[0]
    return tuple(p for p in (*section, *first["loc"]) if p != ""), message(first, config=True)


def dotted(loc: Iterable[str | int]) -> str:
    """``("webhooks", 0, "url")`` → ``webhooks[0].url``, as the TOML reads."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out

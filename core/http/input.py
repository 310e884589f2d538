"""Reading what a client sent: the request line and key header, the JSON body, the query string as a model.

Every refusal here is a 4xx in the API's envelope (400 ``bad_request``, 401, 413),
never a 500: the JSON reader bounds depth, refuses NaN, infinities, numbers
with thousands of digits and lone surrogates; the path, query and
``Authorization`` header must be text without control characters.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from handraise.core.appkeys import SETTINGS
from handraise.core.errors import BadRequestError, PayloadTooLargeError
from handraise.core.problems import field_problems, joined
from handraise.core.text import has_lone_surrogate, text_problem

__all__ = ["MAX_JSON_DEPTH", "parse_json", "parse_query", "read_json", "refuse_malformed"]

# A request body's deepest nesting. A create with an object schema is about 6 deep; Python's
# parser raises RecursionError near 1,000 and every later walk (pydantic, jsonschema,
# canonical JSON) would meet the same depth again.
MAX_JSON_DEPTH = 32

QueryT = TypeVar("QueryT", bound=BaseModel)


def refuse_malformed(request: web.Request) -> None:
    """400 for a path or query that is not plain text, or an ``Authorization`` header that is not ASCII."""
    if _problem(request.path):
        raise BadRequestError("the path must not contain control characters")
    for name, value in request.query.items():
        if _problem(name) or _problem(value):
            raise BadRequestError("the query string must not contain control characters")
    # aiohttp keeps bytes that are not UTF-8 as lone surrogates; a key is visible ASCII (RFC 6750).
    authorization = request.headers.get("Authorization")
    if authorization is not None and not (authorization.isascii() and authorization.isprintable()):
        raise BadRequestError("the Authorization header must be printable ASCII")


def _problem(text: str) -> str | None:
    # Printable ASCII (every path and query of the API's own clients) has none: no regex for it.
    if text.isascii() and text.isprintable():
        return None
    return text_problem(text, prose=False)


async def read_json(request: web.Request) -> Any:
    """The JSON body, or 400 (malformed) / 413 (over the limit)."""
    limit = _body_limit(request)
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLargeError(f"the body is larger than {limit} bytes")
    content = request.content
    if content.is_eof() and not content.at_eof():
        # The whole body has arrived and nobody has read it (an API call's body comes in the packets of its
        # headers): take it as it lies, instead of request.read()'s loop of awaits over the stream.
        raw = content.read_nowait()
        if len(raw) > limit:
            raise PayloadTooLargeError(f"the body is larger than {limit} bytes")
    else:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise PayloadTooLargeError(f"the body is larger than {limit} bytes") from None
    if not raw:
        raise BadRequestError("the body is empty; send a JSON object")
    return parse_json(raw)


def _body_limit(request: web.Request) -> int:
    try:
        settings = request.app[SETTINGS]
    except KeyError:  # a sub-application's route (a connector's webhook): the main application's settings
        settings = request.config_dict[SETTINGS]
    return settings.server.max_body_bytes


def parse_json(raw: bytes) -> Any:
    """Strict JSON (RFC 8259 in UTF-8, I-JSON's text): the value, or ``BadRequestError`` saying why."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError("malformed JSON: the body is not UTF-8") from None
    try:
        value = _decode(text)
    except RecursionError:
        raise BadRequestError(f"malformed JSON: nested more than {MAX_JSON_DEPTH} deep") from None
    except _NumberError as e:
        raise BadRequestError(f"malformed JSON: {e}") from None
    except json.JSONDecodeError as e:
        raise BadRequestError(f"malformed JSON: {e}") from None
    except ValueError:
        # int() past sys.get_int_max_str_digits (4,300 digits).
        raise BadRequestError("malformed JSON: a number has too many digits") from None
    # Only an escape (\ud800) spells a lone surrogate in UTF-8 text, and a body with at most
    # MAX_JSON_DEPTH brackets cannot nest deeper: most bodies need no walk (brackets and backslashes
    # inside strings only make a body walked that need not be).
    if b"\\u" in raw or raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        _check_shape(value)
    return value


def _decode(text: str) -> Any:
    """``json.loads(text)`` with the strict number hooks: one scan of a body that starts and ends with its
    value (json.loads's own path, with its exact messages, for everything else)."""
    if text[:1] in _UNPADDED:
        try:
            value, end = _DECODER.scan_once(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    if text[:1] == "\ufeff":
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


class _NumberError(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NumberError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberError("a number is out of range")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
# What a JSON value can start with (a body padded with whitespace, or empty, takes the full path).
_UNPADDED = frozenset('{["-0123456789tfnNI')


def _check_shape(value: Any) -> None:
    # Iterative, so the check itself never meets the depth it refuses.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                raise BadRequestError("malformed JSON: a string holds a lone surrogate (not Unicode text)")
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > MAX_JSON_DEPTH:
            raise BadRequestError(f"malformed JSON: nested more than {MAX_JSON_DEPTH} deep")
        if isinstance(item, dict):
            for key, member in item.items():
                if has_lone_surrogate(key):
                    raise BadRequestError("malformed JSON: a name holds a lone surrogate (not Unicode text)")
                stack.append((member, depth + 1))
        else:
            stack.extend((member, depth + 1) for member in item)


def parse_query(request: web.Request, model: type[QueryT]) -> QueryT:
    """The query string as ``model`` (its types coerced from text), or 400 with a problem per parameter."""
    try:
        return model.model_validate(dict(request.query))
    except ValidationError as e:
        details = field_problems(e)
        raise BadRequestError(joined(details), fields=details) from None

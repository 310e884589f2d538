"""A posted form read strictly, for the hosted form and the inbox alike: UTF-8 text fields only, bounded.

``application/x-www-form-urlencoded`` and ``multipart/form-data`` are read here and nowhere
else (aiohttp's ``request.post()`` decodes what is not UTF-8 as U+FFFD, takes a charset the
client names, keeps file parts and lets several parser errors through as a 500). A body
over the limit is ``PayloadTooLargeError`` (413); anything else that cannot be read as a
form of text fields is ``BadRequestError`` (400), and ``NotUtf8Error`` when the bytes or a
named charset are not UTF-8. Another content type reads as an empty form: the caller's CSRF
check then refuses it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qsl

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import MultiDict, MultiDictProxy

from handraise.core.errors import BadRequestError, NotUtf8Error, PayloadTooLargeError
from handraise.core.text import has_lone_surrogate

__all__ = ["MAX_FIELDS", "read_form"]

# More fields than any form here draws (20 schema fields, their offsets, proposals, the CSRF token).
MAX_FIELDS = 1000
_URLENCODED = "application/x-www-form-urlencoded"
_MULTIPART = "multipart/form-data"
_UTF8 = frozenset({"utf-8", "utf8"})
# What a browser's text field carries: nothing, or a plain text type (RFC 7578 §4.4).
_TEXT_TYPES = frozenset({"", "text/plain"})
# Content-Transfer-Encoding values that leave the bytes as sent (RFC 7578 §4.7 deprecates the rest).
_IDENTITY_ENCODINGS = frozenset({"", "7bit", "8bit", "binary"})
_NOT_UTF8 = "the form must be sent as UTF-8 text"
_UNREADABLE = "the form could not be read: its body is malformed or cut short"


async def read_form(request: web.Request, *, limit: int) -> MultiDictProxy[str]:
    """Every posted field by name, each value text; raises 413 past ``limit`` bytes, 400 for anything unreadable."""
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    kind = request.content_type  # application/octet-stream when the header is missing
    try:
        if kind in ("", _URLENCODED):
            return _urlencoded(await _read_all(request, limit=limit), charset=request.charset)
        if kind == _MULTIPART:
            return await _multipart(request, limit=limit)
    except (BadRequestError, PayloadTooLargeError):
        raise
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(limit) from None
    except (ValueError, LookupError, AssertionError, RuntimeError, HttpProcessingError, asyncio.IncompleteReadError):
        # aiohttp's readers: a missing or wrong boundary, a part's header line that is not one, a body cut
        # short. Their messages quote the client's bytes, so none reaches the reply or a log.
        raise BadRequestError(_UNREADABLE) from None
    return MultiDictProxy(MultiDict())


async def _read_all(request: web.Request, *, limit: int) -> bytes:
    raw = await request.read()  # bounded by the application's client_max_size as well
    if len(raw) > limit:
        raise _too_large(limit)
    return raw


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"the form is larger than {limit} bytes")


def _check_charset(charset: str | None) -> None:
    if charset is not None and charset.strip().lower() not in _UTF8:
        raise NotUtf8Error(_NOT_UTF8)


def _urlencoded(raw: bytes, *, charset: str | None) -> MultiDictProxy[str]:
    _check_charset(charset)
    try:
        # The raw bytes and what their percent escapes spell must both be UTF-8: %FF%FE is refused, not U+FFFD.
        pairs = parse_qsl(raw.rstrip().decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict",
                          max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        raise NotUtf8Error(_NOT_UTF8) from None
    except ValueError:
        raise BadRequestError(f"the form has more than {MAX_FIELDS} fields") from None
    return MultiDictProxy(MultiDict(pairs))


async def _multipart(request: web.Request, *, limit: int) -> MultiDictProxy[str]:
    reader = await request.multipart()
    out: MultiDict[str] = MultiDict()
    payload = request.content
    while (part := await reader.next()) is not None:
        if len(out) >= MAX_FIELDS:
            raise BadRequestError(f"the form has more than {MAX_FIELDS} fields")
        if not isinstance(part, BodyPartReader):
            raise BadRequestError("the form holds a nested multipart body")
        if "Content-Disposition" not in part.headers:  # no headers at all: the body ended after a boundary
            raise BadRequestError(_UNREADABLE)
        name = part.name
        if not name:
            raise BadRequestError("a part of the form has no field name")
        if has_lone_surrogate(name):  # a name's bytes that are not UTF-8 (aiohttp keeps them as surrogates)
            raise NotUtf8Error(_NOT_UTF8)
        if part.filename is not None or _content_type(part) not in _TEXT_TYPES:
            raise BadRequestError("the form holds a file where a text field is expected")
        if part.headers.get("Content-Encoding", "identity").strip().lower() != "identity" or \
                part.headers.get("Content-Transfer-Encoding", "").strip().lower() not in _IDENTITY_ENCODINGS:
            raise BadRequestError("a field of the form is encoded; send it as plain text")
        # The part's own charset, else a leading _charset_ field's (RFC 7578 §4.6), else UTF-8.
        _check_charset(part.get_charset(default="utf-8"))
        value = bytearray()
        while chunk := await part.read_chunk():
            value.extend(chunk)
            if payload.total_bytes > limit:
                raise _too_large(limit)
        try:
            out.add(name, value.decode("utf-8"))
        except UnicodeDecodeError:
            raise NotUtf8Error(_NOT_UTF8) from None
        if payload.total_bytes > limit:
            raise _too_large(limit)
    return MultiDictProxy(out)


def _content_type(part: BodyPartReader) -> str:
    value = part.headers.get("Content-Type")
    return "" if value is None else value.partition(";")[0].strip().lower()

"""Canonical JSON (RFC 8785, JCS) for answers, and the answer hash the journal keeps.

Two channels that produce the same answer produce the same bytes, so hashes and
idempotency comparisons do not depend on key order or number spelling.
"""

from __future__ import annotations

import hashlib
import logging

import rfc8785

from handraise.core.jsontext import dumps_sorted_compact

log = logging.getLogger(__name__)

__all__ = ["CanonicalizationError", "answer_sha256", "canonical_bytes", "canonical_json"]

# A ValueError subclass: NaN/Infinity, integers beyond 2**53-1, non-string keys,
# lone surrogates and non-JSON types have no canonical form.
CanonicalizationError = rfc8785.CanonicalizationError


# Integers JCS spells as Python does: those an IEEE double holds exactly.
_SAFE_INT = 2**53 - 1
# Floats JCS spells as Python's repr does: both write the shortest digits that read back as the same
# double, and both in plain decimal notation between these bounds (Python from 1e-4 to 1e16,
# ECMAScript from 1e-6 to 1e21). An integral float is not one of them ("1.0" against JCS's "1").
_PLAIN_FLOAT_MIN, _PLAIN_FLOAT_MAX = 1e-4, 1e16


def _spelled_alike(value: object) -> bool:
    """True when ``json.dumps`` (sorted keys, no spaces, not ASCII-escaped) writes ``value`` exactly as RFC
    8785 does: object names in ASCII (where code-point and UTF-16 orders agree), text values of any
    script without lone surrogates (both leave every character as it is but the same escapes: checked
    against rfc8785 over every code point), safe integers, fractional floats of plain notation,
    booleans, null, lists and objects. Other floats, other names and lone surrogates take the full
    RFC 8785 path (which refuses a lone surrogate)."""
    # Exact classes (``__class__``, an attribute rather than a call): a subclass of str or int (an enum, a
    # bool posing as a number) takes the full path. Containers wait on the stack; their members are checked
    # where they stand.
    stack = [value]
    while stack:
        container = stack.pop()
        cls = container.__class__
        if cls is dict:
            try:
                # Every name at once: a name that is not a string makes join raise.
                if not "".join(container).isascii():
                    return False
            except TypeError:
                return False
            members = container.values()
        elif cls is list:
            members = container
        else:
            members = (container,)  # the value itself, not in a container
        for item in members:
            cls = item.__class__
            if cls is str:
                if not item.isascii():
                    try:
                        item.encode("utf-8")  # a lone surrogate cannot be encoded
                    except UnicodeEncodeError:
                        return False
            elif cls is dict or cls is list:
                stack.append(item)
            elif item is None or cls is bool:
                continue
            elif cls is int:
                if not -_SAFE_INT <= item <= _SAFE_INT:
                    return False
            elif cls is float:
                # Times (epoch seconds with a fraction) and fractional numbers; NaN fails both bounds.
                if not (_PLAIN_FLOAT_MIN <= abs(item) < _PLAIN_FLOAT_MAX) or item.is_integer():
                    return False
            else:
                return False
    return True


def canonical_json(value: object) -> str:
    """The RFC 8785 canonical form of ``value`` as text; raises ``CanonicalizationError``.

    The usual payloads (ids, text, codes, choices) take the C JSON encoder, which spells them the
    same; rfc8785's pure-Python encoder was the largest share of a cycle's own CPU time."""
    if _spelled_alike(value):
        return dumps_sorted_compact(value)
    return rfc8785.dumps(value).decode("utf-8")


def canonical_bytes(value: object) -> bytes:
    """The RFC 8785 UTF-8 bytes of ``value``; raises ``CanonicalizationError``."""
    return canonical_json(value).encode("utf-8")


def answer_sha256(value: object) -> str:
    """Hex SHA-256 of the canonical bytes: what a sensitive answer leaves in the journal."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()

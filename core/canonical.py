"""Canonical JSON (RFC 8785, JCS) for answers, and the answer hash the journal keeps.

Two channels that produce the same answer produce the same bytes, so hashes and
idempotency comparisons do not depend on key order or number spelling.
"""

from __future__ import annotations

import hashlib
import logging

import rfc8785

log = logging.getLogger(__name__)

__all__ = ["CanonicalizationError", "answer_sha256", "canonical_bytes", "canonical_json"]

# A ValueError subclass: NaN/Infinity, integers beyond 2**53-1, non-string keys,
# lone surrogates and non-JSON types have no canonical form.
CanonicalizationError = rfc8785.CanonicalizationError


def canonical_bytes(value: object) -> bytes:
    """The RFC 8785 UTF-8 bytes of ``value``; raises ``CanonicalizationError``."""
    return rfc8785.dumps(value)


def canonical_json(value: object) -> str:
    """The RFC 8785 canonical form of ``value`` as text; raises ``CanonicalizationError``."""
    return canonical_bytes(value).decode("utf-8")


def answer_sha256(value: object) -> str:
    """Hex SHA-256 of the canonical bytes: what a sensitive answer leaves in the journal."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()

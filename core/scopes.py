"""What a key may do (its scopes), and the rules for combining them, shared by the config and the CLI."""

from __future__ import annotations

import hashlib
from typing import Literal

Scope = Literal["ask", "answer", "read", "annotate", "forward", "metrics", "admin"]
ALL_SCOPES: tuple[str, ...] = ("ask", "answer", "read", "annotate", "forward", "metrics", "admin")


def scopes_problem(scopes: list[str] | frozenset[str], *, person: str | None = None) -> str | None:
    """Why a set of scopes (and a person the key is bound to) cannot go on one key, or None."""
    if "ask" in scopes and "answer" in scopes:
        return "an ask key can never answer: give ask and answer to different keys"
    if "forward" in scopes and "ask" not in scopes:
        # forward mints links only for requests the key created itself, so it needs ask to mean anything.
        return "forward mints links only for the key's own requests: give it together with ask"
    if "ask" in scopes and "admin" in scopes:
        # An agent that makes keys could make one that answers its own question.
        return "an ask key can never make keys: give ask and admin to different keys"
    if person is not None and "ask" in scopes:
        # A key acting as a person is a human's; an agent's key acts for nobody (it could answer as them).
        return "an ask key acts for no person: bind a person only to a key that answers"
    return None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()

"""The timeout policy: what a request's deadline does when nobody answered (``on_timeout``).

``expire`` (the default) ends it as expired. ``reject`` ends an approval as rejected.
``{"default": value}`` ends any other request with that answer. An approval never
takes a default: expiry is never consent (DESIGN.md, invariant 4), and a default
"approve" would be exactly that. A sensitive request takes none either: the agent's
default would sit in clear in the store and the journal, where a human's answer never does.
"""

from __future__ import annotations

from typing import Any

from handraise.core.errors import ValidationFailedError
from handraise.core.schema import validate_answer_off_loop

EXPIRE = "expire"
REJECT = "reject"
# The answer a ``reject`` policy records: the agent reads the decision and why.
REJECTED_AT_DEADLINE = {"decision": "reject", "reason": "no answer in time"}


def policy_name(policy: str | dict[str, Any]) -> str:
    """``expire``, ``reject`` or ``default``: how the journal and the wording name a policy."""
    return policy if isinstance(policy, str) else "default"


async def check_policy(policy: str | dict[str, Any], *, kind: str, sensitive: bool,
                       schema: dict[str, Any] | None) -> None:
    """Refuse at create, with a 422 naming ``on_timeout``, a policy this request cannot have."""
    if policy == EXPIRE:
        return
    if policy == REJECT:
        if kind != "approval":
            _refuse("on_timeout", '"reject" is for approvals only (kind "approval")')
        return
    assert isinstance(policy, dict)
    if kind == "approval":
        _refuse("on_timeout", 'an approval takes "expire" or "reject", never a default: expiry is never consent')
    if sensitive:
        _refuse("on_timeout", "a sensitive request takes no default: it would be stored in clear")
    errors = await validate_answer_off_loop(schema, policy["default"])
    if errors:
        fields = [{"field": "on_timeout.default" + (f".{e.field}" if e.field else ""), "message": e.message}
                  for e in errors]
        raise ValidationFailedError("on_timeout.default is not a valid answer to this request", fields=fields)


def answer_at_deadline(policy: str | dict[str, Any]) -> tuple[bool, Any]:
    """(True, the answer the deadline records), or (False, None) when the request simply expires."""
    if policy == REJECT:
        return True, dict(REJECTED_AT_DEADLINE)
    if isinstance(policy, dict):
        return True, policy["default"]
    return False, None


def _refuse(field: str, message: str) -> None:
    raise ValidationFailedError(f"{field} {message}", fields=[{"field": field, "message": message}])

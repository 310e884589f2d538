"""Approve with edits: an approval may carry the agent's ``proposal`` (an object valid against its own
``proposal_schema``), which the approver may edit before approving.

The approver's answer is ``{"decision": "approve", "reason"?, "proposal"?: {…}}``; without
``proposal`` it approves the proposal as it stands (a chat button does that). The result the agent
reads is ``{"decision": "approve", "reason"?, "proposal": <as approved>, "edited": true | false}``;
a rejection carries no proposal, and an edit with a rejection is refused. Every edit is validated
against ``proposal_schema`` on the server, with problems named ``proposal.<field>``.
"""

from __future__ import annotations

import copy
import gettext
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from handraise.core.canonical import canonical_json
from handraise.core.errors import InvalidSchemaError, ValidationFailedError
from handraise.core.schema import FieldError, check_schema_off_loop, validate_answer_off_loop
from handraise.core.schema.messages import ENGLISH
from handraise.core.schema.shapes import APPROVAL_SCHEMA

if TYPE_CHECKING:
    from handraise.core.api import RequestView

PROPOSAL = "proposal"
# The hosted form names a proposal's fields "proposal.<name>" beside the approval's decision and reason.
PREFIX = PROPOSAL + "."


async def check_at_create(*, proposal: dict[str, Any] | None, schema: dict[str, Any] | None, kind: str,
                          sensitive: bool, max_fields: int, max_bytes: int) -> dict[str, Any] | None:
    """The proposal's schema as stored, or a 422 naming ``proposal``/``proposal_schema``/``proposal.<field>``."""
    if proposal is None and schema is None:
        return None
    if kind != "approval":
        _refuse("proposal", 'is for approvals only (kind "approval")')
    if sensitive:
        _refuse("proposal", "a sensitive approval takes no proposal: it would be stored and shown in clear")
    if proposal is None:
        _refuse("proposal", "is required with proposal_schema")
    if schema is None:
        _refuse("proposal_schema", "is required with proposal: an object schema its edits are checked against")
    try:
        checked = await check_schema_off_loop(schema, kind="input", max_fields=max_fields, max_bytes=max_bytes,
                                              name="proposal_schema")
    except InvalidSchemaError as e:
        # Each problem where it is (proposal_schema.properties.amount.minimum), under this body's code.
        raise ValidationFailedError(e.message, fields=e.fields) from None
    if not isinstance(checked, dict) or checked.get("type") != "object":
        _refuse("proposal_schema", 'must be an object form ({"type": "object", "properties": …})')
    errors = await validate_answer_off_loop(checked, proposal)
    if errors:
        raise ValidationFailedError("the proposal is not valid against proposal_schema",
                                    fields=[{"field": _name(e), "message": e.message} for e in errors])
    return checked


async def answer_errors(*, schema: dict[str, Any] | None, proposal_schema: dict[str, Any] | None, response: Any,
                        t: gettext.NullTranslations = ENGLISH) -> list[FieldError]:
    """An answer's problems: against the request's schema, and an edited proposal against its own."""
    if proposal_schema is None or not isinstance(response, dict) or PROPOSAL not in response:
        return await validate_answer_off_loop(schema, response, t=t)
    rest = {k: v for k, v in response.items() if k != PROPOSAL}
    errors = await validate_answer_off_loop(schema, rest, t=t)
    if rest.get("decision") != "approve":
        return [*errors, FieldError(PROPOSAL, t.gettext("Only an approval carries an edited proposal."), "type")]
    edited = response[PROPOSAL]
    problems = [FieldError(_name(e), e.message, e.keyword)
                for e in await validate_answer_off_loop(proposal_schema, edited, t=t)]
    if isinstance(edited, dict):
        # An approver changes the proposal's fields; adding others would approve what nobody proposed.
        known = proposal_schema.get("properties", {})
        problems += [FieldError(PREFIX + name, t.gettext("This is not a field of the proposal."), "additionalProperties")
                     for name in edited if name not in known]
    return [*errors, *problems]


def result(*, proposal: dict[str, Any] | None, response: Any) -> Any:
    """What the agent reads for a valid answer: an approval carries the proposal as approved and ``edited``."""
    if proposal is None or not isinstance(response, dict) or response.get("decision") != "approve":
        return response
    approved = response.get(PROPOSAL, proposal)
    return {**response, PROPOSAL: approved, "edited": canonical_json(approved) != canonical_json(proposal)}


def editable(view: RequestView) -> bool:
    """Whether an approver may edit ``view``'s proposal: one with a proposal that one approval decides.
    Several approvers (``approvals_required`` ≥ 2) approve the proposal as proposed (core/quorum.py),
    so forms show it read-only there."""
    return view.proposal is not None and view.proposal_schema is not None and (view.approvals_required or 1) < 2


def form_schema(*, proposal: dict[str, Any], proposal_schema: dict[str, Any]) -> dict[str, Any]:
    """One flat object schema a form draws for an approval with a proposal: the proposal's fields
    (``proposal.<name>``, filled in with the proposal's values) before the decision and reason."""
    properties: dict[str, Any] = {}
    for name, node in proposal_schema.get("properties", {}).items():
        node = copy.deepcopy(node)
        node.setdefault("title", name.replace("_", " ").capitalize())
        if name in proposal:
            node["default"] = proposal[name]
        properties[PREFIX + name] = node
    properties.update(copy.deepcopy(APPROVAL_SCHEMA["properties"]))
    required = [PREFIX + name for name in proposal_schema.get("required", [])] + ["decision"]
    return {"type": "object", "properties": properties, "required": required}


def from_form(value: Any, *, proposal: dict[str, Any] | None, posted: Mapping[str, Sequence[str]] | None) -> Any:
    """A form's flat answer (``proposal.<name>`` fields) as the approval answer the service takes.

    A rejection leaves the proposal behind (the form posts its fields whichever button was pressed);
    a post without any of the proposal's fields (a one-click approve link) approves it as it stands.
    ``posted`` None: a form that always shows every field of the proposal (a chat modal), whose
    values are the proposal as approved, a field left empty included.
    """
    if proposal is None or not isinstance(value, dict):
        return value
    answer = {k: v for k, v in value.items() if not k.startswith(PREFIX)}
    shown = posted is None or any(posted.get(k) for k in posted if k.startswith(PREFIX))
    if answer.get("decision") == "approve" and shown:
        answer[PROPOSAL] = {k[len(PREFIX):]: v for k, v in value.items() if k.startswith(PREFIX)}
    return answer


def _name(error: FieldError) -> str:
    return PREFIX + error.field if error.field else PROPOSAL


def _refuse(field: str, message: str) -> None:
    raise ValidationFailedError(f"{field} {message}", fields=[{"field": field, "message": message}])

"""The subset's vocabulary: kinds, formats, widgets, limits, the approval schema, and shape predicates."""

from __future__ import annotations

from typing import Any

MAX_FIELDS = 20
MAX_SCHEMA_BYTES = 8192

# "choice" is an input whose answer is picked from buttons: a string enum or a boolean.
KINDS = ("input", "approval", "choice")
FORMATS = ("date", "time", "date-time", "email", "uri", "password")
WIDGETS = (
    "text", "textarea", "password", "integer", "number", "boolean", "enum",
    "multi_enum", "date_range", "date", "time", "date-time", "email", "uri",
)

APPROVAL_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"], "title": "Decision"},
        "reason": {"type": "string", "title": "Reason", "maxLength": 2000},
    },
    "required": ["decision"],
    "additionalProperties": False,
}

# A plain string longer than this is answered in a text area rather than a line.
TEXTAREA_FROM = 200


def node_type(node: dict) -> Any:
    # A bare {"enum": [...]} is the DESIGN's "string enum".
    if "type" not in node and "enum" in node:
        return "string"
    return node.get("type")


def is_date_range(node: Any) -> bool:
    return (
        isinstance(node, dict)
        and node.get("type") == "array"
        and isinstance(node.get("items"), dict)
        and node["items"].get("format") == "date"
    )


def is_approval(schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return False
    decision = schema.get("properties", {}).get("decision")
    return isinstance(decision, dict) and decision.get("enum") == ["approve", "reject"]

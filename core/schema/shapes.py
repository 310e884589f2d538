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
    # A bare {"enum": [...]} is the DESIGN's "string enum"; so are bare labelled choices.
    if "type" not in node and ("enum" in node or labelled_choices(node) is not None):
        return "string"
    return node.get("type")


LABELLED = ("oneOf", "anyOf")


def labelled_choices(node: Any) -> list[dict] | None:
    """The options of JSON Schema's labelled choices, ``oneOf``/``anyOf`` of ``{"const", "title"}``
    (as react-jsonschema-form reads them), or None when ``node`` is not shaped so."""
    if not isinstance(node, dict):
        return None
    for key in LABELLED:
        options = node.get(key)
        if isinstance(options, list) and options and all(isinstance(o, dict) and "const" in o for o in options):
            return options
    return None


def choice_values(node: dict) -> list[str]:
    """The values a choice node accepts: its enum, or its labelled options' consts."""
    options = labelled_choices(node)
    if options is not None:
        return [o["const"] for o in options]
    return list(node.get("enum", ()))


def choice_titles(node: dict) -> list[str]:
    """What a person reads for each choice: the option's title where labelled, else the value."""
    options = labelled_choices(node)
    if options is not None:
        return [str(o.get("title") or o["const"]) for o in options]
    return [str(v) for v in node.get("enum", ())]


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

"""A pydantic model as a Handraise form: its JSON schema, flattened into the supported subset or refused."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from handraise.client.errors import InvalidRequest
from handraise.core.errors import InvalidSchemaError
from handraise.core.schema import check_schema


def form_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The form schema for ``model``, or ``InvalidRequest`` saying what a human could not fill in.

    pydantic writes enums as ``$ref``s and optional fields as ``anyOf [X, null]``; both are folded
    into the flat shapes of the subset (an optional field is one that may be left out). Everything
    else is checked by the server's own subset check, so the refusal comes at call time.
    """
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"form() takes a pydantic model class, not {model!r}")
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    try:
        properties = {name: _flatten(node, defs, name) for name, node in (raw.get("properties") or {}).items()}
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if raw.get("title"):
            schema["title"] = raw["title"]
        if raw.get("required"):
            schema["required"] = list(raw["required"])
        if raw.get("additionalProperties") is False:
            schema["additionalProperties"] = False
        check_schema(schema)
    except InvalidSchemaError as e:
        raise InvalidRequest(f"{model.__name__} cannot be a Handraise form: {e.message}", status=None,
                             code="invalid_schema", details={"fields": e.fields} if e.fields else None) from None
    return schema


def _flatten(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        target = defs.get(node.pop("$ref").rsplit("/", 1)[-1])
        if target is None or target.get("type") == "object":
            raise _refused(where, "nested models are not supported; use flat fields")
        node = {**target, **node}
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o != {"type": "null"}]
        if len(options) != 1:
            raise _refused(where, "a union of types is not supported; give one type")
        node = {**_flatten(options[0], defs, where), **node}
        if node.get("default", 0) is None:
            node.pop("default")  # None is pydantic's 'left out', not a value a human could give
    if isinstance(node.get("items"), dict):
        node["items"] = _flatten(node["items"], defs, where)
    return node


def _refused(where: str, message: str) -> InvalidSchemaError:
    field = f"schema.properties.{where}"
    return InvalidSchemaError(f"{field}: {message}", fields=[{"field": field, "message": message}])

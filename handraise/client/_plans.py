"""The client's operations as plans (a flow and what to make of its result), shared by both clients."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from handraise.client._protocol import Call, Flow, RetryPolicy, call_flow, outcome, settle_flow
from handraise.client.errors import InvalidRequest, Rejected
from handraise.client.results import Decision
from handraise.core.api import CreateRequestBody, LinkRecord, RequestRecord

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

DEFAULT_TIMEOUT_SECONDS = 300
# Below the server's default long-poll cap (60 s), so a wait is answered, never cut by a proxy.
WAIT_CHUNK_SECONDS = 50.0


@dataclass(frozen=True)
class Plan(Generic[T]):
    flow: Flow
    finish: Callable[[Any], T]


def new_unique_id(prefix: str = "hr") -> str:
    """A fresh ``unique_id``: generated once per call and kept through every retry of it."""
    return f"{prefix}-{uuid.uuid4()}"


def create_body(*, message: str, schema: Mapping[str, Any] | None, timeout: int, sensitive: bool, kind: str,
                run_id: str | None, channels: list[str] | None, unique_id: str | None,
                approvals_required: int | None = None, reject_policy: str | None = None) -> dict[str, Any]:
    """The create body, checked with the server's own model before anything is sent."""
    raw: dict[str, Any] = {"unique_id": unique_id or new_unique_id(), "message_for_user": message,
                           "timeout_seconds": timeout, "kind": kind, "sensitive": sensitive}
    for name, value in (("schema", dict(schema) if schema is not None else None), ("run_id", run_id),
                        ("channels", list(channels) if channels is not None else None),
                        ("approvals_required", approvals_required), ("reject_policy", reject_policy)):
        if value is not None:
            raw[name] = value
    try:
        CreateRequestBody.model_validate(raw)
    except ValidationError as e:
        fields = [{"field": ".".join(str(p) for p in err["loc"]) or "body", "message": err["msg"]}
                  for err in e.errors()]
        raise InvalidRequest("the request is not valid", status=None, code="validation_error",
                             details={"fields": fields}) from None
    return raw


def whole_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A create body as given, with a ``unique_id`` when it has none. Unchecked here: the server judges
    every field (and knows fields a client older than it does not), so a refusal reads as the server says it."""
    whole = dict(body)
    whole.setdefault("unique_id", new_unique_id())
    return whole


class Plans:
    """Builds each operation's plan; ``Handraise`` and ``AsyncHandraise`` run them."""

    def __init__(self, *, policy: RetryPolicy, wait_chunk: float) -> None:
        self.policy = policy
        self.wait_chunk = wait_chunk

    def settle(self, body: dict[str, Any]) -> Flow:
        return settle_flow(Call("POST", "/v1/requests", json=body), timeout_seconds=body["timeout_seconds"],
                           policy=self.policy, wait_chunk=self.wait_chunk)

    def ask(self, body: dict[str, Any]) -> Plan[Any]:
        return Plan(self.settle(body), lambda record: outcome(record).response)

    def approve(self, body: dict[str, Any], *, raise_on_reject: bool) -> Plan[Decision]:
        def finish(record: RequestRecord) -> Decision:
            decision = Decision.from_request(outcome(record))
            if raise_on_reject and not decision.approved:
                raise Rejected(f"rejected: {decision.reason}" if decision.reason else "rejected", decision=decision)
            return decision

        return Plan(self.settle(body), finish)

    def form(self, body: dict[str, Any], model: type[M]) -> Plan[M]:
        return Plan(self.settle(body), lambda record: model.model_validate(outcome(record).response))

    def create(self, body: dict[str, Any]) -> Plan[RequestRecord]:
        flow = call_flow(Call("POST", "/v1/requests", json=body), policy=self.policy)
        return Plan(flow, RequestRecord.model_validate)

    def wait(self, request_id: str) -> Plan[RequestRecord]:
        flow = settle_flow(Call("GET", f"/v1/requests/{request_id}"), timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
                           policy=self.policy, wait_chunk=self.wait_chunk)
        return Plan(flow, outcome)

    def get(self, request_id: str) -> Plan[RequestRecord]:
        return Plan(call_flow(Call("GET", f"/v1/requests/{request_id}"), policy=self.policy),
                    RequestRecord.model_validate)

    def page(self, *, status: str | None, run_id: str | None, cursor: str | None,
             limit: int) -> Plan[tuple[list[RequestRecord], str | None]]:
        """One page of ``GET /v1/requests``: its records and the next page's cursor (None: the last)."""
        params = {"limit": str(limit)}
        for name, value in (("status", status), ("run_id", run_id), ("cursor", cursor)):
            if value is not None:
                params[name] = value
        return Plan(call_flow(Call("GET", "/v1/requests", params=params), policy=self.policy),
                    lambda body: ([RequestRecord.model_validate(r) for r in body["requests"]],
                                  body.get("next_cursor")))

    def cancel(self, request_id: str) -> Plan[RequestRecord]:
        flow = call_flow(Call("POST", f"/v1/requests/{request_id}/cancel"), policy=self.policy, idempotent=False)
        return Plan(flow, RequestRecord.model_validate)

    def submit(self, unique_id: str, response: Any) -> Plan[RequestRecord]:
        flow = call_flow(Call("POST", "/api/human-feedback/submit", json={"unique_id": unique_id,
                                                                          "response": response}),
                         policy=self.policy, idempotent=False)
        return Plan(flow, lambda body: RequestRecord.model_validate(body["request"]))

    def mint_link(self, request_id: str, recipient: str | None) -> Plan[LinkRecord]:
        body = {"recipient": recipient} if recipient is not None else {}
        flow = call_flow(Call("POST", f"/v1/requests/{request_id}/links", json=body), policy=self.policy,
                         idempotent=False)
        return Plan(flow, LinkRecord.model_validate)


def approval_message(action: str, details: str | Mapping[str, Any] | None) -> str:
    if details is None:
        return action
    if isinstance(details, Mapping):
        lines = "\n".join(f"{key}: {value}" for key, value in details.items())
    else:
        lines = str(details)
    return f"{action}\n\n{lines}" if lines else action

"""Where the MCP tools reach requests: the service in this process, or a Handraise server over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from handraise.client import ApiError, AsyncHandraise, Cancelled, Expired, HandraiseClientError
from handraise.client.errors import error_from_reply
from handraise.core.api import CreateRequestBody, LinkRecord, RequestRecord, RequestView, parse_body
from handraise.core.errors import HandraiseError
from handraise.core.http.auth import Principal
from handraise.core.service import RequestService


class ToolError(Exception):
    """A failure the tool reports to the model as its result (``isError``), in words it can act on."""


class Backend(Protocol):
    async def create(self, body: dict[str, Any]) -> RequestRecord: ...

    async def settle(self, record: RequestRecord) -> RequestRecord:
        """Wait until the request is terminal; returns it (answered, expired or cancelled)."""
        ...

    async def cancel(self, record: RequestRecord) -> None: ...

    async def forward_link(self, record: RequestRecord) -> LinkRecord:
        """A one-time form link for the human this agent serves (the ``forward`` scope)."""
        ...


def _tool_error(error: HandraiseError) -> ToolError:
    # In the words ClientBackend reads from the same refusal over HTTP (the error envelope, as the client
    # tells it: every problem once), so a tool's error is the same through /mcp and ``handraise mcp``.
    return ToolError(str(error_from_reply(error.status, error.to_json())))


class ServiceBackend:
    """In the server itself (``/mcp``): the lifecycle service, acting as the key that called."""

    def __init__(self, *, service: RequestService, principal: Principal) -> None:
        self.service = service
        self.principal = principal

    def _record(self, view: RequestView) -> RequestRecord:
        return RequestRecord.model_validate(view.to_json(include_response=True))

    async def create(self, body: dict[str, Any]) -> RequestRecord:
        try:
            parsed = parse_body(CreateRequestBody, body, what="request body")
            view, _ = await self.service.create(tenant_id=self.principal.tenant_id, principal=self.principal.name,
                                                body=parsed)
        except HandraiseError as e:
            raise _tool_error(e) from None
        return self._record(view)

    async def settle(self, record: RequestRecord) -> RequestRecord:
        service, tenant = self.service, self.principal.tenant_id
        view = await service.get(tenant_id=tenant, request_id=record.id, with_deliveries=False)
        try:
            view = await service.until_terminal(tenant_id=tenant, view=view)
        except HandraiseError as e:  # the server is stopping: the tool call ends with why, to be made again
            raise _tool_error(e) from None
        settled = self._record(view)
        purge = service.response_delivered(view) if view.sensitive and view.has_response else None
        if purge is not None:
            await asyncio.shield(purge)  # handed to the agent once: delete it, as the HTTP API does
        return settled

    async def cancel(self, record: RequestRecord) -> None:
        try:
            await self.service.cancel(tenant_id=self.principal.tenant_id, request_id=record.id,
                                      principal=self.principal.name)
        except HandraiseError:
            pass  # already terminal: nothing to cancel

    async def forward_link(self, record: RequestRecord) -> LinkRecord:
        if "forward" not in self.principal.scopes:
            raise ToolError("this key lacks the forward scope")
        try:
            link = await self.service.mint_link(tenant_id=self.principal.tenant_id, request_id=record.id,
                                                principal=self.principal.name, recipient=None, forward=True)
        except HandraiseError as e:
            raise _tool_error(e) from None
        return LinkRecord.model_validate(link.to_json())


class ClientBackend:
    """Over HTTP (``handraise mcp`` on stdio): the Python client, which re-attaches after any failure."""

    def __init__(self, *, client: AsyncHandraise) -> None:
        self.client = client

    async def create(self, body: dict[str, Any]) -> RequestRecord:
        try:
            return await self.client.create_request(body)  # whole, as ServiceBackend hands it to the service
        except ApiError as e:
            raise ToolError(str(e)) from None

    async def settle(self, record: RequestRecord) -> RequestRecord:
        try:
            return await self.client.wait(record.id)
        except (Expired, Cancelled) as e:
            return e.request or record
        except HandraiseClientError as e:
            raise ToolError(f"lost the request while waiting: {e}") from None

    async def cancel(self, record: RequestRecord) -> None:
        try:
            await self.client.cancel(record.id)
        except HandraiseClientError:
            pass  # already terminal, or the server is gone: its deadline ends it

    async def forward_link(self, record: RequestRecord) -> LinkRecord:
        try:
            return await self.client.mint_link(record.id)
        except HandraiseClientError as e:
            raise ToolError(f"cannot mint a link for the human: {e}") from None

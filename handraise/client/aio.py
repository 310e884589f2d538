"""``AsyncHandraise``: the asyncio client (the same calls as ``Handraise``, awaited)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from handraise.client import _transport
from handraise.client._plans import (
    DEFAULT_TIMEOUT_SECONDS,
    WAIT_CHUNK_SECONDS,
    Plan,
    Plans,
    approval_message,
    create_body,
    whole_body,
)
from handraise.client._protocol import RetryPolicy, Sleep
from handraise.client._sse import SseDecoder
from handraise.client.results import Decision, Event
from handraise.core.api import LinkRecord, RequestRecord

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class AsyncHandraise:
    """Ask humans through a Handraise server and await their answers.

    ``url`` and ``key`` default to ``HANDRAISE_URL`` and ``HANDRAISE_KEY``. Every asking call takes a
    ``unique_id`` (one is generated when omitted) that stays the same through every retry, so a call
    repeated after a crash with the same ``unique_id`` re-attaches to the same request.
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, wait_chunk: float = WAIT_CHUNK_SECONDS,
                 http: httpx.AsyncClient | None = None) -> None:
        self.url, self._key = _transport.resolve(url, key)
        self._timeout = timeout
        self._http = http or httpx.AsyncClient()
        self._plans = Plans(policy=retry or RetryPolicy(), wait_chunk=wait_chunk)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncHandraise:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, plan: Plan[T]) -> T:
        flow = plan.flow
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = flow.send(None)  # type: ignore[arg-type]
                    continue
                try:
                    response = await self._http.request(**_transport.request_args(step, base=self.url, key=self._key,
                                                                            timeout=self._timeout))
                except httpx.TransportError as e:
                    step = flow.throw(_transport.failure(e))
                    continue
                step = flow.send(_transport.reply(response))
        except StopIteration as stop:
            return plan.finish(stop.value)

    # -- asking ----------------------------------------------------------------------------------

    async def ask(self, message: str, *, schema: Mapping[str, Any] | None = None,
                  timeout: int = DEFAULT_TIMEOUT_SECONDS, sensitive: bool = False, run_id: str | None = None,
                  channels: Sequence[str] | None = None, unique_id: str | None = None) -> Any:
        """Ask and wait; returns the answer (a string without ``schema``), raises ``Expired``/``Cancelled``."""
        return await self._run(self._plans.ask(create_body(
            message=message, schema=schema, timeout=timeout, sensitive=sensitive, kind="input", run_id=run_id,
            channels=list(channels) if channels is not None else None, unique_id=unique_id)))

    async def approve(self, action: str, *, details: str | Mapping[str, Any] | None = None,
                      timeout: int = DEFAULT_TIMEOUT_SECONDS, run_id: str | None = None,
                      channels: Sequence[str] | None = None, unique_id: str | None = None,
                      raise_on_reject: bool = False, approvals_required: int | None = None,
                      reject_policy: str | None = None) -> Decision:
        """Ask for approve/reject; returns the ``Decision`` (``Rejected`` raised only with ``raise_on_reject``).
        ``approvals_required``: that many distinct people must approve (``Decision.votes`` lists them);
        ``reject_policy``: ``"any"`` (default) rejection rejects, or ``"quorum"``."""
        return await self._run(self._plans.approve(create_body(
            message=approval_message(action, details), schema=None, timeout=timeout, sensitive=False,
            kind="approval", run_id=run_id, channels=list(channels) if channels is not None else None,
            unique_id=unique_id, approvals_required=approvals_required,
            reject_policy=reject_policy), raise_on_reject=raise_on_reject))

    async def form(self, message: str, model: type[M], *, timeout: int = DEFAULT_TIMEOUT_SECONDS,
                   sensitive: bool = False, run_id: str | None = None, channels: Sequence[str] | None = None,
                   unique_id: str | None = None) -> M:
        """Ask a human to fill in ``model``'s fields; returns a validated instance of it."""
        from handraise.client.forms import form_schema

        return await self._run(self._plans.form(create_body(
            message=message, schema=form_schema(model), timeout=timeout, sensitive=sensitive, kind="input",
            run_id=run_id, channels=list(channels) if channels is not None else None, unique_id=unique_id), model))

    # -- requests one by one -----------------------------------------------------------------------

    async def create(self, message: str, *, schema: Mapping[str, Any] | None = None,
                     timeout: int = DEFAULT_TIMEOUT_SECONDS, sensitive: bool = False, approval: bool = False,
                     run_id: str | None = None, channels: Sequence[str] | None = None,
                     unique_id: str | None = None) -> RequestRecord:
        """Create a request without waiting (idempotent on ``unique_id``)."""
        return await self._run(self._plans.create(create_body(
            message=message, schema=schema, timeout=timeout, sensitive=sensitive,
            kind="approval" if approval else "input", run_id=run_id,
            channels=list(channels) if channels is not None else None, unique_id=unique_id)))

    async def create_request(self, body: Mapping[str, Any]) -> RequestRecord:
        """Create a request from a whole ``POST /v1/requests`` body (every field the API takes: ``on_timeout``,
        ``assign_to``, ``approvals_required``, ``proposal``, ...) without waiting; idempotent on its
        ``unique_id`` (generated when absent). The server checks it: ``InvalidRequest`` names each bad field."""
        return await self._run(self._plans.create(whole_body(body)))

    async def wait(self, request_id: str) -> RequestRecord:
        """Wait until the request is answered (re-attaching after failures); raises ``Expired``/``Cancelled``."""
        return await self._run(self._plans.wait(request_id))

    async def get(self, request_id: str) -> RequestRecord:
        return await self._run(self._plans.get(request_id))

    async def requests(self, *, status: str | None = None, run_id: str | None = None,
                       page_size: int = 100) -> AsyncIterator[RequestRecord]:
        """This tenant's requests, oldest first (``read`` or ``ask`` scope), fetched a page at a time::

            async for record in hr.requests(status="pending"): ...

        Each request appears once even while others are being created; those may appear at the end.
        """
        cursor: str | None = None
        while True:
            records, cursor = await self._run(self._plans.page(status=status, run_id=run_id, cursor=cursor,
                                                               limit=page_size))
            for record in records:
                yield record
            if cursor is None:
                return

    async def cancel(self, request_id: str) -> RequestRecord:
        return await self._run(self._plans.cancel(request_id))

    # -- operator tools --------------------------------------------------------------------------

    async def submit(self, unique_id: str, response: Any) -> RequestRecord:
        """Answer a request (a key with the ``answer`` scope); returns it, now answered."""
        return await self._run(self._plans.submit(unique_id, response))

    async def mint_link(self, request_id: str, *, recipient: str | None = None) -> LinkRecord:
        """A one-time hosted-form link for the request (``answer`` scope)."""
        return await self._run(self._plans.mint_link(request_id, recipient))

    @contextlib.asynccontextmanager
    async def events(self, *, run_id: str | None = None,
                           types: Sequence[str] | None = None) -> AsyncIterator[AsyncIterator[Event]]:
        """This tenant's events as they happen (``read`` scope)::

            async with hr.events(types=["request.created"]) as events:   # subscribed from here on
                async for event in events: ...

        A broken stream raises ``ServerUnavailable``; subscribe again to go on.
        """
        try:
            async with self._http.stream("GET", self.url + "/v1/events", params=_transport.event_params(run_id, types),
                                         headers=_transport.headers(self._key),
                                         timeout=httpx.Timeout(self._timeout, read=None)) as response:
                if response.status_code >= 400:
                    raise _transport.stream_error(response.status_code, await response.aread())
                yield self._decode(response)
        except httpx.TransportError as e:
            raise _transport.broken_stream(e) from None

    @staticmethod
    async def _decode(response: httpx.Response) -> AsyncIterator[Event]:
        decoder = SseDecoder()
        try:
            async for line in response.aiter_lines():
                event = decoder.feed(line)
                if event is not None:
                    yield event
        except httpx.TransportError as e:
            raise _transport.broken_stream(e) from None


__all__ = ["AsyncHandraise"]

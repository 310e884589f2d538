"""Calling the homeserver: matrix-nio's error responses (it does not raise) become one ConnectorError.

The base of the Matrix connector's parts (session, sync loop, direct messages, the connector itself)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from nio import AsyncClient, RoomRedactResponse, RoomSendResponse
from nio.exceptions import LocalProtocolError

from handraise.bots.matrix.settings import MatrixSettings
from handraise.core.chat import ChatConnector
from handraise.core.errors import ConfigError, ConnectorError

# Errors that retrying cannot fix: a bad token, a room the bot may not post in.
_PERMANENT = frozenset({"M_FORBIDDEN", "M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_NOT_FOUND", "M_BAD_JSON",
                        "M_NOT_JSON", "M_TOO_LARGE", "M_UNRECOGNIZED", "M_INVALID_PARAM", "M_USER_DEACTIVATED"})
_AUTH_ERRORS = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_FORBIDDEN", "M_USER_DEACTIVATED"})
NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class HomeserverCalls(ChatConnector[MatrixSettings]):
    """The bot's matrix-nio client and the calls every part of the connector makes through it."""

    _client: AsyncClient | None = None

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise ConnectorError("matrix connector is not started")
        return self._client

    async def _call(self, awaitable: Any, ok: type, what: str, *, auth: bool = False) -> Any:
        """Await a nio call; its error response (nio does not raise) becomes one ConnectorError."""
        try:
            response = await awaitable
        except NETWORK_ERRORS as e:
            raise ConnectorError(f"matrix: could not {what}: {type(e).__name__}") from e
        except LocalProtocolError as e:
            raise ConnectorError(f"matrix: could not {what}: {e}", permanent=True) from e
        if isinstance(response, ok):
            return response
        code = getattr(response, "status_code", None)
        message = str(getattr(response, "message", "") or "")[:200]
        if auth and code in _AUTH_ERRORS:
            raise ConfigError(f"matrix: the homeserver refused the bot's credentials ({code}: {message})")
        retry_ms = getattr(response, "retry_after_ms", None)
        raise ConnectorError(f"matrix: could not {what}: {code or 'error'} {message}".strip(),
                             retry_after=retry_ms / 1000 if retry_ms else None, permanent=code in _PERMANENT)

    async def _send(self, room_id: str, event_type: str, content: dict[str, Any], *, what: str,
                    txn_id: str | None = None) -> str:
        response = await self._call(self.client.room_send(room_id, event_type, content, tx_id=txn_id),
                                    RoomSendResponse, what)
        return response.event_id

    async def _redact(self, room_id: str, event_id: str, *, reason: str = "Answers like this go through the form"
                      ) -> bool:
        try:
            await self._call(self.client.room_redact(room_id, event_id, reason=reason), RoomRedactResponse,
                             f"redact in {room_id}")
        except ConnectorError as e:
            self.log.warning("matrix: could not redact an event (%s)", e.message, extra={"room_id": room_id})
            return False
        return True

    async def _raw(self, method: str, path: str, body: Any = None, *, what: str = "account data") -> tuple[int, Any]:
        """A client-server API call that matrix-nio does not offer (account data, a room made its way)."""
        try:
            async with self.http.request(method, f"{self.settings.homeserver}{path}", json=body,
                                         headers={"Authorization": f"Bearer {self.client.access_token}"},
                                         timeout=aiohttp.ClientTimeout(total=30)) as resp:
                return resp.status, await resp.json(content_type=None)
        except (*NETWORK_ERRORS, ValueError) as e:
            raise ConnectorError(f"matrix: {method} {what} failed: {type(e).__name__}") from e

    @staticmethod
    def _raw_error(what: str, status: int, body: Any) -> ConnectorError:
        """A raw call's error answer as ``_call`` words a nio one."""
        body = body if isinstance(body, dict) else {}
        code, message = body.get("errcode"), str(body.get("error") or "")[:200]
        retry_ms = body.get("retry_after_ms")
        return ConnectorError(f"matrix: could not {what}: {code or status} {message}".strip(),
                              retry_after=retry_ms / 1000 if isinstance(retry_ms, int) else None,
                              permanent=code in _PERMANENT)

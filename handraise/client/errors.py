"""The client's one exception tree: every way a call can end other than with its answer.

    HandraiseClientError
    ├── Expired              the request reached its deadline unanswered (.request)
    ├── Cancelled            the request was cancelled (.request)
    ├── Rejected             approve(..., raise_on_reject=True) and the human rejected (.decision)
    ├── AnswerDeleted        a sensitive answer was handed over on an earlier response that was lost
    └── ApiError             the server refused the call (.status, .code, .message, .details)
        ├── InvalidRequest   400, 413, 422: a bad body, schema or answer (.fields)
        ├── Unauthorized     401: no or unknown key
        │   └── Forbidden    403: the key lacks the scope
        ├── NotFound         404: no such request in this key's tenant
        ├── Conflict         409: unique_id reused with another body, already answered, not pending
        ├── Gone             410: a link already used
        └── ServerUnavailable  5xx or 429 after bounded retries, or the server could not be reached

Expiry is never a value: a call that asked a human either returns the answer or raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handraise.client.results import Decision
    from handraise.core.api import RequestRecord


class HandraiseClientError(Exception):
    """Root of everything the client raises (besides programming errors such as a bad argument type)."""


class Expired(HandraiseClientError):
    """The request expired unanswered. An expired approval is never an approval."""

    def __init__(self, message: str, *, request: RequestRecord | None = None) -> None:
        super().__init__(message)
        self.request = request


class Cancelled(HandraiseClientError):
    def __init__(self, message: str, *, request: RequestRecord | None = None) -> None:
        super().__init__(message)
        self.request = request


class Rejected(HandraiseClientError):
    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message)
        self.decision = decision


class AnswerDeleted(HandraiseClientError):
    """Answered, but the sensitive answer was already handed to this agent once and is deleted."""

    def __init__(self, message: str, *, request: RequestRecord) -> None:
        super().__init__(message)
        self.request = request


class ApiError(HandraiseClientError):
    """The server answered with an error envelope ``{"error", "message", "details"?}``."""

    def __init__(self, message: str, *, status: int | None, code: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details: dict[str, Any] = details or {}

    @property
    def fields(self) -> list[dict[str, str]]:
        """Per-field problems, ``[{"field", "message"}]``."""
        return list(self.details.get("fields") or [])

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        # Each problem once: an invalid_schema message is already its first problem.
        said = [f"{f.get('field')}: {f.get('message')}" for f in self.fields]
        rest = [problem for problem in said if problem not in self.message]
        if rest:
            text += " (" + "; ".join(rest) + ")"
        return text


class InvalidRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(Unauthorized):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    pass


class ServerUnavailable(ApiError):
    pass


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
    413: InvalidRequest, 422: InvalidRequest, 429: ServerUnavailable,
}


def error_from_reply(status: int, body: Any) -> HandraiseClientError:
    """The exception for an error reply; 410 ``expired``/``cancelled`` become ``Expired``/``Cancelled``."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        code, message = body["error"], str(body.get("message") or body["error"])
        details = body.get("details") if isinstance(body.get("details"), dict) else None
    else:
        code, message, details = f"http_{status}", f"HTTP {status}", None
    if status == 410 and code == "expired":
        return Expired(message)
    if status == 410 and code == "cancelled":
        return Cancelled(message)
    cls = _BY_STATUS.get(status, ServerUnavailable if status >= 500 else ApiError)
    return cls(message, status=status, code=code, details=details)

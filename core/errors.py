"""Handraise's error tree: every failure the API can report, with its code and status.

One middleware (``core/http/middleware.py``) turns these into OpenWOP's flat
envelope ``{"error": "<code>", "message": "...", "details"?: {...}}``; the code
strings are the API's. Per-field problems travel as ``fields`` and reach the
wire as ``details.fields: [{"field", "message"}]``.

    HandraiseError (500 internal)
    ├── ConfigError                      bad configuration (never reaches HTTP)
    ├── ConnectorError                   a messenger library failed (wrapped once)
    ├── BadRequestError (400 bad_request)            malformed JSON, bad query, a form that cannot be read
    │   ├── NotUtf8Error (400 bad_request)           a posted form whose bytes or charset are not UTF-8
    │   └── SigninRefusedError (400 signin_refused)  an identity provider's sign-in that proves nothing
    ├── UnauthorizedError (401 unauthorized)         no or unknown key, with WWW-Authenticate
    ├── ForbiddenError (403 forbidden)               wrong scope, bad CSRF token
    │   ├── NotAssignedError (403 not_assigned)      the request is assigned to other people
    │   ├── FourEyesError (403 four_eyes)            its on_behalf_of person may not approve it
    │   ├── PersonRequiredError (403 person_required)  only a proven person's vote or approval counts
    │   ├── PersonNotBoundError (403 person_not_bound) a key bound to nobody named a person
    │   ├── PersonMismatchError (403 person_mismatch)  a key bound to one person named another
    │   └── NoPersonError (403 no_person)            a provider's sign-in that is none of the people
    ├── NotFoundError (404 not_found)                absent, or another tenant's; no such path
    ├── MethodNotAllowedError (405 method_not_allowed)  with Allow
    ├── ConflictError (409 conflict)                 same unique_id, other body, pending
    │   ├── UniqueIdReusedError (409 unique_id_reused)
    │   ├── AlreadyAnsweredError (409 already_answered)
    │   ├── NotPendingError (409 not_pending)        cancel of a terminal request
    │   ├── AlreadyVotedError (409 already_voted)    a person's other vote on a quorum request
    │   └── SeveralTenantsError (409 several_tenants)  a provider's sign-in that is a person of several
    ├── GoneError (410 gone)
    │   ├── ExpiredError (410 expired)
    │   ├── RequestCancelledError (410 cancelled)
    │   └── LinkUsedError (410 link_used)
    ├── PayloadTooLargeError (413 payload_too_large)
    ├── ValidationFailedError (422 validation_error) a body field is wrong
    │   ├── InvalidSchemaError (422 invalid_schema)  details.fields: each problem where it is in the schema
    │   └── InvalidAnswerError (422 invalid_answer)  details.fields: [{"field", "message"}]
    ├── RetryLaterError                               with Retry-After
    │   ├── RateLimitedError (429 rate_limited)
    │   ├── OverloadedError (503 overloaded)          too many writes in flight
    │   └── UnavailableError (503 unavailable)        the store does not answer
    │       └── ShuttingDownError (503 unavailable)   this instance is stopping: call again
    ├── CapabilityNotProvidedError (501 capability_not_provided)
    ├── NotDeliveredError (502 not_delivered)        no channel of a person took a private note
    └── ProviderUnavailableError (502 provider_unavailable)  the identity provider did not answer
"""

from __future__ import annotations

from typing import Any


class HandraiseError(Exception):
    code: str = "internal"
    status: int = 500

    def __init__(self, message: str = "", *, fields: list[dict[str, str]] | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message or self.code.replace("_", " "))
        self.message = message or self.code.replace("_", " ")
        # Per-field problems, each {"field", "message"}: what a form or a chat bot shows beside a field.
        self.fields: list[dict[str, str]] = list(fields or [])
        self.details: dict[str, Any] = dict(details or {})

    def to_json(self) -> dict[str, Any]:
        return error_body(self.code, self.message, fields=self.fields, details=self.details)


def error_body(code: str, message: str, *, fields: list[dict[str, str]] | None = None,
               details: dict[str, Any] | None = None) -> dict[str, Any]:
    """OpenWOP's flat error envelope; ``details`` only when there is something in it."""
    body: dict[str, Any] = {"error": code, "message": message}
    extra = dict(details or {})
    if fields:
        extra["fields"] = list(fields)
    if extra:
        body["details"] = extra
    return body


class ConfigError(HandraiseError):
    code = "config"


class ConnectorError(HandraiseError):
    code = "connector"
    status = 502

    def __init__(self, message: str = "", *, retry_after: float | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        # Honoured by the delivery retry loop (Telegram RetryAfter, Slack Retry-After).
        self.retry_after = retry_after
        # A permanent failure (chat not found, bad token) is not retried.
        self.permanent = permanent


class BadRequestError(HandraiseError):
    code = "bad_request"
    status = 400


class NotUtf8Error(BadRequestError):
    """The API's code, but its own page: the hosted form tells the person the form must be UTF-8."""


class SigninRefusedError(BadRequestError):
    """A sign-in through the identity provider that proves nothing: its state unknown, used, expired or
    from another browser, an error from the provider, a code it refused, an ID token that fails a check.
    ``reason`` says which, for the page; nothing was stored and no session made."""

    code = "signin_refused"

    def __init__(self, message: str = "", *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class UnauthorizedError(HandraiseError):
    code = "unauthorized"
    status = 401

    def __init__(self, message: str = "", *, challenge: str | None = None) -> None:
        super().__init__(message)
        # Sent as WWW-Authenticate: a 401 names how to authenticate (RFC 9110 §15.5.2). None for a
        # credential HTTP has no scheme for (the inbox's session cookie).
        self.challenge = challenge


class ForbiddenError(HandraiseError):
    code = "forbidden"
    status = 403


class NotAssignedError(ForbiddenError):
    code = "not_assigned"


class FourEyesError(ForbiddenError):
    code = "four_eyes"


class PersonRequiredError(ForbiddenError):
    """A quorum vote, or an approval of a request made on someone's behalf, from someone proven as nobody
    (a key or session bound to no person, a plain link): it could be anyone, so it counts for no one."""

    code = "person_required"


class PersonNotBoundError(ForbiddenError):
    """A key (or session) bound to no person tried to act as one, or to mint something naming one."""

    code = "person_not_bound"


class PersonMismatchError(ForbiddenError):
    """A key bound to one person named another: it acts only as its own person."""

    code = "person_mismatch"


class NoPersonError(ForbiddenError):
    """A sign-in through the identity provider that matched none of the people (of the tenant asked
    for), or whose address the provider did not verify. ``reason``: ``"nobody"`` or ``"unverified"``."""

    code = "no_person"

    def __init__(self, message: str = "", *, reason: str = "nobody") -> None:
        super().__init__(message)
        self.reason = reason


class NotFoundError(HandraiseError):
    code = "not_found"
    status = 404


class MethodNotAllowedError(HandraiseError):
    code = "method_not_allowed"
    status = 405

    def __init__(self, message: str = "", *, allowed: list[str]) -> None:
        super().__init__(message)
        # Sent as Allow: a 405 names the methods the path takes (RFC 9110 §15.5.6).
        self.allowed = allowed


class ConflictError(HandraiseError):
    code = "conflict"
    status = 409


class UniqueIdReusedError(ConflictError):
    code = "unique_id_reused"


class AlreadyAnsweredError(ConflictError):
    code = "already_answered"


class NotPendingError(ConflictError):
    code = "not_pending"


class AlreadyVotedError(ConflictError):
    code = "already_voted"


class SeveralTenantsError(ConflictError):
    """A sign-in through the identity provider that is a person of several tenants, none named: the
    sign-in starts again with ``?tenant=``. ``tenants``: their ids."""

    code = "several_tenants"

    def __init__(self, message: str = "", *, tenants: list[str]) -> None:
        super().__init__(message)
        self.tenants = tenants


class GoneError(HandraiseError):
    code = "gone"
    status = 410


class ExpiredError(GoneError):
    code = "expired"


class RequestCancelledError(GoneError):
    code = "cancelled"


class LinkUsedError(GoneError):
    code = "link_used"


class AlreadyAnsweredGone(GoneError):
    """A link whose request was answered by another route: 410 for the form, not 409."""

    code = "already_answered"


class PayloadTooLargeError(HandraiseError):
    code = "payload_too_large"
    status = 413


class ValidationFailedError(HandraiseError):
    code = "validation_error"
    status = 422


class InvalidSchemaError(ValidationFailedError):
    code = "invalid_schema"


class InvalidAnswerError(ValidationFailedError):
    code = "invalid_answer"


class RetryLaterError(HandraiseError):
    """A refusal that says when to try again (the Retry-After header)."""

    def __init__(self, message: str = "", *, retry_after: int = 1) -> None:
        super().__init__(message)
        # Seconds; sent as the Retry-After header.
        self.retry_after = retry_after


class RateLimitedError(RetryLaterError):
    code = "rate_limited"
    status = 429


class CapabilityNotProvidedError(HandraiseError):
    code = "capability_not_provided"
    status = 501


class NotDeliveredError(HandraiseError):
    """A sign-in or link for a person was to go to their own channel and none took it: nothing usable was
    handed out (the link is never returned instead)."""

    code = "not_delivered"
    status = 502


class ProviderUnavailableError(HandraiseError):
    """The identity provider did not answer in time, or not as OpenID Connect says (discovery, keys,
    token endpoint): nothing is wrong with the person's sign-in, try again later."""

    code = "provider_unavailable"
    status = 502


class UnavailableError(RetryLaterError):
    """The store does not answer (PostgreSQL restarting, stopped, unreachable): retry after a moment."""

    code = "unavailable"
    status = 503


class ShuttingDownError(UnavailableError):
    """This instance is stopping (SIGTERM): a blocking call ends unanswered, nothing is lost; the same call
    again re-attaches, on another instance or on this one once it is back."""


class OverloadedError(RetryLaterError):
    """Past the instance's bound on writes in flight (``limits.max_writes_in_flight``): nothing was done."""

    code = "overloaded"
    status = 503

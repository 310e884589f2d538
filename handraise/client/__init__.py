"""The Python client of Handraise: ask a human, approve an action, fill a form, from sync or async code.

    from handraise.client import Handraise

    with Handraise() as hr:                   # HANDRAISE_URL, HANDRAISE_KEY
        code = hr.ask("Enter the code sent to your phone", sensitive=True,
                      schema={"type": "string", "pattern": "^[0-9]{6}$"})

Every asking call either returns the answer or raises (``Expired``, ``Cancelled``, ...; see
``handraise.client.errors``): expiry is never a value.
"""

from __future__ import annotations

from handraise.client._plans import new_unique_id
from handraise.client._protocol import RetryPolicy
from handraise.client.aio import AsyncHandraise
from handraise.client.errors import (
    AnswerDeleted,
    ApiError,
    Cancelled,
    Conflict,
    Expired,
    Forbidden,
    Gone,
    HandraiseClientError,
    InvalidRequest,
    NotFound,
    Rejected,
    ServerUnavailable,
    Unauthorized,
)
from handraise.client.results import Decision, Event
from handraise.client.sync import Handraise
from handraise.core.api import DeliveryRecord, LinkRecord, RequestRecord

__all__ = [
    "AnswerDeleted", "ApiError", "AsyncHandraise", "Cancelled", "Conflict", "Decision", "DeliveryRecord", "Event",
    "Expired", "Forbidden", "Gone", "Handraise", "HandraiseClientError", "InvalidRequest", "LinkRecord", "NotFound",
    "Rejected", "RequestRecord", "RetryPolicy", "ServerUnavailable", "Unauthorized", "new_unique_id",
]

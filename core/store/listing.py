"""Which of a tenant's requests a list shows: the one filter the API's pages (``list_requests``) and the
operator inbox's list and history build on; each adds its own order and paging."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from handraise.core.models import RequestRow

requests_t = RequestRow.__table__


def tenant_requests(tenant_id: str, *, statuses: Sequence[str] | None = None, run_id: str | None = None,
                    channel: str | None = None, created_by: str | None = None, since: float | None = None,
                    until: float | None = None, unexpired_at: float | None = None) -> Any:
    """``SELECT`` the tenant's requests with every filter given (None: not filtered). One status is an
    equality, so the (tenant, status, created_at) index serves it (migration 0009)."""
    c = requests_t.c
    conditions = [c.tenant_id == tenant_id]
    if statuses is not None:
        conditions.append(c.status == statuses[0] if len(statuses) == 1 else c.status.in_(statuses))
    for value, condition in ((run_id, lambda v: c.run_id == v), (channel, lambda v: c.resolved_via == v),
                             (created_by, lambda v: c.created_by == v), (since, lambda v: c.created_at >= v),
                             (until, lambda v: c.created_at < v), (unexpired_at, lambda v: c.expires_at > v)):
        if value is not None:
            conditions.append(condition(value))
    return select(requests_t).where(*conditions)

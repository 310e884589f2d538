"""Request views this instance made, held for the one call that comes next for them (issue 19): the answer
to a request created here, and the wait that collects a request resolved here with no wait parked. Either
call then needs no read of the store, which on SQLite is a trip to the database thread and back.

Only a view that a read could not contradict in what the call uses is held: one whose request no channel
delivers, no callback reports and no escalation schedule or vote moves, so no delivery row is ever added to
it or withdrawn and its routing (assign_to, channels) stays as made. A pending one may have been answered,
cancelled or expired since: ``RequestService.submit`` decides that by compare-and-set, as ever. A resolved
one, in addition, holds no sensitive answer (purged once collected): a terminal request changes in nothing
else, and requests are never deleted. Each kind is bounded, the oldest dropped first.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from handraise.core.api import RequestView

# Views held of each kind (a few KB each): past it the oldest goes, and its call reads the store.
MAX_HELD = 1024


class HeldViews:
    def __init__(self) -> None:
        # Whether any of these channels delivers to this tenant's people (Dispatcher.delivers; the app sets
        # it). Until then any might, and nothing is held.
        self.may_deliver: Callable[[str, list[str]], bool] = lambda _tenant_id, _channels: True
        self._pending: dict[tuple[str, str], RequestView] = {}  # by (tenant, unique_id): for the answer
        self._resolved: dict[str, RequestView] = {}  # by id: for the collecting wait

    def fixed(self, view: RequestView) -> bool:
        """Whether no delivery row can be added to the request or withdrawn, and its routing (assign_to,
        channels) and votes stay as they are: no channel delivers it, no callback, schedule or quorum."""
        return (not view.deliveries and view.callback_url is None and view.schedule is None
                and view.approvals_required is None and not self.may_deliver(view.tenant_id, view.channels))

    def created(self, view: RequestView) -> None:
        if self.fixed(view):
            _put(self._pending, (view.tenant_id, view.unique_id), view)

    def answering(self, tenant_id: str, unique_id: str) -> RequestView | None:
        """The request as created here, for its answer (taken: another answer reads the store)."""
        return self._pending.pop((tenant_id, unique_id), None)

    def resolved(self, view: RequestView) -> None:
        """A resolution that no wait here was parked for."""
        if view.terminal and not view.sensitive and self.fixed(view):
            _put(self._resolved, view.id, view)

    def collecting(self, tenant_id: str, request_id: str) -> RequestView | None:
        """The request as resolved here, for the wait that collects it (taken; another tenant's is left)."""
        view = self._resolved.get(request_id)
        if view is None or view.tenant_id != tenant_id:
            return None
        del self._resolved[request_id]
        return view

    def __len__(self) -> int:
        return len(self._pending) + len(self._resolved)


def _put(held: dict[Any, RequestView], key: Any, view: RequestView) -> None:
    held.pop(key, None)
    if len(held) >= MAX_HELD:
        del held[next(iter(held))]
    held[key] = view

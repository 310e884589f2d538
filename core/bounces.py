"""A delivery that bounced after it was sent (a mail returned, a Matrix invite refused): its request goes
where the connector falls back to, as when none of its direct deliveries could be posted at all. A part of
:class:`~handraise.core.dispatch.Dispatcher`, kept here so the dispatch module holds delivering itself."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from handraise.core.errors import NotFoundError

if TYPE_CHECKING:
    from handraise.core.deliveries import DeliveryRecord
    from handraise.core.dispatch import Dispatcher

log = logging.getLogger("handraise.core.dispatch")

__all__ = ["Bounces"]


class Bounces:
    """What a bounce sets off (a base of Dispatcher: ``self`` is the dispatcher)."""

    def _on_bounce(self: Dispatcher, delivery: DeliveryRecord) -> None:
        if not self._closed:
            self._spawn(delivery.request_id, self._after_bounce(delivery))

    async def _after_bounce(self: Dispatcher, bounced: DeliveryRecord) -> None:
        """A still-pending request whose channel now reaches nobody (no message of it there stands) is
        posted to the connector's ``fallback_targets`` that it has no delivery to yet."""
        connector = self.connectors.get(bounced.channel)
        if connector is None:
            return
        try:
            view = await self.service.get(tenant_id=bounced.tenant_id, request_id=bounced.request_id,
                                          with_deliveries=False)
        except NotFoundError:
            return
        fallback = connector.fallback_targets(view)
        if view.terminal or not fallback:
            return
        rows = [r for r in await self.deliveries.of_request(tenant_id=view.tenant_id, request_id=view.id)
                if r.channel == bounced.channel]
        if any(r.status in ("pending", "sent") for r in rows):
            return  # another message of this channel still reaches people (or is on its way)
        had = {r.target for r in rows}
        log.info("a delivery bounced: falling back", extra={"request_id": view.id, "channel": connector.name})
        await self._fall_back(connector, view, [bounced.target], [t for t in fallback if t not in had])

"""The connector: the allowlisted answer path every delivering channel shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from conftest import base_config, running_app, settings_from
from pydantic import BaseModel, ConfigDict

from handraise.core.api import RequestView
from handraise.core.appkeys import CONNECTORS, SERVICE
from handraise.core.connectors import Connector
from handraise.core.outcomes import outcome_text


class PlainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allowed: list[str] = []


class PlainConnector(Connector):
    name: ClassVar[str] = "plain"
    settings_model = PlainSettings
    backoff_initial = 0.01
    backoff_cap = 0.04

    def targets(self, tenant_id: str) -> list[str]:
        return ["the-room"]

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        return user_id == "ok-user"

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        return {}

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        return None


async def test_submit_answer_enforces_the_allowlist_and_maps_outcomes(tmp_path: Path) -> None:
    settings = settings_from(base_config(f"sqlite:///{tmp_path / 'c.db'}"))
    async with running_app(settings, connector_classes=[PlainConnector]) as api:
        connector = api.app[CONNECTORS]["plain"]
        created = await api.create({"unique_id": "sa-1", "message_for_user": "Size?", "channels": ["plain"],
                                    "schema": {"type": "integer", "minimum": 1}})
        rid = created["id"]

        refused = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="eve", response=3)
        assert (refused.code, refused.message) == ("not_authorized", "You are not authorized to answer this.")
        invalid = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="ok-user", response=0)
        assert invalid.code == "invalid" and invalid.message.startswith("That answer is not valid:")
        accepted = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="ok-user", response=3)
        assert accepted.accepted and accepted.view is not None and accepted.view.resolved_by == "plain:ok-user"
        again = await connector.submit_answer(tenant_id="acme", request_id=rid, user_id="ok-user", response=4)
        assert again.code == "already_answered"
        other_tenant = await connector.submit_answer(tenant_id="globex", request_id=rid, user_id="ok-user",
                                                     response=4)
        assert other_tenant.code == "not_found"

        entries = await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=rid)
        events = [(e["event"], e["principal"]) for e in entries]
        assert ("answer_refused", "plain:eve") in events
        assert ("answered", "plain:ok-user") in events
        assert outcome_text(accepted.view) == "Answered by ok-user via plain"

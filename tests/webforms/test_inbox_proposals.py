"""Approve with edits in the operator inbox: the proposal's fields filled in, an invalid edit refused beside
its field with nothing decided, an edited approval recorded as the operator's with ``edited: true``."""

from __future__ import annotations

from pathlib import Path

from .test_inbox_http import ask, inbox_app, signed_in

PROPOSAL_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 500, "title": "Amount (EUR)"},
                   "to": {"type": "string", "minLength": 1, "title": "Recipient"}},
    "required": ["amount", "to"],
}
PROPOSAL = {"amount": 120, "to": "ACME GmbH"}


async def test_an_operator_edits_the_proposal_before_approving(tmp_path: Path) -> None:
    async with inbox_app(tmp_path) as api, signed_in(api) as browser:
        req = await ask(api, kind="approval", message_for_user="Pay the invoice?", proposal=PROPOSAL,
                        proposal_schema=PROPOSAL_SCHEMA)
        status, html, _ = await browser.get(f"/inbox/r/{req['id']}")
        assert status == 200 and 'name="proposal.amount"' in html and 'value="120"' in html
        assert 'value="ACME GmbH"' in html and 'value="approve"' in html
        status, html, _ = await browser.post(f"/inbox/r/{req['id']}", {
            "proposal.amount": "900", "proposal.to": "ACME GmbH", "decision": "approve"})
        assert status == 422 and "Amount (EUR)" in html
        _, now = await api.call("GET", f"/v1/requests/{req['id']}")
        assert now["status"] == "pending"
        status, _, _ = await browser.post(f"/inbox/r/{req['id']}", {
            "proposal.amount": "100", "proposal.to": "ACME GmbH", "decision": "approve", "reason": "agreed discount"})
        assert status == 303
        done = await api.wait(req["id"])
        assert done["response"] == {"decision": "approve", "reason": "agreed discount",
                                    "proposal": {"amount": 100, "to": "ACME GmbH"}, "edited": True}
        assert done["answered_via"] == "inbox"
        # The detail page names the edited field.
        _, html, _ = await browser.get(f"/inbox/r/{req['id']}")
        assert "Amount (EUR) (edited)" in html

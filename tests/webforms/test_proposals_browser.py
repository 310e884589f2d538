"""Approve with edits in Chromium: the hosted form shows the proposal filled in, refuses an invalid
edit with the field's own message, and the agent gets the edited proposal with ``edited: true``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.browser import screenshot
from harness.fixtures import browser, page  # noqa: F401  (registers the fixtures)

from .hosting import expect_text, hosted, submit, watch

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROPOSAL_SCHEMA = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "maxLength": 200, "title": "Command"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "title": "Replicas"},
    },
    "required": ["command", "replicas"],
}
PROPOSAL = {"command": "kubectl scale deploy/web", "replicas": 4}


async def test_the_approver_edits_the_proposal_then_approves(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        problems = watch(page, app)
        request = await app.ask(kind="approval", message_for_user="Scale the web tier?", proposal=PROPOSAL,
                                proposal_schema=PROPOSAL_SCHEMA)
        await page.goto(await app.link(request["id"]))
        replicas = page.locator('input[name="proposal.replicas"]')
        assert await page.locator('input[name="proposal.command"]').input_value() == PROPOSAL["command"]
        assert await replicas.input_value() == "4"
        await screenshot(page, "webform-proposal")
        # Out of bounds: the server refuses it and says why beside the field; nothing is decided.
        await page.evaluate("document.querySelector('form[data-answer]').noValidate = true")
        await replicas.fill("50")
        assert await submit(page, 'button[name="decision"][value="approve"]') == 422
        await expect_text(page, "#errors", "Replicas")
        assert (await app.get(request["id"]))["status"] == "pending"
        await page.locator('input[name="proposal.replicas"]').fill("2")
        assert await submit(page, 'button[name="decision"][value="approve"]') == 200
        result = await app.wait(request["id"])
        assert result["response"] == {"decision": "approve", "proposal": {**PROPOSAL, "replicas": 2},
                                      "edited": True}
        assert problems == []


async def test_a_rejection_leaves_the_proposal_alone(page: Any, tmp_path: Path) -> None:  # noqa: F811
    async with hosted(tmp_path) as app:
        request = await app.ask(kind="approval", message_for_user="Scale the web tier?", proposal=PROPOSAL,
                                proposal_schema=PROPOSAL_SCHEMA)
        await page.goto(await app.link(request["id"]))
        await page.fill('textarea[name="reason"]', "Not during the sale")
        assert await submit(page, 'button[name="decision"][value="reject"]') == 200
        result = await app.wait(request["id"])
        assert result["response"] == {"decision": "reject", "reason": "Not during the sale"}

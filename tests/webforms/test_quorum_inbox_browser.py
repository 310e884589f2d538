"""A quorum request in the inbox in Debian's Chromium: the card shows the tally, and a vote taken
elsewhere edits it live (request.voted on the inbox's stream), as every chat message is edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from handraise.core.appkeys import SERVICE
from harness.fixtures import browser, page  # noqa: F401  (registers the fixtures)
from tests.webforms.test_inbox_browser import card_appears, inbox, sign_in, watch

pytestmark = pytest.mark.asyncio(loop_scope="session")

PEOPLE = [{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}, {"id": "dave", "name": "Dave"}]


async def test_the_card_shows_the_tally_and_a_vote_elsewhere_edits_it_live(tmp_path: Path, page: Any) -> None:
    async with inbox(tmp_path, people=PEOPLE) as hosted:
        problems = watch(page)
        await sign_in(page, hosted, person="dave")
        request = await hosted.ask(kind="approval", message_for_user="Deploy v3?", approvals_required=2)
        await card_appears(page, request["id"])
        tally = page.locator(f'li.card[data-id="{request["id"]}"] .tally')
        assert "0 of 2 approved. Still expected: Alice, Bob, Dave." in await tally.inner_text()
        await hosted.app[SERVICE].submit(tenant_id="acme", request_id=request["id"], channel="telegram",
                                         response={"decision": "approve"}, principal="person:alice")
        await page.wait_for_function(
            "id => (document.querySelector(`li.card[data-id='${id}'] .tally`) || {}).textContent"
            "?.includes('1 of 2 approved: Alice')", arg=request["id"], timeout=10_000)
        assert "Still expected: Bob, Dave." in await tally.inner_text()
        assert problems == []

"""The contract every chat connector passes: deliver, a human answers with the right principal;
a stranger's answer and a chat reply to a sensitive request are refused.

Drivers live in ``tests/bots/contract_<name>.py`` (see ``tests/bots/contract.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Api

from tests.bots.contract import ConnectorDriver, load_drivers

DRIVERS = load_drivers()


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> ConnectorDriver:
    return DRIVERS[request.param](request)


@pytest.fixture
async def api(driver: ConnectorDriver, tmp_path: Path) -> AsyncIterator[Api]:
    async with driver.running(f"sqlite:///{tmp_path / 'contract.db'}") as running:
        yield running


def ask(driver: ConnectorDriver, uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": f"Contract question {uid}", "timeout_seconds": 60,
            "channels": [driver.channel], **extra}


async def status_of(api: Api, request_id: str) -> str:
    status, body = await api.call("GET", f"/v1/requests/{request_id}")
    assert status == 200, body
    return body["status"]


async def test_delivered_and_answered_by_button_with_principal(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-approve", kind="approval"))
    posted = await driver.posted(api, request)
    _, body = await api.call("GET", f"/v1/requests/{request['id']}")
    assert [(d["channel"], d["status"]) for d in body["deliveries"]] == [(driver.channel, "sent")]

    await driver.press(posted, "approve")
    done = await api.wait(request["id"], timeout=10)
    assert done["status"] == "answered"
    assert done["response"] == {"decision": "approve"}
    assert done["answered_by"] == driver.principal()
    assert done["answered_via"] == driver.channel
    await driver.assert_withdrawn(posted, "approved")


async def test_answered_by_chat_reply(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-reply"))
    posted = await driver.posted(api, request)

    await driver.reply(posted, "blue, like the sea")
    done = await api.wait(request["id"], timeout=10)
    assert (done["status"], done["response"]) == ("answered", "blue, like the sea")
    assert done["answered_by"] == driver.principal()


async def test_stranger_is_refused_and_nothing_changes(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-stranger", kind="approval"))
    posted = await driver.posted(api, request)

    await driver.assert_refused(await driver.press(posted, "approve", stranger=True))
    await driver.assert_refused(await driver.reply(posted, "approve", stranger=True))
    assert await status_of(api, request["id"]) == "pending"

    await driver.press(posted, "reject")
    done = await api.wait(request["id"], timeout=10)
    assert (done["response"], done["answered_by"]) == ({"decision": "reject"}, driver.principal())


async def test_chat_reply_to_sensitive_request_is_refused(driver: ConnectorDriver, api: Api) -> None:
    request = await api.create(ask(driver, "c-sensitive", sensitive=True,
                                   schema={"type": "string", "pattern": "^[0-9]{6}$"}))
    posted = await driver.posted(api, request)

    await driver.assert_reply_removed(await driver.reply(posted, "493817"))
    assert await status_of(api, request["id"]) == "pending"
    status, body = await api.call("GET", f"/v1/requests/{request['id']}/wait", params={"timeout": "0"})
    assert status == 200 and "493817" not in str(body)

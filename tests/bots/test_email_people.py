"""Email with people: an assigned request is mailed only to the assigned people's addresses among the
tenant's recipients, and an escalation step mails its people; through a real SMTP server."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import base_config, running_app, settings_from
from handraise.bots.email import EmailConnector
from handraise.core.appkeys import DELIVERIES, DISPATCHER, SERVICE
from handraise.webforms.connector import WebFormsChannel
from harness.mail import SmtpRecorder, smtp_server, unique_address  # noqa: F401  (the session fixture)
from tests.bots.email_helpers import email_section, links_in, open_page, post_form

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def people_mail(tmp_path: Path, server: SmtpRecorder) -> AsyncIterator[Any]:
    addresses = {name: unique_address(name) for name in ("alice", "bob", "carol", "erin")}
    config = base_config(f"sqlite:///{tmp_path / 'mail-people.db'}",
                         email=email_section(server, recipients=["group:oncall", addresses["carol"]]))
    config["tenants"][0]["people"] = [
        {"id": "alice", "email": addresses["alice"], "groups": ["oncall"]},
        {"id": "bob", "email": addresses["bob"], "groups": ["oncall"]},
        {"id": "carol", "email": addresses["carol"]},
        {"id": "dave", "groups": ["oncall"]},  # no address
        {"id": "erin", "email": addresses["erin"]},  # an address, but no recipient of acme's mail
    ]
    async with running_app(settings_from(config), connector_classes=[WebFormsChannel, EmailConnector]) as api:
        api.addresses = addresses
        yield api


async def targets(api: Any, request_id: str) -> list[str]:
    await api.app[DISPATCHER].idle()
    return sorted(r.target for r in await api.app[DELIVERIES].of_request(tenant_id="acme", request_id=request_id))


async def approve(api: Any, mail: Any) -> None:
    """Approve through the mail's approve link (its confirmation page, then the POST)."""
    url = next(u for u in links_in(mail.part("plain")) if u.endswith("?decision=approve"))
    status, html = await open_page(api, url)
    assert status == 200
    assert (await post_form(api, url, [("decision", "approve")], html))[0] == 200


def question(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Rotate the keys?", "kind": "approval", "timeout_seconds": 600,
            "channels": ["email"], **extra}


async def test_an_unassigned_request_is_mailed_to_every_recipient(tmp_path: Path, smtp_server: SmtpRecorder) -> None:
    async with people_mail(tmp_path, smtp_server) as api:
        created = await api.create(question("m-all"))
        a = api.addresses
        assert await targets(api, created["id"]) == sorted([a["alice"], a["bob"], a["carol"]])


async def test_an_assigned_request_is_mailed_only_to_its_people(tmp_path: Path, smtp_server: SmtpRecorder) -> None:
    async with people_mail(tmp_path, smtp_server) as api:
        a = api.addresses
        created = await api.create(question("m-assigned", assign_to=["alice", "dave", "erin"]))
        # Dave has no address; Erin's is no recipient of this tenant's mail: neither is mailed.
        assert await targets(api, created["id"]) == [a["alice"]]
        (mail,) = await smtp_server.wait_to(a["alice"])
        assert smtp_server.to(a["bob"]) == [] and smtp_server.to(a["carol"]) == []
        await approve(api, mail)
        done = await api.wait(created["id"])
        assert done["answered_by"] == f"email:{a['alice']}"


async def test_a_request_assigned_to_nobody_with_an_address_is_mailed_to_nobody(
        tmp_path: Path, smtp_server: SmtpRecorder) -> None:
    async with people_mail(tmp_path, smtp_server) as api:
        created = await api.create(question("m-none", assign_to=["dave"]))
        assert await targets(api, created["id"]) == []


async def test_an_escalation_step_mails_its_people(tmp_path: Path, smtp_server: SmtpRecorder) -> None:
    async with people_mail(tmp_path, smtp_server) as api:
        a = api.addresses
        created = await api.create(question("m-esc", assign_to=["alice"],
                                            escalation=[{"after_seconds": 60, "to": ["carol"]}]))
        assert await targets(api, created["id"]) == [a["alice"]]
        api.app[SERVICE].clock = lambda: time.time() + 61
        await api.app[SERVICE].sweep()
        assert await targets(api, created["id"]) == sorted([a["alice"], a["carol"]])
        (mail,) = await smtp_server.wait_to(a["carol"])
        assert len(smtp_server.to(a["alice"])) == 1  # not mailed twice
        await approve(api, mail)
        assert (await api.wait(created["id"]))["answered_by"] == f"email:{a['carol']}"

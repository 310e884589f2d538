"""Tenant defaults per kind (``[tenants.defaults.<kind>]``): checked at load with one clear line, applied at
create where the request leaves a field out, and checked against the request like the agent's own field."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import OTHER_AGENT_KEY, Api, base_config, running_app, settings_from
from handraise.core.appkeys import SERVICE
from handraise.core.config import load_settings
from handraise.core.errors import ConfigError

PEOPLE = """
  [[tenants.people]]
  id = "alice"
  groups = ["oncall"]
  [[tenants.people]]
  id = "bob"
  groups = ["secondary"]
"""


def _config(tmp_path: Path, defaults: str) -> Path:
    path = tmp_path / "handraise.toml"
    path.write_text(f"[[tenants]]\nid = 'acme'\n{PEOPLE}\n{defaults}\n")
    return path


def test_defaults_load(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path, """
  [tenants.defaults.approval]
  timeout_seconds = 900
  assign_to = ["group:oncall"]
  on_timeout = "reject"
  reminders = [60, 300]
  [[tenants.defaults.approval.escalation]]
  after_seconds = 120
  to = ["bob"]
  channels = ["telegram"]
"""), environ={})
    approval = settings.tenants[0].defaults["approval"]
    assert (approval.timeout_seconds, approval.assign_to, approval.on_timeout) == (900, ["group:oncall"], "reject")
    assert approval.escalation[0].to == ["bob"] and approval.reminders == [60, 300]


@pytest.mark.parametrize(("defaults", "needle"), [
    ("[tenants.defaults.approval]\nassign_to = ['zed']",
     "tenants[0].defaults.approval.assign_to: zed is not one of this tenant's people"),
    ("[tenants.defaults.input]\non_timeout = 'reject'", 'defaults.input.on_timeout: "reject" is for approvals only'),
    ("[tenants.defaults.approval]\non_timeout = {default = {decision = 'approve'}}",
     "defaults.approval.on_timeout: an approval never takes a default"),
    ("[tenants.defaults.approval]\non_timeout = 'never'", "tenants[0].defaults.approval.on_timeout"),
    ("[tenants.defaults.approval]\non_timeout = {value = 1}", "tenants[0].defaults.approval.on_timeout"),
    ("[tenants.defaults.approval]\ntimeout_seconds = 100\n[[tenants.defaults.approval.escalation]]\n"
     "after_seconds = 100\nto = ['bob']", "defaults.approval.escalation.0.after_seconds: must be shorter than"),
    ("[tenants.defaults.approval]\n[[tenants.defaults.approval.escalation]]\nafter_seconds = 60\nto = ['bob']\n"
     "[[tenants.defaults.approval.escalation]]\nafter_seconds = 30\nto = ['alice']",
     "defaults.approval.escalation.1.after_seconds: must be later than the step before"),
    ("[tenants.defaults.approval]\n[[tenants.defaults.approval.escalation]]\nafter_seconds = 60\nto = ['group:x']",
     "defaults.approval.escalation.0.to: group:x is not one of"),
    ("[tenants.defaults.approval]\n[[tenants.defaults.approval.escalation]]\nafter_seconds = 60\nto = ['bob']\n"
     "channels = ['pager']", "defaults.approval.escalation.0.channels: pager is not a channel"),
    ("[tenants.defaults.approval]\n[[tenants.defaults.approval.escalation]]\nafter_seconds = '60'\nto = ['bob']",
     "tenants[0].defaults.approval.escalation[0].after_seconds"),
    ("[tenants.defaults.approval]\nreminders = [120, 60]", "defaults.approval.reminders.1: must be later"),
    ("[tenants.defaults.approval]\nreminders = [301]\ntimeout_seconds = 300", "defaults.approval.reminders.0"),
    ("[tenants.defaults.approval]\ntimeout_seconds = 999999999", "must be at most limits.max_timeout_seconds"),
    ("[tenants.defaults.question]\ntimeout_seconds = 60", "tenants[0].defaults.question"),
    ("[tenants.defaults.approval]\nchannels = ['web']", "tenants[0].defaults.approval.channels: unknown key"),
])
def test_bad_defaults_are_one_line_naming_the_key(tmp_path: Path, defaults: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(_config(tmp_path, defaults), environ={})
    assert needle in str(e.value), str(e.value)


# -- applied at create ------------------------------------------------------------------------


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    config = base_config(f"sqlite:///{tmp_path / 'defaults.db'}")
    config["tenants"][0]["people"] = [{"id": "alice", "groups": ["oncall"]}, {"id": "bob"}]
    config["tenants"][0]["defaults"] = {"approval": {
        "timeout_seconds": 900, "assign_to": ["group:oncall"], "on_timeout": "reject", "reminders": [60],
        "escalation": [{"after_seconds": 300, "to": ["bob"]}]}}
    async with running_app(settings_from(config)) as a:
        yield a


def body(**extra: Any) -> dict[str, Any]:
    return {"unique_id": f"d-{secrets.token_hex(6)}", "message_for_user": "Ship it?", **extra}


def seconds(request: dict[str, Any]) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(request["expires_at"]) - datetime.fromisoformat(request["created_at"])
            ).total_seconds()


async def test_an_approval_that_leaves_fields_out_gets_the_tenants_defaults(api: Api) -> None:
    created = await api.create(body(kind="approval"))
    assert seconds(created) == 900
    assert (created["assign_to"], created["on_timeout"]) == (["group:oncall"], "reject")
    assert [s["to"] for s in created["escalation"]] == [["bob"]]
    assert [r["after_seconds"] for r in created["reminders"]] == [60]


async def test_fields_the_request_gives_are_its_own(api: Api) -> None:
    created = await api.create(body(kind="approval", timeout_seconds=120, assign_to=["bob"], on_timeout="expire",
                                    escalation=[{"after_seconds": 60, "to": ["alice"]}], remind_after_seconds=30))
    assert seconds(created) == 120 and created["assign_to"] == ["bob"] and created["on_timeout"] == "expire"
    assert [s["to"] for s in created["escalation"]] == [["alice"]]
    assert created["reminders"] == [{"after_seconds": 30, "sent_at": None}]


async def test_another_kind_gets_no_approval_defaults(api: Api) -> None:
    created = await api.create(body())
    assert "assign_to" not in created and "escalation" not in created and created["on_timeout"] == "expire"


async def test_a_default_that_does_not_fit_the_request_is_a_422_naming_the_field(api: Api) -> None:
    # The default escalation step (300 s) would never be reached in the request's own 200 s.
    status, data = await api.call("POST", "/v1/requests", json=body(kind="approval", timeout_seconds=200))
    assert status == 422
    assert data["details"]["fields"][0]["field"] == "escalation.0.after_seconds"


async def test_another_tenant_gets_none_of_them(api: Api) -> None:
    status, created = await api.call("POST", "/v1/requests", key=OTHER_AGENT_KEY, json=body(kind="approval"))
    assert status == 201 and "assign_to" not in created and created["on_timeout"] == "expire"


async def test_a_retry_is_the_same_request(api: Api) -> None:
    request = body(kind="approval")
    first = await api.create(request)
    status, again = await api.call("POST", "/v1/requests", json=request)
    assert status == 200 and again["id"] == first["id"]
    created = (await api.app[SERVICE].journal_entries(tenant_id="acme", request_id=first["id"]))[0]
    assert created["data"]["assign_to"] == ["group:oncall"] and created["data"]["on_timeout"] == "reject"


async def test_a_default_step_on_a_channel_that_does_not_serve_the_tenant_stops_the_start(tmp_path: Path) -> None:
    from handraise.core.app import create_app

    config = base_config(f"sqlite:///{tmp_path / 'defaults-channel.db'}")
    config["tenants"][0]["people"] = [{"id": "bob"}]
    config["tenants"][0]["defaults"] = {"approval": {"escalation": [
        {"after_seconds": 60, "to": ["bob"], "channels": ["telegram"]}]}}
    with pytest.raises(ConfigError) as e:
        await create_app(settings_from(config), connector_classes=[])
    assert str(e.value).startswith("tenants[0].defaults.approval.escalation.0.channels: telegram does not serve "
                                   "tenant acme")

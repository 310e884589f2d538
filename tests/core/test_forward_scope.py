"""The ``forward`` scope: an agent's key mints a one-time link only for a request it created itself.

DESIGN.md: never implied by ``ask``, journaled on each use, and links are never
shown to plain ``ask`` keys. Over real HTTP, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import AGENT_KEY, OPERATOR_KEY, OTHER_AGENT_KEY, Api, base_config, settings_from, web_app
from handraise.core.appkeys import SERVICE
from handraise.core.config import load_settings
from handraise.core.errors import ConfigError

FORWARD_KEY = "forward-agent-key-0123456789abcdef"
SECOND_FORWARD_KEY = "second-forward-key-0123456789abcdef"
OTHER_FORWARD_KEY = "other-forward-key-0123456789abcdef"


def forward_config(storage_url: str) -> dict[str, Any]:
    config = base_config(storage_url)
    acme, globex = config["tenants"]
    acme["keys"] += [{"id": "agent-fwd", "key": FORWARD_KEY, "scopes": ["ask", "forward"]},
                     {"id": "agent-fwd-b", "key": SECOND_FORWARD_KEY, "scopes": ["ask", "forward"]}]
    globex["keys"] += [{"id": "agent-fwd-2", "key": OTHER_FORWARD_KEY, "scopes": ["ask", "forward"]}]
    return config


@pytest.fixture
async def fwd_api(storage_url: str) -> AsyncIterator[Api]:
    async with web_app(settings_from(forward_config(storage_url))) as a:
        yield a


def body(uid: str) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Approve the deploy?", "timeout_seconds": 60}


async def mint(api: Api, request_id: str, key: str, **json: Any) -> tuple[int, Any]:
    return await api.call("POST", f"/v1/requests/{request_id}/links", key=key, json=json)


async def link_entries(api: Api, tenant_id: str, request_id: str) -> list[dict[str, Any]]:
    entries = await api.app[SERVICE].journal_entries(tenant_id=tenant_id, request_id=request_id)
    return [e for e in entries if e["event"] == "link_minted"]


async def test_a_forward_key_mints_a_working_link_for_its_own_request(fwd_api: Api) -> None:
    req = await fwd_api.create(body("own"), key=FORWARD_KEY)
    status, data = await mint(fwd_api, req["id"], FORWARD_KEY, recipient="the user in this chat")
    assert status == 201, data
    assert data["url"].startswith("http://127.0.0.1:8080/f/") and data["expires_at"] == req["expires_at"]
    token = data["url"].rsplit("/", 1)[1]
    # The link opens the hosted form for exactly this question.
    status, page = await fwd_api.call("GET", f"/f/{token}", key=None)
    assert status == 200 and "Approve the deploy?" in page
    # Each use is journaled, naming the key, the scope and the link, never the token.
    [entry] = await link_entries(fwd_api, "acme", req["id"])
    assert entry["principal"] == "agent:agent-fwd"
    assert entry["data"]["scope"] == "forward" and entry["data"]["recipient"] == "the user in this chat"
    assert entry["data"]["link_id"].startswith("lnk_") and token not in str(entry)
    status, _ = await mint(fwd_api, req["id"], FORWARD_KEY)
    assert status == 201
    assert len(await link_entries(fwd_api, "acme", req["id"])) == 2


async def test_a_forward_key_cannot_mint_for_another_keys_request(fwd_api: Api) -> None:
    plain = await fwd_api.create(body("plain"), key=AGENT_KEY)
    other_forward = await fwd_api.create(body("other-forward"), key=SECOND_FORWARD_KEY)
    for request_id in (plain["id"], other_forward["id"]):
        status, data = await mint(fwd_api, request_id, FORWARD_KEY)
        assert status == 403 and data["error"] == "forbidden", data
        assert "url" not in data and "/f/" not in str(data)
        assert await link_entries(fwd_api, "acme", request_id) == []


async def test_another_tenants_request_is_404_to_a_forward_key(fwd_api: Api) -> None:
    theirs = await fwd_api.create(body("theirs"), key=OTHER_FORWARD_KEY)
    status, data = await mint(fwd_api, theirs["id"], FORWARD_KEY)
    assert status == 404 and data["error"] == "not_found"
    # Same unique_id in the other tenant is another request; still nothing crosses.
    mine = await fwd_api.create(body("theirs"), key=FORWARD_KEY)
    status, _ = await mint(fwd_api, mine["id"], OTHER_FORWARD_KEY)
    assert status == 404
    assert await link_entries(fwd_api, "globex", theirs["id"]) == []


async def test_a_plain_ask_key_never_gets_a_link(fwd_api: Api) -> None:
    # forward is never implied by ask, not even for the key's own request.
    own = await fwd_api.create(body("plain-own"), key=AGENT_KEY)
    status, data = await mint(fwd_api, own["id"], AGENT_KEY)
    assert status == 403 and data["error"] == "forbidden" and "forward" in data["message"]
    status, data = await mint(fwd_api, own["id"], OTHER_AGENT_KEY)
    assert status == 403
    # Nor does the request, once a forward key minted one for its own, show any link to anyone.
    fwd = await fwd_api.create(body("fwd-own"), key=FORWARD_KEY)
    status, link = await mint(fwd_api, fwd["id"], FORWARD_KEY)
    assert status == 201
    for key in (AGENT_KEY, FORWARD_KEY, OPERATOR_KEY):
        status, view = await fwd_api.call("GET", f"/v1/requests/{fwd['id']}", key=key)
        assert status == 200 and link["url"] not in str(view) and "/f/" not in str(view)


async def test_forward_does_not_let_an_agent_answer_or_mint_for_dead_requests(fwd_api: Api) -> None:
    req = await fwd_api.create(body("dead"), key=FORWARD_KEY)
    status, _ = await fwd_api.submit("dead", "yes", key=FORWARD_KEY)
    assert status == 403
    status, _ = await fwd_api.call("POST", f"/v1/requests/{req['id']}/cancel", key=FORWARD_KEY)
    assert status == 200
    status, data = await mint(fwd_api, req["id"], FORWARD_KEY)
    assert status == 410 and data["error"] == "cancelled"
    status, data = await mint(fwd_api, "req_does-not-exist", FORWARD_KEY)
    assert status == 404
    status, data = await mint(fwd_api, req["id"], FORWARD_KEY, recipient="x", extra=1)
    assert status == 422


def test_forward_needs_ask_and_is_never_given_with_answer(tmp_path: Path) -> None:
    for scopes, needle in ((["forward"], "together with ask"), (["read", "forward"], "together with ask"),
                           (["ask", "answer", "forward"], "never answer")):
        path = tmp_path / "c.toml"
        path.write_text(f"[[tenants]]\nid = 'a'\n[[tenants.keys]]\nid = 'k'\nkey = '0123456789abcdefgh'\n"
                        f"scopes = {scopes!r}\n")
        with pytest.raises(ConfigError) as info:
            load_settings(path, environ={})
        assert needle in info.value.message
    path = tmp_path / "ok.toml"
    path.write_text("[[tenants]]\nid = 'a'\n[[tenants.keys]]\nid = 'k'\nkey = '0123456789abcdefgh'\n"
                    "scopes = ['ask', 'forward']\n")
    assert load_settings(path, environ={}).tenants[0].keys[0].scopes == ["ask", "forward"]


def test_the_cli_creates_forward_keys_only_with_ask(tmp_path: Path) -> None:
    def keys(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANDRAISE_")}
        env["HANDRAISE_STORAGE__URL"] = f"sqlite:///{tmp_path / 'h.db'}"
        return subprocess.run([sys.executable, "-m", "handraise", "keys", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=env)

    refused = keys("create", "--tenant", "default", "--scopes", "forward")
    assert refused.returncode == 64 and "together with ask" in refused.stderr
    made = keys("create", "--tenant", "default", "--scopes", "ask,forward", "--id", "mcp-agent")
    assert made.returncode == 0, made.stderr
    assert "mcp-agent\tdefault\task,forward\tactive" in keys("list").stdout

"""``handraise doctor`` against real parts: the SQLite file and PostgreSQL a server migrated, the wire-level
Telegram and Slack fakes, the session's real Synapse, and a running Handraise for public_url; each failure
is one FAIL line with its fix, and only a clean report exits 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from conftest import base_config, running_app, settings_from
from handraise.core import doctor
from handraise.core.cli import main
from handraise.core.config import Settings
from harness.fixtures import synapse  # noqa: F401  (the session's one Synapse)
from harness.synapse import SynapseServer, unique_localpart
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settings_for(storage_url: str, public_url: str, **extra: Any) -> Settings:
    return settings_from(base_config(storage_url, server={"public_url": public_url}, **extra))


@contextlib.asynccontextmanager
async def served(storage_url: str) -> AsyncIterator[str]:
    """A running Handraise on this store (it migrates it); yields its base URL."""
    async with running_app(settings_for(storage_url, "http://127.0.0.1:1")) as api:
        yield api.base


def by_subject(findings: list[doctor.Finding]) -> dict[str, list[doctor.Finding]]:
    out: dict[str, list[doctor.Finding]] = {}
    for f in findings:
        out.setdefault(f.subject, []).append(f)
    return out


def only_failure(findings: list[doctor.Finding], subject: str) -> str:
    failures = [f for f in findings if not f.ok]
    assert [f.subject for f in failures] == [subject], [f.line() for f in findings]
    assert "\n" not in failures[0].line()
    return failures[0].message


# -- the whole report ---------------------------------------------------------------


async def test_a_healthy_deployment_passes_every_check(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    async with FakeTelegram() as tg, FakeSlack() as slack, served(url) as base:
        settings = settings_for(url, base, telegram={
            "token": tg.token, "base_url": tg.base_url, "tenants": {"acme": {"chat_ids": [-100123],
                                                                             "allowed_user_ids": [42]}}},
            slack={"bot_token": slack.bot_token, "signing_secret": "s" * 32, "api_url": slack.api_url,
                   "tenants": {"acme": {"channel": "C0ACME", "allowed_user_ids": ["U0ALICE"]}}})
        findings = await doctor.run(settings)
    assert all(f.ok for f in findings), [f.line() for f in findings]
    subjects = by_subject(findings)
    assert {"config", "store", "telegram", "slack", "public_url", "server secret", "tenant acme",
            "tenant globex"} <= set(subjects)
    assert "migrated to" in subjects["store"][0].message
    assert [c.method for c in tg.calls_of("getMe")] and tg.calls_of("getChat")[0].params["chat_id"] == -100123
    assert not tg.calls_of("sendMessage") and not slack.calls_of("chat.postMessage")  # doctor changes nothing


def _doctor_cli(tmp_path: Path, config: str, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    path = tmp_path / "config.toml"
    path.write_text(config)
    for name in [n for n in os.environ if n.startswith("HANDRAISE_")]:
        monkeypatch.delenv(name)
    code = main(["--config", str(path), "doctor"])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


async def test_the_command_prints_one_line_per_finding_and_exits_by_the_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    async with served(f"sqlite:///{db}") as base:
        config = (f'[server]\npublic_url = "{base}"\n[storage]\nurl = "sqlite:///{db}"\n'
                  '[[tenants]]\nid = "t"\n[[tenants.keys]]\nid = "a"\nkey = "agent-key-0123456789"\nscopes = ["ask"]\n'
                  '[[tenants.keys]]\nid = "o"\nkey = "operator-key-0123456789"\nscopes = ["answer"]\n')
        code, lines, err = await asyncio.to_thread(_doctor_cli, tmp_path, config, monkeypatch, capsys)
        assert code == 0, lines
        assert all(line.startswith("ok  ") for line in lines) and "every check passed" in err
        code, lines, err = await asyncio.to_thread(
            _doctor_cli, tmp_path, config.replace('scopes = ["answer"]', 'scopes = ["read"]'), monkeypatch, capsys)
    assert code == 1 and "1 problem(s)" in err
    assert [line for line in lines if line.startswith("FAIL")] == [
        "FAIL  tenant t: no answer key; make one: handraise keys create --scopes answer,read"]


def test_a_broken_config_is_a_finding_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _err = _doctor_cli(tmp_path, "[server]\nprot = 1\n", monkeypatch, capsys)
    assert code == 1 and lines == [f"FAIL  config: {tmp_path / 'config.toml'}: server.prot: unknown key"]


# -- the store -------------------------------------------------------------------------


async def test_store_that_does_not_exist_yet(tmp_path: Path) -> None:
    async with served(f"sqlite:///{tmp_path / 'other.db'}") as base:
        findings = await doctor.run(settings_for(f"sqlite:///{tmp_path / 'missing.db'}", base))
    assert "does not exist yet; handraise serve creates it" in only_failure(findings, "store")
    assert not (tmp_path / "missing.db").exists()  # doctor created nothing


async def test_store_without_tables_and_store_behind(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    async with served(f"sqlite:///{tmp_path / 'h.db'}") as base:
        findings = await doctor.run(settings_for(f"sqlite:///{empty}", base))
        assert "has no tables yet; start handraise serve once" in only_failure(findings, "store")
        with sqlite3.connect(tmp_path / "h.db") as conn:
            conn.execute("UPDATE alembic_version SET version_num = '0001'")
        findings = await doctor.run(settings_for(f"sqlite:///{tmp_path / 'h.db'}", base))
    message = only_failure(findings, "store")
    assert f"is at migration 0001, this version needs {doctor.migrations_head()}" in message


async def test_postgresql_migrated_unreachable_and_behind(pg_url: str, tmp_path: Path) -> None:
    async with served(f"sqlite:///{tmp_path / 'h.db'}") as base:
        findings = await doctor.run(settings_for(pg_url, base))
        assert all(f.ok for f in findings), [f.line() for f in findings]
        assert "PostgreSQL" in by_subject(findings)["store"][0].message
        closed = f"postgresql://postgres:pw-hidden@127.0.0.1:{_closed_port()}/x"
        findings = await doctor.run(settings_for(closed, base))
        message = only_failure(findings, "store")
        assert "cannot connect" in message and "pw-hidden" not in message and "HANDRAISE_STORAGE__URL" in message
        conn = await asyncpg.connect(pg_url)
        try:
            await conn.execute("UPDATE alembic_version SET version_num = '0001'")
        finally:
            await conn.close()
        findings = await doctor.run(settings_for(pg_url, base))
    assert "is at migration 0001" in only_failure(findings, "store")


# -- the server secret -------------------------------------------------------------------


async def test_a_secret_beside_the_database_or_readable_by_others_is_a_warning_with_its_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    data = tmp_path / "data"
    data.mkdir()
    db, old = data / "h.db", data / "handraise.secret"
    old.write_text(secrets.token_hex(32) + "\n")  # where an earlier version made it, as umask 022 left it
    old.chmod(0o644)
    target = tmp_path / "config" / "handraise" / "server-secret"
    async with served(f"sqlite:///{db}") as base:  # starts on that secret and records its fingerprint
        config = (f'[server]\npublic_url = "{base}"\n[storage]\nurl = "sqlite:///{db}"\n'
                  '[[tenants]]\nid = "t"\n[[tenants.keys]]\nid = "a"\nkey = "agent-key-0123456789"\nscopes = ["ask"]\n'
                  '[[tenants.keys]]\nid = "o"\nkey = "operator-key-0123456789"\nscopes = ["answer"]\n')
        code, lines, err = await asyncio.to_thread(_doctor_cli, tmp_path, config, monkeypatch, capsys)
        assert code == 0, lines  # the deployment works: warnings do not fail the report
        assert [line for line in lines if not line.startswith("ok  ")] == [
            f"WARN  server secret: {old} sits beside the database: whoever copies that folder can check guesses "
            f"of sensitive answers against their digests; move it: mkdir -p -m 700 {target.parent} && mv {old} "
            f"{target}",
            f"WARN  server secret: {old} is readable by group or others (mode 0644); chmod 600 {old}"]
        assert "every check passed; 2 warning(s): each WARN line says what to change" in err
        # As the lines say: the same secret, now in a 0700 folder of its own, 0600.
        target.parent.mkdir(mode=0o700, parents=True)
        old.rename(target)
        target.chmod(0o600)
        code, lines, err = await asyncio.to_thread(_doctor_cli, tmp_path, config, monkeypatch, capsys)
    assert code == 0 and all(line.startswith("ok  ") for line in lines), lines
    assert f"ok    server secret: {target} (mode 0600, apart from the database)" in lines
    assert "warning" not in err
    async with served(f"sqlite:///{db}"):  # the database's recorded fingerprint accepts the moved secret
        pass


def test_the_secret_findings_for_each_place_it_may_live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HANDRAISE_SECURITY__SECRET", raising=False)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    fresh = doctor.check_secret(settings_for(url, "http://127.0.0.1:1"))
    assert [f.line() for f in fresh] == [f"ok    server secret: {tmp_path / 'config' / 'handraise' / 'server-secret'} "
                                         "does not exist yet; handraise serve creates it (0600)"]
    inline = doctor.check_secret(settings_for(url, "http://127.0.0.1:1", security={"secret": "ab" * 32}))
    assert [f.line() for f in inline] == ["ok    server secret: given by [security] secret"]
    beside = tmp_path / "my-secret"  # chosen by the operator, yet beside the database all the same
    beside.write_text("ab" * 32 + "\n")
    beside.chmod(0o600)
    chosen = doctor.check_secret(settings_for(url, "http://127.0.0.1:1", security={"secret_file": str(beside)}))
    assert [f.line() for f in chosen] == [
        f"WARN  server secret: {beside} sits beside the database: whoever copies that folder can check guesses of "
        "sensitive answers against their digests; move it to a folder of its own and set [security] secret_file to it"]
    assert not (tmp_path / "config").exists()  # doctor created nothing


# -- public_url ------------------------------------------------------------------------


async def test_public_url_that_reaches_nothing_or_something_else(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    async with served(url):
        findings = await doctor.run(settings_for(url, f"http://127.0.0.1:{_closed_port()}"))
        message = only_failure(findings, "public_url")
        assert "does not answer" in message and "check [server] public_url" in message
        other = web.Application()
        other.router.add_get("/openapi.json", lambda _r: web.json_response({"info": {"title": "Not us"}}))
        server = TestServer(other, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            findings = await doctor.run(settings_for(url, str(server.make_url("")).rstrip("/")))
        finally:
            await server.close()
    assert "answers, but not as Handraise" in only_failure(findings, "public_url")


# -- Telegram and Slack, through their fakes ---------------------------------------------


async def test_telegram_failures(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    async with FakeTelegram() as tg, served(url) as base:
        def telegram(**over: Any) -> Settings:
            section = {"token": tg.token, "base_url": tg.base_url,
                       "tenants": {"acme": {"chat_ids": [-100123], "allowed_user_ids": [42]}}, **over}
            return settings_for(url, base, telegram=section)

        findings = await doctor.run(telegram(token="123456789:AAwrongWrongWrong"))
        message = only_failure(findings, "telegram")
        assert "getMe failed (Unauthorized)" in message and "check [telegram] token" in message
        assert "AAwrongWrongWrong" not in message
        tg.fail_next("getChat", status=400, description="Bad Request: chat not found")
        message = only_failure(await doctor.run(telegram()), "telegram")
        assert message.startswith("chat -100123 of tenant acme: Bad Request: chat not found; add @")
        message = only_failure(await doctor.run(telegram(mode="webhook", webhook_secret="w" * 20)), "telegram")
        assert f"not {base}/bots/telegram/webhook" in message
        findings = await doctor.run(telegram(base_url=f"http://127.0.0.1:{_closed_port()}/bot"))
        assert "getMe failed (cannot reach" in only_failure(findings, "telegram")


async def test_slack_failures(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    async with FakeSlack() as slack, served(url) as base:
        def with_slack(**over: Any) -> Settings:
            section = {"bot_token": slack.bot_token, "signing_secret": "s" * 32, "api_url": slack.api_url,
                       "tenants": {"acme": {"channel": "C0ACME", "allowed_user_ids": ["U0ALICE"]}}, **over}
            return settings_for(url, base, slack=section)

        message = only_failure(await doctor.run(with_slack(bot_token="xoxb-not-the-token")), "slack")
        assert message == "auth.test refused the bot token (invalid_auth); check [slack] bot_token (xoxb-…)"
        findings = await doctor.run(with_slack(mode="socket", app_token="xapp-wrong"))
        assert "apps.connections.open refused the app token (invalid_auth)" in only_failure(findings, "slack")
        findings = await doctor.run(with_slack(mode="socket", app_token=slack.app_token))
    assert all(f.ok for f in findings), [f.line() for f in findings]


async def test_a_connector_that_cannot_be_configured_is_a_finding(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    async with served(url) as base:
        findings = await doctor.run(settings_for(url, base, slack={"bot_token": "xoxb-1"}))
    assert only_failure(findings, "slack") == "slack.tenants: is required"


# -- Matrix, on the real Synapse -----------------------------------------------------------


async def _matrix_call(server: SynapseServer, token: str, method: str, path: str, body: Any = None) -> Any:
    async with aiohttp.ClientSession() as http, http.request(
            method, f"{server.base_url}/_matrix/client/v3{path}", json=body,
            headers={"Authorization": f"Bearer {token}"}) as resp:
        data = await resp.json()
        assert resp.status == 200, data
        return data


async def test_matrix_findings(synapse: SynapseServer, tmp_path: Path) -> None:  # noqa: F811
    bot_id, bot_token, _ = synapse.register_user(unique_localpart("doctorbot"), "pw-doctor-bot")
    _owner_id, owner_token, _ = synapse.register_user(unique_localpart("owner"), "pw-owner")
    room = (await _matrix_call(synapse, owner_token, "POST", "/createRoom", {"invite": [bot_id]}))["room_id"]
    other = (await _matrix_call(synapse, owner_token, "POST", "/createRoom", {}))["room_id"]
    await _matrix_call(synapse, bot_token, "POST", f"/join/{room}", {})
    url = f"sqlite:///{tmp_path / 'h.db'}"

    def with_matrix(*rooms: str, token: str = bot_token) -> Settings:
        return settings_for(url, base, matrix={
            "homeserver": synapse.base_url, "user_id": bot_id, "access_token": token,
            "tenants": {"acme": {"room_ids": list(rooms), "allowed_users": ["@someone:example.org"]}}})

    async with served(url) as base:
        message = only_failure(await doctor.run(with_matrix(room, token="syt_wrong")), "matrix")
        assert message.startswith("whoami refused the access token (M_UNKNOWN_TOKEN)")
        # Joined, but at power 0 where redactions of others' events need 50.
        message = only_failure(await doctor.run(with_matrix(room)), "matrix")
        assert f"room {room}: the bot cannot redact chat replies" in message and "needs 50" in message
        findings = await doctor.run(with_matrix(room, other))
        assert any(f"room {other} (tenant acme): the bot is not in it" in f.message for f in findings if not f.ok)
        levels = await _matrix_call(synapse, owner_token, "GET", f"/rooms/{room}/state/m.room.power_levels/")
        levels["users"][bot_id] = 50
        await _matrix_call(synapse, owner_token, "PUT", f"/rooms/{room}/state/m.room.power_levels/", levels)
        findings = await doctor.run(with_matrix(room))
    assert all(f.ok for f in findings), [f.line() for f in findings]
    assert by_subject(findings)["matrix"][0].message == "credentials accepted, targets reachable"


async def test_postgresql_connections_running_instances_times_the_pool_against_max_connections(
        pg_url: str, tmp_path: Path) -> None:
    async with served(f"sqlite:///{tmp_path / 'h.db'}") as base:
        fits = by_subject(await doctor.run(settings_for(pg_url, base)))["connections"][0]
        assert fits.ok and "room for" in fits.message
        # Two instances running on this database with the default pool, and a config whose pool would need
        # more than the server's max_connections for them.
        async with running_app(settings_for(pg_url, base)), running_app(settings_for(pg_url, base)):
            findings = await doctor.run(settings_for(pg_url, base, storage={"url": pg_url, "pool_size": 60}))
    message = only_failure(findings, "connections")
    assert message.startswith("2 instance(s) × up to 126 connections") and "max_connections" in message

"""Configuration loading and the ``handraise`` command, the latter as real subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import BaseModel

from handraise.core.config import Settings, load_settings
from handraise.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"


# -- configuration ----------------------------------------------------------------


def _model_keys(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


def test_example_config_loads_and_documents_every_core_key() -> None:
    settings = load_settings(EXAMPLE, environ={})
    raw = tomllib.loads(EXAMPLE.read_text())
    for section in ("server", "storage", "feedback", "limits", "logging", "oidc"):
        model = type(getattr(settings, section))
        assert set(raw[section]) == _model_keys(model), section
    tenant = raw["tenants"][0]
    assert set(tenant) == _model_keys(type(settings.tenants[0]))
    documented_key_fields = {k for key in tenant["keys"] for k in key}
    assert documented_key_fields == _model_keys(type(settings.tenants[0].keys[0]))
    documented_person_fields = {k for person in tenant["people"] for k in person}
    assert documented_person_fields == _model_keys(type(settings.tenants[0].people[0]))
    approval = settings.tenants[0].defaults["approval"]
    assert set(tenant["defaults"]["approval"]) == _model_keys(type(approval))
    assert {k for step in tenant["defaults"]["approval"]["escalation"] for k in step} == _model_keys(
        type(approval.escalation[0]))


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic models inside a field's type (``dict[str, M]``, ``list[M]``, ``M | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _nested_models(arg)]


def _all_keys(model: type[BaseModel]) -> set[str]:
    # A key spelled differently in TOML (``from``, a Python keyword) is documented by its alias.
    keys = {field.alias or name for name, field in model.model_fields.items()}
    for field in model.model_fields.values():
        for nested in _nested_models(field.annotation):
            keys |= _all_keys(nested)
    return keys


def test_example_config_documents_every_connector_key() -> None:
    from handraise.core.channels import discover

    text = EXAMPLE.read_text()
    settings = load_settings(EXAMPLE, environ={})
    for name, ep in discover().items():
        cls = ep.load()
        if cls.settings_model is None or not cls.settings_model.model_fields:
            continue  # the web channel: always on, nothing to configure
        assert cls.is_enabled(settings), f"config.example.toml has no [{name}] section"
        cls.load_settings(settings)  # the documented section is valid for the connector's own model
        keys = _all_keys(cls.settings_model)
        if isinstance(settings.connector_section(name), list):
            # [[webhooks]]: the entries are the documented tables, the wrapper's own field is not a key.
            keys -= set(cls.settings_model.model_fields)
            keys |= {k for f in cls.settings_model.model_fields.values()
                     for m in _nested_models(f.annotation) for k in _all_keys(m)}
        # Alternatives may be documented as comments; a key appears as "key =" or as a table "[name.key...]".
        for key in sorted(keys):
            pattern = rf"^\s*#?\s*{re.escape(key)}\s*=|^\[{re.escape(name)}\.{re.escape(key)}\b"
            assert re.search(pattern, text, re.M), f"[{name}] does not document {key}"


def test_no_config_is_the_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    settings = load_settings(None, environ={})
    # An absolute path in the user's data folder, whatever the working folder.
    assert settings.storage.url == f"sqlite:///{tmp_path / 'xdg' / 'handraise' / 'handraise.db'}"
    assert [t.id for t in settings.tenants] == ["default"]
    assert settings.tenants[0].default_channels is None  # every enabled channel serving it


@pytest.mark.parametrize(("toml", "needle"), [
    ("[server]\nprot = 8080\n", "server.prot: unknown key"),
    ("[server]\nport = 'eighty'\n", "server.port"),
    ("[storage]\nurl = 'mysql://x'\n", "storage.url"),
    ("[[tenants]]\nid = 'a'\n[[tenants.keys]]\nid = 'k'\nscopes = ['ask']\n", "exactly one of key or key_sha256"),
    ("[[tenants]]\nid = 'a'\n[[tenants.keys]]\nid = 'k'\nkey = 'short'\nscopes = ['ask']\n", "16 characters"),
    ("[[tenants]]\nid = 'a'\n[[tenants.keys]]\nid = 'k'\nkey = '0123456789abcdefgh'\nscopes = ['ask', 'answer']\n",
     "never answer"),
    ("[[tenants]]\nid = 'a'\n[[tenants.keys]]\nid = 'k'\nkey = '0123456789abcdefgh'\nscopes = ['root']\n", "scopes"),
    ("[[tenants]]\nid = 'a'\n[[tenants]]\nid = 'a'\n", "appears twice"),
    ("[limits]\nmax_schema_fields = 50\n", "limits.max_schema_fields"),
    ("this is not toml", "not valid TOML"),
    ("[oidc]\nissuer = 'http://login.example.com'\nclient_id = 'c'\n", "oidc.issuer: must be https://"),
    ("[oidc]\nissuer = 'https://login.example.com'\nclient_id = 'c'\nscopes = ['email']\n", 'include "openid"'),
    ("[oidc]\nissuer = 'https://login.example.com'\nclient_id = 'c'\nscopes = ['openid']\n", 'the "email" scope'),
    ("[oidc]\nissuer = 'https://login.example.com'\n", "oidc.client_id"),
    ("[[tenants]]\nid = 'a'\n[[tenants.people]]\nid = 'x'\noidc = 's-1'\n[[tenants.people]]\nid = 'y'\noidc = 's-1'\n",
     "oidc s-1 is given for both x and y"),
])
def test_bad_config_names_the_key(tmp_path: Path, toml: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert needle in info.value.message
    assert "\n" not in info.value.message


def test_environment_overrides_and_hashed_keys(tmp_path: Path) -> None:
    key = "a-literal-agent-key-123"
    path = tmp_path / "c.toml"
    path.write_text(f"""
[[tenants]]
id = "t"
  [[tenants.keys]]
  id = "hashed"
  key_sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"
  scopes = ["ask"]
""")
    settings = load_settings(path, environ={"HANDRAISE_STORAGE__URL": "postgresql://u@h/db",
                                            "HANDRAISE_SERVER__PORT": "9999",
                                            "HANDRAISE_FEEDBACK__ENABLED": "false",
                                            "HANDRAISE_TELEGRAM__TOKEN": "123:abc",
                                            # The CLI client's own variables are not settings.
                                            "HANDRAISE_KEY": "hr_x", "HANDRAISE_URL": "http://h",
                                            "HANDRAISE_CONFIG": str(path)})
    assert settings.storage.url == "postgresql://u@h/db"
    assert settings.server.port == 9999 and settings.feedback.enabled is False
    assert settings.telegram == {"token": "123:abc"}
    assert settings.tenants[0].keys[0].digest() == hashlib.sha256(key.encode()).hexdigest()
    # A bad value from the environment names the variable, in a config file's words.
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={"HANDRAISE_SERVER__PORT": "many"})
    assert info.value.message == "HANDRAISE_SERVER__PORT: must be a whole number"


def test_secrets_do_not_show_in_reprs() -> None:
    settings = Settings.model_validate({"tenants": [{"id": "a", "keys": [
        {"id": "k", "key": "super-secret-key-value", "scopes": ["ask"]}]}]})
    assert "super-secret-key-value" not in repr(settings) and "super-secret-key-value" not in str(settings)


# -- the command, as a subprocess --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(cwd: Path, **extra: str) -> dict[str, str]:
    # The user's data folder (the default store) is the test's own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDRAISE_")}
    env["XDG_DATA_HOME"] = str(cwd / "xdg")
    env.update(extra)
    return env


def _run(args: list[str], *, cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "handraise.core.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=_env(cwd), **kwargs)


@contextlib.contextmanager
def serving(cwd: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "handraise.core.cli", "serve", "--port", str(port), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cwd))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "serving on" in line:
                break
        else:
            raise AssertionError(f"server did not start: {proc.stderr.read() if proc.stderr else ''}")
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_bad_config_fails_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[server]\nprot = 1\n")
    result = _run(["--config", "bad.toml", "serve"], cwd=tmp_path)
    assert result.returncode == 64
    assert result.stderr.strip() == "handraise: config error: bad.toml: server.prot: unknown key"


def test_serve_with_no_config_says_how_to_get_a_key(tmp_path: Path) -> None:
    with serving(tmp_path) as (proc, port):
        assert proc.stdout is not None
        hint = [proc.stdout.readline() for _ in range(7)]
    store = tmp_path / "xdg" / "handraise" / "handraise.db"
    assert f"store:      {store}" in hint[0]
    assert f"public_url: http://127.0.0.1:{port}" in hint[1]  # the address served, not :8080
    # The embedded default signs its first operator into the inbox with a one-time link.
    assert re.search(rf"inbox: +http://127\.0\.0\.1:{port}/inbox/signin/[A-Za-z0-9_-]{{43}}$", hint[2]), hint
    assert "handraise keys create --scopes ask" in "".join(hint)
    assert store.exists() and not (tmp_path / "handraise.db").exists()


async def _http(method: str, url: str, key: str | None = None, **kwargs: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as s, s.request(method, url, headers=headers, **kwargs) as r:
        return r.status, await r.json(content_type=None)


def _created_key(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return next(line.split()[-1] for line in result.stdout.splitlines() if line.startswith("key:"))


@pytest.mark.timeout(360)  # two server starts and five cold CLI starts: minutes on a loaded machine
async def test_keys_ask_and_kill_minus_nine(tmp_path: Path) -> None:
    """Keys made by the CLI work; ``handraise ask`` prints the answer; a kill -9 loses no pending request."""
    agent = _created_key(await asyncio.to_thread(_run, ["keys", "create", "--tenant", "default", "--scopes", "ask"],
                                                 cwd=tmp_path))
    operator = _created_key(await asyncio.to_thread(
        _run, ["keys", "create", "--tenant", "default", "--scopes", "answer,read", "--id", "ops"], cwd=tmp_path))
    listing = await asyncio.to_thread(_run, ["keys", "list"], cwd=tmp_path)
    assert "ops\tdefault\tanswer,read\tactive" in listing.stdout and agent not in listing.stdout
    refused = await asyncio.to_thread(_run, ["keys", "create", "--tenant", "nope", "--scopes", "ask"], cwd=tmp_path)
    assert refused.returncode == 64 and "nope" in refused.stderr

    with serving(tmp_path) as (proc, port):
        base = f"http://127.0.0.1:{port}"
        status, req = await _http("POST", f"{base}/v1/requests", agent,
                                  json={"unique_id": "survive", "message_for_user": "code?", "timeout_seconds": 300})
        assert status == 201
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with serving(tmp_path) as (_proc, port):
        base = f"http://127.0.0.1:{port}"
        status, _ = await _http("POST", f"{base}/api/human-feedback/submit", operator,
                                json={"unique_id": "survive", "response": "123456"})
        assert status == 200
        status, done = await _http("GET", f"{base}/v1/requests/{req['id']}/wait?timeout=5", agent)
        assert done["status"] == "answered" and done["response"] == "123456"

        env = _env(tmp_path, HANDRAISE_KEY=agent, HANDRAISE_URL=base)

        async def ask(*extra: str) -> subprocess.Popen[str]:
            return subprocess.Popen([sys.executable, "-m", "handraise.core.cli", "ask", "Approve the deploy?", *extra],
                                    cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

        asking = await ask("--approval", "--unique-id", "cli-approval", "--timeout", "60")
        deadline = time.monotonic() + 60  # a cold interpreter start on a loaded machine takes seconds
        while True:
            status, _ = await _http("POST", f"{base}/api/human-feedback/submit", operator,
                                    json={"unique_id": "cli-approval", "response": {"decision": "approve"}})
            if status == 200:
                break
            assert time.monotonic() < deadline, "the CLI never created its request"
            await asyncio.sleep(0.05)  # the CLI process has not created its request yet
        out, _err = await asyncio.to_thread(asking.communicate, timeout=30)
        assert asking.returncode == 0 and json.loads(out) == {"decision": "approve"}

        expiring = await ask("--timeout", "1")
        _out, err = await asyncio.to_thread(expiring.communicate, timeout=30)
        assert expiring.returncode == 2 and json.loads(err.splitlines()[-1])["status"] == "expired"


def test_the_oidc_client_secret_may_come_from_the_environment_and_is_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[oidc]\nissuer = 'https://login.example.com'\nclient_id = 'handraise'\n")
    assert load_settings(path, environ={}).oidc.client_secret is None  # type: ignore[union-attr]
    settings = load_settings(path, environ={"HANDRAISE_OIDC__CLIENT_SECRET": "s3cret-from-env"})
    assert settings.oidc is not None and settings.oidc.client_secret.get_secret_value() == "s3cret-from-env"
    assert "s3cret-from-env" not in repr(settings) and settings.oidc.claim == "email"
    # No [oidc]: no identity provider, sign-in links only.
    assert load_settings(None, environ={}).oidc is None

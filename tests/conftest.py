"""Shared fixtures: a loopback-only network guard, settings, databases (SQLite and PostgreSQL), the real app,
and the helpers tests share: a create body (``question``), a request's journal (``Api.journal``), ``until``,
``sweeper_held``.

PostgreSQL tests run against this machine's server (127.0.0.1:5432, trust auth):
each test gets a fresh database cloned from a migrated template. Without a
server they are skipped with the reason, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from harness.live import live_server  # noqa: F401  (one real `handraise serve` per session)
from harness.sqlite_template import templates

from handraise.core.app import create_app
from handraise.core.config import Settings

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_HOST = os.environ.get("HANDRAISE_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("HANDRAISE_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("HANDRAISE_TEST_PG_USER", "postgres")

AGENT_KEY = "agent-key-0123456789abcdef"
OPERATOR_KEY = "operator-key-0123456789abcdef"
READER_KEY = "reader-key-0123456789abcdef"
ANNOTATOR_KEY = "annotator-key-0123456789abcdef"
OTHER_AGENT_KEY = "other-agent-key-0123456789abcdef"
OTHER_OPERATOR_KEY = "other-operator-key-0123456789abcdef"
OTHER_READER_KEY = "other-reader-key-0123456789abcdef"


# -- network guard -------------------------------------------------------------

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX
        return True
    host = address[0]
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if not _loopback(address):
        raise OSError(f"tests may only reach loopback, not {address!r}")
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> Any:
    if not _loopback(address):
        raise OSError(f"tests may only reach loopback, not {address!r}")
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    results = _real_getaddrinfo(host, *args, **kwargs)
    if host is not None and not all(_loopback(r[4]) for r in results if r[0] in (socket.AF_INET, socket.AF_INET6)):
        raise OSError(f"tests may only reach loopback, not {host!r}")
    return results


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection beyond loopback: Telegram and Slack are reached through local fakes."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)


@pytest.fixture(scope="session", autouse=True)
def own_config_folder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's own user config folder, where the server secret lives by default (core/serversecret.py):
    the suite never reads or writes the real ~/.config/handraise. One for the whole session, so a server
    restarted on the same SQLite file (harness/live.py) finds the secret it started with."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
        yield


# -- PostgreSQL ----------------------------------------------------------------


def _pg_available() -> str | None:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            return None
    except OSError as e:
        return f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT} ({e})"


def _admin_dsn(db: str = "postgres") -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"


def _run_in_thread(coro: Any) -> Any:
    # Session fixtures may be first requested from inside a running test loop.
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="session")
def pg_template() -> str:
    """A migrated template database for this session; each test clones it."""
    problem = _pg_available()
    if problem:
        if IN_CI:
            pytest.fail(f"{problem}: CI must run the PostgreSQL tests (.ci/run starts the server)")
        pytest.skip(problem)
    import asyncpg

    from handraise.core.store import Store

    name = f"hr_tpl_{os.getpid()}_{secrets.token_hex(3)}"

    async def make() -> None:
        conn = await asyncpg.connect(_admin_dsn())
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        store = Store(url=_admin_dsn(name))
        await store.open()
        await store.close()

    _run_in_thread(make())
    yield name

    async def drop() -> None:
        conn = await asyncpg.connect(_admin_dsn())
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    _run_in_thread(drop())


@pytest.fixture
def pg_url(pg_template: str) -> Any:
    """A fresh database for one test, cloned from the migrated template."""
    import asyncpg

    name = f"hr_t_{secrets.token_hex(5)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(_admin_dsn())
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    _run_in_thread(admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"'))
    yield _admin_dsn(name)
    _run_in_thread(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file of this test's own."""
    return f"sqlite:///{tmp_path / 'handraise.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Both stores: every lifecycle test runs on SQLite and on the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'handraise.db'}"
    return request.getfixturevalue("pg_url")


# -- settings and app ----------------------------------------------------------


def base_config(storage_url: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "public_url": "http://127.0.0.1:8080"},
        "storage": {"url": storage_url},
        # No time bound on queued writes: on a shared, loaded test machine a burst of concurrent writes
        # may queue past 100 ms, and shedding them is not what those tests test (test_backpressure does).
        "limits": {"sweep_interval_seconds": 0.1, "max_write_queue_ms": 0},
        "tenants": [
            {"id": "acme", "keys": [
                {"id": "agent-1", "key": AGENT_KEY, "scopes": ["ask"]},
                {"id": "op-1", "key": OPERATOR_KEY, "scopes": ["answer", "read"]},
                {"id": "reader-1", "key": READER_KEY, "scopes": ["read"]},
                {"id": "annotator-1", "key": ANNOTATOR_KEY, "scopes": ["annotate", "read"]},
            ]},
            {"id": "globex", "keys": [
                {"id": "agent-2", "key": OTHER_AGENT_KEY, "scopes": ["ask"]},
                {"id": "op-2", "key": OTHER_OPERATOR_KEY, "scopes": ["answer", "read"]},
                {"id": "reader-2", "key": OTHER_READER_KEY, "scopes": ["read", "annotate"]},
            ]},
        ],
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def settings_from(config: dict[str, Any]) -> Settings:
    return Settings.model_validate(config)


def named(config: dict[str, Any], *, tenant: str, agent: str, operator: str | None = None) -> dict[str, Any]:
    """``config`` with display names for acme, its agent key and (given) its operator key, as pages show them."""
    acme = config["tenants"][0]
    acme["name"] = tenant
    acme["keys"][0]["name"] = agent
    if operator is not None:
        acme["keys"][1]["name"] = operator
    return config


def question(uid: str, *, message: str | None = None, channels: list[str] | None = None, timeout: int = 60,
             **extra: Any) -> dict[str, Any]:
    """A create body: ``uid``, a question (by default one naming it), a timeout, and the channels when given."""
    body: dict[str, Any] = {"unique_id": uid, "message_for_user": message or f"Question {uid}?",
                            "timeout_seconds": timeout}
    if channels is not None:
        body["channels"] = channels
    return body | extra


async def until(predicate: Callable[[], bool], *, what: str = "the condition", timeout: float = 5.0) -> None:
    """Poll state that has no event to await (which instance holds a lock, a log line); fails naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"never happened within {timeout} s: {what}"
        await asyncio.sleep(0.02)


class Api:
    """A real HTTP client for one running server, with a key per role."""

    def __init__(self, *, server: TestServer, app: web.Application, session: ClientSession) -> None:
        self.server = server
        self.app = app
        self.session = session
        self.base = str(server.make_url("")).rstrip("/")

    def url(self, path: str) -> str:
        return self.base + path

    async def call(self, method: str, path: str, *, key: str | None = AGENT_KEY, json: Any = None,
                   data: Any = None, headers: dict[str, str] | None = None, params: Any = None) -> tuple[int, Any]:
        hdrs = dict(headers or {})
        if key is not None:
            hdrs["Authorization"] = f"Bearer {key}"
        async with self.session.request(method, self.url(path), json=json, data=data, headers=hdrs,
                                        params=params) as resp:
            text = await resp.text()
            try:
                import json as _json

                body = _json.loads(text) if text else None
            except ValueError:
                body = text
            return resp.status, body

    async def create(self, body: dict[str, Any], *, key: str = AGENT_KEY) -> dict[str, Any]:
        status, data = await self.call("POST", "/v1/requests", json=body, key=key)
        assert status in (200, 201), (status, data)
        return data

    async def submit(self, unique_id: str, response: Any, *, key: str = OPERATOR_KEY) -> tuple[int, Any]:
        return await self.call("POST", "/api/human-feedback/submit", json={"unique_id": unique_id,
                                                                           "response": response}, key=key)

    async def wait(self, request_id: str, timeout: float = 15, *, key: str = AGENT_KEY) -> dict[str, Any]:
        status, data = await self.call("GET", f"/v1/requests/{request_id}/wait", params={"timeout": str(timeout)},
                                       key=key)
        assert status == 200, (status, data)
        return data

    async def journal(self, request_id: str, *, tenant_id: str = "acme") -> list[dict[str, Any]]:
        """The request's journal entries, oldest first, read through the service."""
        from handraise.core.appkeys import SERVICE

        return await self.app[SERVICE].journal_entries(tenant_id=tenant_id, request_id=request_id)


@contextlib.asynccontextmanager
async def running_app(settings: Settings, **kwargs: Any) -> AsyncIterator[Api]:
    kwargs.setdefault("connector_classes", [])
    # A new SQLite file starts as a copy of the session's migrated template rather than migrating again.
    await templates.seed(settings.storage.url)
    app = await create_app(settings, **kwargs)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    session = ClientSession()
    try:
        yield Api(server=server, app=app, session=session)
    finally:
        await session.close()
        await server.close()


@contextlib.asynccontextmanager
async def sweeper_held(api: Api) -> AsyncIterator[None]:
    """The app's own sweeper stopped (its tick under way, if any, ended) until the block ends, then started
    again. For a test that does the sweeper's work itself on a moved clock (``sweep()``, ``prune_spent()``)
    and asserts what its call did: otherwise a tick of the sweeper's, reading the same clock, may do that
    work first (or half of it) on a slow machine."""
    from handraise.core.appkeys import SWEEPER

    sweeper = api.app[SWEEPER]
    await sweeper.stop()
    try:
        yield
    finally:
        sweeper.start()


@pytest.fixture
def make_api() -> Callable[..., Any]:
    """``async with make_api(settings) as api:`` starts the real app on an ephemeral loopback port."""
    return running_app


@pytest.fixture
async def api(storage_url: str) -> AsyncIterator[Api]:
    async with running_app(settings_from(base_config(storage_url))) as a:
        yield a


@contextlib.asynccontextmanager
async def web_app(settings: Settings, **kwargs: Any) -> AsyncIterator[Api]:
    """The real app with the web channel (hosted forms under /f/, the inbox under /inbox)."""
    from handraise.webforms.connector import WebFormsChannel

    async with running_app(settings, connector_classes=[WebFormsChannel], **kwargs) as api:
        yield api


@pytest.fixture
async def web(sqlite_url: str) -> AsyncIterator[Api]:
    """The app with the web channel, on SQLite."""
    async with web_app(settings_from(base_config(sqlite_url))) as api:
        yield api


@pytest.fixture
async def sqlite_api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running_app(settings_from(base_config(f"sqlite:///{tmp_path / 'h.db'}"))) as a:
        yield a


"""Observability on the real app: an access log line per request with one-time tokens masked (error paths
too), ``GET /metrics`` behind the ``metrics`` scope with live counts, and ``GET /`` and ``/docs``."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from conftest import AGENT_KEY, ANNOTATOR_KEY, OPERATOR_KEY, READER_KEY, Api, base_config, settings_from
from handraise import __version__
from handraise.core.app import create_app
from handraise.core.appkeys import DISPATCHER, SERVICE
from handraise.core.config import LoggingSettings
from handraise.core.http.openapi import document
from handraise.core.logs import AccessLog, configure_logging, mask_tokens
from handraise.webforms.connector import WebFormsChannel
from sse import streams
from tests.core.test_dispatch import ScriptedConnector

METRICS_KEY = "metrics-key-0123456789abcdef"


def _config(tmp_path: Path) -> dict[str, Any]:
    config = base_config(f"sqlite:///{tmp_path / 'h.db'}")
    config["tenants"][0]["keys"].append({"id": "prom", "key": METRICS_KEY, "scopes": ["metrics"]})
    return config


class ServedAsByServe(TestServer):
    """aiohttp's test server, but with its handlers as ``handraise serve`` runs them: not cancelled when their
    client goes (the test server cancels them), so a handler meets the client's leaving as in production."""

    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        kwargs.pop("handler_cancellation", None)
        return await super()._make_runner(**kwargs)


@contextlib.asynccontextmanager
async def logged_app(tmp_path: Path, *, level: str = "INFO", log_format: str = "json",
                     **kwargs: Any) -> AsyncIterator[tuple[Api, io.StringIO]]:
    """The real app behind the access log the CLI installs, logging (JSON lines unless told) into a buffer."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buffer = io.StringIO()
    configure_logging(LoggingSettings(level=level, format=log_format), stream=buffer)
    app = await create_app(settings_from(_config(tmp_path)), **kwargs)
    server = ServedAsByServe(app, host="127.0.0.1", port=0)
    await server.start_server(access_log_class=AccessLog.serving(app))
    session = ClientSession()
    try:
        yield Api(server=server, app=app, session=session), buffer
    finally:
        await session.close()
        await server.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def _lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]


async def _access_line(buffer: io.StringIO, method: str, path: str) -> dict[str, Any]:
    # The access log is written once the response is sent: poll the buffer briefly, not a fixed sleep.
    for _ in range(200):
        found = [e for e in _lines(buffer) if e.get("logger") == "handraise.access"
                 and e.get("method") == method and e.get("path") == path]
        if found:
            return found[-1]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no access line for {method} {path}: {buffer.getvalue()[-2000:]}")


def test_a_secret_in_a_log_line_is_redacted_by_the_same_detector() -> None:
    # A library error quoting a URL with a bot token, an exception echoing a key: the line keeps its words.
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buffer = io.StringIO()
    bot_token = "123456789:AA" + "h7Qx2LmZp9KtV3rWsYbN4cD8eF1gH6jK0"
    canary = "sk-canary-rfc0056-" + "do-not-leak-abc123"
    try:
        configure_logging(LoggingSettings(level="INFO", format="json"), stream=buffer)
        logging.getLogger("handraise.test").warning(
            "POST https://api.telegram.org/bot%s/sendMessage failed; key %s; pin: 4821", bot_token, canary)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    line = buffer.getvalue()
    assert bot_token not in line and canary not in line and "4821" not in line
    assert "/sendMessage failed; key [REDACTED]; pin: [REDACTED]" in line


def test_mask_tokens() -> None:
    token = "AbCdEf0123456789_-AbCdEf0123456789_-xyz12"
    assert mask_tokens(f"/f/{token}") == "/f/<token>"
    assert mask_tokens(f"GET http://h:1/f/{token}?x=1 failed") == "GET http://h:1/f/<token>?x=1 failed"
    assert mask_tokens("/f/-/static/form.css") == "/f/-/static/form.css"  # the assets are not a token
    assert mask_tokens("/v1/requests/req_abc") == "/v1/requests/req_abc"


async def test_an_access_line_per_request_with_the_token_masked(tmp_path: Path) -> None:
    async with logged_app(tmp_path, connector_classes=[WebFormsChannel]) as (api, buffer):
        req = await api.create({"unique_id": "log-1", "message_for_user": "Code?", "timeout_seconds": 60})
        status, link = await api.call("POST", f"/v1/requests/{req['id']}/links", key=OPERATOR_KEY, json={})
        assert status == 201
        token = link["url"].rsplit("/", 1)[1]
        async with api.session.get(link["url"].replace("http://127.0.0.1:8080", api.base)) as resp:
            assert resp.status == 200
        created = await _access_line(buffer, "POST", "/v1/requests")
        opened = await _access_line(buffer, "GET", "/f/<token>")
        status, _ = await api.call("GET", "/v1/requests/nope", key="not-a-key-at-all-0123")
        refused = await _access_line(buffer, "GET", "/v1/requests/nope")
    assert created["status"] == 201 and created["tenant"] == "acme" and created["key_id"] == "agent-1"
    assert isinstance(created["ms"], float)
    assert opened["status"] == 200 and opened["tenant"] is None
    assert refused["status"] == 401 and refused["key_id"] is None
    text = buffer.getvalue()
    assert token not in text and AGENT_KEY not in text and OPERATOR_KEY not in text and "Code?" not in text


async def test_a_failure_under_a_form_link_logs_no_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with logged_app(tmp_path, connector_classes=[WebFormsChannel]) as (api, buffer):
        req = await api.create({"unique_id": "log-2", "message_for_user": "Code?", "timeout_seconds": 60})
        _status, link = await api.call("POST", f"/v1/requests/{req['id']}/links", key=OPERATOR_KEY, json={})
        token = link["url"].rsplit("/", 1)[1]

        async def broken(self: Any, token: str) -> Any:
            raise RuntimeError(f"store broke while opening /f/{token}")

        monkeypatch.setattr(type(api.app[SERVICE]), "open_link", broken)
        async with api.session.get(f"{api.base}/f/{token}") as resp:
            assert resp.status == 500
        line = await _access_line(buffer, "GET", "/f/<token>")
    assert line["status"] == 500
    text = buffer.getvalue()
    assert "store broke while opening /f/<token>" in text  # the traceback is logged, masked
    assert token not in text


async def _scrape(api: Api, key: str | None = METRICS_KEY) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with api.session.get(api.url("/metrics"), headers=headers) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


def _value(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + wanted + '}') if wanted else ''} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_metrics_need_the_metrics_scope(tmp_path: Path) -> None:
    async with logged_app(tmp_path) as (api, _buffer):
        assert (await _scrape(api, None))[0] == 401
        assert (await _scrape(api, READER_KEY))[0] == 403
        status, kind, text = await _scrape(api)
    assert status == 200 and kind.startswith("text/plain") and "version=0.0.4" in kind
    assert "# TYPE handraise_requests_created_total counter" in text


async def test_metrics_count_what_happens(tmp_path: Path) -> None:
    class Channel(ScriptedConnector):
        name = "chat"
        serve = {"acme": ["room-1"]}

    async with logged_app(tmp_path, connector_classes=[Channel]) as (api, _buffer), streams() as start:
        reader = await start(api, READER_KEY)
        _status, _kind, text = await _scrape(api)
        assert _value(text, "handraise_sse_subscribers") == 1
        dispatcher = api.app[DISPATCHER]
        req = await api.create({"unique_id": "m-1", "message_for_user": "Code?", "timeout_seconds": 60})
        await dispatcher.idle()
        waiting = asyncio.create_task(api.wait(req["id"], timeout=30))
        service = api.app[SERVICE]
        for _ in range(500):
            if service.waiting:
                break
            await asyncio.sleep(0.01)
        _status, _kind, text = await _scrape(api)
        assert _value(text, "handraise_agents_waiting") == 1
        assert (await api.submit("m-1", "42"))[0] == 200
        assert (await waiting)["status"] == "answered"
        other = await api.create({"unique_id": "m-2", "message_for_user": "Stop?", "timeout_seconds": 60})
        await dispatcher.idle()
        assert (await api.call("POST", f"/v1/requests/{other['id']}/cancel"))[0] == 200
        status, _ = await api.call("POST", "/v1/runs/run-9/annotations", key=ANNOTATOR_KEY,
                                   json={"signal": {"kind": "rating", "rating": 4}})
        assert status == 201
        while reader.events.qsize() < 5:  # created, created, resolved, resolved, annotated
            await asyncio.sleep(0.01)
        await dispatcher.idle()
        _status, _kind, text = await _scrape(api)
    assert _value(text, "handraise_requests_created_total") == 2
    assert _value(text, "handraise_requests_resolved_total", status="answered", via="api") == 1
    assert _value(text, "handraise_requests_resolved_total", status="cancelled", via="api") == 1
    assert _value(text, "handraise_wake_latency_seconds_count") == 1
    assert _value(text, "handraise_deliveries_total", channel="chat", outcome="sent") == 2
    assert _value(text, "handraise_deliveries_total", channel="chat", outcome="withdrawn") == 2
    assert _value(text, "handraise_annotations_total", kind="rating") == 1
    assert _value(text, "handraise_agents_waiting") == 0
    assert _value(text, "handraise_http_requests_total", method="POST", status="201") >= 2
    assert "acme" not in text and "globex" not in text  # no tenant is named to a metrics key


async def test_http_requests_are_counted_when_the_access_line_is_not_wanted(tmp_path: Path) -> None:
    # A server logging at WARNING writes no access lines, and its HTTP metrics still count every request.
    async with logged_app(tmp_path, level="WARNING") as (api, buffer):
        await api.create({"unique_id": "w-1", "message_for_user": "Code?", "timeout_seconds": 60})
        status, _ = await api.call("POST", "/v1/requests", json={"unique_id": "w-2"})
        assert status == 422
        assert (await api.submit("w-1", "42"))[0] == 200
        # The access logger runs once a response is written: the metrics page's own request comes
        # after these three, so when it shows all three counted, nothing of theirs is still under way.
        for _ in range(200):
            _status, _kind, text = await _scrape(api)
            if _value(text, "handraise_http_requests_total", method="POST", status="200") >= 1:
                break
            await asyncio.sleep(0.01)
    assert _value(text, "handraise_http_requests_total", method="POST", status="201") == 1
    assert _value(text, "handraise_http_requests_total", method="POST", status="422") == 1
    assert _value(text, "handraise_http_requests_total", method="POST", status="200") == 1
    assert _value(text, "handraise_http_request_duration_seconds_count") >= 3
    assert not [e for e in _lines(buffer) if e.get("logger") == "handraise.access"]


async def test_home_page_and_api_reference(tmp_path: Path) -> None:
    async with logged_app(tmp_path) as (api, _buffer):
        async with api.session.get(api.url("/")) as resp:
            home = await resp.text()
            assert resp.status == 200 and resp.content_type == "text/html"
            csp = resp.headers["Content-Security-Policy"]
        async with api.session.get(api.url("/docs")) as resp:
            reference = await resp.text()
            assert resp.status == 200 and resp.content_type == "text/html"
    assert f"Handraise <span class=\"muted\">{__version__}</span>" in home
    for href in ('href="/docs"', 'href="/openapi.json"', 'href="/healthz"'):
        assert href in home
    assert "default-src 'none'" in csp and "<script" not in home.lower() and "<script" not in reference.lower()
    # Served from the package: nothing is loaded from another host.
    assert not re.search(r'(src|href)="(https?:)?//', home + reference)
    doc = document()
    for path, item in doc["paths"].items():
        for method in item:
            assert f"<code>{path}</code>" in reference, path
            assert item[method]["summary"].replace("'", "&#39;").replace('"', "&#34;") in reference
    for name in doc["components"]["schemas"]:
        assert f'id="schema-{name}"' in reference

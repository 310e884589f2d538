"""The request path's shortcuts (issue 19) give exactly what the long way gave: the JSON reader, the response
writer, the keyring's memory of config keys, the schema and validator caches, canonical JSON's fast check,
and the dispatcher's and event bus's skipped work."""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import time
from typing import Any

import pytest
import rfc8785
from aiohttp import web

from conftest import AGENT_KEY, OPERATOR_KEY, Api
from handraise.core.appkeys import DISPATCHER, KEYRING, STORE
from handraise.core.canonical import _spelled_alike, canonical_json
from handraise.core.scopes import hash_key
from handraise.core.errors import BadRequestError, InvalidSchemaError
from handraise.core.events import Event, EventBus
from handraise.core.http import input as http_input
from handraise.core.http.output import json_response
from handraise.core.jsontext import dumps, dumps_unicode
from handraise.core.schema import check_schema, check_schema_off_loop, validate_answer

# -- the JSON reader ---------------------------------------------------------------------------------------

BODIES = [
    b'{"unique_id": "a", "message_for_user": "m"}', b'  {"a": 1}  ', b'{"a": 1} x', b'{"a": 1}\n', b"\n[1]",
    b"", b" ", b"{", b"}", b"[1, 2", b"nul", b"null", b"true", b"-", b"-1", b"1.5", b'"text"', b"NaN",
    b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 1e999}', b'{"a": 1E400}', b'{"a": -0.0}', b"1" * 5000,
    "\ufeff{}".encode(), b'{"a": "\\ud800"}', b'{"\\udc00": 1}', b'{"a": "\\ud83d\\ude00"}', b'{"a": "\\u00e9"}',
    '{"a": "é ✓"}'.encode(), b"\xff\xfe", b"[" * 32 + b"]" * 32, b"[" * 33 + b"]" * 33, b"[" * 40 + b"]" * 40,
    b"[" * 2000 + b"]" * 2000, b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', b'{"a": {"b": {"c": [1, {}]}}}',
    b'{"a": "\\\\ud800"}', b'{"u": "x", "u": "y"}', b"[1,]", b'{"a":1,}', b"\t{}\r\n",
]


def _reference(raw: bytes) -> Any:
    """parse_json as it was: json.loads with the strict hooks, then the full walk over every value."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError("malformed JSON: the body is not UTF-8") from None
    try:
        value = json.loads(text, parse_constant=http_input._no_constant, parse_float=http_input._finite_float)
    except RecursionError:
        raise BadRequestError(f"malformed JSON: nested more than {http_input.MAX_JSON_DEPTH} deep") from None
    except http_input._NumberError as e:
        raise BadRequestError(f"malformed JSON: {e}") from None
    except json.JSONDecodeError as e:
        raise BadRequestError(f"malformed JSON: {e}") from None
    except ValueError:
        raise BadRequestError("malformed JSON: a number has too many digits") from None
    http_input._check_shape(value)
    return value


def _outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "value", parse(raw)
    except BadRequestError as e:
        return "refused", e.message


@pytest.mark.parametrize("raw", BODIES, ids=range(len(BODIES)))
def test_the_json_reader_gives_what_json_loads_and_the_full_walk_give(raw: bytes) -> None:
    kind, got = _outcome(http_input.parse_json, raw)
    assert (kind, got) == _outcome(_reference, raw)
    if kind == "value" and isinstance(got, float):
        assert math.copysign(1, got) == math.copysign(1, _reference(raw))


def test_a_body_that_could_nest_too_deep_or_spell_a_surrogate_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[Any] = []
    monkeypatch.setattr(http_input, "_check_shape", walked.append)
    http_input.parse_json(b'{"unique_id": "a", "schema": {"type": "string"}}')
    assert walked == []  # two brackets, no escape: nothing to find
    http_input.parse_json(b'{"a": "\\u00e9"}')
    http_input.parse_json(b"[" * 33 + b"]" * 33)
    assert len(walked) == 2


# -- the response writer -----------------------------------------------------------------------------------

RESPONSE_BODIES: list[Any] = [
    {"id": "req_1", "schema": {"type": "string", "pattern": "^[0-9]{6}$"}, "channels": [], "n": 1.5, "x": None},
    {"message": "é ✓ \u2028 \x00 \"quoted\" \\", "nested": [[{}], {"a": [True, False]}]}, [], "text", 12,
    {"nan": float("nan"), "inf": float("inf"), "big": 2**70, "neg": -0.0},
]


@pytest.mark.parametrize("body", RESPONSE_BODIES, ids=range(len(RESPONSE_BODIES)))
@pytest.mark.parametrize(("status", "headers"), [(200, None), (201, {"Cache-Control": "no-store"}),
                                                 (503, {"Retry-After": "3"})])
def test_a_json_response_is_aiohttps_byte_for_byte(body: Any, status: int, headers: dict[str, str] | None) -> None:
    ours, theirs = json_response(body, status=status, headers=headers), web.json_response(body, status=status,
                                                                                         headers=headers)
    assert ours.body == theirs.body
    assert ours.status == theirs.status
    assert list(ours.headers.items()) == list(theirs.headers.items())
    assert ours.content_type == theirs.content_type and ours.charset == theirs.charset


@pytest.mark.parametrize("value", RESPONSE_BODIES, ids=range(len(RESPONSE_BODIES)))
def test_the_prebuilt_encoders_write_what_json_dumps_writes(value: Any) -> None:
    assert dumps(value) == json.dumps(value)
    assert dumps_unicode(value) == json.dumps(value, ensure_ascii=False)


def test_the_prebuilt_encoders_refuse_what_json_dumps_refuses() -> None:
    for value in ({1j: 1}, {"a": object()}, {"a": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            dumps(value)


# -- the keyring -------------------------------------------------------------------------------------------


async def test_a_config_key_is_remembered_by_its_header_and_a_stored_or_unknown_one_never(sqlite_api: Api) -> None:
    keyring = sqlite_api.app[KEYRING]
    assert (await sqlite_api.call("GET", "/v1/requests", key=OPERATOR_KEY))[0] == 200
    assert keyring._known[f"Bearer {OPERATOR_KEY}"].key_id == "op-1"
    # Remembered, it still holds only its own scopes.
    status, err = await sqlite_api.call("POST", "/v1/requests", key=OPERATOR_KEY,
                                        json={"unique_id": "k-1", "message_for_user": "Code?"})
    assert (status, err["error"]) == (403, "forbidden")
    stranger = f"hr_{secrets.token_urlsafe(24)}"
    assert (await sqlite_api.call("GET", "/v1/requests", key=stranger))[0] == 401
    stored = f"hr_{secrets.token_urlsafe(24)}"
    await sqlite_api.app[STORE].insert_api_key({"id": "late", "tenant_id": "acme", "key_sha256": hash_key(stored),
                                                "scopes": "read", "created_at": time.time(), "revoked_at": None})
    keyring._loaded_at = -math.inf  # read the stored keys now
    assert (await sqlite_api.call("GET", "/v1/requests", key=stored))[0] == 200
    # A stored key can be revoked while the server runs: it is looked up (and its revocation seen) each time.
    assert set(keyring._known) == {f"Bearer {OPERATOR_KEY}"}


async def test_the_memory_of_headers_is_bounded(sqlite_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from handraise.core.http import auth

    monkeypatch.setattr(auth, "_KNOWN_HEADERS", 2)
    keyring = sqlite_api.app[KEYRING]
    for header in (f"Bearer {AGENT_KEY}", f"bearer {AGENT_KEY}", f"Bearer  {AGENT_KEY}", f"BEARER {AGENT_KEY}"):
        status, _ = await sqlite_api.call("GET", "/v1/requests/req_none", key=None, headers={"Authorization": header})
        assert status == 404
        assert len(keyring._known) <= 2


# -- the schema and validator caches ------------------------------------------------------------------------


async def test_a_checked_schema_is_checked_once_and_each_caller_gets_its_own_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from handraise.core.schema import subset

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": f"^{secrets.token_hex(4)}$"}}}
    first = await check_schema_off_loop(schema, kind="input", max_fields=20, max_bytes=8192)
    assert first == check_schema(schema)
    checks: list[Any] = []
    monkeypatch.setattr(subset, "check_schema", lambda *a, **k: checks.append(a))
    again = await check_schema_off_loop(json.loads(json.dumps(schema)), kind="input", max_fields=20, max_bytes=8192)
    assert checks == [] and again == first and again is not first
    again["properties"]["code"]["pattern"] = "changed"
    assert (await check_schema_off_loop(schema, kind="input", max_fields=20, max_bytes=8192)) == first
    # The same schema under other limits or another kind is checked afresh.
    await check_schema_off_loop(schema, kind="input", max_fields=19, max_bytes=8192)
    assert len(checks) == 1


async def test_a_refused_schema_is_refused_again_with_its_reason() -> None:
    schema = {"type": "string", "pattern": "(a)\\1"}
    for _ in range(2):
        with pytest.raises(InvalidSchemaError) as refused:
            await check_schema_off_loop(schema, kind="input", max_fields=20, max_bytes=8192)
        assert "pattern" in refused.value.message
    with pytest.raises(InvalidSchemaError):  # passes as input, refused as a choice
        await check_schema_off_loop({"type": "string"}, kind="choice", max_fields=20, max_bytes=8192)
    assert await check_schema_off_loop({"type": "string"}, kind="input", max_fields=20, max_bytes=8192) == {
        "type": "string"}


def test_a_cached_validator_follows_its_schema_not_the_callers_dict() -> None:
    schema = {"type": "string", "pattern": "^[0-9]{6}$"}
    assert validate_answer(schema, "123456") == []
    schema["pattern"] = "^[a-z]+$"  # the caller changes its dict: another schema, another validator
    assert validate_answer(schema, "abc") == []
    assert [e.field for e in validate_answer(schema, "123456")] == [""]
    assert validate_answer({"type": "string", "pattern": "^[0-9]{6}$"}, "123456") == []


# -- canonical JSON's fast check ------------------------------------------------------------------------------


class _Text(str):
    pass


CANONICAL_VALUES: list[Any] = [
    "123456", "é", {"b": 1, "a": [1, 2, {"c": None, "d": True}]}, {"é": 1}, {"a": {"é": 1}}, [{"a": ["é"]}],
    {"a": 1.5, "b": 0.001, "c": 1e-7, "d": 1e20, "e": 2.0, "f": -0.0}, {"big": 2**53 - 1, "small": -(2**53) + 1},
    _Text("x"), {"a": _Text("x")}, [], {}, [[[]]], None, True, False, 0, {"decision": "approve", "reason": "ok"},
]


@pytest.mark.parametrize("value", CANONICAL_VALUES, ids=range(len(CANONICAL_VALUES)))
def test_canonical_json_is_rfc8785s_whichever_path_it_takes(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value).decode()


def test_the_fast_path_is_taken_only_where_the_c_encoder_spells_alike() -> None:
    assert _spelled_alike({"a": [1, "x", {"b": None, "c": 0.5}], "d": True})
    assert _spelled_alike({"a": ["é", "\U0001F600"]})  # text of any script (names stay ASCII: UTF-16 order)
    for value in ({"a": ["é\ud800"]}, {"é": 1}, {1: "a"}, {"a": 2.0}, {"a": 2**53}, {"a": _Text("x")}, ("a",),
                  [{"a": {1}}]):
        assert not _spelled_alike(value), value
    with pytest.raises(rfc8785.CanonicalizationError):
        canonical_json({1: "a"})


# -- work skipped after a create -----------------------------------------------------------------------------


async def test_a_request_no_connector_delivers_makes_no_delivery_task(sqlite_api: Api) -> None:
    dispatcher = sqlite_api.app[DISPATCHER]
    spawned: list[str] = []
    spawn = dispatcher._spawn
    dispatcher._spawn = lambda request_id, coro: (spawned.append(request_id), spawn(request_id, coro))[1]
    view = await sqlite_api.create({"unique_id": "d-1", "message_for_user": "Code?", "timeout_seconds": 60})
    assert view["channels"] == []
    assert (await sqlite_api.submit("d-1", "42"))[0] == 200
    await dispatcher.idle()
    assert spawned == [] and dispatcher._tasks == {} and dispatcher._resolved == {}


async def test_a_listener_that_returns_a_coroutine_still_runs() -> None:
    bus = EventBus(instance_id="test")
    heard: list[str] = []

    async def later(ev: Event) -> None:
        heard.append(ev.object_id)

    bus.add_listener(lambda ev: None)
    bus.add_listener(later)
    bus.publish(Event("request.created", "acme", "req_1", {}))
    await asyncio.sleep(0)
    assert heard == ["req_1"]


# -- answers checked on the loop or off it ---------------------------------------------------------------------


async def test_a_short_answer_skips_the_pattern_cost_and_a_long_one_still_goes_off_the_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from handraise.core.schema import validation

    schema = {"type": "string", "pattern": "^\\p{L}+$"}
    off_loop: list[Any] = []

    async def to_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
        off_loop.append(args[1])
        return fn(*args, **kwargs)

    monkeypatch.setattr(validation.asyncio, "to_thread", to_thread)
    assert await validation.validate_answer_off_loop(schema, "abc") == []
    assert validation.match_steps(schema, "a" * 2000) > validation.OFF_LOOP_STEPS
    assert await validation.validate_answer_off_loop(schema, "a" * 2000) == []
    assert await validation.validate_answer_off_loop({"type": "object", "properties": {"x": schema}},
                                                     {"x": "b" * 2000}) == []
    assert off_loop == ["a" * 2000, {"x": "b" * 2000}]
    monkeypatch.setattr(validation, "match_steps", lambda *a: pytest.fail("a short answer needs no cost bound"))
    assert await validation.validate_answer_off_loop(schema, "x" * 999) == []
    assert await validation.validate_answer_off_loop({"type": "object", "properties": {"x": schema}},
                                                     {"x": "y" * 10}) == []


# -- the body as it lies -----------------------------------------------------------------------------------------


def _request_with(chunks: list[bytes], *, eof: bool, limit: int = 1024) -> Any:
    from unittest import mock

    from aiohttp import streams
    from aiohttp.test_utils import make_mocked_request

    from conftest import base_config, settings_from
    from handraise.core.appkeys import SETTINGS

    settings = settings_from(base_config("sqlite:///unused.db", server={"max_body_bytes": limit}))
    app = web.Application()
    app[SETTINGS] = settings
    protocol = mock.Mock(_reading_paused=False)
    payload = streams.StreamReader(protocol, 2**16, loop=asyncio.get_running_loop())
    for chunk in chunks:
        payload.feed_data(chunk)
    if eof:
        payload.feed_eof()
    return make_mocked_request("POST", "/v1/requests", headers={"Content-Type": "application/json"},
                               payload=payload, app=app), payload


async def test_a_body_that_has_arrived_is_taken_as_it_lies() -> None:
    request, _ = _request_with([b'{"a": ', b'[1, "x"]}'], eof=True)

    async def no_read() -> bytes:
        raise AssertionError("the whole body was there")

    request.read = no_read
    assert await http_input.read_json(request) == {"a": [1, "x"]}


async def test_a_body_still_arriving_is_awaited() -> None:
    request, payload = _request_with([b'{"a": '], eof=False)
    reading = asyncio.create_task(http_input.read_json(request))
    await asyncio.sleep(0)
    payload.feed_data(b"2}")
    payload.feed_eof()
    assert await reading == {"a": 2}


async def test_a_body_read_before_or_over_the_limit_is_refused_as_before() -> None:
    request, _ = _request_with([b"x" * 1025], eof=True)
    with pytest.raises(Exception) as too_large:
        await http_input.read_json(request)
    assert too_large.value.status == 413 and "larger than 1024 bytes" in too_large.value.message
    request, _ = _request_with([b'{"a": 1}'], eof=True)
    assert await request.read() == b'{"a": 1}'  # someone read it first: request.read() has it
    assert await http_input.read_json(request) == {"a": 1}
    request, _ = _request_with([], eof=True)
    with pytest.raises(BadRequestError, match="the body is empty"):
        await http_input.read_json(request)


# -- metrics series looked up once ---------------------------------------------------------------------------------


async def test_http_and_resolution_series_are_counted_apart_and_once_each(sqlite_api: Api) -> None:
    from prometheus_client import generate_latest

    from handraise.core.appkeys import METRICS

    metrics = sqlite_api.app[METRICS]
    for method, status in (("POST", 201), ("POST", 201), ("GET", 200), ("POST", 422)):
        metrics.on_http(method, status, 0.001)
    await sqlite_api.create({"unique_id": "m-1", "message_for_user": "Code?", "timeout_seconds": 60})
    await sqlite_api.create({"unique_id": "m-2", "message_for_user": "Code?", "timeout_seconds": 60})
    assert (await sqlite_api.submit("m-1", "42"))[0] == 200
    assert (await sqlite_api.submit("m-2", "43"))[0] == 200
    text = generate_latest(metrics.registry).decode()
    assert 'handraise_http_requests_total{method="POST",status="201"} 2.0' in text
    assert 'handraise_http_requests_total{method="GET",status="200"} 1.0' in text
    assert 'handraise_http_requests_total{method="POST",status="422"} 1.0' in text
    assert "handraise_http_request_duration_seconds_count 4.0" in text
    assert 'handraise_requests_resolved_total{status="answered",via="api"} 2.0' in text


# -- a request view from its row ---------------------------------------------------------------------------------

_ROW = {"id": "req_1", "tenant_id": "t", "unique_id": "u", "body_sha256": "0" * 64, "message_for_user": "m",
        "form_schema_json": '{"type":"string","pattern":"^[0-9]{6}$"}', "kind": "input", "sensitive": 0,
        "run_id": "r", "channels_json": '["slack"]', "status": "answered", "created_by": "ask", "created_at": 100.0,
        "expires_at": 700.0, "response_json": '"123456"', "response_purged": 0, "resolved_by": "a",
        "resolved_via": "api", "resolved_at": 150.0}
_LATER = {"opened_at": 110.0, "interacted_at": 120.0, "on_timeout_json": '{"default":"x"}',
          "callback_url": "https://u:p@cb.example/x", "proposal_json": '{"a":1}', "proposal_schema_json": '{"type":"object"}',
          "assign_to_json": '["ann"]', "on_behalf_of": "bob", "approvals_required": 2, "reject_policy": "quorum",
          "schedule_json": '{"escalation":[{"after_seconds":60,"to":["ann"],"reached_at":160.0}]}',
          "votes_json": '[{"person":"ann","decision":"approve","at":130.0}]', "votes_version": 1}


@pytest.mark.parametrize("row", [_ROW, _ROW | _LATER, _ROW | dict.fromkeys(_LATER)], ids=["fresh", "full", "nulls"])
def test_a_view_read_from_a_row_is_the_one_its_constructor_makes(row: dict[str, Any]) -> None:
    import dataclasses

    from handraise.core.api import DeliveryView, RequestView
    from handraise.core.schedule import Schedule

    sent = {"channel": "slack", "target": "C1", "status": "sent", "attempts": 1, "last_error": None, "updated_at": 101.0}
    view = RequestView.from_row(row, deliveries=[sent])
    # The long way: each column as the constructor takes it, later ones None (or their default) when absent.
    get = row.get
    expected = RequestView(
        id="req_1", tenant_id="t", unique_id="u", status="answered", message_for_user="m",
        schema={"type": "string", "pattern": "^[0-9]{6}$"}, kind="input", sensitive=False, run_id="r",
        channels=["slack"], created_at=100.0, expires_at=700.0, created_by="ask", response="123456",
        response_purged=False, resolved_by="a", resolved_channel="api", resolved_at=150.0,
        deliveries=[DeliveryView("slack", "C1", "sent", 1, None, 101.0)], opened_at=get("opened_at"),
        interacted_at=get("interacted_at"),
        on_timeout=json.loads(row["on_timeout_json"]) if get("on_timeout_json") else "expire",
        callback_url=get("callback_url"), proposal=json.loads(row["proposal_json"]) if get("proposal_json") else None,
        proposal_schema=json.loads(row["proposal_schema_json"]) if get("proposal_schema_json") else None,
        assign_to=json.loads(row["assign_to_json"]) if get("assign_to_json") else None,
        on_behalf_of=get("on_behalf_of"),
        schedule=Schedule.from_json(get("schedule_json"), created_at=100.0),
        approvals_required=get("approvals_required"), reject_policy=get("reject_policy"),
        votes=json.loads(row["votes_json"]) if get("votes_json") else [], votes_version=get("votes_version") or 0)
    assert view == expected
    assert vars(view).keys() == {f.name for f in dataclasses.fields(RequestView)}  # every field, none more
    assert vars(view.deliveries[0]).keys() == {f.name for f in dataclasses.fields(DeliveryView)}
    assert view.to_json(include_response=True) == expected.to_json(include_response=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.status = "pending"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.deliveries[0].status = "withdrawn"  # type: ignore[misc]


# -- the heap that startup built -------------------------------------------------------------------------------


def test_serve_leaves_the_startup_heap_out_of_later_collections() -> None:
    import gc
    import inspect

    from handraise.core.commands import serve

    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage  # type: ignore[attr-defined]
    ref = __import__("weakref").ref(garbage)
    del garbage
    try:
        frozen = serve.freeze_startup_heap()
        assert ref() is None, "garbage is collected before the freeze, never kept for good"
        assert frozen == gc.get_freeze_count() > 1000
        assert len(gc.get_objects()) < frozen / 10  # what a full collection walks now: what came after
    finally:
        gc.unfreeze()
    # cmd_serve freezes once the app has started (after the banner and the first-run hint).
    source = inspect.getsource(serve.cmd_serve)
    assert source.index("freeze_startup_heap()") > source.index("first_run_hint(settings)")


def test_serve_runs_on_uvloops_event_loop_where_installed_and_the_store_works_on_it(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect
    import sys

    import uvloop

    from handraise.core.commands import serve
    from tests.core.test_pg_hot_path import cycle, opened

    assert serve.event_loop_factory() is uvloop.new_event_loop
    source = inspect.getsource(serve.cmd_serve)
    assert "asyncio.Runner(loop_factory=event_loop_factory())" in source

    async def store_cycles() -> tuple[type, list[int]]:
        # The database thread hands results back with call_soon_threadsafe: on uvloop's loop as on asyncio's.
        async with opened(f"sqlite:///{tmp_path / 'uv.db'}") as store:
            seqs = [(await cycle(store, str(i))).seq for i in range(3)]
            assert await store.verify_journal() == []
        return type(asyncio.get_running_loop()), seqs

    with asyncio.Runner(loop_factory=serve.event_loop_factory()) as runner:
        kind, seqs = runner.run(store_cycles())
    assert kind is uvloop.Loop and seqs == [1, 3, 5]
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed: asyncio's own loop
    assert serve.event_loop_factory() is None

"""Schema patterns run on RE2: no answer, default or chat reply to any pattern may stall the server.

The hostile patterns are the ones that froze the server under Python's backtracking ``re``
(a 27-character answer to ``(\\w+\\s?)+$`` stopped every tenant for 17.5 s). Each is now
accepted at create, matched in linear time, and while long hostile answers are checked on
every channel, other requests (``/healthz`` among them) keep being served.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import AGENT_KEY, OPERATOR_KEY, Api

from handraise.core.errors import InvalidSchemaError
from handraise.core.schema import check_schema, validate_answer
from handraise.core.schema.patterns import MAX_PROGRAM_SIZE, PatternError, compile_pattern, pattern_search
from handraise.core.schema.validation import OFF_LOOP_STEPS, match_steps
from handraise.webforms.render import CSRF_FIELD, ROOT_NAME

# Each pattern with the answer that makes a backtracking engine take exponential (or n^12) time.
HOSTILE = [
    (r"(\w+\s?)+$", "a" * 30_000 + "!"),
    (r"(a|aa)+$", "a" * 30_000 + "b"),
    (r"^(a|a?)+$", "a" * 30_000 + "b"),
    (r"(.*a){12}$", "a" * 30_000 + "b"),
    (r"^([a-z0-9]+[-_.]?)+@example\.com$", "a" * 30_000 + "!"),
    (r"^(a+)+$", "a" * 30_000 + "b"),
]
# Under Python's re, 27 characters took 17 s of the loop's thread; the loop must stay responsive far
# beyond that. Measured in this thread's CPU time during one /healthz round trip (server and client
# share the loop), so a machine loaded by other processes cannot fail it, but a match run on the loop can.
STALL_LIMIT = 1.0


# --------------------------------------------------------------------------- the engine


@pytest.mark.parametrize(("pattern", "answer"), HOSTILE)
def test_hostile_patterns_are_accepted_and_match_in_linear_time(pattern: str, answer: str) -> None:
    schema = {"type": "string", "pattern": pattern}
    assert check_schema(schema) == schema
    started = time.perf_counter()
    errors = validate_answer(schema, answer)
    assert time.perf_counter() - started < 0.5
    assert [e.message for e in errors] == ["This doesn't have the expected format."]


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        ("^(?=.*[0-9])[a-z0-9]+$", "a lookahead (?=…)"),
        ("^(?!admin)[a-z]+$", "a negative lookahead (?!…)"),
        ("(?<=@)example", "a lookbehind (?<=…)"),
        ("(?<!x)y", "a negative lookbehind (?<!…)"),
        ("(a)\\1", "a backreference (\\1)"),
        ("(?P<w>a)(?P=w)", "a named backreference (?P=…)"),
        ("(?<w>a)\\k<w>", "a named backreference \\k<…>"),
        ("(?>a+)b", "an atomic group (?>…)"),
        ("a++b", "a possessive repetition"),
        ("\\cA", "a control escape \\cX"),
    ],
)
def test_constructs_re2_lacks_are_refused_at_create_with_the_reason(pattern: str, construct: str) -> None:
    with pytest.raises(InvalidSchemaError) as info:
        check_schema({"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}})
    message = info.value.message
    assert message.startswith(f"schema.properties.code.pattern: pattern uses {construct}")
    assert "RE2" in message and "linear" in message


def test_a_pattern_too_complex_to_match_quickly_is_refused() -> None:
    with pytest.raises(PatternError, match=f"at most {MAX_PROGRAM_SIZE}"):
        compile_pattern("(?:.{0,300}a){3}c")
    with pytest.raises(InvalidSchemaError, match="too complex"):
        check_schema({"type": "string", "pattern": "(?:.{0,300}a){3}c"})
    # Repetition counts past RE2's limit do not compile at all.
    with pytest.raises(InvalidSchemaError, match="pattern does not compile"):
        check_schema({"type": "string", "pattern": "a{1001}"})


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        # ECMA-262 (JSON Schema's dialect): \d and \w are ASCII, $ is the very end.
        (r"^\d+$", "123", True),
        (r"^\d+$", "١٢٣", False),
        (r"^\w+$", "é", False),
        (r"^a$", "a\n", False),
        # JSON Schema's pattern is unanchored.
        (r"[0-9]{3}", "ab123cd", True),
        # ECMA's \uXXXX and \u{X…} escapes are code points; an escaped backslash stays one.
        (r"^caf\u00e9$", "café", True),
        (r"^\u{1F600}$", "😀", True),
        (r"^[\u0041-\u005A]+$", "ABC", True),
        (r"^\\u0041$", "\\u0041", True),
        (r"^\p{L}+$", "Zoë", True),
        (r"(?<name>x)", "x", True),
    ],
)
def test_patterns_read_as_json_schema_means_them(pattern: str, text: str, matches: bool) -> None:
    assert pattern_search(pattern, text) is matches


def test_a_pattern_never_sees_a_lone_surrogate() -> None:
    assert pattern_search("^.*$", "a\ud800b") is False


def test_long_answers_to_costly_patterns_are_checked_off_the_loop() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[0-9]{6}$"},
                                                 "b": {"type": "string", "pattern": r"^\p{L}+$"}}}
    assert match_steps(schema, {"a": "123456"}) < OFF_LOOP_STEPS
    assert match_steps(schema, {"a": "x" * 50_000}) > OFF_LOOP_STEPS
    assert match_steps({"type": "string"}, "x" * 1_000_000) == 0


# --------------------------------------------------------------------------- the server stays responsive


async def _served_while(api: Api, work: Any) -> tuple[Any, float]:
    """Run ``work`` while polling /healthz; returns its result and the most loop-thread CPU time one
    healthz round trip took (what a match running on the loop would add to every other request)."""
    slowest = 0.0
    served = 0
    done = asyncio.Event()

    async def poll() -> None:
        nonlocal slowest, served
        while not done.is_set():
            started = time.thread_time()
            status, _ = await api.call("GET", "/healthz", key=None)
            assert status == 200
            slowest = max(slowest, time.thread_time() - started)
            served += 1

    poller = asyncio.create_task(poll())
    try:
        result = await work
    finally:
        done.set()
        await poller
    assert served >= 1
    return result, slowest


async def _ask(api: Api, schema: dict[str, Any]) -> dict[str, Any]:
    return await api.create({"unique_id": f"re-{secrets.token_hex(6)}", "message_for_user": "Code?",
                             "schema": schema})


async def test_hostile_api_answers_do_not_stall_other_requests(web: Api) -> None:
    requests = [(await _ask(web, {"type": "string", "pattern": p}), answer) for p, answer in HOSTILE]

    async def submit_all() -> list[tuple[int, Any]]:
        return await asyncio.gather(*(web.submit(r["unique_id"], answer) for r, answer in requests))

    results, slowest = await _served_while(web, submit_all())
    assert slowest < STALL_LIMIT
    for (status, body), (pattern, _) in zip(results, HOSTILE, strict=True):
        assert status == 422 and body["error"] == "invalid_answer"
        assert body["details"]["fields"] == [{"field": "", "message": "This doesn't have the expected format."}]
    # A matching answer still goes through.
    ok = await _ask(web, {"type": "string", "pattern": HOSTILE[0][0]})
    assert (await web.submit(ok["unique_id"], "hello world"))[0] == 200


async def test_hostile_form_answers_do_not_stall_other_requests(web: Api) -> None:
    from tests.webforms.html_tools import csrf_of

    async def post_hostile(pattern: str, answer: str) -> tuple[int, str]:
        request = await _ask(web, {"type": "string", "pattern": pattern})
        status, link = await web.call("POST", f"/v1/requests/{request['id']}/links", key=OPERATOR_KEY, json={})
        assert status == 201
        path = "/f/" + link["url"].rsplit("/f/", 1)[1]
        async with web.session.get(web.url(path)) as resp:
            csrf = csrf_of(await resp.text())
        async with web.session.post(web.url(path), data={CSRF_FIELD: csrf, ROOT_NAME: answer}) as resp:
            return resp.status, await resp.text()

    async def post_all() -> list[tuple[int, str]]:
        return await asyncio.gather(*(post_hostile(p, answer) for p, answer in HOSTILE))

    results, slowest = await _served_while(web, post_all())
    assert slowest < STALL_LIMIT
    for status, html in results:
        assert status == 422 and "have the expected format" in html


async def test_a_hostile_default_does_not_stall_create(web: Api) -> None:
    async def create_all() -> list[tuple[int, Any]]:
        return await asyncio.gather(*(
            web.call("POST", "/v1/requests", key=AGENT_KEY, json={
                "unique_id": f"d-{i}", "message_for_user": "Code?",
                "schema": {"type": "string", "pattern": pattern, "default": answer[-7000:]}})
            for i, (pattern, answer) in enumerate(HOSTILE)))

    results, slowest = await _served_while(web, create_all())
    assert slowest < STALL_LIMIT
    for status, body in results:
        assert status == 422 and body["error"] == "invalid_schema"
        assert body["message"].startswith("schema.default: default does not fit the field: This doesn't have the expected format")


async def test_hostile_chat_replies_do_not_stall_other_requests(tmp_path: Path) -> None:
    from tests.bots.contract_telegram import TelegramDriver

    driver = TelegramDriver()
    async with driver.running(f"sqlite:///{tmp_path / 'h.db'}") as api:
        asked = []
        for pattern, answer in HOSTILE:
            request = await api.create({"unique_id": f"tg-{secrets.token_hex(4)}", "message_for_user": "Code?",
                                        "schema": {"type": "string", "pattern": pattern}, "channels": ["telegram"]})
            asked.append((await driver.posted(api, request), request, answer))

        async def reply_all() -> None:
            # A Telegram message holds at most 4096 characters.
            actions = [await driver.reply(posted, answer[-4000:]) for posted, _, answer in asked]
            await asyncio.gather(*(driver.bot_reply(action, containing="expected format") for action in actions))

        _, slowest = await _served_while(api, reply_all())
        assert slowest < STALL_LIMIT
        for _, request, _ in asked:
            status, body = await api.call("GET", f"/v1/requests/{request['id']}")
            assert status == 200 and body["status"] == "pending"

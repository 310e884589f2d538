"""``GET /v1/requests`` a page at a time: keyset cursors, on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from conftest import AGENT_KEY, OTHER_AGENT_KEY, READER_KEY, Api
from handraise.core.appkeys import SERVICE


def body(uid: str, **extra: Any) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "Enter the code", "timeout_seconds": 60, **extra}


async def pages(api: Api, *, key: str = READER_KEY, on_page: Any = None,
                **params: str) -> list[list[dict[str, Any]]]:
    """Every page in turn, following next_cursor; ``on_page`` runs between pages."""
    out: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        status, data = await api.call("GET", "/v1/requests", key=key, params=query)
        assert status == 200, data
        out.append(data["requests"])
        cursor = data["next_cursor"]
        if cursor is None:
            return out
        if on_page is not None:
            await on_page()


async def test_without_a_cursor_the_list_is_as_before_with_a_null_next_cursor(api: Api) -> None:
    made = [await api.create(body(f"old-{i}")) for i in range(3)]
    status, data = await api.call("GET", "/v1/requests", key=READER_KEY)
    assert status == 200 and [r["id"] for r in data["requests"]] == [r["id"] for r in made]
    assert data["next_cursor"] is None
    status, data = await api.call("GET", "/v1/requests", key=READER_KEY, params={"limit": "3"})
    assert data["next_cursor"] is None  # exactly one full page: no empty page after it


async def test_pages_cover_every_row_exactly_once_while_rows_are_inserted(api: Api) -> None:
    before = [(await api.create(body(f"p-{i}", run_id="run-pages")))["id"] for i in range(11)]
    inserted: list[str] = []

    async def insert_two() -> None:
        # Created between pages, concurrently with the next page's read.
        made = await asyncio.gather(*(api.create(body(f"new-{len(inserted)}-{j}", run_id="run-pages"))
                                      for j in range(2)))
        inserted.extend(r["id"] for r in made)

    seen = [r["id"] for page in await pages(api, run_id="run-pages", limit="3", on_page=insert_two) for r in page]
    assert len(seen) == len(set(seen)), "a row appeared on two pages"
    assert [i for i in seen if i in before] == before  # every row there at the start, once, in order
    assert set(seen) <= set(before) | set(inserted)
    assert set(inserted) & set(seen), "rows created meanwhile are reached on later pages"


async def test_rows_created_at_the_same_instant_are_ordered_by_id_across_pages(api: Api) -> None:
    service = api.app[SERVICE]
    instant = time.time()
    service.clock = lambda: instant
    ids = [(await api.create(body(f"tie-{i}")))["id"] for i in range(7)]
    got = await pages(api, limit="2")
    assert [len(p) for p in got] == [2, 2, 2, 1]
    assert [r["id"] for p in got for r in p] == sorted(ids)


async def test_each_filter_pages_on_its_own(api: Api) -> None:
    made = [await api.create(body(f"f-{i}")) for i in range(5)]
    for r in made[:3]:
        assert (await api.submit(r["unique_id"], "done"))[0] == 200
    answered = [r["id"] for p in await pages(api, status="answered", limit="2") for r in p]
    pending = [r["id"] for p in await pages(api, status="pending", limit="2") for r in p]
    assert answered == [r["id"] for r in made[:3]] and pending == [r["id"] for r in made[3:]]


def _flip(text: str, at: int) -> str:
    return text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1:]


async def test_altered_forged_and_foreign_cursors_are_refused_with_the_envelope(api: Api) -> None:
    for i in range(3):
        await api.create(body(f"c-{i}"))
        await api.create(body(f"c-{i}"), key=OTHER_AGENT_KEY)
    _, first = await api.call("GET", "/v1/requests", key=READER_KEY, params={"limit": "1"})
    cursor = first["next_cursor"]
    assert cursor
    payload, tag = cursor.split(".")
    forged_payload = base64.urlsafe_b64encode(b"c1" + b"0.0\x1freq_x").decode().rstrip("=")
    bad = {
        "not base64": "!!!",
        "no signature": payload,
        "payload altered": _flip(payload, 3) + "." + tag,
        "signature altered": payload + "." + _flip(tag, 2),
        "forged position, old tag": forged_payload + "." + tag,
        "forged position, no valid tag": forged_payload + ".AAAAAAAAAAAAAAAAAAAAAA",
        "an annotation list's cursor": base64.urlsafe_b64encode(b"a:5").decode().rstrip("="),
        "oversized": "A" * 5000 + "." + tag,
        "empty": "",
    }
    for what, value in bad.items():
        status, data = await api.call("GET", "/v1/requests", key=READER_KEY, params={"cursor": value, "limit": "1"})
        assert status == 400, (what, status, data)
        assert data["error"] == "bad_request" and isinstance(data["message"], str), what
    # Another tenant's key with this tenant's cursor: refused, and nothing of acme is listed.
    status, data = await api.call("GET", "/v1/requests", key=OTHER_AGENT_KEY, params={"cursor": cursor})
    assert status == 400 and data["error"] == "bad_request"
    # The same cursor under another filter: refused rather than read as a position in another list.
    status, data = await api.call("GET", "/v1/requests", key=READER_KEY,
                                  params={"cursor": cursor, "status": "pending"})
    assert status == 400 and data["error"] == "bad_request"
    # As given, it still works: the refusals above changed nothing.
    status, data = await api.call("GET", "/v1/requests", key=READER_KEY, params={"cursor": cursor, "limit": "1"})
    assert status == 200 and data["requests"][0]["unique_id"] == "c-1"


@pytest.mark.parametrize("limit", ["0", "501", "-1", "1.5", "ten", ""])
async def test_a_limit_outside_1_to_500_is_refused(api: Api, limit: str) -> None:
    status, data = await api.call("GET", "/v1/requests", key=AGENT_KEY, params={"limit": limit})
    assert status == 400 and data["error"] == "bad_request" and "limit" in data["message"]


async def test_a_request_past_its_deadline_before_the_sweep_is_listed_expired_never_pending(api: Api) -> None:
    from conftest import sweeper_held

    late, live = await api.create(body("late", timeout_seconds=30)), await api.create(body("live"))
    service = api.app[SERVICE]
    async with sweeper_held(api):
        service.clock = lambda: time.time() + 45  # past late's deadline, not live's; nothing swept
        # A page whose one row was settled and dropped still hands the cursor on from it: nothing skipped.
        assert [[r["id"] for r in page] for page in await pages(api, status="pending", limit="1")] == [[], [live["id"]]]
        status, data = await api.call("GET", "/v1/requests", key=READER_KEY, params={"status": "pending"})
        assert status == 200 and [r["id"] for r in data["requests"]] == [live["id"]]
        listed = {r["id"]: r["status"] for r in (await api.call("GET", "/v1/requests", key=READER_KEY))[1]["requests"]}
        assert listed == {late["id"]: "expired", live["id"]: "pending"}
    expired = [e for e in await api.journal(late["id"]) if e["event"] == "expired"]
    assert len(expired) == 1

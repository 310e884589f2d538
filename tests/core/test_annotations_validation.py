"""Every body RFC 0056's schema forbids, malformed JSON, oversized text, scopes, pagination, and a burst of 1,000."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import (
    AGENT_KEY,
    ANNOTATOR_KEY,
    OPERATOR_KEY,
    READER_KEY,
    Api,
    base_config,
    running_app,
    settings_from,
)
from handraise.core.annotations import decode_cursor, encode_cursor

RUN = "run-v"
PATH = f"/v1/runs/{RUN}/annotations"


async def post(api: Api, body: Any, *, key: str | None = ANNOTATOR_KEY, path: str = PATH) -> tuple[int, Any]:
    return await api.call("POST", path, json=body, key=key)


def fields(err: Any) -> set[str]:
    return {d["field"] for d in err.get("details", {}).get("fields") or []}


# Each case: a body, and the field the 422 must name (None: the body as a whole).
INVALID: dict[str, tuple[Any, str | None]] = {
    "array body": ([{"signal": {"kind": "flag"}}], None),
    "string body": ("flag", None),
    "number body": (5, None),
    "null body": (None, None),
    "no signal": ({"note": "hm"}, "signal"),
    "signal not an object": ({"signal": "rating"}, "signal"),
    "no kind": ({"signal": {"rating": 3}}, "signal.kind"),
    "unknown kind": ({"signal": {"kind": "thumbs"}}, "signal.kind"),
    "kind not a string": ({"signal": {"kind": 1}}, "signal.kind"),
    "rating missing": ({"signal": {"kind": "rating"}}, "signal.rating"),
    "rating 0": ({"signal": {"kind": "rating", "rating": 0}}, "signal.rating"),
    "rating 6": ({"signal": {"kind": "rating", "rating": 6}}, "signal.rating"),
    "rating -1": ({"signal": {"kind": "rating", "rating": -1}}, "signal.rating"),
    "rating 3.5": ({"signal": {"kind": "rating", "rating": 3.5}}, "signal.rating"),
    "rating string": ({"signal": {"kind": "rating", "rating": "5"}}, "signal.rating"),
    "rating boolean": ({"signal": {"kind": "rating", "rating": True}}, "signal.rating"),
    "rating null": ({"signal": {"kind": "rating", "rating": None}}, "signal.rating"),
    "rating on a flag": ({"signal": {"kind": "flag", "rating": 3}}, "signal.rating"),
    "rating on a label": ({"signal": {"kind": "label", "label": "x", "rating": 3}}, "signal.rating"),
    "label missing": ({"signal": {"kind": "label"}}, "signal.label"),
    "label empty": ({"signal": {"kind": "label", "label": ""}}, "signal.label"),
    "label blank": ({"signal": {"kind": "label", "label": "   "}}, "signal.label"),
    "label not a string": ({"signal": {"kind": "label", "label": ["a"]}}, "signal.label"),
    "label on a rating": ({"signal": {"kind": "rating", "rating": 2, "label": "meh"}}, "signal.label"),
    "correction missing": ({"signal": {"kind": "correction"}}, "signal.correction"),
    "correction not a string": ({"signal": {"kind": "correction", "correction": {"a": 1}}}, "signal.correction"),
    "correction on a flag": ({"signal": {"kind": "flag", "correction": "x"}}, "signal.correction"),
    "extra signal member": ({"signal": {"kind": "flag", "severity": "high"}}, "signal.severity"),
    "extra top-level member": ({"signal": {"kind": "flag"}, "confidence": 0.9}, "confidence"),
    "annotationId from the client": ({"annotationId": "ann_mine", "signal": {"kind": "flag"}}, "annotationId"),
    "actor from the client": ({"actor": {"principalRef": "operator:boss"}, "signal": {"kind": "flag"}}, "actor"),
    "createdAt from the client": ({"createdAt": "2026-01-01T00:00:00Z", "signal": {"kind": "flag"}}, "createdAt"),
    "target not an object": ({"target": RUN, "signal": {"kind": "flag"}}, "target"),
    "extra target member": ({"target": {"runId": RUN, "stepId": "s"}, "signal": {"kind": "flag"}}, "target.stepId"),
    "target for another run": ({"target": {"runId": "run-other"}, "signal": {"kind": "flag"}}, "target.runId"),
    "runId empty": ({"target": {"runId": ""}, "signal": {"kind": "flag"}}, "target.runId"),
    "runId not a string": ({"target": {"runId": 42}, "signal": {"kind": "flag"}}, "target.runId"),
    "eventId null": ({"target": {"eventId": None}, "signal": {"kind": "flag"}}, "target.eventId"),
    "eventId empty": ({"target": {"eventId": ""}, "signal": {"kind": "flag"}}, "target.eventId"),
    "eventId a number": ({"target": {"eventId": 7}, "signal": {"kind": "flag"}}, "target.eventId"),
    "nodeId too long": ({"target": {"nodeId": "n" * 201}, "signal": {"kind": "flag"}}, "target.nodeId"),
    "note a number": ({"signal": {"kind": "flag"}, "note": 5}, "note"),
    "note null": ({"signal": {"kind": "flag"}, "note": None}, "note"),
    "supersedes unknown": ({"signal": {"kind": "flag"}, "supersedes": "ann_nope"}, "supersedes"),
    "supersedes not a string": ({"signal": {"kind": "flag"}, "supersedes": 3}, "supersedes"),
}


@pytest.mark.parametrize("case", list(INVALID), ids=list(INVALID))
async def test_bodies_the_schema_forbids_are_422_naming_the_field(sqlite_api: Api, case: str) -> None:
    body, field = INVALID[case]
    if body is None:  # aiohttp sends no body for json=None; send the JSON literal itself
        status, err = await sqlite_api.call("POST", PATH, data=b"null", key=ANNOTATOR_KEY,
                                            headers={"Content-Type": "application/json"})
    else:
        status, err = await post(sqlite_api, body)
    assert status == 422, (case, err)
    assert err["error"] == "validation_error" and err["message"]
    if field is not None:
        assert field in fields(err), (case, err)
    status, page = await sqlite_api.call("GET", PATH, key=READER_KEY)
    # Nothing invalid is ever stored: not the annotation, not even the run it named.
    assert status == 404 and page["error"] == "not_found", page


async def test_errors_never_echo_the_rejected_value(sqlite_api: Api) -> None:
    secret = "sk-proj-Abc123DEF456ghi789JKL012mno345"
    status, err = await post(sqlite_api, {"signal": {"kind": "flag", "correction": secret}, "note": [secret]})
    assert status == 422 and secret not in str(err)


@pytest.mark.parametrize("body", [
    {"signal": {"kind": "rating", "rating": 1}},
    {"signal": {"kind": "rating", "rating": 5}},
    {"signal": {"kind": "label", "label": "hallucinated"}},
    {"signal": {"kind": "correction", "correction": ""}},
    {"signal": {"kind": "flag"}, "note": ""},
    {"target": {"runId": RUN, "eventId": "evt-9", "nodeId": "n-1"}, "signal": {"kind": "flag"}},
    {"target": {}, "signal": {"kind": "flag"}},
], ids=["rating 1", "rating 5", "label", "empty correction", "flag with empty note", "event and node", "empty target"])
async def test_bodies_the_schema_allows_are_201(sqlite_api: Api, body: dict[str, Any]) -> None:
    status, ann = await post(sqlite_api, body)
    assert status == 201, ann
    assert ann["signal"] == body["signal"] and ann["target"]["runId"] == RUN
    assert ann.get("note") == body.get("note")


async def test_an_integral_float_rating_is_an_integer_as_json_schema_says(sqlite_api: Api) -> None:
    status, ann = await post(sqlite_api, {"signal": {"kind": "rating", "rating": 4.0}})
    assert status == 201 and ann["signal"]["rating"] == 4 and isinstance(ann["signal"]["rating"], int)


async def test_a_run_id_longer_than_the_store_holds_is_422(sqlite_api: Api) -> None:
    status, err = await post(sqlite_api, {"signal": {"kind": "flag"}}, path=f"/v1/runs/{'r' * 201}/annotations")
    assert status == 422 and "runId" in fields(err)


# -- malformed and oversized ------------------------------------------------------------


@pytest.mark.parametrize("raw", [b'{"signal": {"kind": "flag"}', b"not json", b"\xff\xfe", b""],
                         ids=["truncated", "not json", "not utf-8", "empty"])
async def test_malformed_json_is_400(sqlite_api: Api, raw: bytes) -> None:
    status, err = await sqlite_api.call("POST", PATH, data=raw, key=ANNOTATOR_KEY,
                                        headers={"Content-Type": "application/json"})
    assert status == 400 and err["error"] == "bad_request"


@pytest.mark.parametrize(("field", "limit"), [("note", 10_000), ("signal.correction", 10_000), ("signal.label", 500)])
async def test_text_over_its_cap_is_422_naming_the_field(sqlite_api: Api, field: str, limit: int) -> None:
    # 422, as the schema's maxLength says (issue 11): 413 is for a body over the server's byte limit.
    kind = field.removeprefix("signal.") if field.startswith("signal.") else "flag"

    def body(n: int) -> dict[str, Any]:
        out: dict[str, Any] = {"signal": {"kind": kind}}
        if field == "note":
            out["note"] = "x" * n
        else:
            out["signal"][kind] = "x" * n
        return out

    status, ann = await post(sqlite_api, body(limit))
    assert status == 201, ann  # exactly at the cap is fine
    status, err = await post(sqlite_api, body(limit + 1))
    assert status == 422 and err["error"] == "validation_error"
    assert err["details"]["fields"] == [{"field": field, "message": f"String should have at most {limit} characters"}]


async def test_a_body_over_the_server_limit_is_413(sqlite_api: Api) -> None:
    status, err = await post(sqlite_api, {"signal": {"kind": "flag"}, "note": "y" * 70_000})
    assert status == 413 and err["error"] == "payload_too_large"
    status, page = await sqlite_api.call("GET", PATH, key=READER_KEY)
    assert status == 404, page  # no annotation, and so no run either


# -- scopes --------------------------------------------------------------------------------


async def test_recording_needs_the_annotate_scope_and_reading_read_or_annotate(sqlite_api: Api) -> None:
    good = {"signal": {"kind": "flag"}}
    for key in (AGENT_KEY, READER_KEY, OPERATOR_KEY):
        status, err = await post(sqlite_api, good, key=key)
        assert status == 403 and err["error"] == "forbidden"
    status, err = await post(sqlite_api, good, key=None)
    assert status == 401
    status, err = await post(sqlite_api, good, key="no-such-key-0123456789")
    assert status == 401
    status, _ = await sqlite_api.call("GET", PATH, key=AGENT_KEY)
    assert status == 403
    status, _ = await post(sqlite_api, good)  # the run exists once annotated (a never-named run is 404)
    assert status == 201
    for key in (READER_KEY, OPERATOR_KEY, ANNOTATOR_KEY):
        status, _ = await sqlite_api.call("GET", PATH, key=key)
        assert status == 200
    status, _ = await sqlite_api.call("GET", PATH, key=None)
    assert status == 401


async def test_an_agent_key_with_annotate_records_as_an_agent(tmp_path: Any) -> None:
    config = base_config(f"sqlite:///{tmp_path / 'h.db'}")
    config["tenants"][0]["keys"].append({"id": "judge-1", "key": "judge-key-0123456789abcdef",
                                         "scopes": ["ask", "annotate"]})
    async with running_app(settings_from(config)) as api:
        status, ann = await post(api, {"signal": {"kind": "rating", "rating": 2}}, key="judge-key-0123456789abcdef")
        assert status == 201 and ann["actor"] == {"principalRef": "agent:judge-1"}


# -- pagination ------------------------------------------------------------------------------


async def test_pages_follow_the_cursor_to_the_end(sqlite_api: Api) -> None:
    made = []
    for i in range(5):
        _, ann = await post(sqlite_api, {"signal": {"kind": "flag"}, "note": f"n{i}"})
        made.append(ann["annotationId"])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        status, page = await sqlite_api.call("GET", PATH, key=READER_KEY, params=params)
        assert status == 200
        pages += 1
        seen += [a["annotationId"] for a in page["annotations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made and pages == 3
    status, page = await sqlite_api.call("GET", PATH, key=READER_KEY, params={"limit": "5"})
    assert len(page["annotations"]) == 5 and page["next_cursor"] is None


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "501"}, {"limit": "ten"}, {"cursor": "%%%"},
                                    {"cursor": "bm90LWEtY3Vyc29y"}, {"cursor": encode_cursor(3)[:-1] + "!"}])
async def test_bad_limits_and_cursors_are_400(sqlite_api: Api, params: dict[str, str]) -> None:
    status, err = await sqlite_api.call("GET", PATH, key=READER_KEY, params=params)
    assert status == 400 and err["error"] == "bad_request"


def test_cursors_round_trip_and_are_opaque() -> None:
    assert decode_cursor(encode_cursor(12345)) == 12345
    assert "12345" not in encode_cursor(12345)


# -- a burst of 1,000 --------------------------------------------------------------------------


async def test_a_burst_of_1000_annotations_lists_back_complete_and_in_order(storage_url: str) -> None:
    workers, each = 20, 50
    async with running_app(settings_from(base_config(storage_url))) as api:

        async def worker(w: int) -> list[str]:
            ids = []
            for i in range(each):  # one worker's annotations are sequential: their order is known
                status, ann = await post(api, {"signal": {"kind": "rating", "rating": 1 + (i % 5)},
                                               "note": f"w{w}-{i}"}, path="/v1/runs/run-burst/annotations")
                assert status == 201, ann
                ids.append(ann["annotationId"])
            return ids

        posted = await asyncio.gather(*(worker(w) for w in range(workers)))
        listed: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": "500"} | ({"cursor": cursor} if cursor else {})
            status, page = await api.call("GET", "/v1/runs/run-burst/annotations", key=READER_KEY, params=params)
            assert status == 200
            listed += page["annotations"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    ids = [a["annotationId"] for a in listed]
    assert len(ids) == workers * each == len(set(ids))
    assert set(ids) == {i for batch in posted for i in batch}
    # Oldest first: createdAt never goes back, and each worker's own sequence is kept.
    stamps = [a["createdAt"] for a in listed]
    assert stamps == sorted(stamps)
    position = {annotation_id: n for n, annotation_id in enumerate(ids)}
    for batch in posted:
        assert [position[i] for i in batch] == sorted(position[i] for i in batch)

"""Past the RFC: superseding annotations (open question 1), the feedback summary (open question 3),
the run bundle's scopes, and the service door connectors use to record a rating."""

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
from handraise.core.annotations import AnnotationService
from handraise.core.appkeys import ANNOTATIONS, BUS, STORE
from handraise.core.errors import ForbiddenError, ValidationFailedError
from handraise.core.events import RUN_ANNOTATED


async def annotate(api: Api, run_id: str, body: dict[str, Any], *, key: str = ANNOTATOR_KEY) -> tuple[int, Any]:
    return await api.call("POST", f"/v1/runs/{run_id}/annotations", json=body, key=key)


def rating(n: int, **extra: Any) -> dict[str, Any]:
    return {"signal": {"kind": "rating", "rating": n}, **extra}


# -- supersedes: append-only changes ----------------------------------------------------------


async def test_a_change_is_a_new_annotation_naming_the_one_it_supersedes(sqlite_api: Api) -> None:
    _, first = await annotate(sqlite_api, "run-s", rating(2))
    status, second = await annotate(sqlite_api, "run-s", rating(4, supersedes=first["annotationId"]))
    assert status == 201 and second["supersedes"] == first["annotationId"]
    # Append-only: the first is still there, unchanged, and the list keeps both in order.
    _, page = await sqlite_api.call("GET", "/v1/runs/run-s/annotations", key=READER_KEY)
    assert page["annotations"] == [first, second]
    # One successor per annotation: an edit of a stale version is refused, the newest can be superseded.
    status, err = await annotate(sqlite_api, "run-s", rating(5, supersedes=first["annotationId"]))
    assert status == 409 and err["error"] == "conflict"
    assert "superseded already" in err["message"]
    status, third = await annotate(sqlite_api, "run-s", rating(5, supersedes=second["annotationId"]))
    assert status == 201
    _, page = await sqlite_api.call("GET", "/v1/runs/run-s/annotations", key=READER_KEY)
    assert [a["annotationId"] for a in page["annotations"]] == [first["annotationId"], second["annotationId"],
                                                                 third["annotationId"]]


async def test_only_the_same_actor_on_the_same_run_may_supersede(sqlite_api: Api) -> None:
    _, mine = await annotate(sqlite_api, "run-t", rating(1))
    service = sqlite_api.app[ANNOTATIONS]
    with pytest.raises(ForbiddenError):
        await service.record(tenant_id="acme", run_id="run-t", principal="telegram:99",
                             body=rating(5, supersedes=mine["annotationId"]))
    status, err = await annotate(sqlite_api, "run-other", rating(5, supersedes=mine["annotationId"]))
    assert status == 422 and err["details"]["fields"] == [{"field": "supersedes",
                                                          "message": "no such annotation on this run"}]
    assert len(await sqlite_api.app[STORE].query_annotations("acme")) == 1


async def test_racing_edits_of_one_annotation_have_one_winner(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        _, first = await annotate(api, "run-race", rating(3))
        results = await asyncio.gather(*(annotate(api, "run-race", rating(n, supersedes=first["annotationId"]))
                                         for n in (1, 2, 4, 5)))
        statuses = sorted(status for status, _ in results)
        assert statuses == [201, 409, 409, 409]
        _, page = await api.call("GET", "/v1/runs/run-race/annotations", key=READER_KEY)
        assert len(page["annotations"]) == 2


# -- the feedback summary -------------------------------------------------------------------------


async def test_summary_of_one_run_counts_current_annotations(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        _, low = await annotate(api, "run-m", rating(2))
        await annotate(api, "run-m", rating(4, supersedes=low["annotationId"]))
        await annotate(api, "run-m", rating(5))
        await annotate(api, "run-m", {"signal": {"kind": "correction", "correction": "Use the EU endpoint."}})
        await annotate(api, "run-m", {"signal": {"kind": "flag"}, "note": "review"})
        for label in ("hallucinated", "hallucinated", "off-brand"):
            await annotate(api, "run-m", {"signal": {"kind": "label", "label": label}})
        await annotate(api, "run-elsewhere", rating(1))

        status, summary = await api.call("GET", "/v1/feedback/summary", params={"run_id": "run-m"}, key=READER_KEY)
        assert status == 200
        assert summary == {
            "run_id": "run-m", "since": None, "until": None,
            "annotations": 7, "superseded": 1, "runs": 1,
            "counts": {"rating": 2, "correction": 1, "label": 3, "flag": 1},
            "ratings": {"1": 0, "2": 0, "3": 0, "4": 1, "5": 1},
            "mean_rating": 4.5, "correction_rate": 1.0, "flag_rate": 1.0,
            "labels": {"hallucinated": 2, "off-brand": 1},
        }
        status, again = await api.call("GET", "/v1/feedback/summary", params={"run_id": "run-m"}, key=ANNOTATOR_KEY)
        assert status == 200 and again == summary


async def test_summary_over_a_time_window_rates_per_annotated_run(sqlite_api: Api) -> None:
    service = sqlite_api.app[ANNOTATIONS]
    now = {"t": 1_780_000_000.0}
    service.clock = lambda: now["t"]
    for offset, run_id, body in [(0, "run-1", rating(3)), (100, "run-2", {"signal": {"kind": "correction",
                                                                                      "correction": "x"}}),
                                 (200, "run-3", {"signal": {"kind": "flag"}}), (300, "run-3", rating(1))]:
        now["t"] = 1_780_000_000.0 + offset
        status, _ = await annotate(sqlite_api, run_id, body)
        assert status == 201

    # since is inclusive, until exclusive: run-2's correction and run-3's flag, not the ratings.
    status, window = await sqlite_api.call("GET", "/v1/feedback/summary", key=READER_KEY, params={
        "since": "2026-05-28T20:28:20Z", "until": "2026-05-28T20:31:40+00:00"})
    assert status == 200, window
    assert window["since"] == "2026-05-28T20:28:20.000Z" and window["until"] == "2026-05-28T20:31:40.000Z"
    assert window["runs"] == 2 and window["annotations"] == 2 and window["mean_rating"] is None
    assert window["correction_rate"] == 0.5 and window["flag_rate"] == 0.5

    status, everything = await sqlite_api.call("GET", "/v1/feedback/summary", key=READER_KEY)
    assert everything["runs"] == 3 and everything["annotations"] == 4 and everything["mean_rating"] == 2.0
    assert everything["correction_rate"] == pytest.approx(1 / 3, abs=1e-6)

    status, empty = await sqlite_api.call("GET", "/v1/feedback/summary", key=READER_KEY,
                                          params={"run_id": "run-never"})
    assert status == 200 and empty["runs"] == 0 and empty["correction_rate"] is None and empty["mean_rating"] is None


@pytest.mark.parametrize("params", [{"since": "yesterday"}, {"until": "2026-13-01T00:00:00Z"},
                                    {"since": "2026-05-02T00:00:00Z", "until": "2026-05-01T00:00:00Z"}])
async def test_summary_refuses_bad_windows(sqlite_api: Api, params: dict[str, str]) -> None:
    status, err = await sqlite_api.call("GET", "/v1/feedback/summary", key=READER_KEY, params=params)
    assert status == 400 and err["error"] == "bad_request"


async def test_summary_and_bundle_scopes(sqlite_api: Api) -> None:
    status, _ = await sqlite_api.call("GET", "/v1/feedback/summary", key=AGENT_KEY)
    assert status == 403
    status, _ = await sqlite_api.call("GET", "/v1/feedback/summary", key=None)
    assert status == 401
    # The bundle holds the run's questions and answers: read keys only.
    status, _ = await sqlite_api.call("GET", "/v1/runs/run-1/bundle", key=AGENT_KEY)
    assert status == 403
    for key in (READER_KEY, OPERATOR_KEY, ANNOTATOR_KEY):
        # A run nothing names (no request, journal entry, annotation or run record): 404, as GET /v1/runs/{id}.
        status, error = await sqlite_api.call("GET", "/v1/runs/run-1/bundle", key=key)
        assert (status, error["error"]) == (404, "not_found")
    await sqlite_api.call("POST", "/v1/runs/run-1/annotations", key=ANNOTATOR_KEY,
                          json={"signal": {"kind": "rating", "rating": 4}})
    for key in (READER_KEY, OPERATOR_KEY, ANNOTATOR_KEY):
        status, bundle = await sqlite_api.call("GET", "/v1/runs/run-1/bundle", key=key)
        assert status == 200 and len(bundle["annotations"]) == 1 and bundle["requests"] == [], bundle


# -- the door connectors use ----------------------------------------------------------------------


async def test_a_connector_records_a_rating_through_the_service(sqlite_api: Api) -> None:
    service: AnnotationService = sqlite_api.app[ANNOTATIONS]
    with sqlite_api.app[BUS].subscribe(tenant_id="acme", types={RUN_ANNOTATED}) as sub:
        ann = await service.record(tenant_id="acme", run_id="run-chat", principal="telegram:4242",
                                   body={"signal": {"kind": "rating", "rating": 5}}, channel="telegram")
        event = sub.queue.get_nowait()
    assert ann["actor"] == {"principalRef": "telegram:4242"} and ann["target"] == {"runId": "run-chat"}
    assert event.data == ann and event.run_id == "run-chat" and event.object_id == ann["annotationId"]
    entries = await sqlite_api.app[STORE].journal_rows_for_run(tenant_id="acme", run_id="run-chat")
    assert [(e.event, e.principal, e.channel) for e in entries] == [("annotation_recorded", "telegram:4242",
                                                                     "telegram")]
    assert await service.get(tenant_id="acme", annotation_id=ann["annotationId"]) == ann
    assert await service.get(tenant_id="globex", annotation_id=ann["annotationId"]) is None
    with pytest.raises(ValidationFailedError):
        await service.record(tenant_id="acme", run_id="run-chat", principal="telegram:4242",
                             body={"signal": {"kind": "rating", "rating": 9}})
    with pytest.raises(ValidationFailedError):
        await service.record(tenant_id="acme", run_id="run-chat", principal="telegram:4242",
                             body={"signal": {"kind": "flag"}, "note": "z" * 10_001})
    assert service.capability()["supported"] is True

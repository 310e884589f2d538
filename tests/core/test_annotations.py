"""RFC 0056's conformance scenarios against the real app: capability shape, record and list with the
``run.annotated`` event on the stream, a finished run, cross-tenant isolation, redaction, 501."""

from __future__ import annotations

import json
import logging
from typing import Any

import jsonschema
import pytest

from sse import streams

from conftest import (
    AGENT_KEY,
    ANNOTATOR_KEY,
    OPERATOR_KEY,
    OTHER_READER_KEY,
    READER_KEY,
    Api,
    base_config,
    question,
    running_app,
    settings_from,
)
from handraise.core.appkeys import ANNOTATIONS, STORE
from handraise.core.errors import CapabilityNotProvidedError

# RFC 0056 §A, verbatim.
FEEDBACK_CAPABILITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "supported": {"type": "boolean"},
        "targets": {"type": "array", "items": {"type": "string", "enum": ["run", "event", "node"]}},
        "signals": {"type": "array", "items": {"type": "string", "enum": ["rating", "correction", "label", "flag"]}},
    },
    "required": ["supported"],
    "additionalProperties": False,
}

# RFC 0056 §B, verbatim (annotation.schema.json).
ANNOTATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["annotationId", "target", "signal", "actor", "createdAt"],
    "properties": {
        "annotationId": {"type": "string"},
        "target": {
            "type": "object", "required": ["runId"],
            "properties": {"runId": {"type": "string"}, "eventId": {"type": "string"}, "nodeId": {"type": "string"}},
            "additionalProperties": False,
        },
        "signal": {
            "type": "object", "required": ["kind"],
            "properties": {
                "kind": {"type": "string", "enum": ["rating", "correction", "label", "flag"]},
                "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                "label": {"type": "string"},
                "correction": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "actor": {"type": "object", "required": ["principalRef"], "properties": {"principalRef": {"type": "string"}}},
        "note": {"type": "string"},
        "createdAt": {"type": "string", "format": "date-time"},
    },
    "additionalProperties": False,
}

# Secret shapes the one redactor (core/redaction.py) must catch in every annotation text field.
OPENAI_KEY = "sk-proj-Abc123DEF456ghi789JKL012mno345"
GITHUB_TOKEN = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
PASSWORD = "hunter2-Correct-Horse"
SECRETS = (OPENAI_KEY, GITHUB_TOKEN, AWS_KEY_ID, PASSWORD)


def assert_rfc_annotation(annotation: dict[str, Any]) -> None:
    """Valid against the RFC's own schema (``supersedes`` is this host's additive member, checked apart)."""
    jsonschema.validate({k: v for k, v in annotation.items() if k != "supersedes"}, ANNOTATION_SCHEMA,
                        format_checker=jsonschema.FormatChecker())


async def annotate(api: Api, run_id: str, body: dict[str, Any], *, key: str = ANNOTATOR_KEY) -> tuple[int, Any]:
    return await api.call("POST", f"/v1/runs/{run_id}/annotations", json=body, key=key)


# -- feedback-capability-shape ----------------------------------------------------------


async def test_capability_shape_when_enabled(sqlite_api: Api) -> None:
    status, caps = await sqlite_api.call("GET", "/v1/capabilities", key=None)
    assert status == 200
    feedback = caps["host"]["feedback"]
    jsonschema.validate(feedback, FEEDBACK_CAPABILITY_SCHEMA)
    assert feedback == {"supported": True, "targets": ["run", "event", "node"],
                        "signals": ["rating", "correction", "label", "flag"]}


async def test_well_known_openwop_carries_the_feedback_family_at_the_root(sqlite_api: Api) -> None:
    status, doc = await sqlite_api.call("GET", "/.well-known/openwop", key=None)
    assert status == 200
    # RFC 0073: families are document-root properties; the four required v1 fields are present.
    for required in ("protocolVersion", "supportedEnvelopes", "schemaVersions", "limits"):
        assert required in doc
    assert "capabilities" not in doc
    jsonschema.validate(doc["feedback"], FEEDBACK_CAPABILITY_SCHEMA)
    assert doc["feedback"]["supported"] is True and doc["host"]["feedback"] == doc["feedback"]
    assert doc["limits"]["maxRequestBodyBytes"] == 65536


# -- feedback-record-and-list -------------------------------------------------------------


async def test_record_then_observe_the_event_then_list_it_back(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api, streams() as start:
        stream = await start(api, READER_KEY, run_id="run-42")
        status, created = await annotate(api, "run-42", {
            "target": {"runId": "run-42", "nodeId": "summarise"},
            "signal": {"kind": "rating", "rating": 4}, "note": "good, a bit long"})
        assert status == 201, created
        assert_rfc_annotation(created)
        assert created["annotationId"].startswith("ann_") and len(created["annotationId"]) > 20
        assert created["target"] == {"runId": "run-42", "nodeId": "summarise"}
        assert created["signal"] == {"kind": "rating", "rating": 4}
        assert created["actor"] == {"principalRef": "operator:annotator-1"}
        assert created["note"] == "good, a bit long" and "supersedes" not in created

        event, data = await stream.next()
        assert event == "run.annotated" and data == created

        status, page = await api.call("GET", "/v1/runs/run-42/annotations", key=READER_KEY)
        assert status == 200 and page == {"annotations": [created], "next_cursor": None}
        # The annotate scope may read the side-store too.
        status, page = await api.call("GET", "/v1/runs/run-42/annotations", key=ANNOTATOR_KEY)
        assert status == 200 and page["annotations"] == [created]


async def test_the_run_filter_on_the_stream_holds_back_other_runs(sqlite_api: Api) -> None:
    async with streams() as start:
        only_b = await start(sqlite_api, READER_KEY, run_id="run-b", types="run.annotated")
        await annotate(sqlite_api, "run-a", {"signal": {"kind": "flag"}})
        _, b = await annotate(sqlite_api, "run-b", {"signal": {"kind": "flag"}})
        event, data = await only_b.next()
        assert event == "run.annotated" and data["annotationId"] == b["annotationId"]
        assert only_b.events.empty()


async def test_annotations_are_a_side_store_not_request_or_journal_events(sqlite_api: Api) -> None:
    req = await sqlite_api.create({"unique_id": "side-1", "message_for_user": "ok?", "run_id": "run-s"})
    status, ann = await annotate(sqlite_api, "run-s", {"signal": {"kind": "label", "label": "off-brand"}})
    assert status == 201
    status, view = await sqlite_api.call("GET", f"/v1/requests/{req['id']}", key=READER_KEY)
    assert status == 200 and "annotations" not in view and view["status"] == "pending"
    store = sqlite_api.app[STORE]
    entries = await store.journal_rows_for_run(tenant_id="acme", run_id="run-s")
    # One audit entry with the acting principal, holding ids only, tied to no request.
    audit = [e for e in entries if e.event == "annotation_recorded"]
    assert len(audit) == 1 and audit[0].principal == "operator:annotator-1" and audit[0].request_id is None
    assert audit[0].data == {"annotation_id": ann["annotationId"], "kind": "label"}
    assert audit[0].channel == "api"
    assert [e.event for e in entries] == ["created", "annotation_recorded"]


# -- feedback-on-terminal-run ---------------------------------------------------------------


async def test_an_annotation_on_a_finished_run_is_accepted(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api:
        req = await api.create({"unique_id": "done-1", "message_for_user": "Deploy?", "kind": "approval",
                                "run_id": "run-done"})
        status, _ = await api.submit("done-1", {"decision": "approve"})
        assert status == 200
        cancelled = await api.create({"unique_id": "done-2", "message_for_user": "More?", "run_id": "run-done"})
        status, _ = await api.call("POST", f"/v1/requests/{cancelled['id']}/cancel")
        assert status == 200
        assert (await api.wait(req["id"]))["status"] == "answered"
        status, ann = await annotate(api, "run-done", {"signal": {"kind": "correction",
                                                                  "correction": "It should have asked first."}})
        assert status == 201 and ann["signal"]["correction"] == "It should have asked first."
        # A run this host never saw (a worker's run elsewhere) takes feedback as well.
        status, _ = await annotate(api, "run-elsewhere", {"signal": {"kind": "flag"}})
        assert status == 201


# -- feedback-cross-tenant-isolation -----------------------------------------------------


async def test_tenant_b_can_neither_read_nor_stream_nor_reference_tenant_a_annotations(storage_url: str) -> None:
    async with running_app(settings_from(base_config(storage_url))) as api, streams() as start:
        theirs_all = await start(api, OTHER_READER_KEY)
        theirs_run = await start(api, OTHER_READER_KEY, run_id="run-shared")
        status, mine = await annotate(api, "run-shared", {"signal": {"kind": "rating", "rating": 2},
                                                          "note": "acme only"})
        assert status == 201
        # globex annotates a run of the same name: its own, separate side-store.
        status, theirs = await annotate(api, "run-shared", {"signal": {"kind": "flag"}}, key=OTHER_READER_KEY)
        assert status == 201 and theirs["actor"] == {"principalRef": "operator:reader-2"}
        # Each globex stream's first event is globex's own: acme's, published before it, never arrived.
        for reader in (theirs_all, theirs_run):
            _, data = await reader.next()
            assert data["annotationId"] == theirs["annotationId"]
            assert reader.events.empty()
            assert "acme only" not in "\n".join(reader.raw)

        status, page = await api.call("GET", "/v1/runs/run-shared/annotations", key=OTHER_READER_KEY)
        assert status == 200 and [a["annotationId"] for a in page["annotations"]] == [theirs["annotationId"]]
        status, page = await api.call("GET", "/v1/runs/run-shared/annotations", key=READER_KEY)
        assert [a["annotationId"] for a in page["annotations"]] == [mine["annotationId"]]
        # Superseding another tenant's annotation reads like superseding one that does not exist.
        status, err = await annotate(api, "run-shared", {"signal": {"kind": "rating", "rating": 5},
                                                         "supersedes": mine["annotationId"]}, key=OTHER_READER_KEY)
        assert status == 422 and err["details"]["fields"][0]["field"] == "supersedes"
        status, summary = await api.call("GET", "/v1/feedback/summary", params={"run_id": "run-shared"},
                                         key=OTHER_READER_KEY)
        assert status == 200 and summary["counts"] == {"rating": 0, "correction": 0, "label": 0, "flag": 1}
        status, bundle = await api.call("GET", "/v1/runs/run-shared/bundle", key=OTHER_READER_KEY)
        assert status == 200 and [a["annotationId"] for a in bundle["annotations"]] == [theirs["annotationId"]]
        # A run only another tenant names reads as one that does not exist.
        status, _ = await annotate(api, "run-globex-only", {"signal": {"kind": "rating", "rating": 2}},
                                   key=OTHER_READER_KEY)
        assert status == 201
        status, error = await api.call("GET", "/v1/runs/run-globex-only/bundle", key=READER_KEY)
        assert (status, error["error"]) == (404, "not_found")


async def test_an_annotation_recorded_on_one_instance_streams_from_another(pg_url: str) -> None:
    settings = settings_from(base_config(pg_url))
    async with (running_app(settings, instance_id="a") as a, running_app(settings, instance_id="b") as b,
                streams() as start):
        on_b = await start(b, READER_KEY, run_id="run-x")
        other_tenant_on_b = await start(b, OTHER_READER_KEY)
        status, ann = await annotate(a, "run-x", {"signal": {"kind": "correction", "correction": "use v2"}})
        assert status == 201
        event, data = await on_b.next(timeout=10)
        # Rebuilt from the store on b: the very Annotation a returned.
        assert event == "run.annotated" and data == ann
        _, theirs = await annotate(a, "run-x", {"signal": {"kind": "flag"}}, key=OTHER_READER_KEY)
        _, data = await other_tenant_on_b.next(timeout=10)
        assert data["annotationId"] == theirs["annotationId"]


# -- feedback-correction-redaction ---------------------------------------------------------


async def test_secrets_are_redacted_in_storage_stream_log_and_bundle(
        storage_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_app(settings_from(base_config(storage_url))) as api, streams() as start:
        stream = await start(api, READER_KEY, run_id="run-r")
        status, ann = await annotate(api, "run-r", {
            "signal": {"kind": "correction", "correction": f"Call the API with {OPENAI_KEY} instead."},
            "note": f"The agent pasted {GITHUB_TOKEN} and password={PASSWORD} into the chat."})
        assert status == 201
        status, labelled = await annotate(api, "run-r", {"signal": {"kind": "label", "label": f"leaked {AWS_KEY_ID}"}})
        assert status == 201

        # The rest of the text stays; only the secret-shaped parts go.
        assert ann["signal"]["correction"] == "Call the API with [REDACTED] instead."
        assert ann["note"] == "The agent pasted [REDACTED] and password=[REDACTED] into the chat."
        assert labelled["signal"]["label"] == "leaked [REDACTED]"

        store = api.app[STORE]
        rows = await store.query_annotations("acme", run_id="run-r")
        stored = json.dumps(rows)
        _, streamed = await stream.next()
        _, streamed_label = await stream.next()
        status, page = await api.call("GET", "/v1/runs/run-r/annotations", key=READER_KEY)
        status, bundle = await api.call("GET", "/v1/runs/run-r/bundle", key=READER_KEY)
        assert status == 200 and len(bundle["annotations"]) == 2
        journal = json.dumps([e.data for e in await store.journal_rows_for_run(tenant_id="acme", run_id="run-r")])
        surfaces = {"storage": stored, "stream": json.dumps([streamed, streamed_label]) + "\n".join(stream.raw),
                    "list": json.dumps(page), "bundle": json.dumps(bundle), "journal": journal,
                    "log": caplog.text + json.dumps([vars(r) for r in caplog.records], default=str)}
        for name, text in surfaces.items():
            for secret in SECRETS:
                assert secret not in text, f"{secret[:6]}… leaked into the {name}"
        assert "[REDACTED]" in stored and "[REDACTED]" in surfaces["stream"] and "[REDACTED]" in surfaces["bundle"]
        assert any(r.getMessage() == "annotation recorded" for r in caplog.records)


async def test_the_bundle_redacts_request_text_and_answers_but_keeps_ids(sqlite_api: Api) -> None:
    uid = "9f1c2b7e4d5a6f708192a3b4c5d6e7f8"  # uuid4().hex: an id, which must survive the redactor
    req = await sqlite_api.create({"unique_id": uid, "run_id": "run-q",
                                   "message_for_user": f"Is {OPENAI_KEY} the right key?"})
    status, _ = await sqlite_api.submit(uid, f"yes, and the other one is {GITHUB_TOKEN}")
    assert status == 200
    await annotate(sqlite_api, "run-q", {"signal": {"kind": "flag"}, "note": "key in the question"})
    status, bundle = await sqlite_api.call("GET", "/v1/runs/run-q/bundle", key=READER_KEY)
    assert status == 200
    text = json.dumps(bundle)
    assert OPENAI_KEY not in text and GITHUB_TOKEN not in text
    (request,) = bundle["requests"]
    assert request["id"] == req["id"] and request["unique_id"] == uid
    assert request["message_for_user"] == "Is [REDACTED] the right key?"
    assert request["response"] == "yes, and the other one is [REDACTED]"
    events = [e["event"] for e in bundle["journal"]]
    assert events == ["created", "answered", "annotation_recorded"]
    created = bundle["journal"][0]
    assert created["data"]["unique_id"] == uid and created["request_id"] == req["id"]
    assert bundle["annotations"][0]["note"] == "key in the question"
    assert bundle["run_id"] == "run-q" and bundle["format"] == "handraise.run-bundle/1"


# -- feedback-unsupported-501 -------------------------------------------------------------


async def test_feedback_off_answers_501_and_advertises_unsupported(storage_url: str) -> None:
    settings = settings_from(base_config(storage_url, feedback={"enabled": False}))
    async with running_app(settings) as api:
        status, caps = await api.call("GET", "/v1/capabilities", key=None)
        assert status == 200 and caps == {"host": {"feedback": {"supported": False}}}
        jsonschema.validate(caps["host"]["feedback"], FEEDBACK_CAPABILITY_SCHEMA)
        status, doc = await api.call("GET", "/.well-known/openwop", key=None)
        assert doc["feedback"] == {"supported": False}

        good = {"signal": {"kind": "rating", "rating": 5}}
        # Capability-gated before authentication: every caller hears 501, never 404 or 401.
        for key in (ANNOTATOR_KEY, AGENT_KEY, None):
            status, err = await api.call("POST", "/v1/runs/run-1/annotations", json=good, key=key)
            assert status == 501 and err["error"] == "capability_not_provided"
            status, err = await api.call("GET", "/v1/runs/run-1/annotations", key=key)
            assert status == 501 and err["error"] == "capability_not_provided"
        status, err = await api.call("GET", "/v1/feedback/summary", params={"run_id": "run-1"}, key=READER_KEY)
        assert status == 501 and err["error"] == "capability_not_provided"
        # The service refuses too, so a connector's rating button cannot write past the switch.
        with pytest.raises(CapabilityNotProvidedError):
            await api.app[ANNOTATIONS].record(tenant_id="acme", run_id="run-1", principal="telegram:1", body=good)
        assert await api.app[STORE].query_annotations("acme") == []
        # The run bundle still exports requests and journal, without an annotations member.
        status, bundle = await api.call("GET", "/v1/runs/run-1/bundle", key=OPERATOR_KEY)
        assert status == 404  # nothing names run-1 yet
        asked = await api.create(question("off-1", run_id="run-1"))
        status, bundle = await api.call("GET", "/v1/runs/run-1/bundle", key=OPERATOR_KEY)
        assert status == 200 and "annotations" not in bundle
        assert [r["id"] for r in bundle["requests"]] == [asked["id"]] and bundle["journal"]

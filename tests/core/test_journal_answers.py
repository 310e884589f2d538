"""``journal verify`` recomputes the answers (issue 28, item 4): an answer, a vote, a proposal or a digest
changed with SQL behind the server's back fails verification, naming the request and what differs; an
untouched store verifies clean, sensitive answers held and deleted included. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Api, base_config, running_app, settings_from
from tests.core.test_journal import sql
from tests.core.test_proposals import PROPOSAL
from tests.core.test_proposals import body as proposal_body
from tests.core.test_quorum import approval, quorum_config, vote

from handraise.core.appkeys import STORE
from handraise.core.store import Store


async def problems_of(api: Api) -> list[str]:
    return await api.app[STORE].verify_journal()


async def stored(store: Store, request_id: str, column: str) -> Any:
    return (await sql(store, f"SELECT {column} FROM requests WHERE id = :i", {"i": request_id}))[0][0]


async def set_column(store: Store, request_id: str, column: str, value: Any) -> None:
    await sql(store, f"UPDATE requests SET {column} = :v WHERE id = :i", {"v": value, "i": request_id})


async def test_a_rejection_edited_into_an_approval_is_caught(api: Api) -> None:
    store = api.app[STORE]
    req = await api.create({"unique_id": "deploy", "message_for_user": "Deploy?", "timeout_seconds": 60,
                            "kind": "approval"})
    other = await api.create({"unique_id": "other", "message_for_user": "Other?", "timeout_seconds": 60,
                              "kind": "approval"})
    assert (await api.submit("deploy", {"decision": "reject", "reason": "not today"}))[0] == 200
    assert (await api.submit("other", {"decision": "approve"}))[0] == 200
    assert await problems_of(api) == []
    answer = await stored(store, req["id"], "response_json")
    await set_column(store, req["id"], "response_json", '{"decision":"approve"}')
    found = await problems_of(api)
    assert len(found) == 1, found
    assert req["id"] in found[0] and "does not match the digest the journal holds" in found[0]
    assert found[0].endswith("differs from the journal's copy in: decision, reason"), found[0]
    assert "approve" not in found[0] and "not today" not in found[0]  # what differs, never the values
    # Respelled with the same meaning, it is still not the answer the journal holds.
    await set_column(store, req["id"], "response_json", answer.replace(":", ": "))
    assert any(req["id"] in p and "its spelling" in p for p in await problems_of(api))
    await set_column(store, req["id"], "response_json", answer)
    assert await problems_of(api) == []
    # The digest column changed alone.
    await set_column(store, other["id"], "response_digest", "0" * 64)
    assert [p for p in await problems_of(api) if other["id"] in p] == [
        f"tenant acme, request {other['id']}: the answer's digest differs from the journal's"]


async def test_an_edited_proposal_is_caught(api: Api) -> None:
    store = api.app[STORE]
    req = await api.create(proposal_body("p-edit"))
    edited = {**PROPOSAL, "replicas": 2}
    assert (await api.submit("p-edit", {"decision": "approve", "proposal": edited}))[0] == 200
    assert await problems_of(api) == []
    answer = await stored(store, req["id"], "response_json")
    # The approved edit changed afterwards.
    await set_column(store, req["id"], "response_json", answer.replace('"replicas":2', '"replicas":9'))
    found = await problems_of(api)
    assert len(found) == 1 and req["id"] in found[0] and found[0].endswith("copy in: proposal.replicas"), found
    await set_column(store, req["id"], "response_json", answer)
    # The agent's own proposal changed to what was approved, so that the edit would look like none.
    await set_column(store, req["id"], "proposal_json", json.dumps(edited))
    assert await problems_of(api) == [
        f"tenant acme, request {req['id']}: the stored proposal differs from the one journaled at its creation"]


@pytest.fixture
async def qapi(storage_url: str) -> AsyncIterator[Api]:
    async with running_app(settings_from(quorum_config(storage_url))) as a:
        yield a


async def test_an_edited_vote_is_caught(qapi: Api) -> None:
    store = qapi.app[STORE]
    decided = await qapi.create(approval("q-done", 2))
    assert (await vote(qapi, "q-done", "alice", "approve"))[0] == 200
    assert (await vote(qapi, "q-done", "bob", "approve"))[0] == 200
    pending = await qapi.create(approval("q-open", 2))
    assert (await vote(qapi, "q-open", "alice", "approve"))[0] == 200
    assert await problems_of(qapi) == []
    # Alice's approval of the decided request turned into Carol's rejection.
    votes = json.loads(await stored(store, decided["id"], "votes_json"))
    votes[0] |= {"person": "carol", "decision": "reject"}
    await set_column(store, decided["id"], "votes_json", json.dumps(votes))
    # A vote nobody cast added to the open one: the next real approval would decide it.
    votes = json.loads(await stored(store, pending["id"], "votes_json"))
    await set_column(store, pending["id"], "votes_json", json.dumps([*votes, {**votes[0], "person": "bob"}]))
    found = sorted(await problems_of(qapi))
    assert sorted([f"tenant acme, request {decided['id']}: vote 1 differs from its 'voted' entry in the journal "
                   "(person, decision)",
                   f"tenant acme, request {pending['id']}: 2 vote(s) stored, but the journal has 1 'voted' "
                   "entries"]) == found


def sensitive(uid: str) -> dict[str, Any]:
    return {"unique_id": uid, "message_for_user": "The code?", "timeout_seconds": 60, "sensitive": True}


async def test_sensitive_answers_held_and_deleted_verify_clean_and_a_swapped_one_does_not(api: Api) -> None:
    store = api.app[STORE]
    reqs = [await api.create(sensitive(f"s-{i}")) for i in range(3)]
    for i in range(3):
        assert (await api.submit(f"s-{i}", f"code {i}"))[0] == 200
    assert (await api.wait(reqs[0]["id"]))["response"] == "code 0"
    assert (await api.call("POST", f"/v1/requests/{reqs[0]['id']}/ack"))[0] == 200  # deleted: nothing to compare
    assert await problems_of(api) == []
    # Each held answer opened and recomputed: two swapped between requests open as neither.
    a, b = reqs[1]["id"], reqs[2]["id"]
    await sql(store, "UPDATE sealed_answers SET request_id = CASE request_id WHEN :a THEN 'swap' ELSE :a END "
                     "WHERE request_id IN (:a, :b)", {"a": a, "b": b})
    await sql(store, "UPDATE sealed_answers SET request_id = :b WHERE request_id = 'swap'", {"b": b})
    assert sorted(await problems_of(api)) == sorted(
        f"tenant acme, request {r}: its sealed answer does not open: altered, or not this request's" for r in (a, b))


async def test_journal_verify_on_the_command_line_names_an_edited_answer(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: the server stopped, a rejected approval's stored answer changed to approve."""
    from handraise.core.cli import main

    db = tmp_path / "j.db"
    config = tmp_path / "handraise.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{db}"\n')
    async with running_app(settings_from(base_config(f"sqlite:///{db}"))) as api:
        req = await api.create({"unique_id": "deploy", "message_for_user": "Deploy?", "timeout_seconds": 60,
                                "kind": "approval"})
        assert (await api.submit("deploy", {"decision": "reject"}))[0] == 200
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify"]) == 0
    assert "every answer" in capsys.readouterr().out
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("UPDATE requests SET response_json = '{\"decision\":\"approve\"}'")
    conn.commit()
    conn.close()
    assert await asyncio.to_thread(main, ["--config", str(config), "journal", "verify"]) == 1
    err = capsys.readouterr().err
    assert f"request {req['id']}: the stored answer does not match the digest" in err and "in: decision" in err

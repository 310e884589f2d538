"""What ``journal verify`` checks of each request beyond its chain: that the requests table tells the journal's
story, down to the answer itself. The answer as stored is recomputed into its keyed digest (core/sealing.py;
a sensitive answer still held is opened first, one already shredded has nothing left to compare) and held
against the digest the ``answered`` entry journaled; each stored vote of a quorum against its ``voted`` entry
(person, decision, channel, principal, time); an approval's proposal against the one journaled at creation,
and the answer's ``edited`` against it. Nobody can recompute the chain without the server secret, so a value
changed behind the server's back (an answer, a vote, a proposal, a digest) differs from what it says.

``note`` gathers, while the chain is walked, what the journal says of each request; ``problems`` compares one
row of the requests table with it. Problems name the request and what differs, never a value.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy import select

from handraise.core.canonical import canonical_json
from handraise.core.models import RequestRow, SealedAnswerRow
from handraise.core.sealing import Sealer

requests_t = RequestRow.__table__
sealed_t = SealedAnswerRow.__table__

TERMINAL_EVENTS = frozenset({"answered", "expired", "cancelled"})
_NOTED = TERMINAL_EVENTS | {"created", "voted"}
PROPOSAL = "proposal"  # core/proposals.py's (a layer above the store)

# The columns the cross-check reads, a held sensitive answer's sealed parts with them.
ROWS = select(requests_t.c.id, requests_t.c.tenant_id, requests_t.c.status, requests_t.c.resolved_by,
              requests_t.c.resolved_via, requests_t.c.response_digest, requests_t.c.response_json,
              requests_t.c.response_purged, requests_t.c.sensitive, requests_t.c.votes_json,
              requests_t.c.proposal_json, sealed_t.c.sealed, sealed_t.c.wrapped_key,
              ).select_from(requests_t.outerjoin(sealed_t, sealed_t.c.request_id == requests_t.c.id))

Facts = dict[str, dict[str, Any]]
Entry = Callable[[int], Awaitable[Mapping[str, Any] | None]]


def _fingerprint(value: Any) -> str:
    # What a fact keeps of a value it compares later: a million requests' proposals need not stay in memory.
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def note(facts: Facts, r: Mapping[str, Any]) -> None:
    """What entry ``r`` (a journal row) says of its request."""
    request_id, event = r["request_id"], r["event"]
    if request_id is None or event not in _NOTED:
        return
    fact = facts.setdefault(request_id, {})
    data = json.loads(r["data_json"])
    if event == "created":
        fact["created"] = True
        if "sensitive" in data:
            fact["sensitive"] = bool(data["sensitive"])
        if data.get(PROPOSAL) is not None:
            fact[PROPOSAL] = _fingerprint(data[PROPOSAL])
    elif event == "voted":
        fact.setdefault("votes", []).append({"person": data.get("person"), "decision": data.get("decision"),
                                             "channel": r["channel"], "principal": r["principal"], "at": r["at"]})
    else:
        fact["outcome"] = {"event": event, "principal": r["principal"], "channel": r["channel"],
                           "digest": data.get("response_digest"), "seq": r["seq"]}


async def problems(where: str, r: Mapping[str, Any], fact: Mapping[str, Any], sealer: Sealer,
                   entry: Entry) -> list[str]:
    """How row ``r`` (``ROWS``) differs from what the journal says of it (``fact``); ``entry(seq)``: a journal
    row, read to name what differs in an answer."""
    found: list[str] = []
    if "sensitive" in fact and bool(r["sensitive"]) != fact["sensitive"]:
        found.append(f"{where}: sensitive is {bool(r['sensitive'])}, but the journal says {fact['sensitive']}")
    found += _votes(where, r, fact.get("votes", []))
    stored_proposal = None if r["proposal_json"] is None else _fingerprint(json.loads(r["proposal_json"]))
    if stored_proposal != fact.get(PROPOSAL):
        found.append(f"{where}: the stored proposal differs from the one journaled at its creation")
    outcome = fact.get("outcome")
    if r["status"] != "answered" or outcome is None or outcome["event"] != "answered":
        if r["status"] in TERMINAL_EVENTS - {"answered"} and (r["response_json"] is not None or r["sealed"]):
            found.append(f"{where}: {r['status']}, but it holds an answer")
        return found
    if not hmac.compare_digest(str(outcome["digest"]), str(r["response_digest"])):
        found.append(f"{where}: the answer's digest differs from the journal's")
    answer, problem = _stored_answer(r, sealer)
    if problem is not None:
        return [*found, f"{where}: {problem}"]
    if answer is None:  # a sensitive answer shredded: nothing left to compare, as intended
        return found
    digest = sealer.digest(tenant_id=r["tenant_id"], request_id=r["id"], canonical=answer)
    if not hmac.compare_digest(digest, str(outcome["digest"])):
        what = "" if r["sensitive"] else (f"; it differs from the journal's copy in: "
                                          f"{_what_differs(answer, await entry(outcome['seq']))}")
        found.append(f"{where}: the stored {'sealed ' if r['sensitive'] else ''}answer does not match the digest "
                     f"the journal holds{what}")
        return found
    found += _edited(where, answer, fact.get(PROPOSAL))
    return found


def _stored_answer(r: Mapping[str, Any], sealer: Sealer) -> tuple[str | None, str | None]:
    """(the answer as canonical JSON, or None when shredded; a problem, or None)."""
    if not r["sensitive"]:
        return r["response_json"], None if r["response_json"] is not None else "answered, but its answer is missing"
    if r["sealed"] is None or r["wrapped_key"] is None:
        return None, None if r["response_purged"] else "answered and not deleted, but its sealed answer is missing"
    try:
        return sealer.open(tenant_id=r["tenant_id"], request_id=r["id"], sealed=r["sealed"],
                           wrapped=r["wrapped_key"]), None
    except ValueError:
        return None, "its sealed answer does not open: altered, or not this request's"


def _what_differs(answer: str, entry: Mapping[str, Any] | None) -> str:
    """The fields of a non-sensitive answer that differ from the copy its ``answered`` entry holds."""
    journaled = json.loads(entry["data_json"]).get("response") if entry is not None else None
    try:
        stored = json.loads(answer)
    except ValueError:
        return "the stored JSON"
    if not isinstance(stored, dict) or not isinstance(journaled, dict):
        return "the value"
    fields = []
    for name in sorted(set(stored) | set(journaled)):
        a, b = stored.get(name), journaled.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            fields += [f"{name}.{k}" for k in sorted(set(a) | set(b))
                       if k not in a or k not in b or canonical_json(a[k]) != canonical_json(b[k])]
        elif name not in stored or name not in journaled or canonical_json(a) != canonical_json(b):
            fields.append(name)
    return ", ".join(fields) or "its spelling"


def _votes(where: str, r: Mapping[str, Any], journaled: list[dict[str, Any]]) -> list[str]:
    """Each stored vote against its ``voted`` entry, in order."""
    stored = json.loads(r["votes_json"]) if r["votes_json"] else []
    if len(stored) != len(journaled):
        return [f"{where}: {len(stored)} vote(s) stored, but the journal has {len(journaled)} 'voted' entries"]
    found = []
    for n, (vote, entry) in enumerate(zip(stored, journaled), start=1):
        differ = [k for k in ("person", "decision", "channel", "principal", "at") if vote.get(k) != entry[k]]
        if differ:
            found.append(f"{where}: vote {n} differs from its 'voted' entry in the journal ({', '.join(differ)})")
    return found


def _edited(where: str, answer: str, proposal: str | None) -> list[str]:
    """An approval of a proposal says ``edited`` exactly when what it approved is not the journaled proposal."""
    value = json.loads(answer)
    if proposal is None or not isinstance(value, dict) or PROPOSAL not in value:
        return []
    edited = _fingerprint(value[PROPOSAL]) != proposal
    if value.get("edited") is not edited:
        return [f"{where}: the answer says edited is {value.get('edited')}, but its proposal "
                f"{'differs from' if edited else 'is'} the one journaled at creation"]
    return []

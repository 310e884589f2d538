"""What the tests of private notes share (``deliver: true`` on a real channel): asking for a person's form link
and sign-in through the HTTP API, reading what the person received, and using both links as a browser would.

A channel's test hands :func:`prove_delivered_privately` a :class:`PrivateInbox` of its own: how to read the
one message the person received on that channel, asserting it went to their own identity and nowhere else.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from aiohttp import ClientSession, CookieJar

from conftest import OPERATOR_KEY, Api
from handraise.core import wording
from handraise.core.appkeys import INBOX, STORE
from handraise.webforms.inbox.session import COOKIE
from tests.bots.email_helpers import open_page, path_of, post_form

QUESTION = "Wire 50k to ACME Ltd?"


@dataclass(frozen=True)
class Note:
    """One private message as the person reads it: its text (without markup), its link's label, the link."""

    text: str
    button: str
    url: str


class PrivateInbox(Protocol):
    """One person's private place on one channel, as the messenger's fake (or server) saw it."""

    def mark(self) -> None:
        """Remember what was sent so far: ``one_new`` reads what comes after."""

    async def one_new(self) -> Note:
        """The one message sent since ``mark``: to the person's own identity, and nothing anywhere else."""


def approval(uid: str, **extra: Any) -> dict[str, Any]:
    # Posted on no channel: whatever the channel's fake records after it is the private note alone.
    return {"unique_id": uid, "message_for_user": QUESTION, "kind": "approval", "timeout_seconds": 600,
            "channels": [], **extra}


def token_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def deliver_link(api: Api, request_id: str, person: str) -> tuple[int, Any]:
    return await api.call("POST", f"/v1/requests/{request_id}/links", json={"person": person, "deliver": True},
                          key=OPERATOR_KEY)


async def deliver_signin(api: Api, person: str) -> tuple[int, Any]:
    return await api.call("POST", "/v1/inbox/links", json={"person": person, "deliver": True}, key=OPERATOR_KEY)


async def sign_in(api: Api, url: str) -> str:
    """Use a sign-in link as the browser does (a POST to its page): the principal of the session it made."""
    async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as browser:
        async with browser.post(api.url(path_of(url)), allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
            cookie = resp.cookies[COOKIE].value
    session = await api.app[INBOX].session(cookie)
    assert session is not None
    return session.principal


async def approve_in_form(api: Api, url: str) -> None:
    status, html = await open_page(api, url)
    assert status == 200, html
    assert (await post_form(api, url, [("decision", "approve")], html))[0] == 200


async def prove_delivered_privately(api: Api, inbox: PrivateInbox, caplog: pytest.LogCaptureFixture, *,
                                    channel: str, person: str, name: str) -> tuple[Note, Note]:
    """Both routes with ``deliver: true`` for ``person``: each sends exactly one private message on
    ``channel`` that reads right, whose link acts as ``person:<id>``, and that no response, journal entry
    or log line holds. The two notes (form link, sign-in)."""
    caplog.set_level(logging.INFO)
    request = await api.create(approval(f"priv-{uuid.uuid4().hex[:8]}"))
    inbox.mark()
    status, body = await deliver_link(api, request["id"], person)
    assert status == 202 and body == {"delivered_to": channel, "person": person,
                                      "expires_at": body["expires_at"]}, body
    link = await inbox.one_new()
    assert link.text.startswith(QUESTION) and wording.text("link") in link.text, link.text
    assert link.button == wording.text("link_button") and "/f/" in link.url
    inbox.mark()
    status, signin_body = await deliver_signin(api, person)
    assert status == 202 and signin_body == {"delivered_to": channel, "person": person,
                                             "expires_at": signin_body["expires_at"]}, signin_body
    signin = await inbox.one_new()
    assert signin.text == wording.text("signin_note") and signin.button == wording.text("signin_button")
    assert "/inbox/signin/" in signin.url
    tokens = [token_of(link.url), token_of(signin.url)]
    for token in tokens:
        assert token not in json.dumps(body) + json.dumps(signin_body)
        leaked = [r.name for r in caplog.records if token in r.getMessage() or token in str(r.__dict__)]
        assert leaked == [], leaked
    # Each link works, and acts as the person it was sent to.
    await approve_in_form(api, link.url)
    done = await api.wait(request["id"])
    assert (done["answered_by"], done["answered_by_person"]) == (f"person:{person}", {"id": person, "name": name})
    assert await sign_in(api, signin.url) == f"person:{person}"
    entries = [(e.event, e.principal, e.data) for e in await api.app[STORE].journal_entries(tenant_id="acme")]
    assert ("inbox_signed_in", f"person:{person}") in [(event, who) for event, who, _ in entries]
    for token in tokens:
        assert token not in repr(entries)
    return link, signin

"""The email contract driver: a person reads mail from the real SMTP server and replies into a real Dovecot.

Mail has no buttons: "pressing" approve/reject is the mail's Approve/Reject link, confirmed on the
page it opens (as a person would); any other choice, and everything a stranger does, is a reply.
A stranger is never mailed back (the From of a mail may be anyone's): refusal shows as the
journal's ``answer_refused`` and an untouched request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import Api

from handraise.bots.email import EmailConnector
from handraise.core.appkeys import SERVICE
from handraise.core.connectors import Connector
from handraise.webforms.connector import WebFormsChannel
from harness.mail import DovecotServer, ReceivedMail, SmtpRecorder, unique_address
from tests.bots.contract import Action, ConnectorDriver, Posted, register_driver
from tests.bots.email_helpers import (
    email_section,
    handled,
    imap_section,
    links_in,
    open_page,
    post_form,
    reply_to,
)

_OUTCOME_WORDS = {"approved": "Approved", "rejected": "Rejected", "answered": "Answered", "expired": "Expired",
                  "cancelled": "Cancelled"}


class EmailDriver(ConnectorDriver):
    channel = "email"

    def __init__(self, smtp: SmtpRecorder, imap: DovecotServer) -> None:
        self.smtp, self.imap = smtp, imap
        self.human, self.stranger = unique_address("human"), unique_address("stranger")
        self.user, self.password = imap.add_user()
        self.api: Api | None = None

    def connector_classes(self) -> list[type[Connector]]:
        return [WebFormsChannel, EmailConnector]

    def config(self) -> dict[str, Any]:
        return {"email": email_section(self.smtp, recipients=[self.human],
                                       imap=imap_section(self.imap, self.user, self.password))}

    async def ready(self, api: Api) -> None:
        self.api = api
        await handled(api, passes=1, timeout=30)

    def principal(self) -> str:
        return f"email:{self.human}"

    def display_name(self) -> str:
        return self.human

    # -- the human's side ------------------------------------------------------

    async def question(self, posted: Posted) -> ReceivedMail:
        wanted = posted.ref["message_id"]
        (mail,) = await self.smtp.wait_for(lambda m: m.message["Message-ID"] == wanted)
        return mail

    async def press(self, posted: Posted, choice: str, *, stranger: bool = False) -> Action:
        mail = await self.question(posted)
        link = next((u for u in links_in(mail.part("plain")) if u.endswith(f"?decision={choice}")), None)
        if stranger or link is None:
            return await self.reply(posted, choice, stranger=stranger)
        assert self.api is not None
        status, page = await open_page(self.api, link)
        assert status == 200, page
        status, page = await post_form(self.api, link, [("decision", choice)], page)
        assert status == 200, page
        return Action(posted=posted, kind="press", stranger=False)

    async def reply(self, posted: Posted, text: str, *, stranger: bool = False) -> Action:
        mail = await self.question(posted)
        reply = reply_to(mail, sender=self.stranger if stranger else self.human, text=text)
        uid = await asyncio.to_thread(self.imap.deliver, self.user, reply.as_bytes())
        return Action(posted=posted, kind="reply", stranger=stranger,
                      handle={"uid": uid, "message_id": str(reply["Message-ID"])})

    async def told(self, action: Action) -> str:
        wanted = action.handle["message_id"]
        (mail,) = await self.smtp.wait_for(lambda m: m.message["In-Reply-To"] == wanted)
        return mail.part("plain")

    async def assert_removed(self, action: Action) -> None:
        await self._handled()
        assert action.handle["uid"] not in await asyncio.to_thread(self.imap.flags, self.user)

    async def question_text(self, posted: Posted) -> str:
        return (await self.question(posted)).part("plain")

    async def outcome_text(self, posted: Posted) -> str:
        root = posted.ref["message_id"]
        (mail,) = await self.smtp.wait_for(
            lambda m: m.message["In-Reply-To"] == root and "outcome" in str(m.message["Message-ID"]))
        return mail.part("plain")

    async def open_form(self, posted: Posted, *, stranger: bool = False) -> str | None:
        if stranger:
            assert self.smtp.to(self.stranger) == []  # a stranger is sent nothing, no link either
            return None
        mail = await self.question(posted)
        return next(u for u in links_in(mail.part("plain")) if "?" not in u)

    async def reminder_text(self, posted: Posted) -> str:
        root = posted.ref["message_id"]
        (mail,) = await self.smtp.wait_for(
            lambda m: m.message["In-Reply-To"] == root and "Reminder" in m.part("plain"), timeout=15)
        return mail.part("plain")

    async def shared_view(self, posted: Posted) -> str:
        # Mail has no shared room: each mail goes to one person. What the stranger was sent:
        return "\n".join(m.raw.decode("utf-8", "replace") for m in self.smtp.to(self.stranger))

    async def _handled(self) -> None:
        assert self.api is not None
        await handled(self.api)

    async def assert_refused(self, action: Action) -> None:
        assert self.api is not None
        await self._handled()
        journal = await self.api.app[SERVICE].journal_entries(tenant_id="acme", request_id=action.posted.request_id)
        who = f"email:{self.stranger}" if action.stranger else self.principal()
        assert any(e["event"] == "answer_refused" and e["principal"] == who for e in journal), journal
        assert self.smtp.to(self.stranger) == []  # no backscatter to a From that may be forged

    async def assert_reply_removed(self, action: Action) -> None:
        wanted = action.handle["message_id"]
        (notice,) = await self.smtp.wait_for(lambda m: m.message["In-Reply-To"] == wanted)
        text = notice.part("plain")
        assert "deleted" in text and "form" in text, text
        await self._handled()
        assert action.handle["uid"] not in await asyncio.to_thread(self.imap.flags, self.user)

    async def assert_withdrawn(self, posted: Posted, outcome: str) -> None:
        root = posted.ref["message_id"]
        word = _OUTCOME_WORDS.get(outcome.lower(), outcome)
        (mail,) = await self.smtp.wait_for(
            lambda m: m.message["In-Reply-To"] == root and "outcome" in str(m.message["Message-ID"]))
        assert word in mail.part("plain"), mail.part("plain")
        assert "/f/" not in mail.raw.decode("utf-8", "replace")  # no way in left


@register_driver("email")
def email_driver(request: pytest.FixtureRequest) -> EmailDriver:
    return EmailDriver(request.getfixturevalue("smtp_server"), request.getfixturevalue("dovecot"))

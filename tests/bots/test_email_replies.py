"""Email in: replies read from a real Dovecot mailbox answer through the shared chat path; bounces; restarts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from handraise.core.appkeys import CONNECTORS, DISPATCHER, SERVICE
from harness.mail import (
    DovecotServer,
    ReceivedMail,
    SmtpRecorder,
    dovecot,  # noqa: F401  (registers the session fixtures)
    smtp_server,  # noqa: F401
    tcp_proxy,  # noqa: F401
    unique_address,
)
from tests.bots.email_helpers import MAILBOX, email_app, email_section, handled, imap_section, reply_to
from tests.bots.test_email_parsing import dsn_bytes

FORM = {"type": "object", "properties": {"host": {"type": "string", "minLength": 3},
                                         "replicas": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["host"]}


class Setup:
    """Two recipients, one mailbox of this test's own, the app under test."""

    def __init__(self, smtp: SmtpRecorder, imap: DovecotServer) -> None:
        self.smtp, self.imap = smtp, imap
        self.alice, self.bob = unique_address("alice"), unique_address("bob")
        self.user, self.password = imap.add_user()

    def section(self, **extra: Any) -> dict[str, Any]:
        imap = imap_section(self.imap, self.user, self.password, **extra.pop("imap", {}))
        return email_section(self.smtp, recipients=[self.alice, self.bob], imap=imap, **extra)

    async def deliver(self, message: Any) -> int:
        raw = message if isinstance(message, bytes) else message.as_bytes()
        return await asyncio.to_thread(self.imap.deliver, self.user, raw)

    async def flags(self) -> dict[int, set[str]]:
        return await asyncio.to_thread(self.imap.flags, self.user)


@pytest.fixture
def mail(smtp_server: SmtpRecorder, dovecot: DovecotServer) -> Setup:
    return Setup(smtp_server, dovecot)


async def _question(api: Any, mail: Setup, body: dict[str, Any]) -> tuple[dict[str, Any], ReceivedMail]:
    request = await api.create({"timeout_seconds": 600, **body})
    found = []
    for person in (mail.alice, mail.bob):
        (first,) = await mail.smtp.wait_for(
            lambda m, p=person: p in m.rcpt_tos and m.message["In-Reply-To"] is None
            and m.message["Message-ID"] not in {f.message["Message-ID"] for f in found}
            and "Re:" not in str(m.message["Subject"]) and _asks(m, body))
        found.append(first)
    return request, found[0]


def _asks(mail: ReceivedMail, body: dict[str, Any]) -> bool:
    return body.get("sensitive", False) or body["message_for_user"] in mail.part("plain")


async def _notice(mail: Setup, reply: Any, *, to: str | None = None) -> ReceivedMail:
    """The mail Handraise sends back about ``reply`` (threaded under it)."""
    wanted = str(reply["Message-ID"])
    (notice,) = await mail.smtp.wait_for(
        lambda m: m.message["In-Reply-To"] == wanted and (to or mail.alice) in m.rcpt_tos)
    return notice


@pytest.mark.parametrize("style", ["gmail", "apple-bottom", "outlook"])
async def test_a_reply_answers_and_everyone_hears_how_it_ended(storage_url: str, mail: Setup, style: str) -> None:
    async with email_app(storage_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": f"form-{style}",
                                                         "message_for_user": "Where to?", "schema": FORM})
        assert "reply with one line per field" in question.part("plain")
        reply = reply_to(question, sender=f"Alice Example <{mail.alice}>", text="host: db-1\nreplicas: 2",
                         quote=style)
        uid = await mail.deliver(reply)
        done = await api.wait(request["id"])
        assert done["status"] == "answered" and done["response"] == {"host": "db-1", "replicas": 2}
        assert (done["answered_by"], done["answered_via"]) == (f"email:{mail.alice}", "email")
        # The outcome reaches both recipients in their own threads, with the display name and the answer.
        for person in (mail.alice, mail.bob):
            *_, outcome = await mail.smtp.wait_to(person, count=2)
            assert outcome.message["In-Reply-To"] == (question.message["Message-ID"] if person == mail.alice
                                                      else mail.smtp.to(mail.bob)[0].message["Message-ID"])
            assert "Answered by Alice Example via email" in outcome.part("plain")
            assert "db-1" in outcome.part("plain")
        await api.app[DISPATCHER].idle()
        await handled(api, passes=1)
        assert "$HandraiseDone" in (await mail.flags())[uid]


async def test_a_reply_matched_by_in_reply_to_alone_and_an_html_only_approval(sqlite_url: str, mail: Setup) -> None:
    async with email_app(sqlite_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": "approve-html", "kind": "approval",
                                                         "message_for_user": "Ship 4.2?"})
        html = ('<div dir="ltr">Reject: the <b>canary</b> is red</div><div class="gmail_quote">'
                '<div class="gmail_attr">On Tue wrote:</div><blockquote>approve</blockquote></div>')
        # Sent to the plain mailbox address (the client dropped Reply-To): In-Reply-To still names the thread.
        await mail.deliver(reply_to(question, sender=mail.alice, html=html, to=MAILBOX))
        done = await api.wait(request["id"])
        assert done["response"] == {"decision": "reject", "reason": "the canary is red"}
        *_, outcome = await mail.smtp.wait_to(mail.alice, count=2)
        assert "Rejected by" in outcome.part("plain") and "❌" in outcome.part("plain")


async def test_an_invalid_reply_is_told_what_is_wrong_and_a_casual_remark_decides_nothing(
        sqlite_url: str, mail: Setup) -> None:
    async with email_app(sqlite_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": "invalid-1", "message_for_user": "Where?",
                                                         "schema": FORM})
        wrong = reply_to(question, sender=mail.alice, text="host: db-1\nreplicas: 12")
        await mail.deliver(wrong)
        notice = await _notice(mail, wrong)
        assert notice.message["References"].split() == [question.message["Message-ID"], wrong["Message-ID"]]
        assert notice.message["Subject"] == "Re: " + question.message["Subject"]
        assert "That answer is not valid" in notice.part("plain") and "replicas" in notice.part("plain")
        assert "12" not in notice.part("plain").split("replicas", 1)[1].split("\n")[0].replace("1 to 9", "")
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        right = reply_to(question, sender=mail.alice, text="host: db-1\nreplicas: 3")
        await mail.deliver(right)
        assert (await api.wait(request["id"]))["response"] == {"host": "db-1", "replicas": 3}

        approval, approval_mail = await _question(api, mail, {"unique_id": "casual-1", "kind": "approval",
                                                              "message_for_user": "Drop the table?"})
        casual = reply_to(approval_mail, sender=mail.alice, text="ok, let me look at the graphs first")
        await mail.deliver(casual)
        notice = await _notice(mail, casual)
        assert "Reply approve or reject" in notice.part("plain") and "Nothing was changed" in notice.part("plain")
        assert (await api.call("GET", f"/v1/requests/{approval['id']}"))[1]["status"] == "pending"


async def test_strangers_forgeries_and_robots_change_nothing_and_get_no_mail(sqlite_url: str, mail: Setup) -> None:
    eve = unique_address("eve")
    async with email_app(sqlite_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": "stranger-1", "kind": "approval",
                                                         "message_for_user": "Wire the money?"})
        bob_question = mail.smtp.to(mail.bob)[0]
        forged_token = str(question.message["Reply-To"]).replace("+", "+a", 1)[:-1]
        attempts = [
            reply_to(question, sender=eve, text="approve"),                      # a stranger in Alice's thread
            reply_to(question, sender=mail.bob, text="approve"),                 # Bob, in Alice's thread
            reply_to(question, sender=f"Alice <{mail.alice}>", text="approve", threaded=False,
                     to=forged_token),                                           # a made-up reply address
            reply_to(question, sender=mail.alice, text="approve", extra_headers={
                "Auto-Submitted": "auto-replied"}),                              # an out-of-office robot
            reply_to(bob_question, sender=mail.alice, text="approve"),           # Alice, in Bob's thread
        ]
        for attempt in attempts:
            await mail.deliver(attempt)
        await handled(api)
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        refused = [e for e in await api.journal(request["id"]) if e["event"] == "answer_refused"]
        assert sorted(e["principal"] for e in refused) == sorted(
            [f"email:{eve}", f"email:{mail.bob}", f"email:{mail.alice}"])
        assert {e["data"]["reason"] for e in refused} == {"sender_mismatch"}
        assert mail.smtp.to(eve) == [] and len(mail.smtp.to(mail.alice)) == 1 and len(mail.smtp.to(mail.bob)) == 1
        assert all("$HandraiseDone" in f for f in (await mail.flags()).values())


async def test_a_reply_to_a_sensitive_request_is_deleted_and_pointed_to_the_form(sqlite_url: str,
                                                                                   mail: Setup) -> None:
    async with email_app(sqlite_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": "secret-1", "sensitive": True,
                                                         "message_for_user": "The vault PIN?"})
        assert "reply with" not in question.part("plain").lower()
        reply = reply_to(question, sender=mail.alice, text="4711-9932")
        uid = await mail.deliver(reply)
        notice = await _notice(mail, reply)
        assert "Your reply was deleted" in notice.part("plain") and "form link" in notice.part("plain")
        assert "4711" not in notice.raw.decode()
        await handled(api, passes=1)
        assert uid not in await mail.flags()  # gone from the mailbox
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        journal = await api.journal(request["id"])
        assert "4711" not in json.dumps(journal)
        assert [e["data"] for e in journal if e["event"] == "chat_reply_refused"] == [
            {"reason": "sensitive", "removed": True}]

        # A secret-shaped reply to an ordinary question is deleted too, and nothing is stored.
        plain, plain_mail = await _question(api, mail, {"unique_id": "token-1", "message_for_user": "Which key?"})
        leaked = reply_to(plain_mail, sender=mail.alice, text="use ghp_0123456789abcdefghijklmnopqrstuvwxyzAB")
        await mail.deliver(leaked)
        notice = await _notice(mail, leaked)
        assert "looked like a secret" in notice.part("plain")
        assert "ghp_0123" not in json.dumps(await api.journal(plain["id"]))


async def test_a_bounce_marks_its_delivery_and_gets_no_outcome_mail(sqlite_url: str, mail: Setup) -> None:
    async with email_app(sqlite_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": "bounce-1", "message_for_user": "Hello?"})
        bob_question = mail.smtp.to(mail.bob)[0]
        await api.app[DISPATCHER].idle()
        # Bob's server returns the mail to the address it came from (the envelope sender of his thread).
        await mail.deliver(dsn_bytes(recipient=mail.bob, to=bob_question.mail_from,
                                     original_id=str(bob_question.message["Message-ID"])))
        # A DSN that names only the returned Message-ID is matched too (here a duplicate: no second change).
        await mail.deliver(dsn_bytes(recipient=mail.bob, to=MAILBOX, headers_only=True,
                                     original_id=str(bob_question.message["Message-ID"])))
        # A forged DSN for a made-up thread changes nothing.
        await mail.deliver(dsn_bytes(recipient=mail.alice, to=MAILBOX,
                                     original_id="<hr.aaaaaaaaaaaaaaaaaaaaaaaaaa@example.test>"))
        await handled(api)
        view = await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])
        by_target = {d.target: d for d in view.deliveries}
        assert by_target[mail.bob].status == "bounced" and "5.1.1" in (by_target[mail.bob].last_error or "")
        assert by_target[mail.alice].status == "sent"
        assert [e["data"]["target"] for e in await api.journal(request["id"])
                if e["event"] == "delivery_bounced"] == [mail.bob, mail.bob]
        status, _ = await api.call("POST", f"/v1/requests/{request['id']}/cancel")
        assert status == 200
        await mail.smtp.wait_to(mail.alice, count=2)
        await api.app[DISPATCHER].idle()
        assert len(mail.smtp.to(mail.bob)) == 1  # no outcome mail to an address that bounced
        assert question.message["Message-ID"] != bob_question.message["Message-ID"]


async def test_a_restart_neither_replays_nor_loses_and_duplicates_are_ignored(sqlite_url: str, mail: Setup) -> None:
    section = mail.section()
    async with email_app(sqlite_url, section) as api:
        first, first_mail = await _question(api, mail, {"unique_id": "restart-1", "kind": "approval",
                                                        "message_for_user": "First?"})
        second, second_mail = await _question(api, mail, {"unique_id": "restart-2", "kind": "approval",
                                                          "message_for_user": "Second?"})
        wrong = reply_to(first_mail, sender=mail.alice, text="maybe")
        await mail.deliver(wrong)
        await _notice(mail, wrong)
        await handled(api, passes=1)
    # While nobody reads: an answer arrives, and the same invalid mail is delivered again.
    await mail.deliver(reply_to(second_mail, sender=mail.alice, text="approve"))
    await mail.deliver(wrong)
    sent_before = len(mail.smtp.received())
    async with email_app(sqlite_url, section) as api:
        done = await api.wait(second["id"])
        assert done["response"] == {"decision": "approve"}
        await handled(api)
        await api.app[DISPATCHER].idle()
        journal = await api.journal(first["id"])
        assert len([e for e in journal if e["event"] == "invalid_attempt"]) == 1  # not replayed, not re-read
        # Only the outcome mails of the second request went out: no second notice about "maybe".
        new = mail.smtp.received()[sent_before:]
        assert all("Second?" in str(m.message["Subject"]) for m in new) and len(new) == 2


async def test_a_mailbox_outage_delays_answers_but_loses_none(sqlite_url: str, mail: Setup, tcp_proxy: Any) -> None:
    proxy = await tcp_proxy(mail.imap.host, mail.imap.port)
    async with email_app(sqlite_url, mail.section(imap={"port": proxy.port, "timeout_seconds": 2})) as api:
        request, question = await _question(api, mail, {"unique_id": "outage-1", "kind": "approval",
                                                         "message_for_user": "Go?"})
        await handled(api, passes=1)
        await proxy.cut()
        await mail.deliver(reply_to(question, sender=mail.alice, text="approve"))
        await proxy.wait_refused()  # the reader tried again and found the line down
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        await proxy.restore()
        done = await api.wait(request["id"], timeout=30)
        assert done["response"] == {"decision": "approve"}
        # Sending never depended on the mailbox.
        await mail.smtp.wait_to(mail.bob, count=2)


async def test_one_instance_reads_the_mailbox_on_postgresql(pg_url: str, mail: Setup) -> None:
    section = mail.section()
    async with email_app(pg_url, section, instance_id="one") as one, \
            email_app(pg_url, section, instance_id="two") as two:
        connectors = [one.app[CONNECTORS]["email"], two.app[CONNECTORS]["email"]]

        async def one_reads() -> None:
            while sum(c.reading for c in connectors) != 1:
                await asyncio.sleep(0.05)  # leadership is a lock in PostgreSQL: no event to await

        await asyncio.wait_for(one_reads(), timeout=15)
        request = await one.create({"unique_id": "pg-1", "kind": "approval", "message_for_user": "Go?",
                                    "timeout_seconds": 600})
        (question,) = await mail.smtp.wait_to(mail.alice)
        wrong = reply_to(question, sender=mail.alice, text="perhaps")
        await mail.deliver(wrong)
        await _notice(mail, wrong)
        await mail.deliver(reply_to(question, sender=mail.alice, text="approve"))
        assert (await two.wait(request["id"]))["response"] == {"decision": "approve"}
        reader = next(c for c in connectors if c.reading)
        async with reader.reader.pass_done:
            target = reader.reader.passes + 2
            await asyncio.wait_for(reader.reader.pass_done.wait_for(lambda: reader.reader.passes >= target), 15)
        notices = [m for m in mail.smtp.to(mail.alice) if m.message["In-Reply-To"] == wrong["Message-ID"]]
        assert len(notices) == 1  # read once, by one instance


async def test_broken_and_hostile_mail_is_skipped_and_script_stays_text(sqlite_url: str, mail: Setup) -> None:
    async with email_app(sqlite_url, mail.section()) as api:
        request, question = await _question(api, mail, {"unique_id": "hostile-1", "message_for_user": "Name?"})
        reply_address = str(question.message["Reply-To"])
        in_thread = f"In-Reply-To: {question.message['Message-ID']}\r\n"
        broken_body = (f"From: {mail.alice}\r\nTo: {reply_address}\r\nSubject: Re\r\nMIME-Version: 1.0\r\n"
                       f"Message-ID: <broken@mail.example.test>\r\n{in_thread}"
                       "Content-Type: multipart/mixed; boundary=\"never-closed\"\r\n\r\n--never-closed\r\n"
                       "Content-Type: text/plain; charset=x-no-such-charset\r\n"
                       "Content-Transfer-Encoding: base64\r\n\r\n!!!not base64!!!\r\n").encode()
        for raw in (b"\x00\xff garbage that is no mail at all \r\n\r\n\xfe",
                    (f"From: {mail.alice}, {mail.bob}\r\nTo: {reply_address}\r\nSubject: two senders\r\n\r\n"
                     "Bob\r\n").encode(),
                    broken_body):
            await mail.deliver(raw)
        notice = await mail.smtp.wait_for(lambda m: m.message["In-Reply-To"] == "<broken@mail.example.test>")
        assert "Please answer with a text reply" in notice[0].part("plain")
        await handled(api)
        assert (await api.call("GET", f"/v1/requests/{request['id']}"))[1]["status"] == "pending"
        # A long header and a script: the answer is stored as the text it is, and shown escaped.
        script = (f"From: {mail.alice}\r\nTo: {reply_address}\r\nSubject: Re\r\nX-Long: {'a' * 20000}\r\n"
                  f"Message-ID: <script@mail.example.test>\r\n\r\n<script>alert(1)</script>\r\n").encode()
        await mail.deliver(script)
        done = await api.wait(request["id"])
        assert done["response"] == "<script>alert(1)</script>"
        *_, outcome = await mail.smtp.wait_to(mail.alice, count=3)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in outcome.part("html") and "<script>" not in outcome.part("html")
        late = reply_to(question, sender=mail.alice, text="Alice")
        await mail.deliver(late)
        assert "already answered" in (await _notice(mail, late)).part("plain")
        await handled(api, passes=1)  # the pass that sent the notice flags the mail when it ends
        assert all("$HandraiseDone" in f for f in (await mail.flags()).values())

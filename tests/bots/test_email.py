"""Email out: one personal mail per recipient through a real SMTP server, links, threading, delivery state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from conftest import OPERATOR_KEY, running_app
from handraise.bots.email import EmailConnector
from handraise.core.api import CreateRequestBody
from handraise.core.appkeys import CONNECTORS, DISPATCHER, SERVICE
from handraise.core.config import load_settings
from harness.mail import (
    MailCertificate,
    SmtpRecorder,
    mail_certificate,  # noqa: F401  (registers the session fixtures)
    smtp_server,  # noqa: F401
    tcp_proxy,  # noqa: F401
    unique_address,
)
from tests.bots.email_helpers import (
    MAILBOX,
    config_error,
    email_app,
    email_section,
    form_link,
    links_in,
    open_page,
    post_form,
)

FORM_SCHEMA = {
    "type": "object",
    "properties": {
        "host": {"type": "string", "title": "Host name", "minLength": 3},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 9},
        "urgent": {"type": "boolean"},
    },
    "required": ["host"],
}


async def test_each_recipient_gets_a_mail_of_their_own(storage_url: str, smtp_server: SmtpRecorder) -> None:
    alice, bob = unique_address("alice"), unique_address("bob")
    async with email_app(storage_url, email_section(smtp_server, recipients=[alice, bob])) as api:
        request = await api.create({"unique_id": "deploy-1", "message_for_user": "Which host shall we deploy to?",
                                    "schema": FORM_SCHEMA, "timeout_seconds": 3600})
        (to_alice,) = await smtp_server.wait_to(alice)
        (to_bob,) = await smtp_server.wait_to(bob)
        await api.app[DISPATCHER].idle()

        for mail, person in ((to_alice, alice), (to_bob, bob)):
            msg = mail.message
            assert mail.rcpt_tos == (person,) and msg["To"] == person
            assert msg["From"] == f"Handraise <{MAILBOX}>"
            assert msg["Subject"] == "Question from acme: Which host shall we deploy to?"
            assert msg.get_content_type() == "multipart/alternative"
            assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
            assert msg["Auto-Submitted"] == "auto-generated"
            # Replies and bounces go to plus-addresses of the mailbox; the Message-ID carries the same token.
            local, domain = MAILBOX.split("@")
            reply_to = str(msg["Reply-To"])
            token = reply_to.split("+", 1)[1].split("@")[0]
            assert reply_to == f"{local}+{token}@{domain}" and len(token) == 26
            assert mail.mail_from == f"{local}+bounce-{token}@{domain}"
            assert msg["Message-ID"] == f"<hr.{token}@{domain}>"
            for text in (mail.part("plain"), mail.part("html")):
                assert "Which host shall we deploy to?" in text
                assert "Host name" in text and "host" in text and "at least 3 characters" in text
                assert "integer from 1 to 9" in text and "yes or no" in text
                assert "Answer by " in text
        # Personal: a link, a reply address and a thread of one's own each.
        assert form_link(to_alice) != form_link(to_bob)
        assert to_alice.message["Reply-To"] != to_bob.message["Reply-To"]
        assert to_alice.message["Message-ID"] != to_bob.message["Message-ID"]

        view = await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])
        assert sorted((d.target, d.status, d.attempts) for d in view.deliveries) == sorted(
            [(alice, "sent", 1), (bob, "sent", 1)])
        minted = [e for e in await api.journal(request["id"]) if e["event"] == "link_minted"]
        assert sorted(e["data"]["recipient"] for e in minted) == sorted([alice, bob])

        # Alice's link opens the form for her and takes one answer.
        status, html = await open_page(api, form_link(to_alice))
        assert status == 200 and alice in html
        status, _ = await post_form(api, form_link(to_alice), [("host", "db-1"), ("replicas", "2")], html)
        assert status == 200
        answered = await api.wait(request["id"])
        assert answered["status"] == "answered" and answered["response"] == {"host": "db-1", "replicas": 2, "urgent": False}
        # The link was Alice's alone: the answer is recorded as hers, by email.
        assert (answered["answered_by"], answered["answered_via"]) == (f"email:{alice}", "email")
        status, _ = await open_page(api, form_link(to_alice))
        assert status == 410


async def test_untrusted_text_is_escaped_and_headers_stay_one_line(sqlite_url: str,
                                                                    smtp_server: SmtpRecorder) -> None:
    alice = unique_address("alice")
    async with email_app(sqlite_url, email_section(smtp_server, recipients=[alice])) as api:
        question = 'Run <script>alert("x")</script> & drop?\r\nBcc: victim@example.test\r\n\r\nInjected body'
        await api.create({"unique_id": "evil-1", "message_for_user": question})
        (mail,) = await smtp_server.wait_to(alice)
        msg = mail.message
        assert msg["Bcc"] is None and mail.rcpt_tos == (alice,)
        assert "\n" not in str(msg["Subject"]) and str(msg["Subject"]).startswith("Question from acme: Run <script>")
        html = mail.part("html")
        assert "<script>" not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; drop?" in html
        assert '<script>alert("x")</script> & drop?' in mail.part("plain")


async def test_a_sensitive_request_mails_only_generic_text_and_the_link(sqlite_url: str,
                                                                        smtp_server: SmtpRecorder) -> None:
    alice = unique_address("alice")
    async with email_app(sqlite_url, email_section(smtp_server, recipients=[alice])) as api:
        await api.create({"unique_id": "otp-1", "message_for_user": "Enter the code for ACCOUNT-7731",
                          "schema": {"type": "object", "properties": {"pin_code": {"type": "string"}}},
                          "sensitive": True})
        (mail,) = await smtp_server.wait_to(alice)
        raw = mail.raw.decode("utf-8", "replace")
        assert "ACCOUNT-7731" not in raw and "pin_code" not in raw and "Enter the code" not in raw
        assert mail.message["Subject"] == "A private answer is needed (acme)"
        for text in (mail.part("plain"), mail.part("html")):
            assert "A private answer is needed" in text and "Replies to this mail are not read" in text
        assert form_link(mail)


async def test_approve_and_reject_links_only_open_a_confirmation(storage_url: str,
                                                                  smtp_server: SmtpRecorder) -> None:
    alice = unique_address("alice")
    async with email_app(storage_url, email_section(smtp_server, recipients=[alice])) as api:
        request = await api.create({"unique_id": "approve-1", "message_for_user": "Drop the staging database?",
                                    "kind": "approval"})
        (mail,) = await smtp_server.wait_to(alice)
        assert mail.message["Subject"] == "Approval needed: Drop the staging database?"
        links = links_in(mail.part("plain"))
        approve = next(u for u in links if u.endswith("?decision=approve"))
        reject = next(u for u in links if u.endswith("?decision=reject"))
        assert {approve, reject} <= set(links_in(mail.part("html")))
        # A link scanner, a preview, a person who opens both: nothing is decided by opening.
        for url in (approve, reject, approve):
            status, html = await open_page(api, url)
            assert status == 200 and "Nothing is decided until you press the button" in html
        _, html = await open_page(api, reject)
        assert 'value="reject" class="reject" autofocus' in html and "You chose to <strong>reject</strong>" in html
        still = await api.call("GET", f"/v1/requests/{request['id']}")
        assert still[1]["status"] == "pending"
        # The confirmation is a POST with the page's CSRF token.
        status, _ = await post_form(api, reject, [("decision", "reject"), ("reason", "not today")], html)
        assert status == 200
        done = await api.wait(request["id"])
        assert done["response"] == {"decision": "reject", "reason": "not today"}


async def test_reminder_and_outcome_are_threaded_under_the_question(sqlite_url: str,
                                                                     smtp_server: SmtpRecorder) -> None:
    alice, bob = unique_address("alice"), unique_address("bob")
    section = email_section(smtp_server, recipients=[alice, bob], remind_after_seconds=0.5)
    async with email_app(sqlite_url, section) as api:
        request = await api.create({"unique_id": "thread-1", "message_for_user": "Ship release 4.2?",
                                    "kind": "approval", "timeout_seconds": 600})
        question, reminder = await smtp_server.wait_to(alice, count=2)
        root = question.message["Message-ID"]
        assert reminder.message["In-Reply-To"] == root and reminder.message["References"] == root
        assert reminder.message["Subject"] == "Re: Approval needed: Ship release 4.2?"
        assert reminder.message["Message-ID"] != root
        assert "Reminder: this question still needs an answer" in reminder.part("plain")

        status, body = await api.submit("thread-1", {"decision": "approve", "reason": "green"}, key=OPERATOR_KEY)
        assert status == 200, body
        *_, outcome = await smtp_server.wait_to(alice, count=3)
        (bob_question, *_), bob_outcome = await smtp_server.wait_to(bob, count=3), None
        await api.app[DISPATCHER].idle()
        assert outcome.message["In-Reply-To"] == root and outcome.message["References"] == root
        assert outcome.message["Subject"] == "Re: Approval needed: Ship release 4.2?"
        assert "operator op-1" in outcome.part("plain")
        # Bob's thread is his own: its outcome answers his question, not Alice's.
        bob_outcome = smtp_server.to(bob)[-1]
        assert bob_outcome.message["In-Reply-To"] == bob_question.message["Message-ID"] != root
        # Withdrawn once: a second withdraw pass sends nothing more.
        view = await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])
        assert {d.status for d in view.deliveries} == {"withdrawn"}
        connector = api.app[DISPATCHER].connectors["email"]
        await connector.withdraw(view, target=alice, ref={})
        assert len(smtp_server.to(alice)) == 3


async def test_no_outcome_mail_when_the_tenant_does_not_want_it(sqlite_url: str,
                                                                 smtp_server: SmtpRecorder) -> None:
    alice = unique_address("alice")
    section = email_section(smtp_server, recipients=[alice])
    section["tenants"]["acme"]["notify_outcome"] = False
    async with email_app(sqlite_url, section) as api:
        request = await api.create({"unique_id": "quiet-1", "message_for_user": "Anything?"})
        await smtp_server.wait_to(alice)
        status, _ = await api.call("POST", f"/v1/requests/{request['id']}/cancel")
        assert status == 200
        await api.app[DISPATCHER].idle()
        view = await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])
        assert [d.status for d in view.deliveries] == ["withdrawn"]
        assert len(smtp_server.to(alice)) == 1


async def test_refused_and_deferred_recipients_show_on_the_request(sqlite_url: str,
                                                                    smtp_server: SmtpRecorder) -> None:
    gone, busy, fine = unique_address("gone"), unique_address("busy"), unique_address("fine")
    smtp_server.refuse(gone)
    smtp_server.defer(busy, times=2)
    async with email_app(sqlite_url, email_section(smtp_server, recipients=[gone, busy, fine])) as api:
        request = await api.create({"unique_id": "deliv-1", "message_for_user": "Status?"})
        await smtp_server.wait_to(fine)
        await smtp_server.wait_to(busy)  # the third attempt, after the shared backoff
        await api.app[DISPATCHER].idle()
        view = await api.app[SERVICE].get(tenant_id="acme", request_id=request["id"])
        by_target = {d.target: d for d in view.deliveries}
        assert (by_target[gone].status, by_target[gone].attempts) == ("failed", 1)  # 550: no retry helps
        assert "550" in (by_target[gone].last_error or "")
        assert (by_target[busy].status, by_target[busy].attempts) == ("sent", 3)
        assert (by_target[fine].status, by_target[fine].attempts) == ("sent", 1)
        failures = [e["data"] for e in await api.journal(request["id"]) if e["event"] == "delivery_failed"]
        assert sorted((f["target"], f["final"]) for f in failures) == sorted(
            [(gone, True), (busy, False), (busy, False)])
        assert smtp_server.to(gone) == []
        # The deferred recipient's three tries mailed the one link the first minted.
        minted = [e["data"] for e in await api.journal(request["id"]) if e["event"] == "link_minted"]
        assert sorted(m["recipient"] for m in minted) == sorted([gone, busy, fine])
        (mail,) = smtp_server.to(busy)
        assert form_link(mail) == api.app[SERVICE].link_url(next(m["link_id"] for m in minted
                                                                 if m["recipient"] == busy))


async def test_an_smtp_outage_is_retried_until_the_server_answers(sqlite_url: str, tcp_proxy: Any,
                                                                  smtp_server: SmtpRecorder) -> None:
    alice = unique_address("alice")
    proxy = await tcp_proxy(smtp_server.host, smtp_server.port)
    await proxy.cut()
    section = email_section(smtp_server, recipients=[alice], smtp={"port": proxy.port})
    async with email_app(sqlite_url, section) as api:
        request = await api.create({"unique_id": "outage-1", "message_for_user": "Still there?"})
        service = api.app[SERVICE]
        await proxy.wait_refused()
        await proxy.restore()
        (mail,) = await smtp_server.wait_to(alice)
        await api.app[DISPATCHER].idle()
        view = await service.get(tenant_id="acme", request_id=request["id"])
        assert view.deliveries[0].status == "sent" and view.deliveries[0].attempts >= 2
        assert mail.message["Subject"] == "Question from acme: Still there?"


@pytest.mark.parametrize("security", ["starttls", "tls"])
async def test_tls_and_login_with_the_password_from_the_environment(
        security: str, tmp_path: Path, mail_certificate: MailCertificate) -> None:
    server = SmtpRecorder(certificate=mail_certificate, security=security, login=("hr-bot", "pa55-from-env"))
    server.start()
    try:
        alice = unique_address("alice")
        config = tmp_path / "config.toml"
        config.write_text(
            f'[storage]\nurl = "sqlite:///{tmp_path / "h.db"}"\n'
            '[[tenants]]\nid = "acme"\n'
            f'[email]\nfrom = "Handraise <{MAILBOX}>"\n'
            f'[email.smtp]\nhost = "{server.host}"\nport = {server.port}\nsecurity = "{security}"\n'
            f'user = "hr-bot"\nca_file = "{mail_certificate.cert_path}"\n'
            f'[email.tenants.acme]\nrecipients = ["{alice}"]\n')
        settings = load_settings(config, environ={"HANDRAISE_EMAIL__SMTP__PASSWORD": "pa55-from-env"})

        async with running_app(settings, connector_classes=[EmailConnector]) as api:
            view, _ = await api.app[SERVICE].create(
                tenant_id="acme", principal="agent:test",
                body=CreateRequestBody.model_validate({"unique_id": "tls-1", "message_for_user": "Over TLS?"}))
            (mail,) = await server.wait_to(alice)
            assert mail.tls and mail.login == "hr-bot"
            await api.app[DISPATCHER].idle()
            assert (await api.app[SERVICE].get(tenant_id="acme", request_id=view.id)).deliveries[0].status == "sent"
            # Held as a secret: no repr or log line of the connector's settings shows it.
            assert "pa55-from-env" not in repr(api.app[CONNECTORS]["email"].settings)
    finally:
        server.stop()


async def test_an_untrusted_certificate_is_refused(sqlite_url: str, mail_certificate: MailCertificate) -> None:
    server = SmtpRecorder(certificate=mail_certificate, security="tls")
    server.start()
    try:
        alice = unique_address("alice")
        section = email_section(server, recipients=[alice], smtp={"security": "tls"})
        async with email_app(sqlite_url, section) as api:
            request = await api.create({"unique_id": "untrusted-1", "message_for_user": "Hello?"})

            async def failed() -> str:
                # No event says "a delivery failed": read the journal until it does (bounded below).
                while True:
                    entries = [e for e in await api.journal(request["id"]) if e["event"] == "delivery_failed"]
                    if entries:
                        return str(entries[0]["data"]["error"])
                    await asyncio.sleep(0.05)

            error = await asyncio.wait_for(failed(), timeout=15)
            assert "smtp" in error
            assert server.to(alice) == []
    finally:
        server.stop()


@pytest.mark.parametrize(("change", "needle"), [
    ({"tenants": {"nobody": {"recipients": ["a@example.test"]}}}, "email.tenants.nobody: no tenant with this id"),
    ({"tenants": {"acme": {"recipients": ["not an address"]}}}, "not an email address"),
    ({"tenants": {"acme": {"recipients": ["a@example.test", "A@example.test"]}}}, "appears twice"),
    ({"tenants": {"acme": {"recipients": ["a@example.test"]}, "globex": {"recipients": ["A@example.test"]}}},
     "recipient a@example.test is configured for tenants acme and globex"),
    ({"tenants": {"acme": {"recipients": []}}}, "recipients"),
    ({"smtp": {"host": "smtp.example.test", "user": "bot"}}, "user and password go together"),
    ({"reply_address": "handraise+x@example.test"}, "no +tag"),
    ({"from": "nobody"}, "not an email address"),
    ({"smtp": {"host": "smtp.example.test", "security": "ssl"}}, "smtp.security"),
    ({"smtp": {"host": "smtp.example.test", "sender": "x"}}, "unknown key"),
])
async def test_bad_config_names_the_key(smtp_server: SmtpRecorder, change: dict[str, Any], needle: str) -> None:
    section = email_section(smtp_server, recipients=["alice@example.test"])
    section.update(change)
    assert needle in config_error(section)


async def test_the_deadline_is_in_the_tenants_time_zone(sqlite_url: str, smtp_server: SmtpRecorder) -> None:
    import datetime as dt
    import zoneinfo

    from conftest import base_config, settings_from
    from handraise.webforms.connector import WebFormsChannel

    alice = unique_address("alice")
    config = base_config(sqlite_url, email=email_section(smtp_server, recipients=[alice]))
    config["tenants"][0]["timezone"] = "America/New_York"
    async with running_app(settings_from(config), connector_classes=[WebFormsChannel, EmailConnector]) as api:
        request = await api.create({"unique_id": "tz-1", "message_for_user": "When?", "timeout_seconds": 7200})
        (mail,) = await smtp_server.wait_to(alice)
        expires = dt.datetime.fromisoformat(request["expires_at"].replace("Z", "+00:00"))
        local = expires.astimezone(zoneinfo.ZoneInfo("America/New_York"))
        expected = f"Answer by {local.strftime('%Y-%m-%d %H:%M')} {local.tzname()}."
        assert local.tzname() in ("EST", "EDT")
        for text in (mail.part("plain"), mail.part("html")):
            assert expected in text


async def test_a_sensitive_answer_never_appears_in_a_mail(sqlite_url: str, smtp_server: SmtpRecorder) -> None:
    alice, bob = unique_address("alice"), unique_address("bob")
    async with email_app(sqlite_url, email_section(smtp_server, recipients=[alice, bob])) as api:
        request = await api.create({"unique_id": "sens-out-1", "message_for_user": "The vault PIN?",
                                    "schema": {"type": "string", "pattern": "^[0-9]{6}$"}, "sensitive": True})
        (question,) = await smtp_server.wait_to(alice)
        status, html = await open_page(api, form_link(question))
        assert status == 200
        status, _ = await post_form(api, form_link(question), [("answer", "493817")], html)
        assert status == 200
        assert (await api.wait(request["id"]))["status"] == "answered"
        for person in (alice, bob):
            *_, outcome = await smtp_server.wait_to(person, count=2)
            assert "Answered by" in outcome.part("plain") and "via email" in outcome.part("plain")
        await api.app[DISPATCHER].idle()
        assert all("493817" not in m.raw.decode("utf-8", "replace") for m in smtp_server.to(alice) + smtp_server.to(bob))

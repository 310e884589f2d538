"""Smoke tests of the mail harness: the recording SMTP server, Dovecot, and the line that can be cut."""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from email.message import EmailMessage

import aioimaplib
import pytest

from harness.mail import (
    DovecotServer,
    SmtpRecorder,
    MailCertificate,
    dovecot,  # noqa: F401  (registers the session fixture)
    mail_certificate,  # noqa: F401
    smtp_server,  # noqa: F401
    tcp_proxy,  # noqa: F401
    unique_address,
)


def _message(to: str, subject: str = "hello") -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "sender@example.test"
    msg["To"] = to
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{subject}.{to}>"
    msg.set_content("plain body")
    msg.add_alternative("<p>html body</p>", subtype="html")
    return msg


async def test_smtp_records_what_arrives(smtp_server: SmtpRecorder) -> None:
    to = unique_address()

    def send() -> None:
        with smtplib.SMTP(smtp_server.host, smtp_server.port, timeout=10) as client:
            client.send_message(_message(to))

    await asyncio.to_thread(send)
    (mail,) = await smtp_server.wait_to(to)
    assert mail.rcpt_tos == (to,) and mail.mail_from == "sender@example.test"
    assert mail.part("plain").strip() == "plain body" and "html body" in mail.part("html")
    assert not mail.tls


async def test_smtp_refuses_and_defers(smtp_server: SmtpRecorder) -> None:
    refused, deferred = unique_address("refused"), unique_address("deferred")
    smtp_server.refuse(refused)
    smtp_server.defer(deferred, times=1)

    def send(to: str) -> None:
        with smtplib.SMTP(smtp_server.host, smtp_server.port, timeout=10) as client:
            client.send_message(_message(to))

    with pytest.raises(smtplib.SMTPRecipientsRefused) as refusal:
        await asyncio.to_thread(send, refused)
    assert refusal.value.recipients[refused][0] == 550
    with pytest.raises(smtplib.SMTPRecipientsRefused) as deferral:
        await asyncio.to_thread(send, deferred)
    assert deferral.value.recipients[deferred][0] == 451
    await asyncio.to_thread(send, deferred)  # the second attempt is taken
    assert len(await smtp_server.wait_to(deferred)) == 1
    assert smtp_server.to(refused) == []


@pytest.mark.parametrize("security", ["starttls", "tls"])
async def test_smtp_tls_with_login(security: str, mail_certificate: MailCertificate) -> None:
    server = SmtpRecorder(certificate=mail_certificate, security=security, login=("bot", "s3cret"))
    server.start()
    try:
        to = unique_address()
        context = ssl.create_default_context(cafile=str(mail_certificate.cert_path))

        def send(password: str) -> None:
            if security == "tls":
                client: smtplib.SMTP = smtplib.SMTP_SSL(server.host, server.port, context=context, timeout=10)
            else:
                client = smtplib.SMTP(server.host, server.port, timeout=10)
                client.starttls(context=context)
            with client:
                client.login("bot", password)
                client.send_message(_message(to))

        with pytest.raises(smtplib.SMTPAuthenticationError):
            await asyncio.to_thread(send, "wrong")
        await asyncio.to_thread(send, "s3cret")
        (mail,) = await server.wait_to(to)
        assert mail.tls and mail.login == "bot"
    finally:
        server.stop()


async def _imap_login(server: DovecotServer, user: str, password: str, port: int | None = None,
                      tls: bool = False, cafile: str | None = None) -> aioimaplib.IMAP4:
    if tls:
        client: aioimaplib.IMAP4 = aioimaplib.IMAP4_SSL(
            server.host, port or server.tls_port, ssl_context=ssl.create_default_context(cafile=cafile))
    else:
        client = aioimaplib.IMAP4(server.host, port or server.port)
    await client.wait_hello_from_server()
    response = await client.login(user, password)
    assert response.result == "OK", response
    return client


async def test_dovecot_holds_delivered_mail_and_keywords(dovecot: DovecotServer,
                                                         mail_certificate: MailCertificate) -> None:
    user, password = dovecot.add_user()
    uid = await asyncio.to_thread(dovecot.deliver, user, _message("handraise@example.test", "reply"))
    assert uid >= 1
    client = await _imap_login(dovecot, user, password, tls=True, cafile=str(mail_certificate.cert_path))
    try:
        assert client.has_capability("IDLE")
        assert (await client.select("INBOX")).result == "OK"
        search = await client.uid_search("UNKEYWORD $HandraiseDone")
        assert search.lines[0].split() == [str(uid).encode()]
        assert (await client.uid("store", str(uid), "+FLAGS", "($HandraiseDone)")).result == "OK"
        assert (await client.uid_search("UNKEYWORD $HandraiseDone")).lines[0].strip() == b""
    finally:
        await client.logout()
    assert "$HandraiseDone" in (await asyncio.to_thread(dovecot.flags, user))[uid]
    # Another user's mailbox is another mailbox, and a wrong password is refused.
    other, _ = dovecot.add_user()
    assert await asyncio.to_thread(dovecot.flags, other) == {}
    bad = aioimaplib.IMAP4(dovecot.host, dovecot.port)
    await bad.wait_hello_from_server()
    assert (await bad.login(other, "not-the-password")).result == "NO"
    await bad.logout()


async def test_a_cut_line_refuses_and_comes_back(dovecot: DovecotServer, tcp_proxy: object) -> None:
    user, password = dovecot.add_user()
    proxy = await tcp_proxy(dovecot.host, dovecot.port)  # type: ignore[operator]
    client = await _imap_login(dovecot, user, password, port=proxy.port)
    await proxy.cut()
    with pytest.raises((ConnectionError, OSError, asyncio.TimeoutError, aioimaplib.Abort)):
        await asyncio.wait_for(client.select("INBOX"), timeout=2)  # aioimaplib waits forever on a dead line
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    with pytest.raises(ConnectionError):
        if not await reader.read(100):
            raise ConnectionResetError("closed")  # a reset may read as EOF
    writer.close()
    await proxy.wait_refused(timeout=5)
    assert proxy.refused == 1
    await proxy.restore()
    again = await _imap_login(dovecot, user, password, port=proxy.port)
    assert (await again.select("INBOX")).result == "OK"
    await again.logout()

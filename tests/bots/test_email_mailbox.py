"""The IMAP reader against a real Dovecot: each mail handled once, IDLE and polling, large mails, outages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from email.message import EmailMessage
from typing import Any

import pytest

from handraise.bots.email.mailbox import DONE_KEYWORD, IncomingMail, MailboxError, MailboxReader
from handraise.bots.email.settings import ImapSettings
from harness.mail import (
    DovecotServer,
    MailCertificate,
    dovecot,  # noqa: F401  (registers the session fixtures)
    mail_certificate,  # noqa: F401
    tcp_proxy,  # noqa: F401
)

log = logging.getLogger(__name__)


def _mail(subject: str, body: str = "approve") -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "alice@example.test"
    msg["To"] = "handraise@example.test"
    msg["Subject"] = subject
    msg.set_content(body)
    return msg


class Recorder:
    """A handler that keeps what it got and lets a test await the n-th mail."""

    def __init__(self, disposition: str = "keep") -> None:
        self.mails: list[IncomingMail] = []
        self.disposition = disposition
        self.changed = asyncio.Condition()

    async def __call__(self, mail: IncomingMail) -> Any:
        async with self.changed:
            self.mails.append(mail)
            self.changed.notify_all()
        return self.disposition

    async def wait(self, count: int, timeout: float = 15) -> list[IncomingMail]:
        async with asyncio.timeout(timeout):
            async with self.changed:
                await self.changed.wait_for(lambda: len(self.mails) >= count)
        return self.mails


def _settings(server: DovecotServer, user: str, password: str, **extra: Any) -> ImapSettings:
    return ImapSettings.model_validate({"host": server.host, "port": server.port, "security": "none",
                                        "user": user, "password": password, "timeout_seconds": 5, **extra})


@asynccontextmanager
async def reading(reader: MailboxReader, *, check_every: float = 30) -> AsyncIterator[asyncio.Task[None]]:
    async def leading() -> bool:
        return True

    task = asyncio.get_running_loop().create_task(reader.run(still_leading=leading, check_every=check_every))
    try:
        yield task
    finally:
        task.cancel()
        with pytest.raises((asyncio.CancelledError, MailboxError)):
            await task


async def _passes(reader: MailboxReader, count: int, timeout: float = 15) -> None:
    async with asyncio.timeout(timeout):
        async with reader.pass_done:
            await reader.pass_done.wait_for(lambda: reader.passes >= count)


@pytest.mark.parametrize("idle", [True, False], ids=["idle", "polling"])
async def test_each_mail_is_handled_once_and_flagged(dovecot: DovecotServer, idle: bool) -> None:
    user, password = dovecot.add_user()
    first = await asyncio.to_thread(dovecot.deliver, user, _mail("before start"))
    handler = Recorder()
    reader = MailboxReader(settings=_settings(dovecot, user, password, idle=idle, poll_seconds=0.2),
                           handle=handler, log=log)
    async with reading(reader):
        (got,) = await handler.wait(1)
        assert got.uid == first and got.message is not None and got.message["Subject"] == "before start"
        await _passes(reader, 1)
        passes = reader.passes
        # A mail that arrives while the reader waits is handled without a restart: IDLE or the next poll.
        second = await asyncio.to_thread(dovecot.deliver, user, _mail("while waiting"))
        mails = await handler.wait(2)
        assert [m.uid for m in mails] == [first, second]
        await _passes(reader, passes + 1)
    flags = await asyncio.to_thread(dovecot.flags, user)
    assert DONE_KEYWORD in flags[first] and DONE_KEYWORD in flags[second] and "\\Seen" in flags[first]
    # A new session reads nothing again.
    again = Recorder()
    reader = MailboxReader(settings=_settings(dovecot, user, password), handle=again, log=log)
    async with reading(reader):
        await _passes(reader, 1)
    assert again.mails == []


async def test_a_deleted_mail_leaves_the_mailbox_and_a_large_one_is_not_read(dovecot: DovecotServer) -> None:
    user, password = dovecot.add_user()
    big = await asyncio.to_thread(dovecot.deliver, user, _mail("huge", "x" * 40_000))
    secret = await asyncio.to_thread(dovecot.deliver, user, _mail("secret", "token ghp_0123456789abcdef"))
    handler = Recorder(disposition="delete")
    reader = MailboxReader(settings=_settings(dovecot, user, password, max_message_bytes=16_384), handle=handler,
                           log=log)
    async with reading(reader):
        mails = await handler.wait(2)
        await _passes(reader, 1)
    by_uid = {m.uid: m for m in mails}
    assert by_uid[big].message is None and by_uid[big].size > 16_384
    assert by_uid[secret].message is not None
    assert await asyncio.to_thread(dovecot.flags, user) == {}  # both expunged


async def test_an_outage_ends_the_session_and_the_next_one_catches_up(dovecot: DovecotServer,
                                                                       tcp_proxy: Callable[..., Any]) -> None:
    user, password = dovecot.add_user()
    proxy = await tcp_proxy(dovecot.host, dovecot.port)
    handler = Recorder()
    settings = _settings(dovecot, user, password, port=proxy.port, timeout_seconds=2)
    reader = MailboxReader(settings=settings, handle=handler, log=log)

    async def leading() -> bool:
        return True

    session = asyncio.get_running_loop().create_task(reader.run(still_leading=leading, check_every=30))
    await _passes(reader, 1)
    await proxy.cut()
    with pytest.raises(MailboxError):
        await asyncio.wait_for(session, timeout=15)
    # Mail that arrives during the outage waits in the mailbox.
    during = await asyncio.to_thread(dovecot.deliver, user, _mail("during the outage"))
    with pytest.raises(MailboxError):
        await asyncio.wait_for(reader.run(still_leading=leading, check_every=30), timeout=15)
    await proxy.restore()
    async with reading(reader):
        (got,) = await handler.wait(1)
    assert got.uid == during


async def test_tls_with_a_trusted_ca_and_a_refused_login(dovecot: DovecotServer,
                                                         mail_certificate: MailCertificate) -> None:
    user, password = dovecot.add_user()
    uid = await asyncio.to_thread(dovecot.deliver, user, _mail("over tls"))
    handler = Recorder()
    settings = _settings(dovecot, user, password, port=dovecot.tls_port, security="tls",
                         ca_file=str(mail_certificate.cert_path))
    reader = MailboxReader(settings=settings, handle=handler, log=log)
    async with reading(reader):
        assert [m.uid for m in await handler.wait(1)] == [uid]

    async def leading() -> bool:
        return True

    untrusted = MailboxReader(settings=_settings(dovecot, user, password, port=dovecot.tls_port, security="tls"),
                              handle=handler, log=log)
    with pytest.raises(MailboxError, match="greeting"):
        await untrusted.run(still_leading=leading, check_every=30)
    wrong = MailboxReader(settings=_settings(dovecot, user, "wrong-password"), handle=handler, log=log)
    with pytest.raises(MailboxError, match="login: NO"):
        await wrong.run(still_leading=leading, check_every=30)

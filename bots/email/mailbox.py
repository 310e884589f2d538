"""Reading the reply mailbox over IMAP (aioimaplib): new mails in, each handled once, flagged when done.

A mail counts as new until it carries the ``$HandraiseDone`` keyword (or, on a server that
allows no keywords, ``\\Seen``); it is flagged only after its handler returned, so a restart
neither replays a handled mail nor loses one that arrived while nobody read. New mail is
awaited with IDLE when the server offers it, else by polling. Every command has a deadline:
aioimaplib waits forever on a dead line, and a mailbox outage must end in a reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any, Literal

import aioimaplib

from handraise.bots.email.settings import ImapSettings

DONE_KEYWORD = "$HandraiseDone"
_UID = re.compile(rb"UID (\d+)")
_SIZE = re.compile(rb"RFC822\.SIZE (\d+)")

Disposition = Literal["keep", "delete"]


class MailboxError(Exception):
    """The IMAP server refused a command or the line failed; the reader reconnects after a pause."""


@dataclass(frozen=True)
class IncomingMail:
    uid: int
    message: EmailMessage | None   # None: too large to read (``size`` says how large)
    size: int


Handler = Callable[[IncomingMail], Awaitable[Disposition]]


class MailboxReader:
    """One IMAP session at a time: ``run`` connects, handles what is new, waits for more, until cancelled."""

    def __init__(self, *, settings: ImapSettings, handle: Handler, log: logging.Logger) -> None:
        # aioimaplib logs every line it sends and receives at DEBUG: the password, and people's answers.
        logging.getLogger("aioimaplib").setLevel(logging.WARNING)
        self.settings = settings
        self.handle = handle
        self.log = log
        self._client: aioimaplib.IMAP4 | None = None
        self._lost = asyncio.Event()
        self._keywords = True
        # Set each time a pass over the mailbox has finished (tests and the connector await it).
        self.passes = 0
        self.pass_done = asyncio.Condition()
        self.idling = False

    # -- one session ---------------------------------------------------------------

    async def run(self, *, still_leading: Callable[[], Awaitable[bool]], check_every: float) -> None:
        """Connect and serve until leadership is lost or the line fails (then raise for a reconnect)."""
        await self._connect()
        try:
            while True:
                await self.read_new()
                if not await still_leading():
                    self.log.warning("email: lost the mailbox leadership; another instance may read it")
                    return
                await self._wait_for_news(min(check_every, self._wait_seconds()))
        finally:
            await self._close()

    def _wait_seconds(self) -> float:
        return self.settings.idle_renew_seconds if self._use_idle() else self.settings.poll_seconds

    def _use_idle(self) -> bool:
        return self.settings.idle and self._client is not None and self._client.has_capability("IDLE")

    async def _connect(self) -> None:
        s = self.settings
        self._lost = asyncio.Event()
        lost = self._lost

        def connection_lost(_exc: Exception | None) -> None:
            lost.set()

        if s.security == "tls":
            context = ssl.create_default_context(cafile=s.ca_file)
            client: aioimaplib.IMAP4 = aioimaplib.IMAP4_SSL(s.host, s.port, timeout=s.timeout_seconds,
                                                             ssl_context=context)
            client.protocol.conn_lost_cb = connection_lost
        else:
            client = aioimaplib.IMAP4(s.host, s.port, timeout=s.timeout_seconds, conn_lost_cb=connection_lost)
        self._client = client
        await self._command(client.wait_hello_from_server(), "greeting")
        await self._ok(client.login(s.user, s.password.get_secret_value()), "login")
        selected = await self._ok(client.select(s.mailbox), "select")
        permanent = b" ".join(line for line in selected.lines if b"PERMANENTFLAGS" in line)
        self._keywords = b"\\*" in permanent
        self.log.info("email: mailbox open", extra={"idle": self._use_idle(), "keywords": self._keywords})

    async def _close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        # Cancelled in the middle of an IDLE (or of starting one), the server would answer nothing
        # else: drop the line instead of logging out politely.
        if not self.idling:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.logout(), timeout=2)
        self.idling = False
        with contextlib.suppress(Exception):
            client.protocol.transport.close()

    # -- reading -------------------------------------------------------------------

    async def read_new(self) -> int:
        """Handle every mail not yet flagged done, oldest first; returns how many."""
        client = self._require()
        search = await self._ok(client.uid_search(f"UNKEYWORD {DONE_KEYWORD}" if self._keywords else "UNSEEN"),
                                "search")
        uids = sorted({int(n) for line in search.lines[:1] for n in line.split() if n.isdigit()})
        for uid in uids:
            mail = await self._fetch(uid)
            if mail is None:
                continue  # expunged meanwhile
            disposition = await self.handle(mail)
            if disposition == "delete":
                await self.delete(uid)
            else:
                await self._mark_done(uid)
        async with self.pass_done:
            self.passes += 1
            self.pass_done.notify_all()
        return len(uids)

    async def _fetch(self, uid: int) -> IncomingMail | None:
        client = self._require()
        sized = await self._ok(client.uid("fetch", str(uid), "(RFC822.SIZE)"), "fetch size")
        size_match = next((m for line in sized.lines if isinstance(line, (bytes, bytearray))
                           for m in [_SIZE.search(bytes(line))] if m), None)
        if size_match is None:
            return None
        size = int(size_match.group(1))
        if size > self.settings.max_message_bytes:
            return IncomingMail(uid, None, size)
        fetched = await self._ok(client.uid("fetch", str(uid), "BODY.PEEK[]"), "fetch")
        raw = next((bytes(line) for line in fetched.lines if isinstance(line, bytearray)), None)
        if raw is None:
            return None
        message = email.message_from_bytes(raw, policy=email.policy.default)
        return IncomingMail(uid, message, size)  # type: ignore[arg-type]

    async def _mark_done(self, uid: int) -> None:
        flags = f"({DONE_KEYWORD} \\Seen)" if self._keywords else "(\\Seen)"
        await self._ok(self._require().uid("store", str(uid), "+FLAGS.SILENT", flags), "store")

    async def delete(self, uid: int) -> None:
        """Remove a mail from the mailbox (a reply that must not be kept: a secret, a sensitive answer)."""
        client = self._require()
        await self._mark_done(uid)
        await self._ok(client.uid("store", str(uid), "+FLAGS.SILENT", "(\\Deleted)"), "store deleted")
        if client.has_capability("UIDPLUS"):
            await self._ok(client.uid("expunge", str(uid)), "expunge")
        else:
            await self._ok(client.expunge(), "expunge")

    # -- waiting -------------------------------------------------------------------

    async def _wait_for_news(self, seconds: float) -> None:
        """Return when the server says the mailbox changed (IDLE), or after ``seconds``."""
        client = self._require()
        if not self._use_idle():
            await self._sleep_unless_lost(seconds)
            return
        self.idling = True
        idle = await self._command(client.idle_start(timeout=seconds + self.settings.timeout_seconds), "idle")
        try:
            with contextlib.suppress(TimeoutError):
                while True:
                    push = await client.wait_server_push(timeout=seconds)
                    if _news(push):
                        break
        finally:
            self.idling = False
            if client.has_pending_idle():
                client.idle_done()
            await self._command(asyncio.shield(idle), "idle done")

    async def _sleep_unless_lost(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._lost.wait(), timeout=seconds)
        if self._lost.is_set():
            raise MailboxError("the IMAP connection was lost")

    # -- commands ------------------------------------------------------------------

    def _require(self) -> aioimaplib.IMAP4:
        if self._client is None or self._lost.is_set():
            raise MailboxError("the IMAP connection was lost")
        return self._client

    async def _command(self, awaitable: Awaitable[Any], what: str) -> Any:
        """One command under the deadline; a lost line fails it at once instead of never."""
        task = asyncio.ensure_future(awaitable)
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            done, _ = await asyncio.wait({task, lost}, timeout=self.settings.timeout_seconds,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            lost.cancel()
        if task not in done:
            task.cancel()
            reason = "the line was lost" if self._lost.is_set() else f"no answer in {self.settings.timeout_seconds} s"
            raise MailboxError(f"imap {what}: {reason}")
        try:
            return task.result()
        except (aioimaplib.Abort, aioimaplib.Error, OSError, TimeoutError) as e:
            raise MailboxError(f"imap {what}: {type(e).__name__}") from e

    async def _ok(self, awaitable: Awaitable[Any], what: str) -> Any:
        response = await self._command(awaitable, what)
        if response.result != "OK":
            # The server's words may echo what we sent (never the password: LOGIN is not echoed).
            raise MailboxError(f"imap {what}: {response.result}")
        return response


def _news(push: Any) -> bool:
    """Whether an IDLE push says the mailbox changed (EXISTS, RECENT), not just "still here"."""
    lines = push if isinstance(push, list) else getattr(push, "lines", [push])
    return any(isinstance(line, (bytes, bytearray, str)) and (b"EXISTS" in _b(line) or b"RECENT" in _b(line))
               for line in lines)


def _b(line: bytes | bytearray | str) -> bytes:
    return line.encode() if isinstance(line, str) else bytes(line)

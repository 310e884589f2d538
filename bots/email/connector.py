"""The email connector: questions go out by SMTP, one personal mail per recipient; answers come back by reply.

Each (request, recipient) is one delivery: its own one-time form link, its own
reply address and Message-ID (both from an unguessable per-thread token, see
``addresses``), and the shared retry and backoff of the dispatcher. Reminders and
the outcome are threaded under the question. Replies are read from one IMAP
mailbox (one instance at a time) and answered through core's one chat-answer path;
bounces mark their delivery ``bounced``.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import aiosmtplib

from handraise.bots.email.addresses import (
    bounce_address,
    message_id,
    reply_address,
    thread_token,
    token_matches,
)
from handraise.bots.email.compose import Composer, Thread, subject_of
from handraise.bots.email.inbound import Arrival, classify
from handraise.bots.email.mailbox import Disposition, IncomingMail, MailboxReader
from handraise.bots.email.quotes import reply_text
from handraise.bots.email.settings import EmailSettings
from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.chat import ChatConnector, Sender, must_not_stay
from handraise.core.config import PersonSettings
from handraise.core.errors import ConnectorError, NotFoundError
from handraise.core.outcomes import AnswerOutcome
from handraise.core.personal import PrivateNote

CHANNEL = "email"
LEADER = "email-imap"
# Durable state: "<request id>:<recipient>" -> "1" once the outcome mail went out (withdraw may run twice).
OUTCOME_SENT = "email.outcome"
# Remembered message keys: "thread:<token>" -> the request; "seen:<sha256 of a Message-ID>" -> handled mail.
_THREAD = "thread:"
_SEEN = "seen:"
# Outcomes that get no mail back: strangers (the From may be forged: no backscatter) and accepted answers
# (the outcome mail tells every recipient).
_SILENT = frozenset({"not_authorized", "accepted"})
_REMOVED = frozenset({"sensitive_removed", "secret_removed"})


@dataclass
class _Held:
    """A mail being handled; ``remove_message`` marks it for deletion from the mailbox."""

    mail: IncomingMail
    delete: bool = False


class EmailConnector(ChatConnector[EmailSettings]):
    name = CHANNEL
    settings_model = EmailSettings

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings = self.settings
        self.mailbox = settings.mailbox_address
        self.composer = Composer()
        self._tls: ssl.SSLContext | None = None
        self.reader: MailboxReader | None = None
        if settings.imap is not None:
            self.reader = MailboxReader(settings=settings.imap, handle=self.handle_mail, log=self.log)
        self.reading = False  # this instance holds the mailbox

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        if self.reader is not None:
            self.spawn(self.run_forever(self._read_while_leading, what="email mailbox"), name="mailbox")

    async def _read_while_leading(self) -> None:
        """While this instance holds the lock, keep one IMAP session (run_forever reconnects it)."""
        assert self.reader is not None and self.settings.imap is not None
        interval = self.settings.imap.leader_check_seconds
        if not await self.leadership.take(LEADER):
            await asyncio.sleep(interval)
            return
        self.reading = True
        try:
            await self.reader.run(still_leading=lambda: self.leadership.alive(LEADER),
                                  check_every=interval)
        finally:
            self.reading = False
            await self.leadership.release(LEADER)

    # -- what a mail says --------------------------------------------------------------

    def asker(self, tenant_id: str) -> str:
        tenant = self.app_settings.tenant(tenant_id)
        return tenant.name if tenant is not None and tenant.name else tenant_id

    def reply_hint(self, view: RequestView) -> str | None:
        """How to answer by reply, or None when replies are not read (no [email.imap]) or not taken."""
        if self.settings.imap is None or wording.form_only(view):
            return None
        return wording.how_to_reply(view) + ", above the quoted mail"

    async def thread(self, view: RequestView, recipient: str) -> Thread:
        token = thread_token(await self.signing_key.get(), request_id=view.id, recipient=recipient)
        return self._thread(token, recipient, subject_of(view, asker=self.asker(view.tenant_id)))

    def _thread(self, token: str, recipient: str, subject: str) -> Thread:
        return Thread(sender=self.settings.from_address, recipient=recipient, token=token,
                      root_id=message_id(self.mailbox, token), reply_to=reply_address(self.mailbox, token),
                      subject=subject)

    # -- routing -----------------------------------------------------------------------

    def targets_for(self, request: RequestView) -> list[str]:
        """Every recipient; for an assigned request only the assigned people's addresses among them (an
        escalation step it reached adds its people's): a mail is personal (its link and reply answer as
        that address), so nobody else needs one."""
        if request.assign_to is None:
            return self.targets(request.tenant_id)
        # Only recipients of this tenant may answer by mail: a person's address counts when it is one.
        return self._direct(request.tenant_id, self.people_reached(request))

    def direct_target(self, user_id: str) -> str | None:
        return user_id

    # -- delivery ----------------------------------------------------------------------

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        """One mail to one recipient, with a one-time link that answers as them alone (a retried
        delivery mails the link its first try minted, while unused)."""
        thread = await self.thread(request, target)
        link = await self.service.mint_link(tenant_id=request.tenant_id, request_id=request.id,
                                            principal=f"{self.name}:bot", recipient=target,
                                            for_principal=self.principal(target), reuse=True)
        # Remembered before the mail leaves: no reply can outrun it.
        await self.chat_refs.remember_message(channel=self.name, message_key=_THREAD + thread.token,
                                            tenant_id=request.tenant_id, request_id=request.id)
        mail = self.composer.question(request, thread, asker=self.asker(request.tenant_id),
                                      deadline=wording.deadline(request, self.timezone(request.tenant_id)),
                                      link_url=link.url, reply_hint=self.reply_hint(request),
                                      now=self.service.clock())
        await self.send(mail, thread)
        self.log.info("question mailed", extra={"request_id": request.id, "channel": self.name})
        return {"message_id": thread.root_id}

    async def send_private(self, person: PersonSettings, *, tenant_id: str, note: PrivateNote) -> bool:
        """A mail to the person's own address as ``[[tenants.people]]`` lists it, in a thread of its own that
        nothing answers to (its token is made from a fresh nonce: a reply or a bounce names no known thread).
        False when the mail server refuses the address for good (5xx)."""
        if person.email is None:
            return False
        token = thread_token(await self.signing_key.get(), request_id=f"note:{secrets.token_hex(16)}",
                             recipient=person.email)
        thread = self._thread(token, person.email, f"{note.title or note.button} ({self.asker(tenant_id)})")
        mail = self.composer.private_note(thread, note, asker=self.asker(tenant_id), now=self.service.clock())
        try:
            await self.send(mail, thread)
        except ConnectorError as e:
            if not (e.permanent and isinstance(e.__cause__, aiosmtplib.SMTPRecipientsRefused)):
                raise
            self.log.info("email: the mail server refused the person's address (%s)", e.message,
                          extra={"tenant_id": tenant_id})
            return False
        return True

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        thread = await self.thread(request, target)
        text = wording.reminder(request, now=self.service.clock(), tz=self.timezone(request.tenant_id))
        mail = self.composer.notice(thread, message_id=message_id(self.mailbox, thread.token, "reminder"),
                                    asker=self.asker(request.tenant_id), headline=text,
                                    paragraphs=("Use the form link in the mail this one answers.",),
                                    now=self.service.clock())
        await self.send(mail, thread)
        return None  # nothing to withdraw: the outcome mail answers the whole thread

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """The request ended: one short outcome mail in the thread (when the tenant wants it), once."""
        tenant = self.settings.tenants.get(request.tenant_id)
        if tenant is None or not tenant.notify_outcome:
            return
        key = f"{request.id}:{target.lower()}"
        if await self.state.get(OUTCOME_SENT, key) is not None:
            return
        thread = await self.thread(request, target)
        outcome = await self.outcome_of(request)
        mail = self.composer.notice(thread, message_id=message_id(self.mailbox, thread.token, "outcome"),
                                    asker=self.asker(request.tenant_id), headline=outcome.plain().split("\n")[0],
                                    lines=outcome.lines, now=self.service.clock())
        await self.send(mail, thread)
        await self.state.set(OUTCOME_SENT, key, "1", request_id=request.id)

    # -- SMTP ----------------------------------------------------------------------------

    def tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self.settings.smtp.ca_file)
        return self._tls

    async def send(self, mail: EmailMessage, thread: Thread) -> None:
        """Hand one message to the SMTP server, bounces to the thread's bounce address.

        A refusal becomes a ConnectorError: 5xx is permanent, anything else is retried.
        """
        smtp = self.settings.smtp
        try:
            await aiosmtplib.send(
                mail, sender=bounce_address(self.mailbox, thread.token), recipients=[thread.recipient],
                hostname=smtp.host, port=smtp.port, username=smtp.user,
                password=smtp.password.get_secret_value() if smtp.password else None,
                use_tls=smtp.security == "tls", start_tls=smtp.security == "starttls",
                tls_context=self.tls_context() if smtp.security != "none" else None,
                timeout=smtp.timeout_seconds, local_hostname=self.mailbox.domain)
        except aiosmtplib.SMTPRecipientsRefused as e:
            codes = [r.code for r in e.recipients]
            raise ConnectorError(f"smtp refused the recipient ({', '.join(map(str, codes))})",
                                 permanent=all(c >= 500 for c in codes)) from e
        except aiosmtplib.SMTPResponseException as e:
            raise ConnectorError(f"smtp: {e.code} {_first_line(e.message)}", permanent=e.code >= 500) from e
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as e:
            raise ConnectorError(f"smtp: {type(e).__name__}") from e

    # -- mail that arrives -----------------------------------------------------------------

    async def handle_mail(self, mail: IncomingMail) -> Disposition:
        """One mail from the mailbox: a reply answers through the shared chat path, a bounce marks its
        delivery; anything else is left alone. Never raises for what a mail says."""
        if mail.message is None:
            self.log.info("email: a mail too large to read was skipped", extra={"size": mail.size})
            return "keep"
        try:
            arrival = classify(mail.message, self.mailbox)
        except Exception as e:  # a mail is untrusted input: a broken one must not wedge the mailbox
            self.log.warning("email: unreadable mail skipped (%s)", type(e).__name__)
            return "keep"
        if arrival.kind in ("automatic", "unmatched"):
            self.log.info("email: mail ignored", extra={"kind": arrival.kind})
            return "keep"
        assert arrival.token is not None
        found = await self.chat_refs.lookup_message(channel=self.name, message_key=_THREAD + arrival.token)
        if found is None:
            self.log.info("email: mail names no known thread (forged or stale token)")
            return "keep"
        tenant_id, request_id = found
        recipient = await self._recipient(tenant_id, request_id, arrival.token)
        if arrival.kind == "bounce":
            await self._bounced(tenant_id, request_id, recipient, arrival)
            return "keep"
        if arrival.message_id and await self._seen(arrival.message_id):
            return "keep"  # the same mail delivered twice, or handled before a restart
        held = _Held(mail)
        await self._answer(tenant_id, request_id, recipient, arrival, held)
        if arrival.message_id:
            await self.chat_refs.remember_message(channel=self.name, message_key=_seen_key(arrival.message_id),
                                                tenant_id=tenant_id, request_id=request_id)
        return "delete" if held.delete else "keep"

    async def remove_message(self, message: Any) -> bool:
        """A reply that must not be kept (sensitive, secret-shaped) leaves the mailbox once handled."""
        if isinstance(message, _Held):
            message.delete = True
            return True
        return False

    async def _recipient(self, tenant_id: str, request_id: str, token: str) -> str | None:
        """Which of the tenant's recipients the thread's token was made for (None: no longer one)."""
        secret = await self.signing_key.get()
        return next((r for r in self.targets(tenant_id)
                     if token_matches(secret, token, request_id=request_id, sender=r)), None)

    async def _seen(self, mail_id: str) -> bool:
        return await self.chat_refs.lookup_message(channel=self.name, message_key=_seen_key(mail_id)) is not None

    async def _bounced(self, tenant_id: str, request_id: str, recipient: str | None, arrival: Arrival) -> None:
        assert arrival.bounce is not None
        if recipient is None:
            return
        failed = next((f for f in arrival.bounce.failed if f.address.lower() == recipient), arrival.bounce.failed[0])
        error = f"bounced: {failed.status} {failed.diagnostic}".strip()
        if await self.deliveries.bounced(tenant_id=tenant_id, request_id=request_id, channel=self.name,
                                               target=recipient, error=error):
            self.log.info("email: delivery bounced", extra={"request_id": request_id})

    async def _answer(self, tenant_id: str, request_id: str, recipient: str | None, arrival: Arrival,
                      held: _Held) -> None:
        assert arrival.sender is not None and held.mail.message is not None
        sender = Sender(user_id=arrival.sender, principal=self.principal(arrival.sender),
                        display=arrival.display or arrival.sender)
        if recipient is None or recipient != arrival.sender:
            # The token proves which address the thread went to; any other From is a stranger here,
            # or a forgery. Refused without a reply: the From may be anyone's.
            await self._refuse(tenant_id, request_id, sender, "sender_mismatch", held=held)
            return
        text = self._text(held)
        if text.strip():
            outcome = await self.answer_from_chat(tenant_id=tenant_id, request_id=request_id, sender=sender,
                                                  text=text, message=held)
        else:
            # Only a quote, or a body nothing can read: no answer, and an empty one must not count as one.
            outcome = AnswerOutcome("text_only", wording.text("text_only"),
                                    await self.service.get(tenant_id=tenant_id, request_id=request_id,
                                                           with_deliveries=False))
        self.log.info("email: reply handled", extra={"request_id": request_id, "outcome": outcome.code})
        if outcome.code not in _SILENT:
            await self._reply(outcome, recipient, arrival)

    def _text(self, held: _Held) -> str:
        """The reply's own text; a body no parser reads is no answer."""
        assert held.mail.message is not None
        try:
            return reply_text(held.mail.message)
        except Exception as e:
            self.log.warning("email: unreadable reply skipped (%s)", type(e).__name__)
            return ""

    async def _refuse(self, tenant_id: str, request_id: str, sender: Sender, reason: str, *, held: _Held) -> None:
        """A mail from an address the thread did not go to: refused without a reply, and, like any
        reply that must not stay (secret-shaped, or to a form-only request), out of the mailbox."""
        try:
            view = await self.service.get(tenant_id=tenant_id, request_id=request_id, with_deliveries=False)
        except NotFoundError:
            return
        data: dict[str, Any] = {"reason": reason}
        if must_not_stay(view, self._text(held)):
            data["removed"] = await self.remove_message(held)
        await self.service.journal(tenant_id=tenant_id, event="answer_refused", request_id=request_id,
                                   run_id=view.run_id, principal=sender.principal, channel=self.name, data=data)

    async def _reply(self, outcome: AnswerOutcome, recipient: str, arrival: Arrival) -> None:
        """A short mail back in the thread: what was wrong, or why the reply was not taken."""
        view = outcome.view
        if view is None:
            return
        thread = await self.thread(view, recipient)
        paragraphs = [outcome.message]
        if outcome.code in _REMOVED or outcome.code in ("sensitive_kept", "secret_kept", "use_the_form"):
            paragraphs.append("Use the form link in the question mail. Please delete your reply from your "
                              "sent mail too.")
        suffix = "re-" + hashlib.sha256((arrival.message_id or "").encode()).hexdigest()[:12]
        mail = self.composer.notice(thread, message_id=message_id(self.mailbox, thread.token, suffix),
                                    asker=self.asker(view.tenant_id), paragraphs=tuple(paragraphs),
                                    in_reply_to=arrival.message_id, now=self.service.clock())
        try:
            await self.send(mail, thread)
        except ConnectorError as e:
            self.log.warning("email: reply to an answer not sent (%s)", e.message)


def _seen_key(mail_id: str) -> str:
    return _SEEN + hashlib.sha256(mail_id.encode()).hexdigest()


def _first_line(text: str) -> str:
    stripped = (text or "").strip()
    return stripped.splitlines()[0][:200] if stripped else ""

"""The email connector: questions go out by SMTP, one personal mail per recipient; answers come back by reply.

Each (request, recipient) is one delivery: its own one-time form link, its own
reply address and Message-ID (both from an unguessable per-thread token, see
``addresses``), and the shared retry and backoff of the dispatcher. Reminders and
the outcome are threaded under the question.
"""

from __future__ import annotations

import datetime as dt
import ssl
import zoneinfo
from email.message import EmailMessage
from typing import Any

import aiosmtplib

from handraise.bots.email.addresses import bounce_address, message_id, reply_address, thread_token
from handraise.bots.email.compose import Composer, Thread, subject_of
from handraise.bots.email.settings import EmailSettings, EmailTenantSettings
from handraise.core.api import RequestView
from handraise.core.connectors import Connector, outcome_text
from handraise.core.errors import ConfigError, ConnectorError

# Durable state: "<request id>:<recipient>" -> "1" once the outcome mail went out (withdraw may run twice).
OUTCOME_SENT = "email.outcome"
CHANNEL = "email"


class EmailConnector(Connector):
    name = CHANNEL
    settings_model = EmailSettings

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings: EmailSettings = self.settings
        unknown = [t for t in settings.tenants if self.app_settings.tenant(t) is None]
        if unknown:
            raise ConfigError(f"email.tenants: no such tenant: {', '.join(sorted(unknown))}")
        self.mailbox = settings.mailbox_address
        self.composer = Composer()
        self._allowed = {t: {r.lower() for r in s.recipients} for t, s in settings.tenants.items()}
        self._tls: ssl.SSLContext | None = None

    # -- routing -------------------------------------------------------------------

    def targets(self, tenant_id: str) -> list[str]:
        tenant = self.settings.tenants.get(tenant_id)
        return list(tenant.recipients) if tenant is not None else []

    def may_answer(self, tenant_id: str, user_id: str) -> bool:
        return user_id.lower() in self._allowed.get(tenant_id, set())

    def principal(self, user_id: str) -> str:
        return f"{self.name}:{user_id.lower()}"

    def tenant_settings(self, tenant_id: str) -> EmailTenantSettings | None:
        return self.settings.tenants.get(tenant_id)

    # -- what a mail says ----------------------------------------------------------------

    def asker(self, tenant_id: str) -> str:
        tenant = self.app_settings.tenant(tenant_id)
        return tenant.name if tenant is not None and tenant.name else tenant_id

    def zone(self, tenant_id: str) -> dt.tzinfo:
        tenant = self.app_settings.tenant(tenant_id)
        try:
            return zoneinfo.ZoneInfo(getattr(tenant, "timezone", None) or "UTC")
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return dt.UTC

    def deadline(self, view: RequestView) -> str:
        moment = dt.datetime.fromtimestamp(view.expires_at, self.zone(view.tenant_id))
        return f"Answer by {moment.strftime('%Y-%m-%d %H:%M')} {moment.tzname() or 'UTC'}."

    def reply_hint(self, view: RequestView) -> str | None:
        """How to answer by reply, or None when replies are not read (no [email.imap])."""
        if self.settings.imap is None:
            return None
        if view.kind == "approval":
            return "reply approve or reject (a reason may follow after a colon, e.g. “reject: too risky”)"
        if view.schema is not None and view.schema.get("type") == "object":
            return "reply with one line per field (name: value) above the quoted mail"
        return "reply with your answer above the quoted mail"

    async def thread(self, view: RequestView, recipient: str) -> Thread:
        token = thread_token(await self.service.server_secret(), request_id=view.id, recipient=recipient)
        return Thread(sender=self.settings.from_address, recipient=recipient,
                      root_id=message_id(self.mailbox, token), reply_to=reply_address(self.mailbox, token),
                      subject=subject_of(view, asker=self.asker(view.tenant_id)))

    # -- delivery ----------------------------------------------------------------------

    async def deliver(self, request: RequestView, *, target: str) -> dict[str, Any]:
        """One mail to one recipient, with a one-time link minted for them alone."""
        thread = await self.thread(request, target)
        token = _token(thread)
        link = await self.service.mint_link(tenant_id=request.tenant_id, request_id=request.id,
                                            principal=f"{self.name}:bot", recipient=target)
        # Replies name the thread's token; remembered before the mail leaves, so no reply can outrun it.
        await self.service.remember_message(channel=self.name, message_key=f"thread:{token}",
                                            tenant_id=request.tenant_id, request_id=request.id)
        mail = self.composer.question(request, thread, asker=self.asker(request.tenant_id),
                                      deadline=self.deadline(request), link_url=link.url,
                                      reply_hint=self.reply_hint(request), now=self.service.clock())
        await self.send(mail, envelope_from=bounce_address(self.mailbox, token), to=target)
        self.log.info("question mailed", extra={"request_id": request.id, "channel": self.name})
        return {"message_id": thread.root_id}

    async def remind(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        thread = await self.thread(request, target)
        left = max(0.0, request.expires_at - self.service.clock())
        minutes = int(-(-left // 60))
        mail = self.composer.notice(
            thread, message_id=message_id(self.mailbox, _token(thread), "reminder"),
            asker=self.asker(request.tenant_id),
            headline=f"Reminder: this question still needs an answer ({minutes} min left).",
            paragraphs=(self.deadline(request), "Use the form link in the mail this one answers."),
            now=self.service.clock())
        await self.send(mail, envelope_from=bounce_address(self.mailbox, _token(thread)), to=target)
        return None  # nothing to withdraw: the outcome mail answers the whole thread

    async def withdraw(self, request: RequestView, *, target: str, ref: dict[str, Any]) -> None:
        """The request ended: one short outcome mail in the thread (when the tenant wants it), once."""
        tenant = self.tenant_settings(request.tenant_id)
        if tenant is None or not tenant.notify_outcome:
            return
        key = f"{request.id}:{target.lower()}"
        if await self.service.get_state(OUTCOME_SENT, key) is not None:
            return
        thread = await self.thread(request, target)
        mail = self.composer.notice(thread, message_id=message_id(self.mailbox, _token(thread), "outcome"),
                                    asker=self.asker(request.tenant_id), headline=outcome_text(request),
                                    now=self.service.clock())
        await self.send(mail, envelope_from=bounce_address(self.mailbox, _token(thread)), to=target)
        await self.service.set_state(OUTCOME_SENT, key, "1")

    # -- SMTP ----------------------------------------------------------------------------

    def tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self.settings.smtp.ca_file)
        return self._tls

    async def send(self, mail: EmailMessage, *, envelope_from: str, to: str) -> None:
        """Hand one message to the SMTP server; its refusal becomes a ConnectorError (5xx: permanent)."""
        smtp = self.settings.smtp
        try:
            await aiosmtplib.send(
                mail, sender=envelope_from, recipients=[to], hostname=smtp.host, port=smtp.port,
                username=smtp.user, password=smtp.password.get_secret_value() if smtp.password else None,
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


def _token(thread: Thread) -> str:
    return thread.root_id[4:].partition("@")[0]


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0][:200] if (text or "").strip() else ""

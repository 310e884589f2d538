"""The ``[email]`` config section: SMTP out, IMAP in (``[email.imap]``), and per-tenant recipients."""

from __future__ import annotations

from email.headerregistry import Address, HeaderRegistry
import re
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from handraise.core.chat import RoutedSettings, TenantRoute
from handraise.core.people import REFERENCE

Security = Literal["starttls", "tls", "none"]


_HEADERS = HeaderRegistry()


def addr_spec(value: str) -> str:
    """``local@domain`` of one address (a display name may come with it), or ValueError."""
    try:
        header = _HEADERS("To", value)
        addresses = header.addresses  # type: ignore[attr-defined]
    except Exception:  # the parser's own errors are many and undocumented
        addresses = ()
    if len(addresses) != 1 or header.defects:
        raise ValueError(f"{value!r} is not an email address (local@domain)")
    spec = addresses[0].addr_spec
    local, at, domain = spec.rpartition("@")
    if not at or not local or not domain or "." not in domain.strip(".") or any(c.isspace() for c in spec):
        raise ValueError(f"{value!r} is not an email address (local@domain)")
    return spec


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SmtpSettings(_Section):
    """``[email.smtp]``: the server that sends (``security``: STARTTLS on 587, TLS on 465, or none)."""

    host: str = Field(min_length=1)
    port: int = Field(default=587, ge=1, le=65535)
    security: Security = "starttls"
    user: str | None = None
    # From the environment: HANDRAISE_EMAIL__SMTP__PASSWORD.
    password: SecretStr | None = None
    # A PEM bundle to trust besides the system's (a private CA); certificates are always verified.
    ca_file: str | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=300)

    @model_validator(mode="after")
    def _login(self) -> SmtpSettings:
        if (self.user is None) != (self.password is None):
            raise ValueError("user and password go together")
        return self


class ImapSettings(_Section):
    """``[email.imap]``: the mailbox replies and bounces arrive in (one instance reads it)."""

    host: str = Field(min_length=1)
    port: int = Field(default=993, ge=1, le=65535)
    security: Literal["tls", "none"] = "tls"  # aioimaplib speaks no STARTTLS
    user: str = Field(min_length=1)
    # From the environment: HANDRAISE_EMAIL__IMAP__PASSWORD.
    password: SecretStr
    ca_file: str | None = None
    mailbox: str = "INBOX"
    # IDLE when the server offers it (answers arrive at once); otherwise, or with idle = false, poll.
    idle: bool = True
    poll_seconds: float = Field(default=30.0, gt=0, le=3600)
    # An IDLE is renewed this often (servers drop idle clients after 30 minutes).
    idle_renew_seconds: float = Field(default=600.0, gt=0, le=1740)
    # Longest wait for any one IMAP command: a dead line is noticed instead of waited on forever.
    timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    # How often a standby instance asks whether it may read the mailbox, and the reader checks it still may.
    leader_check_seconds: float = Field(default=5.0, gt=0, le=300)
    # Larger mails are not read: they are flagged as handled and journaled as refused.
    max_message_bytes: int = Field(default=1_048_576, ge=16_384, le=26_214_400)


class EmailTenantSettings(TenantRoute):
    """Who gets one tenant's questions by mail; only they may answer by reply.

    Recipients are addresses, or the tenant's people and groups by name (``alice``, ``group:oncall``):
    those become the people's ``email`` at load (``allowed``), and each of them gets the mail.
    """

    raw_id: ClassVar[re.Pattern[str]] = re.compile(r".*@.*")

    recipients: list[str] = Field(min_length=1, max_length=100)
    # One short threaded mail to every recipient when a request ends, whichever way.
    notify_outcome: bool = True

    @field_validator("recipients")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        # Lower case: the address a reply comes from is compared with these, and mail systems vary the case.
        specs = [v if re.fullmatch(REFERENCE, v) else addr_spec(v).lower() for v in value]
        if len(set(specs)) != len(specs):
            raise ValueError("a recipient appears twice")
        return specs

    def places(self) -> list[str]:
        return self.resolved_people()

    def people(self) -> list[str]:
        return list(self.recipients)


class EmailSettings(RoutedSettings):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    place_word: ClassVar[str] = "recipient"

    # "Handraise <handraise@example.org>": the From of every mail.
    from_address: str = Field(alias="from")
    # The mailbox [email.imap] reads. Replies go to its plus-addresses (handraise+<token>@example.org),
    # bounces to handraise+bounce-<token>@example.org; the server must deliver those to the same mailbox.
    # Default: the address of "from".
    reply_address: str | None = None
    smtp: SmtpSettings
    imap: ImapSettings | None = None
    tenants: dict[str, EmailTenantSettings] = Field(min_length=1)
    remind_after_seconds: float | None = Field(default=None, gt=0)

    @field_validator("from_address")
    @classmethod
    def _from(cls, value: str) -> str:
        addr_spec(value)
        return value

    @field_validator("reply_address")
    @classmethod
    def _reply(cls, value: str | None) -> str | None:
        if value is None:
            return None
        spec = addr_spec(value)
        if "+" in spec.partition("@")[0]:
            raise ValueError("the reply address must have no +tag: Handraise adds one per request")
        return spec

    @property
    def mailbox_address(self) -> Address:
        """The reply mailbox as ``Address`` (its local part and domain)."""
        spec = self.reply_address or addr_spec(self.from_address)
        local, _, domain = spec.rpartition("@")
        return Address(username=local.partition("+")[0], domain=domain)

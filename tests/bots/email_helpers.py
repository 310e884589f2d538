"""What the email tests share: the connector's config, an app with the email channel, and reading mails."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from conftest import base_config, running_app, settings_from
from handraise.bots.email import EmailConnector
from handraise.core.appkeys import CONNECTORS
from handraise.core.errors import ConfigError
from handraise.webforms.connector import WebFormsChannel
from harness.mail import DovecotServer, ReceivedMail, SmtpRecorder
from tests.bots.offline import NO_CORE
from tests.webforms.html_tools import csrf_of

MAILBOX = "handraise@example.test"
FROM = f"Handraise <{MAILBOX}>"
_LINK = re.compile(r"https?://[^\s<>\"]+/f/[A-Za-z0-9_-]+(?:\?decision=(?:approve|reject))?")


def email_section(server: SmtpRecorder, *, recipients: list[str], other: list[str] | None = None,
                  **extra: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "from": FROM,
        "smtp": {"host": server.host, "port": server.port, "security": "none", "timeout_seconds": 10},
        "tenants": {"acme": {"recipients": recipients}},
    }
    if other:
        section["tenants"]["globex"] = {"recipients": other}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(section.get(key), dict):
            section[key] = {**section[key], **value}
        else:
            section[key] = value
    return section


@contextlib.asynccontextmanager
async def email_app(storage_url: str, section: dict[str, Any], **kwargs: Any) -> AsyncIterator[Any]:
    config = base_config(storage_url, email=section)
    settings = settings_from(config)
    async with running_app(settings, connector_classes=[WebFormsChannel, EmailConnector], **kwargs) as api:
        yield api


def config_error(section: dict[str, Any], storage_url: str = "sqlite:///:memory:") -> str:
    """The ConfigError message the connector gives for ``section``."""
    settings = settings_from(base_config(storage_url, email=section))
    try:
        EmailConnector.load_settings(settings)
        EmailConnector(settings=EmailConnector.load_settings(settings), **NO_CORE, http=None,  # type: ignore[arg-type]
                       log=__import__("logging").getLogger("test"), app_settings=settings)
    except ConfigError as e:
        return str(e)
    raise AssertionError("no ConfigError")


def links_in(text: str) -> list[str]:
    return _LINK.findall(text)


def form_link(mail: ReceivedMail) -> str:
    """The personal form link of a question mail (the same in both parts)."""
    plain = [u for u in links_in(mail.part("plain")) if "?" not in u]
    html = [u for u in links_in(mail.part("html")) if "?" not in u]
    assert plain and set(plain) == set(html), (plain, html)
    return plain[0]


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


async def open_page(api: Any, url: str) -> tuple[int, str]:
    async with api.session.get(api.url(path_of(url))) as resp:
        return resp.status, await resp.text()


async def post_form(api: Any, url: str, pairs: list[tuple[str, str]], html: str) -> tuple[int, str]:
    from handraise.webforms.render import CSRF_FIELD

    async with api.session.post(api.url(path_of(url).split("?")[0]),
                                data=[(CSRF_FIELD, csrf_of(html)), *pairs]) as resp:
        return resp.status, await resp.text()


# -- replies as mail clients write them --------------------------------------------------


def reply_to(question: ReceivedMail, *, sender: str, text: str | None = None, html: str | None = None,
             to: str | None = None, threaded: bool = True, quote: str = "gmail",
             extra_headers: dict[str, str] | None = None) -> EmailMessage:
    """A person's reply to ``question``: addressed to its Reply-To (or ``to``), quoting the original."""
    original = question.message
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to if to is not None else str(original["Reply-To"])
    msg["Subject"] = "Re: " + str(original["Subject"])
    msg["Message-ID"] = f"<{uuid.uuid4().hex}@mail.example.test>"
    msg["Date"] = formatdate(usegmt=True)
    if threaded:
        msg["In-Reply-To"] = str(original["Message-ID"])
        msg["References"] = str(original["Message-ID"])
    for name, value in (extra_headers or {}).items():
        msg[name] = value
    quoted = "\n".join("> " + line for line in question.part("plain").splitlines())
    if text is not None:
        if quote == "gmail":
            body = f"{text}\n\nOn Tue, Dec 1, 2026 at 10:02 AM Handraise <{MAILBOX}> wrote:\n\n{quoted}\n"
        elif quote == "apple-bottom":
            body = f"On 1 Dec 2026, at 10:02, Handraise <{MAILBOX}> wrote:\n\n{quoted}\n\n{text}\n\nSent from my iPhone"
        elif quote == "outlook":
            body = (f"{text}\n\nKind regards,\nAlice\n\n________________________________\n"
                    f"From: Handraise <{MAILBOX}>\nSent: Tuesday, December 1, 2026 10:02 AM\n"
                    f"To: {sender}\nSubject: {original['Subject']}\n\n{question.part('plain')}")
        else:
            body = text
        msg.set_content(body)
        if html is not None:
            msg.add_alternative(html, subtype="html")
    else:
        assert html is not None
        msg.set_content(html, subtype="html")
    return msg


def imap_section(server: DovecotServer, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"host": server.host, "port": server.port, "security": "none", "user": user, "password": password,
            "timeout_seconds": 5, "leader_check_seconds": 0.5, **extra}


async def handled(api: Any, passes: int = 2, timeout: float = 15.0) -> None:
    """Wait until the mailbox reader finished ``passes`` more passes: whatever was in the mailbox is handled."""
    reader = api.app[CONNECTORS]["email"].reader
    async with asyncio.timeout(timeout):
        async with reader.pass_done:
            target = reader.passes + passes
            await reader.pass_done.wait_for(lambda: reader.passes >= target)

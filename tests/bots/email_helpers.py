"""What the email tests share: the connector's config, an app with the email channel, and reading mails."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

from conftest import base_config, running_app, settings_from
from handraise.bots.email import EmailConnector
from handraise.core.errors import ConfigError
from handraise.webforms.connector import WebFormsConnector
from harness.mail import ReceivedMail, SmtpRecorder
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
async def email_app(storage_url: str, section: dict[str, Any], **server: Any) -> AsyncIterator[Any]:
    config = base_config(storage_url, email=section)
    if server:
        config["server"] = {**config["server"], **server}
    settings = settings_from(config)
    async with running_app(settings, connector_classes=[WebFormsConnector, EmailConnector]) as api:
        yield api


def config_error(section: dict[str, Any], storage_url: str = "sqlite:///:memory:") -> str:
    """The ConfigError message the connector gives for ``section``."""
    settings = settings_from(base_config(storage_url, email=section))
    try:
        EmailConnector.load_settings(settings)
        EmailConnector(settings=EmailConnector.load_settings(settings), service=None, http=None,  # type: ignore[arg-type]
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

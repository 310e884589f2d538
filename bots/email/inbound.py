"""What an arriving mail is: a reply to one of our threads, a bounce of one of our mails, or neither.

Matched by the unguessable thread token in the address it came to (``handraise+<token>@…``,
``handraise+bounce-<token>@…``) or in the Message-IDs it answers (``In-Reply-To``,
``References``). Automatic mail (out-of-office, lists, other robots) is never an answer
and gets no reply, so two robots cannot talk to each other forever. Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.headerregistry import Address
from email.message import Message
from typing import Literal

from handraise.bots.email.addresses import token_of_address, tokens_of_message_ids
from handraise.bots.email.dsn import Bounce, is_report, parse_bounce
from handraise.bots.email.settings import addr_spec

# Where a server writes the address a mail was delivered to.
_RECIPIENT_HEADERS = ("Delivered-To", "X-Original-To", "Envelope-To", "To", "Cc")


@dataclass(frozen=True)
class Arrival:
    kind: Literal["reply", "bounce", "automatic", "unmatched"]
    token: str | None = None
    sender: str | None = None       # the From address, lower case
    display: str = ""               # the From display name
    message_id: str | None = None
    bounce: Bounce | None = None


def classify(message: Message, mailbox: Address) -> Arrival:
    message_id = _header(message, "Message-ID") or None
    if is_report(message):
        bounce = parse_bounce(message)
        if bounce is None:
            return Arrival("automatic", message_id=message_id)  # a delay notice, or a success report
        token = _token_in_addresses(message, mailbox, "bounce")
        if token is None:
            ids = tokens_of_message_ids(bounce.original_message_id)
            token = ids[0] if ids else None
        return Arrival("bounce" if token else "unmatched", token=token, message_id=message_id, bounce=bounce)
    if _automatic(message):
        return Arrival("automatic", message_id=message_id)
    sender, display = _sender(message)
    token = _token_in_addresses(message, mailbox, "reply")
    if token is None:
        for header in ("In-Reply-To", "References"):
            found = tokens_of_message_ids(_header(message, header))
            if found:
                token = found[0]
                break
    if token is None or sender is None:
        return Arrival("unmatched", sender=sender, display=display, message_id=message_id)
    return Arrival("reply", token=token, sender=sender, display=display, message_id=message_id)


def _automatic(message: Message) -> bool:
    auto = _header(message, "Auto-Submitted").lower()
    if auto and auto != "no":
        return True
    if _header(message, "Precedence").lower() in ("bulk", "junk", "list", "auto_reply"):
        return True
    if any(_header(message, name) for name in ("X-Autoreply", "X-Autorespond", "List-Id")):
        return True
    return _header(message, "Return-Path") == "<>"


def _token_in_addresses(message: Message, mailbox: Address, kind: str) -> str | None:
    for header in _RECIPIENT_HEADERS:
        for value in message.get_all(header) or ():
            for part in str(value).split(","):
                spec = part.strip()
                if "<" in spec:
                    spec = spec[spec.rfind("<") + 1:].split(">", 1)[0]
                found = token_of_address(spec, mailbox)
                if found is not None and found[0] == kind:
                    return found[1]
    return None


def _sender(message: Message) -> tuple[str | None, str]:
    values = message.get_all("From") or ()
    if len(values) != 1:
        return None, ""
    try:
        spec = addr_spec(str(values[0]))
    except ValueError:
        return None, ""
    addresses = getattr(values[0], "addresses", ())
    display = addresses[0].display_name if len(addresses) == 1 else ""
    return spec.lower(), " ".join(str(display).split())[:100]


def _header(message: Message, name: str) -> str:
    try:
        value = message.get(name)
    except (IndexError, ValueError):  # a malformed header the parser could not model
        return ""
    return " ".join(str(value).split()) if value is not None else ""

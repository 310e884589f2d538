"""Delivery status notifications (RFC 3464): which recipient failed, why, and which of our mails it was.

A DSN is a ``multipart/report; report-type=delivery-status`` whose ``message/delivery-status``
part holds per-recipient fields (``Final-Recipient``, ``Action``, ``Status``,
``Diagnostic-Code``) and whose third part returns the original message or its headers.
Pure functions; the connector matches a bounce to its delivery by the address it came
back to or by the returned Message-ID.
"""

from __future__ import annotations

import email
import email.policy
from dataclasses import dataclass
from email.message import Message


@dataclass(frozen=True)
class FailedRecipient:
    address: str
    status: str           # "5.1.1"
    diagnostic: str       # the remote server's words, one line, clipped


@dataclass(frozen=True)
class Bounce:
    """A DSN that reports at least one failed recipient."""

    failed: tuple[FailedRecipient, ...]
    original_message_id: str | None
    original_to: tuple[str, ...]


def is_report(message: Message) -> bool:
    return (message.get_content_type() == "multipart/report"
            and str(message.get_param("report-type", "")).lower() == "delivery-status")


def parse_bounce(message: Message) -> Bounce | None:
    """The failed recipients of a DSN (``Action: failed``), or None for anything else (delays too)."""
    if not is_report(message):
        return None
    failed: list[FailedRecipient] = []
    original_id: str | None = None
    original_to: tuple[str, ...] = ()
    for part in message.walk():
        kind = part.get_content_type()
        if kind == "message/delivery-status":
            failed.extend(_failed_recipients(part))
        elif kind in ("message/rfc822", "text/rfc822-headers", "message/rfc822-headers") and original_id is None:
            original = _original(part)
            if original is not None:
                original_id = (original.get("Message-ID") or "").strip() or None
                original_to = tuple(a.strip() for a in str(original.get("To") or "").split(",") if a.strip())
    if not failed:
        return None
    return Bounce(tuple(failed), original_id, original_to)


def _failed_recipients(part: Message) -> list[FailedRecipient]:
    blocks = part.get_payload()
    if not isinstance(blocks, list):
        # Some parsers leave the fields as text: read them as header blocks separated by blank lines.
        text = part.get_payload(decode=True) or b""
        blocks = [email.message_from_bytes(chunk.strip() + b"\n")
                  for chunk in text.replace(b"\r\n", b"\n").split(b"\n\n") if chunk.strip()]
    out = []
    # The first block describes the message; each later one describes a recipient.
    for block in blocks[1:]:
        if str(block.get("Action", "")).strip().lower() != "failed":
            continue
        recipient = _address_field(block.get("Final-Recipient") or block.get("Original-Recipient") or "")
        if not recipient:
            continue
        diagnostic = " ".join(str(block.get("Diagnostic-Code", "")).partition(";")[2].split())[:300]
        out.append(FailedRecipient(recipient, str(block.get("Status", "")).strip()[:16], diagnostic))
    return out


def _address_field(value: object) -> str:
    """``rfc822; alice@example.org`` → ``alice@example.org``."""
    text = str(value).strip()
    kind, sep, address = text.partition(";")
    return (address if sep else kind).strip().strip("<>")


def _original(part: Message) -> Message | None:
    payload = part.get_payload()
    if isinstance(payload, list) and payload:
        first = payload[0]
        return first if isinstance(first, Message) else None
    raw = part.get_payload(decode=True)
    if isinstance(raw, bytes) and raw.strip():
        return email.message_from_bytes(raw, policy=email.policy.compat32)
    return None

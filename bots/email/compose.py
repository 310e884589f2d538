"""Mails about a request, rendered from ``templates/email/`` (plain text and autoescaped HTML) and threaded.

Every mail about one request to one recipient carries the thread's headers: the
question is the root (``Message-ID``), and reminders, the outcome and any notice
answer it (``In-Reply-To``, ``References``), so mail clients show one
conversation. A sensitive request's mails say nothing about the question.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from handraise.core import wording
from handraise.core.api import RequestView
from handraise.core.personal import PrivateNote
from handraise.core.schema.fields import describe_field, fields

TEMPLATES_DIR = Path(str(importlib.resources.files("handraise.templates"))) / "email"
SUBJECT_CHARS = 72
# Mail clients must not auto-reply to these (RFC 3834; Exchange reads the second).
_AUTOMATED = {"Auto-Submitted": "auto-generated", "X-Auto-Response-Suppress": "All"}


@dataclass(frozen=True)
class Thread:
    """One recipient's thread about one request: its root Message-ID and where replies go."""

    sender: str          # From: "Handraise <handraise@example.org>"
    recipient: str       # To
    token: str           # the thread's token (addresses)
    root_id: str         # the question's Message-ID
    reply_to: str        # handraise+<token>@example.org
    subject: str         # the question's subject (later mails add "Re: ")


@dataclass(frozen=True)
class FieldLine:
    name: str
    title: str
    words: str
    required: bool


class Composer:
    """Renders the templates; holds no state but the Jinja environment."""

    def __init__(self, directory: Path = TEMPLATES_DIR) -> None:
        self.env = Environment(loader=FileSystemLoader(directory), undefined=StrictUndefined,
                               autoescape=select_autoescape(enabled_extensions=("html",), default=False),
                               keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False)

    def render(self, name: str, **context: Any) -> tuple[str, str]:
        """(plain text, HTML) of ``name``.txt and ``name``.html with the same context."""
        return (self.env.get_template(f"{name}.txt").render(**context),
                self.env.get_template(f"{name}.html").render(**context))

    def question(self, view: RequestView, thread: Thread, *, asker: str, deadline: str, link_url: str,
                 reply_hint: str | None, now: float) -> EmailMessage:
        """The first mail: the question, its fields in words, the deadline and a personal link."""
        approval = view.kind == "approval" and not view.sensitive
        context = {
            "subject": thread.subject, "asker": asker, "sensitive": view.sensitive,
            # An approval's proposal follows the question, read-only (the form's link changes it).
            "question": "\n\n".join(p for p in (view.message_for_user, wording.proposal_text(view)) if p),
            "fields": [] if view.sensitive else field_lines(view),
            "deadline": deadline, "link_url": link_url,
            "approve_url": f"{link_url}?decision=approve" if approval else None,
            "reject_url": f"{link_url}?decision=reject" if approval else None,
            "reply_hint": None if view.sensitive else reply_hint,
        }
        text, html = self.render("request", **context)
        return _message(thread, subject=thread.subject, message_id=thread.root_id, text=text, html=html, now=now)

    def notice(self, thread: Thread, *, message_id: str, asker: str, headline: str = "",
               paragraphs: tuple[str, ...] = (), lines: tuple[tuple[str, str], ...] = (),
               link_url: str | None = None, in_reply_to: str | None = None, now: float) -> EmailMessage:
        """A later mail in the thread (reminder, outcome, a reply to an answer): threaded under the root,
        and under ``in_reply_to`` (the person's own mail) when it answers one."""
        subject = reply_subject(thread.subject)
        text, html = self.render("notice", subject=subject, asker=asker, headline=headline,
                                 paragraphs=paragraphs, lines=lines, link_url=link_url)
        return _message(thread, subject=subject, message_id=message_id, text=text, html=html, now=now,
                        in_reply_to=in_reply_to or thread.root_id,
                        references=[thread.root_id] + ([in_reply_to] if in_reply_to else []))


    def private_note(self, thread: Thread, note: PrivateNote, *, asker: str, now: float) -> EmailMessage:
        """A mail to one person alone with a link of their own (a sign-in, a form link sent for them): the
        note's paragraphs first, so that a client's preview shows them, then the link. The link is in the
        body only: never in the subject or the HTML's title, which lists and notifications show to anyone
        near the screen."""
        context = {"subject": thread.subject, "asker": asker, "url": note.url, "button": note.button,
                   "paragraphs": [p for p in note.text.split("\n\n") if p.strip()]}
        text, html = self.render("note", **context)
        return _message(thread, subject=thread.subject, message_id=thread.root_id, text=text, html=html, now=now)


def field_lines(view: RequestView) -> list[FieldLine]:
    """A form's fields as the mail lists them (schema order); none for free text, approvals or sensitive."""
    if view.sensitive or view.kind == "approval" or view.schema is None:
        return []
    return [FieldLine(spec.name or "answer", spec.title, describe_field(spec), spec.required)
            for spec in fields(view.schema)]


def subject_of(view: RequestView, *, asker: str) -> str:
    """The question's subject: nothing of the question when it is sensitive."""
    if view.sensitive:
        return f"A private answer is needed ({asker})"
    first = " ".join(view.message_for_user.split())
    if len(first) > SUBJECT_CHARS:
        first = first[: SUBJECT_CHARS - 1].rstrip() + "…"
    lead = "Approval needed" if view.kind == "approval" else f"Question from {asker}"
    return f"{lead}: {first}"


def reply_subject(subject: str) -> str:
    return subject if subject[:3].lower() == "re:" else f"Re: {subject}"


def _message(thread: Thread, *, subject: str, message_id: str, text: str, html: str, now: float,
             in_reply_to: str | None = None, references: list[str] | None = None) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = thread.sender
    msg["To"] = thread.recipient
    msg["Reply-To"] = thread.reply_to
    # One line, whatever the agent wrote: a header cannot carry a line break.
    msg["Subject"] = " ".join(subject.split())
    msg["Date"] = formatdate(now, usegmt=True)
    msg["Message-ID"] = message_id
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = " ".join(dict.fromkeys(references))
    for name, value in _AUTOMATED.items():
        msg[name] = value
    msg.set_content(text, cte="quoted-printable")
    msg.add_alternative(html, subtype="html", cte="quoted-printable")
    return msg

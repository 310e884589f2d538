"""What the Matrix bot posts and reads: the card (HTML table and plain text), its edits, notices, answer text.

Matrix has no buttons, so the card is the form; Synapse passes HTML through untouched, so all foreign text is escaped here."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
import datetime as dt
import re as _re
from html.parser import HTMLParser
from typing import Any

from handraise.core.api import RequestView
from handraise.core import wording
from handraise.core.schema import describe_field, fields

HTML_FORMAT = "org.matrix.custom.html"
REQUIRED_MARK = "✱"
THUMBS_UP = "👍"
THUMBS_DOWN = "👎"
ACCEPTED = "✅"
# The reaction that asks the bot for one's own form link, by direct message (the bot puts it on each card
# so that asking is one click).
FORM_KEY = "📝"
ASK_FOR_LINK = f"react {FORM_KEY} to this message: the bot sends you your own one-time form link in a direct message."
# The same, said in the card's thread (a 📝 on a notice asks for nothing).
ASK_ON_THE_QUESTION = ASK_FOR_LINK.replace("to this message", "to the question")
FORM_LINK_LABEL = "Open the form"

# Skin tones and the emoji variation selector ride along with 👍/👎 reactions.
_EMOJI_NOISE = re.compile("[\U0001F3FB-\U0001F3FF\ufe0f]")


# A reply fallback's first line quotes the replied-to sender: "> <@alice:example.org> …" (or "> * <@…" for
# an emote). A person's own answer that starts with ">" is not one.
_FALLBACK_LINE = _re.compile(r"> \*? ?<[@!][^>\s]+> ")


def _html_lines(text: str) -> str:
    return "<br>".join(html.escape(line) for line in text.splitlines())


# -- the field table --------------------------------------------------------------


def field_rows(schema: dict[str, Any] | None) -> list[dict[str, str]]:
    """One row per field of an object form: what the card's table (and its plain twin) shows."""
    return [{
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        # The core's words for a field (type, choices, bounds): the same in every channel.
        "what": describe_field(spec),
        "required": "required" if spec.required else "optional",
    } for spec in fields(schema)]


def is_form(request: RequestView) -> bool:
    """An object form answered with ``field: value`` lines (an approval is answered in one line); a form
    with a masked field is answered only in the hosted form, never in chat."""
    return (isinstance(request.schema, dict) and request.schema.get("type") == "object"
            and request.kind != "approval" and not wording.form_only(request))


def takes_reactions(request: RequestView) -> bool:
    """Boolean and approval requests can be answered with 👍 / 👎 on the card."""
    schema = request.schema
    return request.kind == "approval" or (isinstance(schema, dict) and schema.get("type") == "boolean")


def how_to_answer(request: RequestView) -> str:
    """The one line that says how to answer in the room."""
    if wording.form_only(request):
        return "This question holds a secret field, so it is answered only in the form; replies here are removed."
    if request.kind == "approval":
        react = f"react {THUMBS_UP} to approve or {THUMBS_DOWN} to reject"
        return f"To answer, {wording.how_to_reply(request)}, or {react}."
    if request.schema is None:
        return "To answer, reply to this message with your answer."
    if is_form(request):
        return 'To answer, reply to this message with one "field: value" line per field.'
    spec = fields(request.schema)[0]
    if spec.widget == "boolean":
        return f"To answer, reply yes or no, or react {THUMBS_UP} / {THUMBS_DOWN}."
    if spec.widget == "enum":
        return "To answer, reply with one of: " + ", ".join(spec.choice_titles or spec.choices) + "."
    return f"To answer, reply with {describe_field(spec)}."


# -- the card -----------------------------------------------------------------------


def _message(body: str, formatted: str, **extra: Any) -> dict[str, Any]:
    # m.notice: other bots do not answer notices, and default push rules keep them quiet. Empty
    # m.mentions: text that an agent wrote (an "@room" in a question) must not ping anyone.
    return {"msgtype": "m.notice", "body": body, "format": HTML_FORMAT, "formatted_body": formatted,
            "m.mentions": {}, **extra}


def notify(content: dict[str, Any], people: list[str]) -> dict[str, Any]:
    """Make ``content`` reach ``people``: an ``m.text`` (default push rules silence ``m.notice``) that
    mentions them (intentional mentions: only these ids, never what the question's text says)."""
    if not people:
        return {**content, "msgtype": "m.text"}
    names = ", ".join(people)
    links = ", ".join(f'<a href="https://matrix.to/#/{html.escape(p, quote=True)}">{html.escape(p)}</a>'
                      for p in people)
    return {**content, "msgtype": "m.text", "body": f"{content['body']}\nFor: {names}",
            "formatted_body": f"{content['formatted_body']}<p>For: {links}</p>", "m.mentions": {"user_ids": people}}


def card_content(request: RequestView, *, people: list[str] | None = None,
                 tz: dt.tzinfo = dt.UTC, tally: str = "") -> dict[str, Any]:
    """The ``m.room.message`` content that asks the question, notifying the people who may answer.

    It carries no form link: everyone in the room reads the card, so a link there would let any
    member answer. A person asks for their own with a 📝 reaction and gets it in a direct message.
    """
    body, formatted = _card_parts(request, tz=tz, tally=tally)
    return notify(_message(body, formatted), people or [])


def tally_content(request: RequestView, *, card_event_id: str, tally: str, tz: dt.tzinfo = dt.UTC) -> dict[str, Any]:
    """An ``m.replace`` edit of a pending quorum card: the card as posted, with the votes so far
    (``tally``, core.quorum); it mentions nobody again."""
    body, formatted = _card_parts(request, tz=tz, tally=tally)
    return _replacing(card_event_id, body, formatted)


def _card_parts(request: RequestView, *, tz: dt.tzinfo = dt.UTC, tally: str = "") -> tuple[str, str]:
    deadline = wording.deadline(request, tz)
    if request.sensitive:
        # The question may itself reveal what is asked: only the form shows it.
        text = ("🔒 A sensitive request is waiting for an answer.\n"
                "Its question is shown only in the form, and answers are not taken in this chat.\n"
                f"To answer, {ASK_FOR_LINK}\n{deadline}")
        formatted = ("<p>🔒 <b>A sensitive request is waiting for an answer.</b></p>"
                     "<p>Its question is shown only in the form, and answers are not taken in this chat.</p>"
                     f"<p>To answer, {html.escape(ASK_FOR_LINK)}</p><p><i>{html.escape(deadline)}</i></p>")
        return text, formatted
    lines = ["❓ Question", request.message_for_user, ""]
    parts = ["<p><b>❓ Question</b></p>", f"<p>{_html_lines(request.message_for_user)}</p>"]
    proposed = wording.proposal_text(request)
    if proposed:
        lines += [proposed, ""]
        parts.append(f"<p>{_html_lines(proposed)}</p>")
    if is_form(request):
        rows = field_rows(request.schema)
        lines.append(f"Fields ({REQUIRED_MARK} = required):")
        for row in rows:
            mark = REQUIRED_MARK if row["required"] == "required" else " "
            line = f"{mark} {row['title']} ({row['name']}): {row['what']}"
            if row["description"]:
                line += f" — {row['description']}"
            lines.append(line)
        lines.append("")
        parts.append(_table_html(rows))
    if tally:
        lines += [tally, ""]
        parts.append(f"<p><b>{html.escape(tally)}</b></p>")
    answer = how_to_answer(request)
    lines.append(answer)
    parts.append(f"<p>{html.escape(answer)}</p>")
    if is_form(request):
        lines.extend(f"{row['name']}: …" for row in field_rows(request.schema))
    or_form = f"Or, for the form, {ASK_FOR_LINK}" if not wording.form_only(request) else f"To answer, {ASK_FOR_LINK}"
    lines.append(or_form)
    lines.append(deadline)
    parts.append(f"<p>{html.escape(or_form)}</p><p><i>{html.escape(deadline)}</i></p>")
    return "\n".join(lines), "".join(parts)


def link_content(url: str, request: RequestView, *, tz: dt.tzinfo = dt.UTC) -> dict[str, Any]:
    """The direct message that hands a person their own one-time form link (an ``m.text``: it notifies)."""
    about = wording.text("sensitive_question") if request.sensitive else f"❓ {request.message_for_user}"
    lead, deadline = wording.text("link"), wording.deadline(request, tz)
    body = f"{about}\n\n{lead}\n{url}\n{deadline}"
    formatted = (f"<p>{_html_lines(about)}</p><p>{html.escape(lead)}</p>"
                 f'<p><a href="{html.escape(url, quote=True)}">{html.escape(FORM_LINK_LABEL)}</a></p>'
                 f"<p><i>{html.escape(deadline)}</i></p>")
    return {**_message(body, formatted), "msgtype": "m.text"}


def note_content(text: str, *, url: str, button: str) -> dict[str, Any]:
    """A direct message that hands one person a link of their own (a sign-in, a form link sent for them):
    ``text``, then the link under its label (an ``m.text``: it notifies)."""
    body = f"{text}\n\n{button}: {url}"
    formatted = (f"<p>{_html_lines(text)}</p>"
                 f'<p><a href="{html.escape(url, quote=True)}">{html.escape(button)}</a></p>')
    return {**_message(body, formatted), "msgtype": "m.text"}


def link_closed_content(request: RequestView, *, event_id: str,
                        outcome: wording.Outcome | None = None) -> dict[str, Any]:
    """An edit of a direct message that carried a form link: the request ended, the link goes."""
    about = "🔒 A sensitive request." if request.sensitive else f"❓ {request.message_for_user}"
    shown = (outcome or wording.outcome(request)).plain()
    body = f"{about}\n\n{shown}"
    new = _message(body, f"<p>{_html_lines(about)}</p><p>{_html_lines(shown)}</p>")
    edit = _message(f"* {body}", new["formatted_body"])
    edit["m.new_content"] = new
    edit["m.relates_to"] = {"rel_type": "m.replace", "event_id": event_id}
    return edit


def private_notice(text: str) -> dict[str, Any]:
    """A short direct message to one person (a refusal told once)."""
    return _message(text, _html_lines(text))


def _table_html(rows: Iterable[dict[str, str]]) -> str:
    out = ["<table><thead><tr><th>Field</th><th>What to enter</th><th>Required</th></tr></thead><tbody>"]
    for row in rows:
        name = f"<b>{html.escape(row['title'])}</b> (<code>{html.escape(row['name'])}</code>)"
        if row["description"]:
            name += f"<br><i>{html.escape(row['description'])}</i>"
        required = f"{REQUIRED_MARK} required" if row["required"] == "required" else "optional"
        out.append(f"<tr><td>{name}</td><td>{html.escape(row['what'])}</td><td>{required}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


# -- outcomes, notices, reactions ---------------------------------------------------


def reminder_text(request: RequestView, *, now: float, tz: dt.tzinfo = dt.UTC) -> str:
    return f"{wording.ICONS['reminder']} {wording.reminder(request, now=now, tz=tz)}"


def outcome_content(request: RequestView, *, card_event_id: str,
                    outcome: wording.Outcome | None = None) -> dict[str, Any]:
    """An ``m.replace`` edit of the card: the question stays, the table goes, the outcome shows
    (``outcome``: with the person's name; by default as the principal reads)."""
    outcome = outcome or wording.outcome(request)
    shown = outcome.plain()
    outcome_html = f"<p><b>{html.escape(f'{outcome.icon} {outcome.headline}')}</b></p>"
    if outcome.lines:
        outcome_html += "<ul>" + "".join(f"<li><b>{html.escape(title)}</b>: {html.escape(value)}</li>"
                                         for title, value in outcome.lines) + "</ul>"
    if request.sensitive:
        body = f"🔒 A sensitive request.\n{shown}"
        formatted = f"<p>🔒 <b>A sensitive request.</b></p>{outcome_html}"
    else:
        body = f"❓ Question\n{request.message_for_user}\n\n{shown}"
        formatted = (f"<p><b>❓ Question</b></p><p>{_html_lines(request.message_for_user)}</p>{outcome_html}")
    return _replacing(card_event_id, body, formatted)


def _replacing(card_event_id: str, body: str, formatted: str) -> dict[str, Any]:
    """An ``m.replace`` edit of the card to ``body``/``formatted``."""
    new = _message(body, formatted)
    edit = _message(f"* {body}", formatted)
    edit["m.new_content"] = new
    edit["m.relates_to"] = {"rel_type": "m.replace", "event_id": card_event_id}
    return edit


def thread_notice(lines: list[str], *, card_event_id: str, reply_to: str, mention: str | None) -> dict[str, Any]:
    """A notice in the card's thread, replying to ``reply_to``; the first line is the lead, the rest a list."""
    lead, items = lines[0], lines[1:]
    body = "\n".join([lead, *(f"- {item}" for item in items)])
    formatted = f"<p>{html.escape(lead)}</p>"
    if items:
        formatted += "<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in items) + "</ul>"
    content = _message(body, formatted)
    content["m.relates_to"] = {"rel_type": "m.thread", "event_id": card_event_id, "is_falling_back": False,
                               "m.in_reply_to": {"event_id": reply_to}}
    if mention:
        content["m.mentions"] = {"user_ids": [mention]}
    return content


def reaction_content(event_id: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


def reaction_vote(key: Any) -> str | None:
    """The reaction key as "👍" or "👎" (skin tones and variation selectors dropped), else None."""
    if not isinstance(key, str):
        return None
    bare = _EMOJI_NOISE.sub("", key).strip()
    return bare if bare in (THUMBS_UP, THUMBS_DOWN) else None


# -- reading answers ----------------------------------------------------------------


class _HtmlText(HTMLParser):
    """Plain text of a formatted body, without the ``<mx-reply>`` quote of the replied-to event."""

    _BREAKS = frozenset({"br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._in_reply = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "mx-reply":
            self._in_reply += 1
        elif tag == "br" and not self._in_reply:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "mx-reply":
            self._in_reply = max(0, self._in_reply - 1)
        elif tag in self._BREAKS and tag != "br" and not self._in_reply:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._in_reply:
            self.parts.append(data)


def strip_reply_fallback(body: str) -> str:
    """Drop the ``> <@user> …`` quote a replying client puts before the answer."""
    lines = body.split("\n")
    if not lines or not _FALLBACK_LINE.match(lines[0]):
        return body
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    if lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def html_text(formatted: str) -> str:
    parser = _HtmlText()
    parser.feed(formatted)
    parser.close()
    return "".join(parser.parts)


def answer_text(content: dict[str, Any]) -> str:
    """What the human typed: the plain body without its reply fallback, else the HTML body's text."""
    relates = content.get("m.relates_to")
    is_reply = isinstance(relates, dict) and isinstance(relates.get("m.in_reply_to"), dict)
    body = content.get("body")
    text = body if isinstance(body, str) else ""
    if is_reply:
        text = strip_reply_fallback(text)
    if text.strip():
        return text
    formatted = content.get("formatted_body")
    if content.get("format") == HTML_FORMAT and isinstance(formatted, str):
        return html_text(formatted)
    return text

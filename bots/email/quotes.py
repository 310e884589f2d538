"""What a person wrote in a reply, without the quoted original, the signature or the HTML around it.

Mail clients quote in a handful of ways: Gmail and Apple Mail write an attribution line
("On <date>, Alice <a@x> wrote:") above ``>`` lines or a ``<blockquote>``; Outlook writes
"-----Original Message-----" or a rule and a ``From:``/``Sent:`` header block, then the original
unmarked. People answer above the quote (top-posting) or below it (bottom-posting). Pure functions.
"""

from __future__ import annotations

import re
from email import errors
from email.message import EmailMessage, Message
from html.parser import HTMLParser

# Attribution lines, in the languages mail clients most often write them.
_ATTRIBUTION = re.compile(
    r"^\s*(?:On\b.{0,300}\bwrote|Am\b.{0,300}\bschrieb\b.{0,200}|Le\b.{0,300}\ba écrit|El\b.{0,300}\bescribió"
    r"|Il giorno\b.{0,300}\bha scritto|Op\b.{0,300}\bschreef)\s*:\s*$", re.IGNORECASE | re.DOTALL)
_ORIGINAL = re.compile(r"^\s*-{2,}\s*(?:Original Message|Ursprüngliche Nachricht|Message d'origine|"
                       r"Forwarded message)\s*-{2,}\s*$", re.IGNORECASE)
_RULE = re.compile(r"^\s*_{10,}\s*$")
_HEADER_LINE = re.compile(r"^\s*\**(?P<name>From|Von|De|Sent|Gesendet|Envoyé|Date|Datum|To|An|À|Subject|Betreff|"
                          r"Objet|Cc)\**\s*:", re.IGNORECASE)
_HEADER_NAMES = {"from": "from", "von": "from", "de": "from", "sent": "date", "gesendet": "date", "envoyé": "date",
                 "date": "date", "datum": "date", "subject": "subject", "betreff": "subject", "objet": "subject"}
_SIGNATURE = re.compile(r"^(?:-- ?|--)$")
_MOBILE = re.compile(r"^\s*(?:Sent from my \w+|Sent from (?:Mail|Outlook) for \w+|Get Outlook for \w+|"
                     r"Von meinem \w+ gesendet)\b.*$", re.IGNORECASE)
_CLOSINGS = frozenset(word.casefold() for word in (
    "best", "best regards", "kind regards", "regards", "warm regards", "many thanks", "thanks", "thank you",
    "thanks a lot", "cheers", "all the best", "sincerely", "yours", "br", "viele grüße", "mit freundlichen grüßen",
    "liebe grüße", "gruß", "grüße", "cordialement", "merci"))
_CLOSING_TAIL_LINES = 4
_BROKEN_ENCODING = (errors.InvalidBase64CharactersDefect, errors.InvalidBase64PaddingDefect,
                    errors.InvalidBase64LengthDefect)


def reply_text(message: Message) -> str:
    """The new text of a reply: its plain part (or its HTML as text), quotes and signature removed."""
    plain, html = _bodies(message)
    if plain is not None and plain.strip():
        return strip_quotes(plain)
    if html is not None:
        return strip_quotes(html_to_text(html, drop_quotes=True))
    return ""


def _bodies(message: Message) -> tuple[str | None, str | None]:
    """The first inline text/plain and text/html bodies (attachments are not the answer)."""
    plain = html = None
    for part in message.walk():
        if part.is_multipart() or part.get_content_maintype() != "text":
            continue
        if part.get_content_disposition() == "attachment":
            continue
        subtype = part.get_content_subtype()
        if subtype == "plain" and plain is None:
            plain = _decoded(part)
        elif subtype == "html" and html is None:
            html = _decoded(part)
    return plain, html


def _decoded(part: Message) -> str:
    """The part's text; nothing when its transfer encoding is broken (garbage is no answer)."""
    if isinstance(part, EmailMessage):
        try:
            content = str(part.get_content())
        except (LookupError, UnicodeError, ValueError):
            content = None
        if any(isinstance(d, _BROKEN_ENCODING) for d in part.defects):
            return ""
        if content is not None:
            return content
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:
        return payload.decode("utf-8", errors="replace")


def strip_quotes(text: str) -> str:
    """The new lines of a plain-text reply: above or below the quote, without the signature."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if _ORIGINAL.match(line) or (_RULE.match(line) and _header_block_follows(lines, i + 1)):
            break  # Outlook: the original follows, unmarked, to the end
        if _HEADER_LINE.match(line) and _header_block_follows(lines, i) and kept_has_text(kept):
            break  # Outlook without a rule: a From:/Sent:/To:/Subject: block starts the original
        attribution = _attribution_at(lines, i)
        if attribution:
            # Bottom-posting answers below the quote: skip the attribution and its quoted lines.
            i += attribution
            continue
        if stripped.startswith(">"):
            i += 1
            continue
        if _SIGNATURE.match(line.rstrip()) or _MOBILE.match(line):
            break
        kept.append(line)
        i += 1
    return _without_closing("\n".join(kept)).strip()


def kept_has_text(kept: list[str]) -> bool:
    return any(k.strip() for k in kept)


def _attribution_at(lines: list[str], i: int) -> int:
    """How many lines an attribution ("On …, Alice wrote:") takes at ``i`` (clients wrap it), or 0."""
    for span in (1, 2, 3):
        if i + span > len(lines):
            break
        joined = " ".join(line.strip() for line in lines[i:i + span])
        if _ATTRIBUTION.match(joined):
            return span
    return 0


def _header_block_follows(lines: list[str], start: int) -> bool:
    """An Outlook header block starts at ``start``: From, a date (Sent/Date) and Subject lines in a row.

    All three are needed: a form's own "from: …" / "to: …" answer lines are not a quoted original.
    """
    names: set[str] = set()
    for line in lines[start:start + 10]:
        if not line.strip():
            if names:
                continue
            continue
        match = _HEADER_LINE.match(line)
        if match is None:
            break
        names.add(_HEADER_NAMES.get(match.group("name").casefold(), ""))
    return {"from", "date", "subject"} <= names


def _without_closing(text: str) -> str:
    """Cut a closing ("Thanks,\\nAlice") and the few short lines after it at the end of a reply."""
    lines = text.rstrip().split("\n")
    for index in range(len(lines) - 1, max(-1, len(lines) - _CLOSING_TAIL_LINES - 2), -1):
        word = lines[index].strip().rstrip(",.!").casefold()
        if word in _CLOSINGS:
            tail = [t for t in lines[index + 1:] if t.strip()]
            if len(tail) <= _CLOSING_TAIL_LINES and all(len(t.strip()) <= 40 for t in tail) and index > 0:
                return "\n".join(lines[:index])
    return text


# -- HTML ------------------------------------------------------------------------------

_BLOCK = frozenset({"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol",
                    "pre", "hr", "section", "article", "header", "footer"})
_SKIP = frozenset({"style", "script", "head", "title"})
# Where clients put the quoted original in HTML: everything inside (and, for Outlook, after) is the original.
_QUOTE_CLASSES = ("gmail_quote", "yahoo_quoted", "moz-cite-prefix", "protonmail_quote")
_ORIGINAL_IDS = ("divrplyfwdmsg", "appendonsend", "mail-editor-reference-message-container")


class _TextOfHtml(HTMLParser):
    def __init__(self, *, drop_quotes: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.drop_quotes = drop_quotes
        self.out: list[str] = []
        self.skip_depth = 0
        self.quote_depth = 0
        self.stack: list[bool] = []  # per open element: whether it opened a quote
        self.done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.done:
            return
        attributes = {k.lower(): (v or "") for k, v in attrs}
        if self.drop_quotes and attributes.get("id", "").lower() in _ORIGINAL_IDS:
            self.done = True  # Outlook: the original runs to the end of the mail
            return
        quote = self.drop_quotes and (tag == "blockquote" or any(
            c in attributes.get("class", "").split() for c in _QUOTE_CLASSES))
        if tag in _SKIP:
            self.skip_depth += 1
        if tag not in ("br", "hr", "img", "meta", "link", "input"):
            self.stack.append(quote)
            if quote:
                self.quote_depth += 1
        if tag in _BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self.done:
            return
        if tag in _SKIP and self.skip_depth:
            self.skip_depth -= 1
        if tag in _BLOCK:
            self.out.append("\n")
        if tag not in ("br", "hr", "img", "meta", "link", "input") and self.stack:
            if self.stack.pop():
                self.quote_depth -= 1

    def handle_data(self, data: str) -> None:
        if self.done or self.skip_depth or self.quote_depth:
            return
        self.out.append(" ".join(data.split()) if "\n" in data else data)


def html_to_text(html: str, *, drop_quotes: bool = False) -> str:
    """Readable text of an HTML mail; with ``drop_quotes`` the quoted original is left out."""
    parser = _TextOfHtml(drop_quotes=drop_quotes)
    parser.feed(html)
    parser.close()
    text = "".join(parser.out).replace("\xa0", " ")
    lines = [line.strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()

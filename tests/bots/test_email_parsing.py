"""The mail-specific pure functions: a reply's own text (quotes, HTML, signatures), DSNs, thread tokens."""

from __future__ import annotations

import email
import email.policy
from email.headerregistry import Address
from email.message import EmailMessage

import pytest

from handraise.bots.email.addresses import (
    bounce_address,
    message_id,
    reply_address,
    thread_token,
    token_matches,
    token_of_address,
    tokens_of_message_ids,
)
from handraise.bots.email.dsn import parse_bounce
from handraise.bots.email.quotes import html_to_text, reply_text, strip_quotes

SECRET = b"s" * 32
MAILBOX = Address(username="handraise", domain="example.test")

# Real-world shapes of the same answer, "host: db-1 / replicas: 2", as clients send it.
GMAIL_TOP = """host: db-1
replicas: 2

On Tue, Dec 1, 2026 at 10:02 AM Handraise <handraise+abcdefghijklmnopqrstuvwxyz@example.test>
wrote:

> Which host shall we deploy to?
>
> Open the form: https://hr.example.test/f/xyz
"""
APPLE_TOP = """host: db-1
replicas: 2

Sent from my iPhone

> On 1 Dec 2026, at 10:02, Handraise <handraise@example.test> wrote:
>
> Which host shall we deploy to?
"""
OUTLOOK_TOP = """host: db-1
replicas: 2

Best regards,
Alice Example
Head of Platform

________________________________
From: Handraise <handraise+abc@example.test>
Sent: Tuesday, December 1, 2026 10:02 AM
To: Alice Example <alice@example.test>
Subject: Question from acme: Which host shall we deploy to?

Which host shall we deploy to?
host: Host name, text
"""
OUTLOOK_CLASSIC = """host: db-1
replicas: 2

-----Original Message-----
From: Handraise
Sent: Tuesday
Subject: Question
replicas: 9
"""
BOTTOM_POSTED = """On Tue, 1 Dec 2026 10:02:00 +0000, Handraise <handraise@example.test> wrote:
> Which host shall we deploy to?
> host: Host name, text

host: db-1
replicas: 2

--
Alice
"""
INTERLEAVED_GERMAN = """Am 01.12.2026 um 10:02 schrieb Handraise <handraise@example.test>:
> Which host shall we deploy to?
host: db-1
> How many replicas?
replicas: 2

Viele Grüße
Alice
"""


@pytest.mark.parametrize("text", [GMAIL_TOP, APPLE_TOP, OUTLOOK_TOP, OUTLOOK_CLASSIC, BOTTOM_POSTED,
                                  INTERLEAVED_GERMAN], ids=["gmail", "apple", "outlook", "outlook-classic",
                                                            "bottom", "interleaved-de"])
def test_only_the_new_lines_remain(text: str) -> None:
    assert strip_quotes(text) == "host: db-1\nreplicas: 2"


def test_a_reply_that_is_only_quote_reads_as_nothing() -> None:
    assert strip_quotes("> approve\n> everything\n") == ""
    assert strip_quotes("On Tue, Dec 1, 2026 Handraise wrote:\n> approve\n") == ""


def test_form_lines_named_like_headers_are_not_taken_for_a_quote() -> None:
    # A date-range form's "from:"/"to:" lines are the answer, not an Outlook header block.
    assert strip_quotes("from: 2026-01-01\nto: 2026-01-09\n") == "from: 2026-01-01\nto: 2026-01-09"
    # A closing in the middle of an answer is kept; only a short tail at the end is a signature.
    body = "reason: thanks\nfor the detailed plan, it covers every case we discussed last week in full detail"
    assert strip_quotes(body) == body


def _html_reply(html: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "alice@example.test"
    msg["Subject"] = "Re: question"
    msg.set_content(html, subtype="html")
    return msg


@pytest.mark.parametrize("html", [
    # Gmail
    '<div dir="ltr">approve: looks &amp; feels <b>right</b></div><br><div class="gmail_quote">'
    '<div dir="ltr" class="gmail_attr">On Tue, Dec 1 Handraise wrote:<br></div>'
    '<blockquote class="gmail_quote">Ship release 4.2?</blockquote></div>',
    # Apple Mail
    '<html><body><div>approve: looks &amp; feels <b>right</b></div><div><br><blockquote type="cite">'
    '<div>On 1 Dec 2026, at 10:02, Handraise wrote:</div><div>Ship release 4.2?</div></blockquote></div>'
    '</body></html>',
    # Outlook on the web
    '<html><head><style>p {margin:0}</style></head><body><div>approve: looks &amp; feels <b>right</b></div>'
    '<hr><div id="divRplyFwdMsg"><b>From:</b> Handraise<br><b>Sent:</b> Tuesday</div>'
    '<div>Ship release 4.2?</div></body></html>',
])
def test_an_html_only_reply_reads_as_its_own_text(html: str) -> None:
    assert reply_text(_html_reply(html)) == "approve: looks & feels right"


def test_the_plain_part_wins_and_attachments_are_not_the_answer() -> None:
    msg = EmailMessage()
    msg.set_content("approve\n\n> Ship?\n")
    msg.add_alternative("<p>reject</p>", subtype="html")
    msg.add_attachment(b"reject", maintype="text", subtype="plain", filename="note.txt")
    assert reply_text(msg) == "approve"
    assert html_to_text("<p>a</p><script>alert(1)</script><p>b</p>") == "a\n\nb"


def test_a_charset_the_mail_declares_is_honoured() -> None:
    raw = ("From: a@example.test\r\nSubject: x\r\nMIME-Version: 1.0\r\n"
           "Content-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: 8bit\r\n\r\n").encode()
    raw += "reason: Gr\xfc\xdfe\r\n".encode("latin-1")
    assert reply_text(email.message_from_bytes(raw, policy=email.policy.default)) == "reason: Grüße"


def test_thread_tokens_are_per_request_and_recipient_and_prove_the_address() -> None:
    token = thread_token(SECRET, request_id="req_1", recipient="Alice@Example.test")
    assert token == thread_token(SECRET, request_id="req_1", recipient="alice@example.test")
    assert len(token) == 26 and token.isalnum() and token == token.lower()
    assert token != thread_token(SECRET, request_id="req_2", recipient="alice@example.test")
    assert token != thread_token(SECRET, request_id="req_1", recipient="bob@example.test")
    assert token != thread_token(b"t" * 32, request_id="req_1", recipient="alice@example.test")
    assert token_matches(SECRET, token, request_id="req_1", sender="ALICE@example.test")
    assert not token_matches(SECRET, token, request_id="req_1", sender="bob@example.test")


def test_addresses_and_message_ids_read_back() -> None:
    token = thread_token(SECRET, request_id="req_1", recipient="alice@example.test")
    assert token_of_address(reply_address(MAILBOX, token), MAILBOX) == ("reply", token)
    assert token_of_address(bounce_address(MAILBOX, token).upper(), MAILBOX) == ("bounce", token)
    assert token_of_address(f"<handraise+{token}@example.test>", MAILBOX) == ("reply", token)
    for forged in (f"handraise+{token}@elsewhere.test", f"other+{token}@example.test", "handraise@example.test",
                   "handraise+short@example.test", f"handraise+{token}x@example.test", "", "@", "+@"):
        assert token_of_address(forged, MAILBOX) is None, forged
    root, later = message_id(MAILBOX, token), message_id(MAILBOX, token, "outcome")
    assert tokens_of_message_ids(f"<CAF=x@mail.gmail.com> {later}\r\n {root}") == [token]
    assert tokens_of_message_ids("<hr.tooshort@example.test> <random@x>") == []
    assert tokens_of_message_ids(None) == []


def dsn_bytes(*, action: str = "failed", recipient: str = "gone@example.test",
              original_id: str = "<hr.x@example.test>", to: str = "handraise+bounce-x@example.test",
              headers_only: bool = False) -> bytes:
    """A DSN as Postfix writes one (RFC 3464), returning the original or only its headers."""
    original_headers = (f"From: Handraise <handraise@example.test>\r\nTo: {recipient}\r\n"
                        f"Subject: Question from acme\r\nMessage-ID: {original_id}\r\n")
    third = (("Content-Type: text/rfc822-headers\r\n\r\n" + original_headers) if headers_only else
             ("Content-Type: message/rfc822\r\n\r\n" + original_headers
              + "Content-Type: text/plain\r\n\r\nWhich host?\r\n"))
    return (
        "From: MAILER-DAEMON@mx.example.test (Mail Delivery System)\r\n"
        f"To: {to}\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\n"
        "Auto-Submitted: auto-replied\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B1"\r\n\r\n'
        "--B1\r\nContent-Type: text/plain\r\n\r\n"
        "I'm sorry to have to inform you that your message could not be delivered.\r\n\r\n"
        "--B1\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.test\r\nArrival-Date: Tue,  1 Dec 2026 10:02:00 +0000\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\nOriginal-Recipient: rfc822;{recipient}\r\n"
        f"Action: {action}\r\nStatus: 5.1.1\r\n"
        f"Diagnostic-Code: smtp; 550 5.1.1 <{recipient}>: Recipient address rejected:\r\n"
        " User unknown in local recipient table\r\n\r\n"
        f"--B1\r\n{third}\r\n--B1--\r\n"
    ).encode()


def _dsn(**kwargs: object) -> EmailMessage:
    return email.message_from_bytes(dsn_bytes(**kwargs), policy=email.policy.default)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("headers_only", [False, True])
def test_a_dsn_names_the_failed_recipient_and_our_message(headers_only: bool) -> None:
    bounce = parse_bounce(_dsn(headers_only=headers_only))
    assert bounce is not None
    (failed,) = bounce.failed
    assert failed.address == "gone@example.test" and failed.status == "5.1.1"
    assert failed.diagnostic.startswith("550 5.1.1 <gone@example.test>: Recipient address rejected")
    assert bounce.original_message_id == "<hr.x@example.test>"
    assert bounce.original_to == ("gone@example.test",)


def test_delays_and_ordinary_mail_are_not_bounces() -> None:
    assert parse_bounce(_dsn(action="delayed")) is None
    plain = EmailMessage()
    plain.set_content("Undelivered Mail Returned to Sender")
    assert parse_bounce(plain) is None

"""A form link or sign-in sent to a person's own channel (``deliver: true``), through the real clients: Telegram
(python-telegram-bot against the wire-level fake Bot API), Slack (slack_sdk against the fake Web API) and email
(aiosmtplib to a real SMTP server). Each person gets exactly one message, in their private chat, their DM or
their own mailbox, and never in the tenant's shared chat or channel; a channel that refuses them hands the note
to their next one, and with none left nothing usable is handed out."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from conftest import Api, base_config, running_app, settings_from
from handraise.bots.email import EmailConnector
from handraise.bots.slack import SlackConnector
from handraise.bots.telegram import TelegramConnector
from handraise.core.appkeys import STORE
from handraise.webforms.connector import WebFormsChannel
from harness.mail import ReceivedMail, SmtpRecorder, smtp_server, unique_address  # noqa: F401  (session fixture)
from tests.bots.email_helpers import email_section
from tests.bots.private_helpers import Note, approval, deliver_link, deliver_signin, prove_delivered_privately
from tests.bots.slack_helpers import ACME_CHANNEL, slack_section
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.timeout(60)

CHAT = -1001234567  # acme's Telegram group
ALICE_TG, BOB_TG, FRANK_TG = 4242, 5353, 6464
BOB_SLACK, CAROL_SLACK, SAM_SLACK = "U0BOB", "U0CAROL", "U0SAM"


@dataclass
class Chats:
    api: Api
    tg: FakeTelegram
    slack: FakeSlack
    smtp: SmtpRecorder
    addresses: dict[str, str] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def chats(storage_url: str, smtp: SmtpRecorder) -> AsyncIterator[Chats]:
    """Acme on Telegram (its group), Slack (its channel) and email, with people each reached differently."""
    addresses = {name: unique_address(name) for name in ("carol", "dave", "eve")}
    people = [
        {"id": "alice", "name": "Alice Aldridge", "telegram": ALICE_TG, "slack": "U0ALICE"},
        # Bob never started the Telegram bot: Telegram refuses to write to him first.
        {"id": "bob", "name": "Bob Builder", "telegram": BOB_TG, "slack": BOB_SLACK},
        {"id": "carol", "name": "Carol", "slack": CAROL_SLACK, "email": addresses["carol"]},
        {"id": "dave", "name": "Dave", "email": addresses["dave"]},
        {"id": "eve", "name": "Eve Example", "email": addresses["eve"]},
        {"id": "frank", "name": "Frank", "telegram": FRANK_TG},
        {"id": "sam", "name": "Sam Slack", "slack": SAM_SLACK},
        {"id": "zoe", "name": "Zoe"},  # on no channel
    ]
    async with FakeTelegram() as tg, FakeSlack() as slack:
        config = base_config(storage_url, email=email_section(smtp, recipients=[addresses["eve"]]),
                             slack=slack_section(slack))
        config["telegram"] = {"token": tg.token, "base_url": tg.base_url, "leader_check_seconds": 0.2,
                              "tenants": {"acme": {"chat_ids": [CHAT], "allowed_user_ids": ["alice"]}}}
        config["tenants"][0]["people"] = people
        connectors = [WebFormsChannel, TelegramConnector, SlackConnector, EmailConnector]
        async with running_app(settings_from(config), connector_classes=connectors) as api:
            await tg.wait_until_polling()
            yield Chats(api, tg, slack, smtp, addresses)


# -- each channel's private place, as its fake saw it ------------------------------------------------


class TelegramChat:
    """The person's private chat with the bot (its id is their user id)."""

    def __init__(self, tg: FakeTelegram, user_id: int) -> None:
        self.tg, self.user_id, self.seen = tg, user_id, 0

    def mark(self) -> None:
        self.seen = len(self.tg.calls_of("sendMessage"))

    async def one_new(self) -> Note:
        # The API answers once the note was sent: nothing to wait for.
        sent = self.tg.calls_of("sendMessage")[self.seen:]
        assert [(c.params["chat_id"], c.ok) for c in sent] == [(self.user_id, True)], sent
        assert self.tg.messages(CHAT) == []  # the group saw nothing
        params = sent[0].params
        # The text a notification shows holds no link; the link is the one button.
        (button,), = params["reply_markup"]["inline_keyboard"]
        assert "http" not in params["text"]
        return Note(params["text"], button["text"], button["url"])


class SlackDm:
    """The person's DM with the app, opened with conversations.open."""

    def __init__(self, slack: FakeSlack, user_id: str) -> None:
        self.slack, self.user_id, self.seen = slack, user_id, 0

    def mark(self) -> None:
        self.seen = len(self.slack.calls)

    async def one_new(self) -> Note:
        made = [c for c in self.slack.calls[self.seen:] if c.method != "auth.test"]
        assert [c.method for c in made] == ["conversations.open", "chat.postMessage"], [c.method for c in made]
        opened, posted = made
        assert opened["users"] == self.user_id
        assert posted["channel"] == self.slack.dm_channel(self.user_id) == opened.response["channel"]["id"]
        assert self.slack.messages(ACME_CHANNEL) == [] and self.slack.ephemeral_messages == []
        (block,) = posted["blocks"]
        button = block["accessory"]
        # The notification text holds no link; the section reads as the text does.
        assert "http" not in posted["text"] and block["text"]["text"] == posted["text"]
        return Note(posted["text"], button["text"]["text"], button["url"])


class Mailbox:
    """The person's own address, as the SMTP server received for it."""

    def __init__(self, smtp: SmtpRecorder, address: str) -> None:
        self.smtp, self.address, self.seen = smtp, address, 0

    def mark(self) -> None:
        self.seen = len(self.smtp.received())

    async def one_new(self) -> Note:
        (mail,) = self.smtp.received()[self.seen:]
        assert mail.rcpt_tos == (self.address,) and mail.message["To"] == self.address
        return read_mail(mail)


def read_mail(mail: ReceivedMail) -> Note:
    """The note a mail carries; the link only in its body, after the text a client's preview shows."""
    plain, html = mail.part("plain").replace("\r\n", "\n"), mail.part("html")
    links = re.findall(r"https?://\S+", plain)
    assert len(links) == 1, plain
    url = links[0]
    assert url not in str(mail.message["Subject"]) and "http" not in str(mail.message["Subject"])
    first, *rest = plain.split("\n\n")
    assert url not in first  # the preview line
    assert url not in html.split("</title>")[0] and html.count(url) == 1
    label = re.search(rf'<a href="{re.escape(url)}"[^>]*>([^<]+)</a>', html)
    assert label is not None, html
    text = plain.split(f"\n\n{label.group(1)}:\n")[0]
    return Note(text, label.group(1), url)


# -- each channel reaches its person alone -----------------------------------------------------------


async def test_telegram_sends_a_person_their_own_link_in_their_private_chat(
        sqlite_url: str, smtp_server: SmtpRecorder, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    async with chats(sqlite_url, smtp_server) as world:
        tg = world.tg
        # Alice started the bot once (/start in private): Telegram lets it write to her from then on.
        tg.push_update(tg.make_text_message(chat_id=ALICE_TG, user_id=ALICE_TG, text="/start"))
        await tg.wait_for_call("sendMessage", lambda c: c.params.get("chat_id") == ALICE_TG)
        await prove_delivered_privately(world.api, TelegramChat(tg, ALICE_TG), caplog, channel="telegram",
                                        person="alice", name="Alice Aldridge")


async def test_slack_sends_a_person_their_own_link_in_their_dm(
        sqlite_url: str, smtp_server: SmtpRecorder, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    async with chats(sqlite_url, smtp_server) as world:
        await prove_delivered_privately(world.api, SlackDm(world.slack, SAM_SLACK), caplog, channel="slack",
                                        person="sam", name="Sam Slack")


async def test_email_sends_a_person_their_own_link_to_their_own_address(
        sqlite_url: str, smtp_server: SmtpRecorder, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    async with chats(sqlite_url, smtp_server) as world:
        address = world.addresses["eve"]
        link, signin = await prove_delivered_privately(world.api, Mailbox(smtp_server, address), caplog,
                                                       channel="email", person="eve", name="Eve Example")
        (first, second) = smtp_server.to(address)
        # Subjects say what the mail is, and for whom: never the link, nor the question.
        assert str(first.message["Subject"]) == "Your own link to answer a question (acme)"
        assert str(second.message["Subject"]) == "Your sign-in link to the Handraise inbox (acme)"
        # Each mail stands alone: its own Message-ID, nothing it answers, replies to an address no thread knows.
        assert first.message["Message-ID"] != second.message["Message-ID"]
        assert first.message["In-Reply-To"] is None and "+" in str(first.message["Reply-To"])


# -- who has no private channel, and who refuses -------------------------------------------------------


async def test_a_refusing_channel_hands_the_note_to_the_persons_next_one(
        sqlite_url: str, smtp_server: SmtpRecorder) -> None:  # noqa: F811
    async with chats(sqlite_url, smtp_server) as world:
        api, tg, slack = world.api, world.tg, world.slack
        request = await api.create(approval("fall-1"))
        # Bob never started the Telegram bot (403): his Slack DM gets it.
        dm = SlackDm(slack, BOB_SLACK)
        dm.mark()
        status, body = await deliver_link(api, request["id"], "bob")
        assert (status, body["delivered_to"]) == (202, "slack")
        refused = tg.calls_of("sendMessage")[-1]
        assert (refused.params["chat_id"], refused.status) == (BOB_TG, 403)
        assert "/f/" in (await dm.one_new()).url
        # Carol's Slack has no DM to give (channel_not_found): her own address gets it.
        slack.fail_next("conversations.open", error="channel_not_found")
        mailbox = Mailbox(smtp_server, world.addresses["carol"])
        mailbox.mark()
        status, body = await deliver_signin(api, "carol")
        assert (status, body["delivered_to"]) == (202, "email")
        assert "/inbox/signin/" in (await mailbox.one_new()).url
        # The journal says where each went: the channel that took it, not the first one tried.
        sent = [e.data for e in await api.app[STORE].journal_entries(tenant_id="acme") if e.event == "sent_privately"]
        assert [(d["for"], d["channel"]) for d in sent[-2:]] == [("person:bob", "slack"), ("person:carol", "email")]


async def test_with_no_channel_left_nothing_is_handed_out(sqlite_url: str, smtp_server: SmtpRecorder) -> None:  # noqa: F811
    async with chats(sqlite_url, smtp_server) as world:
        api = world.api
        request = await api.create(approval("none-1"))
        smtp_server.refuse(world.addresses["dave"])  # 550: no such user
        for person in ("dave", "frank"):  # the mail server refuses Dave; Frank never started the bot
            for status, body in (await deliver_link(api, request["id"], person), await deliver_signin(api, person)):
                assert (status, body["error"]) == (502, "not_delivered"), (person, body)
                assert "http" not in body["message"]
        assert smtp_server.to(world.addresses["dave"]) == []
        # Telegram was asked, and refused both times (403: Frank never started the bot).
        assert [c.status for c in world.tg.calls_of("sendMessage") if c.params["chat_id"] == FRANK_TG] == [403, 403]
        # Zoe has an identity on no channel that serves acme: a 422 naming person, before anything is minted.
        for status, body in (await deliver_link(api, request["id"], "zoe"), await deliver_signin(api, "zoe")):
            assert status == 422 and [f["field"] for f in body["details"]["fields"]] == ["person"], body
        events = [(e.event, e.data.get("for")) for e in await api.app[STORE].journal_entries(tenant_id="acme")]
        assert ("inbox_link_minted", "person:zoe") not in events

"""Proves FakeSlack speaks Slack's wire formats: the real slack_sdk clients and a
slack_bolt AsyncApp (HTTP and Socket Mode) work against it unchanged."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.fakes.slack import (
    FakeSlack,
    form_body,
    make_block_action,
    make_view_submission,
    post_interaction,
    sign_request,
)

pytestmark = pytest.mark.timeout(30)

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def plain(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text}


def reason_values(text: str) -> dict[str, dict[str, dict[str, str]]]:
    """The modal's state values as Slack submits them when the "reason" input holds ``text``."""
    return {"reason": {"text": {"type": "plain_text_input", "value": text}}}

APPROVE_BLOCKS = [
    {"type": "section", "text": {"type": "mrkdwn", "text": "Deploy to prod?"}},
    {
        "type": "actions",
        "block_id": "decision",
        "elements": [
            {"type": "button", "action_id": "approve", "value": "yes", "text": plain("Approve")},
            {"type": "button", "action_id": "deny", "value": "no", "text": plain("Deny")},
        ],
    },
]
MODAL = {
    "type": "modal",
    "callback_id": "answer_form",
    "private_metadata": "req-42",
    "title": {"type": "plain_text", "text": "Answer"},
    "submit": {"type": "plain_text", "text": "Send"},
    "blocks": [
        {
            "type": "input",
            "block_id": "reason",
            "label": {"type": "plain_text", "text": "Why?"},
            "element": {"type": "plain_text_input", "action_id": "text"},
        }
    ],
}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)


def bolt_app(slack: FakeSlack, **kwargs: Any) -> AsyncApp:
    # The token rides on the client: giving AsyncApp both makes Bolt warn that it ignores `token`.
    return AsyncApp(client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url), **kwargs)


async def serve_bolt(app: AsyncApp, aiohttp_server: Any) -> str:
    """Mount Bolt in our own aiohttp app, as the connector will (AsyncApp.start binds 0.0.0.0)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post("/slack/events", handle)
    server = await aiohttp_server(web_app)
    return str(server.make_url("/slack/events"))


# ------------------------------------------------------------------ Web API


async def test_message_lifecycle_with_real_client(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C0REVIEW", text="Deploy to prod?", blocks=APPROVE_BLOCKS)
    ts = posted["ts"]
    assert posted["channel"] == "C0REVIEW"
    assert posted["message"]["text"] == "Deploy to prod?"
    # Slack gives blocks without a block_id one of its own and keeps the ones given.
    assert posted["message"]["blocks"][0]["block_id"]
    assert posted["message"]["blocks"][1]["block_id"] == "decision"
    call = slack.calls_of("chat.postMessage")[0]
    assert call.content_type == "application/json"
    assert call.token == slack.bot_token
    assert call["blocks"][1]["elements"][0]["action_id"] == "approve"
    assert "token" not in call.args

    updated = await client.chat_update(channel="C0REVIEW", ts=ts, text="Approved by <@U1>", blocks=[])
    assert updated["ts"] == ts
    stored = slack.message("C0REVIEW", ts)
    assert stored["text"] == "Approved by <@U1>"
    assert "blocks" not in stored
    assert "edited" in stored

    ephemeral = await client.chat_postEphemeral(channel="C0REVIEW", user="U1", text="only you")
    assert ephemeral["message_ts"] > ts
    assert slack.ephemeral_messages[-1]["user"] == "U1"

    await client.chat_delete(channel="C0REVIEW", ts=ts)
    with pytest.raises(KeyError, match="deleted"):
        slack.message("C0REVIEW", ts)
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_update(channel="C0REVIEW", ts=ts, text="again")
    assert excinfo.value.response["error"] == "message_not_found"


async def test_posting_to_a_user_lands_in_their_dm(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="U0ALICE", text="a question for you")
    opened = await client.conversations_open(users="U0ALICE")
    assert posted["channel"] == opened["channel"]["id"] == slack.dm_channel("U0ALICE")
    assert posted["channel"].startswith("D")
    assert slack.message("U0ALICE", posted["ts"])["text"] == "a question for you"


async def test_views_open_push_update(slack: FakeSlack, client: AsyncWebClient) -> None:
    opened = await client.views_open(trigger_id="1.2.abc", view=MODAL)
    view = opened["view"]
    assert view["id"].startswith("V")
    assert view["callback_id"] == "answer_form"
    assert view["private_metadata"] == "req-42"
    assert view["state"] == {"values": {}}
    assert slack.calls_of("views.open")[0]["view"]["title"]["text"] == "Answer"

    changed = {**MODAL, "private_metadata": "req-43"}
    updated = await client.views_update(view_id=view["id"], hash=view["hash"], view=changed)
    assert updated["view"]["id"] == view["id"]
    assert slack.view(view["id"])["private_metadata"] == "req-43"
    with pytest.raises(SlackApiError) as excinfo:
        await client.views_update(view_id=view["id"], hash=view["hash"], view=changed)
    assert excinfo.value.response["error"] == "hash_conflict"

    pushed = await client.views_push(trigger_id="1.2.def", view=MODAL)
    assert pushed["view"]["id"] != view["id"]
    with pytest.raises(SlackApiError) as excinfo:
        await client.views_open(trigger_id="1.2.ghi", view={"type": "modal", "blocks": []})
    assert excinfo.value.response["error"] == "invalid_arguments"


async def test_auth_test_and_form_bodies(slack: FakeSlack, client: AsyncWebClient) -> None:
    auth = await client.auth_test()
    assert (auth["user_id"], auth["team_id"], auth["bot_id"]) == (slack.bot_user_id, slack.team_id, slack.bot_id)
    assert slack.calls_of("auth.test")[0].token == slack.bot_token

    # A form-encoded call carries blocks as a JSON string, as Slack accepts; the record decodes it.
    await client.api_call(
        "chat.postMessage", data={"channel": "C1", "text": "form", "blocks": json.dumps(APPROVE_BLOCKS)}
    )
    call = slack.calls_of("chat.postMessage")[0]
    assert call.content_type == "application/x-www-form-urlencoded"
    assert call["blocks"][1]["block_id"] == "decision"


async def test_token_errors(slack: FakeSlack) -> None:
    cases = [
        (AsyncWebClient(token="xoxb-wrong", base_url=slack.api_url), "chat_postMessage", "invalid_auth"),
        (AsyncWebClient(base_url=slack.api_url), "chat_postMessage", "not_authed"),
        (AsyncWebClient(token=slack.app_token, base_url=slack.api_url), "chat_postMessage", "not_allowed_token_type"),
    ]
    for web_client, method, error in cases:
        with pytest.raises(SlackApiError) as excinfo:
            await getattr(web_client, method)(channel="C1", text="x")
        assert excinfo.value.response["error"] == error
    bot = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    with pytest.raises(SlackApiError) as excinfo:
        await bot.apps_connections_open(app_token=slack.bot_token)
    assert excinfo.value.response["error"] == "not_allowed_token_type"
    assert len(slack.calls) == 4


async def test_ok_false_errors_raise_slack_api_error(client: AsyncWebClient) -> None:
    async with FakeSlack(channels={"C0KNOWN"}) as strict:
        strict_client = AsyncWebClient(token=strict.bot_token, base_url=strict.api_url)
        with pytest.raises(SlackApiError) as excinfo:
            await strict_client.chat_postMessage(channel="C0OTHER", text="hi")
        assert excinfo.value.response.status_code == 200
        assert excinfo.value.response["error"] == "channel_not_found"
        assert (await strict_client.chat_postMessage(channel="C0KNOWN", text="hi"))["ok"]
        with pytest.raises(SlackApiError) as excinfo, pytest.warns(UserWarning, match="`text` argument"):
            await strict_client.chat_postMessage(channel="C0KNOWN")
        assert excinfo.value.response["error"] == "no_text"
        with pytest.raises(SlackApiError) as excinfo:
            await strict_client.api_call("chat.frobnicate", json={"x": 1})
        assert excinfo.value.response["error"] == "unknown_method"
        assert strict.calls_of("chat.frobnicate")[0]["x"] == 1


async def test_fail_next_error_repeats_then_recovers(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.fail_next("chat.postMessage", error="channel_not_found", count=2)
    for _ in range(2):
        with pytest.raises(SlackApiError) as excinfo:
            await client.chat_postMessage(channel="C1", text="x")
        assert excinfo.value.response["error"] == "channel_not_found"
    assert (await client.chat_postMessage(channel="C1", text="x"))["ok"]
    assert [c.ok for c in slack.calls_of("chat.postMessage")] == [False, False, True]


async def test_fail_next_server_error(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.fail_next("chat.update", status=500)
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_update(channel="C1", ts="1.000001", text="x")
    assert excinfo.value.response.status_code == 500
    assert excinfo.value.response["error"] == "internal_error"


async def test_rate_limit_default_client_raises_without_retrying(slack: FakeSlack, client: AsyncWebClient) -> None:
    # AsyncWebClient's default retry handlers only cover connection errors: a 429 surfaces at once.
    slack.fail_next("chat.postMessage", status=429, retry_after=1)
    with pytest.raises(SlackApiError) as excinfo:
        await client.chat_postMessage(channel="C1", text="x")
    response = excinfo.value.response
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"
    assert response["error"] == "ratelimited"
    assert len(slack.calls_of("chat.postMessage")) == 1


async def test_rate_limit_retry_handler_waits_and_retries(slack: FakeSlack) -> None:
    # AsyncRateLimitErrorRetryHandler sleeps Retry-After plus up to 1 s of jitter, then retries;
    # Retry-After 0 keeps the test under a second.
    retrying = AsyncWebClient(
        token=slack.bot_token,
        base_url=slack.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    slack.fail_next("chat.postMessage", status=429, retry_after=0)
    assert (await retrying.chat_postMessage(channel="C1", text="x"))["ok"]
    assert [c.status for c in slack.calls_of("chat.postMessage")] == [429, 200]


async def test_wait_for_call_sees_past_and_future_calls(slack: FakeSlack, client: AsyncWebClient) -> None:
    await client.chat_postMessage(channel="C1", text="first")
    assert (await slack.wait_for_call("chat.postMessage"))["text"] == "first"

    waiting = asyncio.create_task(slack.wait_for_call("chat.postMessage", lambda c: c["text"] == "second"))
    await client.chat_postMessage(channel="C1", text="other")
    await client.chat_postMessage(channel="C1", text="second")
    assert (await waiting)["text"] == "second"

    with pytest.raises(TimeoutError, match="chat.update"):
        await slack.wait_for_call("chat.update", timeout=0.05)


# --------------------------------------------------------- signed interactions


def test_sign_request_matches_slack_sdk_verifier() -> None:
    body = form_body({"type": "block_actions", "text": "a & b = c"})
    assert parse_qs(body)["payload"] == ['{"type":"block_actions","text":"a & b = c"}']
    now = int(time.time())
    headers = sign_request(SIGNING_SECRET, body, timestamp=now)
    verifier = SignatureVerifier(SIGNING_SECRET)
    assert verifier.is_valid(body, headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"])
    assert not SignatureVerifier("another-secret").is_valid(
        body, headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
    )


def test_payload_builders_have_slack_shape() -> None:
    action = make_block_action(
        user_id="U1", action_id="approve", value="yes", channel="C1", message_ts="1.000001", trigger_id="t"
    )
    assert action["type"] == "block_actions"
    assert action["user"] == {"id": "U1", "username": "user-u1", "name": "user-u1", "team_id": action["team"]["id"]}
    assert action["container"]["message_ts"] == action["message"]["ts"] == "1.000001"
    assert action["actions"][0]["type"] == "button"
    assert action["actions"][0]["value"] == "yes"
    submission = make_view_submission(
        user_id="U1",
        callback_id="cb",
        private_metadata="m",
        values={"b": {"a": {"type": "plain_text_input", "value": "v"}}},
    )
    assert submission["view"]["state"]["values"]["b"]["a"]["value"] == "v"
    assert submission["view"]["callback_id"] == "cb"


async def test_bolt_http_block_action_reaches_handler(
    slack: FakeSlack, client: AsyncWebClient, aiohttp_server: Any
) -> None:
    app = bolt_app(slack, signing_secret=SIGNING_SECRET)
    clicked = asyncio.Event()
    seen: dict[str, Any] = {}

    @app.action("approve")
    async def on_approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        seen.update(user=body["user"]["id"], value=body["actions"][0]["value"], block=body["actions"][0]["block_id"])
        # The per-request client Bolt hands over must still point at the fake.
        await client.chat_update(
            channel=body["container"]["channel_id"], ts=body["container"]["message_ts"], text="approved", blocks=[]
        )
        clicked.set()

    url = await serve_bolt(app, aiohttp_server)
    posted = await client.chat_postMessage(channel="C1", text="Deploy?", blocks=APPROVE_BLOCKS)
    payload = slack.make_block_action(
        user_id="U0ALICE", action_id="approve", value="yes", channel="C1", message_ts=posted["ts"]
    )
    assert payload["message"]["blocks"][1]["block_id"] == "decision"

    status, body = await post_interaction(url, payload, signing_secret=SIGNING_SECRET)
    assert (status, body) == (200, "")
    await asyncio.wait_for(clicked.wait(), 5)
    assert seen == {"user": "U0ALICE", "value": "yes", "block": "decision"}
    await slack.wait_for_call("chat.update")
    assert slack.message("C1", posted["ts"])["text"] == "approved"
    # Bolt checks the token with a lazy auth.test on its first request.
    assert slack.calls_of("auth.test")


async def test_bolt_http_refuses_bad_signatures(slack: FakeSlack, aiohttp_server: Any) -> None:
    app = bolt_app(slack, signing_secret=SIGNING_SECRET)
    invoked = asyncio.Event()

    @app.action("approve")
    async def on_approve(ack: Any) -> None:
        await ack()
        invoked.set()

    url = await serve_bolt(app, aiohttp_server)
    payload = make_block_action(user_id="U1", action_id="approve", value="yes", channel="C1", message_ts="1.000001")
    assert (await post_interaction(url, payload, signing_secret="wrong-secret"))[0] == 401
    stale = int(time.time()) - 6 * 60
    assert (await post_interaction(url, payload, signing_secret=SIGNING_SECRET, timestamp=stale))[0] == 401
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url, data=form_body(payload), headers={"Content-Type": "application/x-www-form-urlencoded"}
        ) as resp:
            assert resp.status == 401
    # The positive control: the same payload, signed now, is accepted.
    assert (await post_interaction(url, payload, signing_secret=SIGNING_SECRET))[0] == 200
    await asyncio.wait_for(invoked.wait(), 5)


async def test_bolt_http_view_submission_errors_come_back_in_the_body(
    slack: FakeSlack, client: AsyncWebClient, aiohttp_server: Any
) -> None:
    app = bolt_app(slack, signing_secret=SIGNING_SECRET)

    @app.view("answer_form")
    async def on_submit(ack: Any, view: dict[str, Any]) -> None:
        reason = view["state"]["values"]["reason"]["text"]["value"]
        if len(reason) < 5:
            await ack(response_action="errors", errors={"reason": f"too short ({view['private_metadata']})"})
        else:
            await ack()

    url = await serve_bolt(app, aiohttp_server)
    view = (await client.views_open(trigger_id="1.2.abc", view=MODAL))["view"]
    short = slack.make_view_submission(
        user_id="U1", view_id=view["id"], values=reason_values("no")
    )
    assert short["view"]["blocks"][0]["block_id"] == "reason"
    status, body = await post_interaction(url, short, signing_secret=SIGNING_SECRET)
    assert status == 200
    assert body == {"response_action": "errors", "errors": {"reason": "too short (req-42)"}}

    long = slack.make_view_submission(
        user_id="U1", view_id=view["id"], values=reason_values("long enough")
    )
    assert await post_interaction(url, long, signing_secret=SIGNING_SECRET) == (200, "")


async def test_response_url_updates_the_stored_message(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel="C1", text="Deploy?", blocks=APPROVE_BLOCKS)
    payload = slack.make_block_action(user_id="U1", action_id="deny", value="no", channel="C1", message_ts=posted["ts"])
    webhook = AsyncWebhookClient(payload["response_url"])
    response = await webhook.send(text="Denied", replace_original=True, blocks=[])
    assert response.status_code == 200
    assert slack.message("C1", posted["ts"])["text"] == "Denied"
    assert (await slack.wait_for_call("response_url"))["replace_original"] is True

    response = await webhook.send(delete_original=True)
    assert response.status_code == 200
    with pytest.raises(KeyError):
        slack.message("C1", posted["ts"])


async def test_clicks_on_ephemeral_messages(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postEphemeral(channel="C1", user="U1", text="Deploy?", blocks=APPROVE_BLOCKS)
    payload = slack.make_block_action(
        user_id="U1", action_id="approve", value="yes", channel="C1", message_ts=posted["message_ts"]
    )
    # Slack sends no `message` for a click on an ephemeral message.
    assert payload["container"]["is_ephemeral"] is True
    assert "message" not in payload
    assert payload["actions"][0]["block_id"] == "decision"

    webhook = AsyncWebhookClient(payload["response_url"])
    assert (await webhook.send(text="Approved", replace_original=True)).status_code == 200
    assert [e["text"] for e in slack.ephemeral_messages] == ["Approved"]
    assert (await webhook.send(text="Noted")).status_code == 200
    assert slack.ephemeral_messages[-1]["user"] == "U1"
    assert slack.ephemeral_messages[-1]["text"] == "Noted"


# --------------------------------------------------------------- Socket Mode


async def test_raw_socket_gets_hello_first_and_ack_timeouts(slack: FakeSlack) -> None:
    app_client = AsyncWebClient(token=slack.app_token, base_url=slack.api_url)
    url = (await app_client.apps_connections_open(app_token=slack.app_token))["url"]
    assert url.startswith(f"ws://127.0.0.1:{slack.port}/socket/")
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:
            hello = await ws.receive_json(timeout=5)
            assert hello["type"] == "hello"
            assert hello["connection_info"]["app_id"] == slack.app_id
            sock = await slack.wait_for_socket()
            assert slack.sockets == [sock]

            sending = asyncio.create_task(slack.socket_send_interactive({"type": "block_actions"}))
            envelope = await ws.receive_json(timeout=5)
            assert envelope["type"] == "interactive"
            assert envelope["accepts_response_payload"] is True
            assert envelope["payload"] == {"type": "block_actions"}
            await ws.send_json({"envelope_id": envelope["envelope_id"]})
            assert await sending == {"envelope_id": envelope["envelope_id"]}

            with pytest.raises(TimeoutError, match="no ack"):
                await slack.socket_send_interactive({"type": "block_actions"}, timeout=0.1)

            unacked = await ws.receive_json(timeout=5)
            assert unacked["envelope_id"] != envelope["envelope_id"]
            await slack.close_sockets()
            assert (await ws.receive(timeout=5)).type == aiohttp.WSMsgType.CLOSE
        # A ticket works once: reusing the URL is refused at the handshake.
        with pytest.raises(aiohttp.WSServerHandshakeError) as excinfo:
            await session.ws_connect(url)
        assert excinfo.value.status == 401
    assert slack.sockets == []


async def test_bolt_socket_mode_handler_receives_and_acks(slack: FakeSlack, client: AsyncWebClient) -> None:
    app = bolt_app(slack)
    clicked = asyncio.Event()

    @app.action("approve")
    async def on_approve(ack: Any, body: dict[str, Any]) -> None:
        await ack()
        assert body["user"]["id"] == "U0ALICE"
        clicked.set()

    @app.view("answer_form")
    async def on_submit(ack: Any) -> None:
        await ack(response_action="errors", errors={"reason": "say more"})

    handler = AsyncSocketModeHandler(app, app_token=slack.app_token)
    await handler.connect_async()
    try:
        first = await slack.wait_for_socket()
        opened = await slack.wait_for_call("apps.connections.open")
        assert opened.token == slack.app_token

        posted = await client.chat_postMessage(channel="C1", text="Deploy?", blocks=APPROVE_BLOCKS)
        action = slack.make_block_action(
            user_id="U0ALICE", action_id="approve", value="yes", channel="C1", message_ts=posted["ts"]
        )
        ack = await slack.socket_send_interactive(action)
        assert set(ack) == {"envelope_id"}
        await asyncio.wait_for(clicked.wait(), 5)

        view = (await client.views_open(trigger_id="1.2.abc", view=MODAL))["view"]
        submission = slack.make_view_submission(
            user_id="U0ALICE", view_id=view["id"], values=reason_values("x")
        )
        ack = await slack.socket_send_interactive(submission)
        assert ack["payload"] == {"response_action": "errors", "errors": {"reason": "say more"}}

        # Slack's "disconnect" makes the SDK fetch a new URL and move to a second socket.
        await slack.socket_disconnect()
        second = await slack.wait_for_socket(nth=2)
        assert second is not first
        assert len(slack.calls_of("apps.connections.open")) == 2
        ack = await slack.socket_send_interactive(submission, socket=second)
        assert ack["payload"]["response_action"] == "errors"
    finally:
        await handler.close_async()

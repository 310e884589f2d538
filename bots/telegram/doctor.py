"""``handraise doctor`` for Telegram: try the token, the chats and the webhook live; change nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from handraise.bots.telegram.settings import TelegramSettings
from handraise.core.config import Settings


async def check(settings: TelegramSettings, *, app_settings: Settings, http: aiohttp.ClientSession) -> list[str]:
    """getMe with the token, getChat for every configured chat, the webhook as Telegram has it."""
    token = settings.token.get_secret_value()

    async def call(method: str, **params: Any) -> tuple[bool, Any]:
        try:
            async with http.post(f"{settings.base_url}{token}/{method}", json=params,
                                 timeout=aiohttp.ClientTimeout(total=15)) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            return False, f"cannot reach {settings.base_url.split('/bot')[0]} ({type(e).__name__})"
        if isinstance(body, dict) and body.get("ok"):
            return True, body.get("result")
        return False, str(body.get("description") if isinstance(body, dict) else resp.status).replace(token, "…")

    ok, me = await call("getMe")
    if not ok:
        return [f"getMe failed ({me}); check [telegram] token (from @BotFather) and base_url"]
    problems = []
    for tenant, section in settings.tenants.items():
        for chat_id in section.chat_ids:
            ok, found = await call("getChat", chat_id=chat_id)
            if not ok:
                problems.append(f"chat {chat_id} of tenant {tenant}: {found}; add @{me.get('username')} to "
                                "that chat or fix chat_ids")
    if settings.mode == "webhook":
        expected = settings.webhook_url or f"{app_settings.server.public_url}/bots/telegram/webhook"
        ok, info = await call("getWebhookInfo")
        if ok and info.get("url") != expected:
            problems.append(f"Telegram delivers updates to {info.get('url') or 'no webhook'}, not {expected}; "
                            "start handraise serve (it sets the webhook) or fix webhook_url/public_url")
    return problems

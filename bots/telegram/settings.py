"""``[telegram]``: the bot token, polling or webhook, and which chats and people serve each tenant."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from handraise.core.chat import RoutedSettings, TenantRoute
from handraise.core.people import PersonRef


class TelegramTenantSettings(TenantRoute):
    """Where one tenant's requests go, and who may answer them."""

    raw_id = re.compile(r"-?[0-9]+")

    # Empty: the tenant's requests reach only the private chats of the people they are assigned to
    # (``assigned_delivery`` "direct" or "room_and_direct").
    chat_ids: list[int] = Field(default_factory=list)
    # User ids, or the tenant's people and groups by name ("alice", "group:oncall").
    allowed_user_ids: list[int | PersonRef] = Field(min_length=1)

    def places(self) -> list[str]:
        return [str(c) for c in self.chat_ids]

    def people(self) -> list[str]:
        return [str(u) for u in self.allowed_user_ids]


class TelegramSettings(RoutedSettings):
    """``[telegram]``. Per tenant: ``[telegram.tenants.<id>]``; or, for one tenant, the short form
    ``chat_ids`` / ``allowed_user_ids`` (with ``tenant`` when several tenants are configured)."""

    place_word = "chat"

    token: SecretStr
    base_url: str = "https://api.telegram.org/bot"
    mode: Literal["polling", "webhook"] = "polling"
    # Webhook mode: Telegram sends it in X-Telegram-Bot-Api-Secret-Token; checked on every update.
    webhook_secret: SecretStr | None = None
    # Webhook mode: the public URL registered with setWebhook (default: public_url + /bots/telegram/webhook).
    webhook_url: str | None = None
    tenant: str | None = None
    chat_ids: list[int] | None = None
    allowed_user_ids: list[int | PersonRef] | None = None
    tenants: dict[str, TelegramTenantSettings] = Field(default_factory=dict)
    remind_after_seconds: float | None = Field(default=None, gt=0)
    # Polling: how often the poller checks it still holds the lock, and a standby tries to take over.
    leader_check_seconds: float = Field(default=5.0, gt=0, le=300)
    # Polling: how long one getUpdates waits for news.
    poll_timeout_seconds: int = Field(default=25, ge=0, le=50)
    # An answered request's message offers buttons 1-5 that rate its run (needs a run_id and [feedback]).
    rating_buttons: bool = False
    # A request assigned to people (assign_to) also reaches each of them in their private chat with the
    # bot (once they have started it): "room_and_direct", only there ("direct"), or "room".
    assigned_delivery: Literal["room_and_direct", "direct", "room"] = "room_and_direct"

    @field_validator("token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        # Refused here in one line, not as python-telegram-bot's InvalidToken traceback at start.
        if not re.fullmatch(r"[0-9]+:[A-Za-z0-9_-]+", value.get_secret_value().strip()):
            raise ValueError("must be the bot token from @BotFather, like 123456789:AA... "
                             "(set it here or in HANDRAISE_TELEGRAM__TOKEN)")
        return SecretStr(value.get_secret_value().strip())

    @model_validator(mode="after")
    def _check(self) -> TelegramSettings:
        if self.mode == "webhook":
            if self.webhook_secret is None:
                raise ValueError("webhook_secret is required in webhook mode")
            if not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", self.webhook_secret.get_secret_value()):
                raise ValueError("webhook_secret: 16-256 characters of A-Z, a-z, 0-9, _ and -")
        if (self.chat_ids is None) != (self.allowed_user_ids is None):
            raise ValueError("chat_ids and allowed_user_ids go together")
        if self.chat_ids is None and not self.tenants:
            raise ValueError("say where to post: chat_ids and allowed_user_ids, or [telegram.tenants.<id>]")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        self.base_url = self.base_url.rstrip("/")
        return self

    def check_reachable(self) -> None:
        """With ``assigned_delivery = "room"`` a tenant without chats would be reached nowhere."""
        if self.assigned_delivery == "room":
            chatless = [t for t, route in self.tenants.items() if not route.chat_ids]
            if chatless:
                raise ValueError(f"tenants {', '.join(chatless)} have no chat_ids: with assigned_delivery = "
                                 '"room" nothing would reach them (name a chat, or use "direct")')

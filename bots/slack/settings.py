"""The ``[slack]`` config section: tokens, HTTP or Socket Mode, and per-tenant channel and allowlist."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from handraise.core.chat import RoutedSettings, TenantRoute
from handraise.core.people import REFERENCE

# Slack ids: channels C/G (private)/D (DM), users U/W (Enterprise Grid). Posting to a user id lands in the DM.
_CHANNEL_ID = r"^[CGDUW][A-Z0-9]{2,}$"
_USER_ID = r"[UW][A-Z0-9]{2,}"


class SlackTenantSettings(TenantRoute):
    """Where one tenant's requests are posted and who may answer them."""

    raw_id = re.compile(_USER_ID)

    # None: the tenant's requests reach only the DMs of the people they are assigned to
    # (``assigned_delivery`` "direct" or "room_and_direct").
    channel: str | None = Field(default=None, pattern=_CHANNEL_ID)
    # Slack user ids, or the tenant's people and groups by name ("alice", "group:oncall").
    allowed_user_ids: list[str] = Field(min_length=1)

    @field_validator("allowed_user_ids")
    @classmethod
    def _user_ids(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not re.fullmatch(_USER_ID, v) and not re.fullmatch(REFERENCE, v)]
        if bad:
            raise ValueError(f"not Slack user ids (U… or W…) nor people (alice, group:oncall): {', '.join(bad)}")
        return value

    def places(self) -> list[str]:
        return [self.channel] if self.channel is not None else []

    def people(self) -> list[str]:
        return list(self.allowed_user_ids)


class SlackSettings(RoutedSettings):
    place_word = "channel"

    mode: Literal["http", "socket"] = "http"
    bot_token: SecretStr
    # HTTP mode: Slack signs every request with it. Socket Mode needs none (the app token is the auth).
    signing_secret: SecretStr | None = None
    # Socket Mode: an app-level token (xapp-…) with connections:write.
    app_token: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    tenants: dict[str, SlackTenantSettings] = Field(min_length=1)
    remind_after_seconds: float | None = Field(default=None, gt=0)
    # A request assigned to people (assign_to) also reaches each of them in a DM with the app:
    # "room_and_direct", only there ("direct"; the channel when none is on the allowlist), or "room".
    assigned_delivery: Literal["room_and_direct", "direct", "room"] = "room_and_direct"
    # An answered request's message offers buttons 1-5 that rate its run (needs a run_id and [feedback]).
    rating_buttons: bool = False

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        # AsyncWebClient joins method names onto it: without the slash it would call /apichat.postMessage.
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _mode_secrets(self) -> SlackSettings:
        if self.mode == "http" and not _given(self.signing_secret):
            raise ValueError("signing_secret is required in http mode")
        if self.mode == "socket" and not _given(self.app_token):
            raise ValueError("app_token is required in socket mode")
        if not _given(self.bot_token):
            raise ValueError("bot_token must not be empty")
        if self.assigned_delivery == "room":
            roomless = [t for t, route in self.tenants.items() if route.channel is None]
            if roomless:
                raise ValueError(f"tenants {', '.join(roomless)} have no channel: with assigned_delivery = "
                                 '"room" nothing would reach them (name a channel, or use "direct")')
        return self


def _given(secret: SecretStr | None) -> bool:
    return secret is not None and bool(secret.get_secret_value().strip())

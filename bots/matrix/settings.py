"""The ``[matrix]`` config section: the bot account, and per tenant its rooms and who may answer."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from handraise.core.chat import RoutedSettings, TenantRoute
from handraise.core.people import REFERENCE

# A Matrix user id: @localpart:server (the server part may carry a port).
_USER_ID = re.compile(r"@[^:\s]+:[^\s]+")
# Room ids: "!opaque:server" up to room version 11, "!opaque" from version 12.
_ROOM_ID = re.compile(r"![^\s]+")


def is_user_id(value: str) -> bool:
    """Whether ``value`` is a Matrix user id (a person) rather than a room id."""
    return _USER_ID.fullmatch(value) is not None


class MatrixTenantSettings(TenantRoute):
    """``[matrix.tenants.<tenant id>]``: where that tenant's requests are posted and who answers."""

    raw_id = _USER_ID

    room_ids: list[str] = Field(min_length=1)
    # Full Matrix ids ("@alice:example.org"), or the tenant's people and groups by name ("alice",
    # "group:oncall"); nobody else's answer is taken.
    allowed_users: list[str] = Field(default_factory=list)

    @field_validator("room_ids")
    @classmethod
    def _room_ids(cls, value: list[str]) -> list[str]:
        for room_id in value:
            if not _ROOM_ID.fullmatch(room_id):
                raise ValueError(f"{room_id!r} is not a room id (it starts with '!'; aliases are not accepted)")
        return list(dict.fromkeys(value))

    @field_validator("allowed_users")
    @classmethod
    def _user_ids(cls, value: list[str]) -> list[str]:
        for user_id in value:
            if not _USER_ID.fullmatch(user_id) and not re.fullmatch(REFERENCE, user_id):
                raise ValueError(f"{user_id!r} is not a Matrix user id like @alice:example.org, nor a person "
                                 "(alice, group:oncall)")
        return list(dict.fromkeys(value))

    def places(self) -> list[str]:
        return list(self.room_ids)

    def people(self) -> list[str]:
        return list(self.allowed_users)


class MatrixSettings(RoutedSettings):
    """The bot account and its rooms. Give exactly one of ``access_token`` or ``password``.
    Every room serves one tenant (checked by :class:`RoutedSettings`)."""

    place_word = "room"

    homeserver: str
    user_id: str
    access_token: SecretStr | None = None
    password: SecretStr | None = None
    # Reused on every password login, so restarts do not pile up devices.
    device_id: str | None = Field(default=None, min_length=1, max_length=255)
    # Folder for the session a password login creates (reused at the next start).
    store_path: str | None = None
    # How long one /sync long-poll waits for new events on the homeserver.
    sync_timeout_ms: int = Field(default=30000, ge=1000, le=300000)
    remind_after_seconds: int | None = Field(default=None, ge=1)
    tenants: dict[str, MatrixTenantSettings] = Field(min_length=1)
    # A request assigned to people (assign_to) also reaches each of them in a direct room with the bot:
    # "room_and_direct", only there ("direct"; the rooms when none is on the allowlist), or "room".
    assigned_delivery: Literal["room_and_direct", "direct", "room"] = "room_and_direct"

    @field_validator("homeserver")
    @classmethod
    def _homeserver(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str) -> str:
        if not _USER_ID.fullmatch(value):
            raise ValueError("must be a full Matrix user id like @handraise:example.org")
        return value

    @model_validator(mode="after")
    def _one_secret(self) -> MatrixSettings:
        if (self.access_token is None) == (self.password is None):
            raise ValueError("give exactly one of access_token or password")
        return self

    def room_tenants(self) -> dict[str, str]:
        """Configured room id -> the tenant that owns it."""
        return {room_id: tenant_id for tenant_id, t in self.tenants.items() for room_id in t.room_ids}

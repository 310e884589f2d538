"""Configuration: one pydantic model per TOML table, environment overrides, one clear error.

``load_settings(path)`` reads TOML (or nothing: the embedded default), applies
``HANDRAISE_*`` environment variables (``__`` nests: ``HANDRAISE_STORAGE__URL``)
and raises :class:`ConfigError` naming the offending key. Connector sections are
kept as raw tables here; each connector validates its own with its own model.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
import zoneinfo
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from handraise.core.errors import ConfigError

Scope = Literal["ask", "answer", "read", "annotate", "forward"]
ALL_SCOPES: tuple[str, ...] = ("ask", "answer", "read", "annotate", "forward")
ENV_PREFIX = "HANDRAISE_"
# HANDRAISE_ variables that are not settings: the config path, and the CLI client's key and URL.
_NOT_SETTINGS = frozenset({"HANDRAISE_CONFIG", "HANDRAISE_KEY", "HANDRAISE_URL"})
DEFAULT_TENANT = "default"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    public_url: str = "http://127.0.0.1:8080"
    # Largest request body accepted by any endpoint (413 beyond).
    max_body_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)

    @field_validator("public_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")


class StorageSettings(_Section):
    url: str = "sqlite:///handraise.db"

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql://", "postgres://", "postgresql+asyncpg://")):
            raise ValueError("must be sqlite:///PATH or postgresql://user@host/db")
        return value


class FeedbackSettings(_Section):
    enabled: bool = True


class LimitsSettings(_Section):
    default_timeout_seconds: int = Field(default=300, ge=1)
    max_timeout_seconds: int = Field(default=86400, ge=1)
    # Long-poll cap: a larger ?timeout= is cut to this.
    max_wait_seconds: int = Field(default=60, ge=1, le=3600)
    max_schema_fields: int = Field(default=20, ge=1, le=20)
    max_schema_bytes: int = Field(default=8192, ge=256, le=8192)
    max_message_chars: int = Field(default=8000, ge=1)
    # A sensitive answer no agent collected is deleted this long after it arrived.
    sensitive_retention_seconds: int = Field(default=3600, ge=1)
    # How often the sweeper looks for overdue requests.
    sweep_interval_seconds: float = Field(default=1.0, gt=0, le=60)

    @model_validator(mode="after")
    def _default_within_max(self) -> LimitsSettings:
        if self.default_timeout_seconds > self.max_timeout_seconds:
            raise ValueError("default_timeout_seconds exceeds max_timeout_seconds")
        return self


class LoggingSettings(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "console"] = "console"


class McpSettings(_Section):
    # MCP over streamable HTTP at /mcp (tools ask_human, request_approval, human_feedback).
    enabled: bool = True
    # While a tool waits for a human it sends progress this often, so clients that drop idle calls keep waiting.
    progress_interval_seconds: float = Field(default=10.0, gt=0, le=15)


class KeySettings(_Section):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    key: SecretStr | None = None
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    scopes: list[Scope] = Field(min_length=1)

    @model_validator(mode="after")
    def _exactly_one_secret(self) -> KeySettings:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of key or key_sha256")
        problem = scopes_problem(self.scopes)
        if problem:
            raise ValueError(problem)
        if self.key is not None and len(self.key.get_secret_value()) < 16:
            raise ValueError("key must be at least 16 characters")
        return self

    def digest(self) -> str:
        if self.key_sha256 is not None:
            return self.key_sha256.lower()
        assert self.key is not None
        return hash_key(self.key.get_secret_value())


class TenantSettings(_Section):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    name: str | None = None
    keys: list[KeySettings] = Field(default_factory=list)
    # Channels a request goes to when it names none; absent: every enabled channel serving this tenant.
    default_channels: list[str] | None = None
    # The IANA time zone deadlines and outcomes are shown in to this tenant's people ("Europe/Berlin").
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone like Europe/Berlin or UTC") from None
        return value


class Settings(_Section):
    server: ServerSettings = Field(default_factory=ServerSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    tenants: list[TenantSettings] = Field(default_factory=list)
    # Connector sections: validated by each connector's own settings_model.
    telegram: dict[str, Any] | None = None
    matrix: dict[str, Any] | None = None
    slack: dict[str, Any] | None = None
    email: dict[str, Any] | None = None
    webhooks: list[dict[str, Any]] | None = None
    web: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _tenants(self) -> Settings:
        if not self.tenants:
            self.tenants = [TenantSettings(id=DEFAULT_TENANT)]
        seen: set[str] = set()
        key_ids: set[str] = set()
        for tenant in self.tenants:
            if tenant.id in seen:
                raise ValueError(f"tenant id {tenant.id!r} appears twice")
            seen.add(tenant.id)
            for key in tenant.keys:
                if key.id in key_ids:
                    raise ValueError(f"key id {key.id!r} appears twice")
                key_ids.add(key.id)
        return self

    def tenant(self, tenant_id: str) -> TenantSettings | None:
        return next((t for t in self.tenants if t.id == tenant_id), None)

    def connector_section(self, name: str) -> Any:
        """The raw table of a connector, or None when it is not configured."""
        return getattr(self, name, None) if name in type(self).model_fields else None


def scopes_problem(scopes: list[str] | frozenset[str]) -> str | None:
    """Why a set of scopes cannot go on one key, or None: the rules the config and the CLI share."""
    if "ask" in scopes and "answer" in scopes:
        return "an ask key can never answer: give ask and answer to different keys"
    if "forward" in scopes and "ask" not in scopes:
        # forward mints links only for requests the key created itself, so it needs ask to mean anything.
        return "forward mints links only for the key's own requests: give it together with ask"
    return None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """``HANDRAISE_A__B=v`` → ``{"a": {"b": v}}``; values may be TOML literals."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in _NOT_SETTINGS:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not parts:
            continue
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: conflicts with another HANDRAISE_ variable")
        node[parts[-1]] = _parse_env_value(raw)
    return tree


def _parse_env_value(raw: str) -> Any:
    # Lists, numbers and booleans as TOML literals; anything else is a string.
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(p) for p in first["loc"]) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{location}: {message}"


def load_settings(path: str | os.PathLike[str] | None = None, *, environ: dict[str, str] | None = None) -> Settings:
    """Read the TOML file (None: embedded default) and the environment; raise ConfigError."""
    environ = dict(os.environ if environ is None else environ)
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{file}: no such config file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file}: not valid TOML: {e}") from None
    data = _merge(data, _env_overrides(environ))
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{_describe(e)}") from None

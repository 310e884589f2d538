"""Configuration: one pydantic model per TOML table, environment overrides, one clear error.

``load_settings(path)`` reads TOML (or nothing: the embedded default), applies
``HANDRAISE_*`` environment variables (``__`` nests: ``HANDRAISE_STORAGE__URL``)
and raises :class:`ConfigError` naming the offending key, or the variable when the
value came from the environment. Connector sections are kept as raw tables here;
each connector validates its own with its own model and reports through
:meth:`Settings.config_error`, so every message reads the same.

pydantic-settings is not used: its environment source parses values as JSON, not
TOML literals (``HANDRAISE_TELEGRAM__TENANTS__ACME__CHAT_IDS=[-100]`` would reach
the connector as a string), it cannot say which variable a failing value came from,
and the overlay it would replace is forty lines.
"""

from __future__ import annotations

import os
import re
import tomllib
import zoneinfo
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import platformdirs

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from handraise.core.errors import ConfigError
from handraise.core.problems import config_problem, dotted
from handraise.core.schedule import MAX_REMINDERS, MAX_STEPS, EscalationStep
from handraise.core.schedule import problems as schedule_problems
from handraise.core.scopes import Scope, hash_key, scopes_problem

ENV_PREFIX = "HANDRAISE_"
# HANDRAISE_ variables that are not settings: the config path, the CLI client's key and URL, tracebacks.
_NOT_SETTINGS = frozenset({"HANDRAISE_CONFIG", "HANDRAISE_KEY", "HANDRAISE_URL", "HANDRAISE_DEBUG"})
DEFAULT_TENANT = "default"
APP_NAME = "handraise"


def data_dir() -> Path:
    """The user's data folder for Handraise (``$XDG_DATA_HOME/handraise``): the default store lives here,
    so every command run from any folder finds the same one."""
    return platformdirs.user_data_path(APP_NAME)


def default_storage_url() -> str:
    return f"sqlite:///{data_dir() / 'handraise.db'}"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # Base of one-time links. Unset: the address actually served (see ``served_at``).
    public_url: str = "http://127.0.0.1:8080"
    # Largest request body accepted by any endpoint (413 beyond).
    max_body_bytes: int = Field(default=65536, ge=1024, le=16 * 1024 * 1024)

    @field_validator("public_url")
    @classmethod
    def _absolute_http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL, e.g. https://hr.example.com")
        if parts.query or parts.fragment:
            raise ValueError("must not carry a query or a fragment")
        return value.rstrip("/")

    @property
    def public_url_set(self) -> bool:
        return "public_url" in self.model_fields_set

    def served_at(self, host: str, port: int) -> None:
        """Record the address actually served; an unset ``public_url`` follows it (flags, port 0)."""
        self.host, self.port = host, port
        if not self.public_url_set:
            shown = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else host
            shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
            # Assigned through __dict__: model_fields_set keeps saying the operator never set it.
            self.__dict__["public_url"] = f"http://{shown}:{port}"


class StorageSettings(_Section):
    # Default: handraise.db in the user's data folder (``data_dir()``), whatever the working folder.
    url: str = Field(default_factory=default_storage_url)
    # PostgreSQL: connections in each of an instance's two pools (writes, reads). An instance opens at
    # most 2 × pool_size + 6 (its listener and leader locks); doctor checks it against max_connections.
    pool_size: int = Field(default=10, ge=1, le=200)
    # PostgreSQL: opening a connection gives up after this; a server found gone makes calls fail at once
    # (503 unavailable, Retry-After) until a connection succeeds again (core/store/breaker.py).
    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql://", "postgres://", "postgresql+asyncpg://")):
            raise ValueError("must be sqlite:///PATH or postgresql://user@host/db")
        return value


class FeedbackSettings(_Section):
    enabled: bool = True


class OpenWopSettings(_Section):
    # OpenWOP's conformance fixtures (only conformance-noop): off in production, on to run the published
    # feedback-*.test.ts scenarios against this host (README).
    conformance_fixtures: bool = False


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
    # A sensitive answer handed to the agent stays this long for its next call (a lost connection)
    # unless acknowledged or fetched again; then it is deleted.
    sensitive_grace_seconds: float = Field(default=30.0, ge=0, le=600)
    # What a request leaves behind once it is no longer pending (chat button tokens, chat message refs,
    # one-time links, connector state about it) is deleted by the sweeper this long after it was made
    # or last changed. Rating buttons under an answered question stop working then.
    spent_retention_seconds: int = Field(default=7 * 86400, ge=1)
    # Invalid answers one principal (a key, a link, a chat user) may make
    # within the window; beyond it 429 with Retry-After, and nothing is journaled.
    max_failed_attempts: int = Field(default=20, ge=1)
    failed_attempts_window_seconds: float = Field(default=300.0, gt=0)
    # Backpressure: a write (POST and the like) that would queue longer than this behind the ones in
    # flight, estimated from this instance's measured drain rate, is refused at once with 503 overloaded
    # and Retry-After, nothing done. 0: no time bound.
    max_write_queue_ms: int = Field(default=100, ge=0, le=60000)
    # A hard cap on writes one instance works on at once, whatever their timing. 0: no bound.
    max_writes_in_flight: int = Field(default=128, ge=0)
    # The least Retry-After of a shed write (the rest is the measured time to drain, at most 60 s).
    overload_retry_after_seconds: int = Field(default=1, ge=1, le=60)

    @model_validator(mode="after")
    def _default_within_max(self) -> LimitsSettings:
        if self.default_timeout_seconds > self.max_timeout_seconds:
            raise ValueError("default_timeout_seconds exceeds max_timeout_seconds")
        return self


class SecuritySettings(_Section):
    # The server secret keys the journal's chain, answer digests and the wrapping of sensitive answers.
    # It lives outside the database: give it here (or HANDRAISE_SECURITY__SECRET; 64 hex characters),
    # or let secret_file hold it (created 0600 on first start when absent). Every instance sharing
    # one database needs the same secret.
    secret: SecretStr | None = None
    # Default: server-secret in the user's config folder, apart from the database (core/serversecret.py).
    secret_file: str | None = None

    @field_validator("secret")
    @classmethod
    def _hex_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            raw = value.get_secret_value()
            if len(raw) < 64 or len(raw) % 2 or any(c not in "0123456789abcdefABCDEF" for c in raw):
                raise ValueError("must be at least 64 hex characters (32 random bytes)")
        return value


class LoggingSettings(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "console"] = "console"


class McpSettings(_Section):
    # MCP over streamable HTTP at /mcp (tools ask_human, request_approval, human_feedback).
    enabled: bool = True
    # While a tool waits for a human it sends progress this often, so clients that drop idle calls keep waiting.
    progress_interval_seconds: float = Field(default=10.0, gt=0, le=15)


class InboxSettings(_Section):
    """``[inbox]``: the operator inbox's one-time sign-in links and browser sessions."""

    # A sign-in link works once, within this many seconds of being made.
    signin_link_seconds: int = Field(default=900, ge=30, le=7 * 86400)
    # A session ends after this long without a request from its browser ...
    session_idle_seconds: int = Field(default=8 * 3600, ge=60, le=30 * 86400)
    # ... and after this long in any case.
    session_max_seconds: int = Field(default=7 * 86400, ge=60, le=90 * 86400)


# A person's id, and a group's name: what allowlists and ``assign_to`` name (``alice``, ``group:oncall``).
PERSON_ID = r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$"


class KeySettings(_Section):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    # What people read for this key ("Deploy bot"); ids never reach a human (core/names.py).
    name: str | None = Field(default=None, min_length=1, max_length=80)
    key: SecretStr | None = None
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    scopes: list[Scope] = Field(min_length=1)
    # The one person of the tenant this key acts as (``person:<id>``): only a key bound to alice answers,
    # votes and mints sign-ins as alice. Unset: the key acts as nobody (``operator:<id>``).
    person: str | None = Field(default=None, pattern=PERSON_ID)

    @model_validator(mode="after")
    def _exactly_one_secret(self) -> KeySettings:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of key or key_sha256")
        problem = scopes_problem(self.scopes, person=self.person)
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


# The channels a person may have an identity on: the connector names (core/people.py reads principals with them).
PERSON_CHANNELS: tuple[str, ...] = ("telegram", "slack", "matrix", "email")


class PersonSettings(_Section):
    """``[[tenants.people]]``: someone of this tenant, with their identity on each channel and their groups."""

    id: str = Field(pattern=PERSON_ID)
    # What people read ("Alice Example"); default: the id.
    name: str | None = Field(default=None, min_length=1, max_length=80)
    telegram: int | None = None
    slack: str | None = Field(default=None, pattern=r"^[UW][A-Z0-9]{2,}$")
    matrix: str | None = Field(default=None, pattern=r"^@[^:\s]+:\S+$")
    email: str | None = Field(default=None, max_length=254, pattern=r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")
    groups: list[str] = Field(default_factory=list)

    @field_validator("email")
    @classmethod
    def _lower_email(cls, value: str | None) -> str | None:
        # Compared with the address a reply comes from; mail systems vary the case.
        return value.lower() if value is not None else None

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: list[str]) -> list[str]:
        bad = [g for g in value if not re.fullmatch(PERSON_ID, g)]
        if bad:
            raise ValueError(f"not group names (a letter, then letters, digits, _ . -): {', '.join(bad)}")
        return list(dict.fromkeys(value))

    @property
    def display(self) -> str:
        return self.name or self.id

    def identity(self, channel: str) -> str | None:
        """This person's id on ``channel`` (a connector name), as that channel's principals carry it."""
        value = getattr(self, channel, None) if channel in PERSON_CHANNELS else None
        return None if value is None else str(value)


def _signing_secret(value: SecretStr) -> SecretStr:
    if len(value.get_secret_value()) < 16:
        raise ValueError("must be at least 16 characters")
    return value


# A secret that signs outgoing POSTs (core/signedpost.py): [[webhooks]] and [tenants.callbacks].
SigningSecret = Annotated[SecretStr, AfterValidator(_signing_secret)]


class CallbackSettings(_Section):
    """``[tenants.callbacks]``: how requests' ``callback_url`` POSTs are signed, and where they may go."""

    # Signs every callback exactly as [[webhooks]] are signed (core/signedpost.py).
    secret: SigningSecret
    # Hosts a callback may reach over plain http or at a loopback/private address (tests, an
    # agent beside the server). Anything else must be https to a public address.
    allow_hosts: list[str] = Field(default_factory=list, max_length=100)
    # One POST, connect to the last byte read; at most core/signedpost.py MAX_EXCHANGE_SECONDS.
    timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        # Host names compare case-insensitively; brackets of an IPv6 literal are optional here.
        return [host.strip().strip("[]").lower() for host in value]


KINDS: tuple[str, ...] = ("input", "approval", "choice")


class KindDefaults(_Section):
    """``[tenants.defaults.<kind>]``: what a request of that kind gets when its create leaves a field out."""

    timeout_seconds: int | None = Field(default=None, ge=1)
    assign_to: list[str] | None = Field(default=None, min_length=1, max_length=50)
    escalation: list[EscalationStep] | None = Field(default=None, min_length=1, max_length=MAX_STEPS)
    reminders: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, min_length=1, max_length=MAX_REMINDERS)
    # "expire", "reject" (approvals) or {default = <answer>} (never approvals; checked against each
    # request's schema at create).
    on_timeout: Literal["expire", "reject"] | dict[str, Any] | None = None

    @field_validator("on_timeout")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) != {"default"}:
            raise ValueError('must be "expire", "reject" or {default = <an answer>}')
        return value


class TenantSettings(_Section):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    name: str | None = Field(default=None, min_length=1, max_length=80)
    keys: list[KeySettings] = Field(default_factory=list)
    # Channels a request goes to when it names none; absent: every enabled channel serving this tenant.
    default_channels: list[str] | None = None
    # The IANA time zone deadlines and outcomes are shown in to this tenant's people ("Europe/Berlin").
    timezone: str = "UTC"
    # The language of its people's forms and pages when their browser asks for none we ship (core/i18n.py).
    locale: str = Field(default="en", pattern=r"^[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{2,8})*$")
    # Requests' callback_url: refused at create while this is absent (nothing to sign with).
    callbacks: CallbackSettings | None = None
    # Its people: allowlists and assignment name them (``alice``, ``group:oncall``); core/people.py.
    people: list[PersonSettings] = Field(default_factory=list)
    # Per kind of request, what a create that leaves them out gets (core/defaults.py).
    defaults: dict[Literal["input", "approval", "choice"], KindDefaults] = Field(default_factory=dict)

    @field_validator("people")
    @classmethod
    def _distinct_people(cls, value: list[PersonSettings]) -> list[PersonSettings]:
        ids: set[str] = set()
        owner: dict[tuple[str, str], str] = {}
        for person in value:
            if person.id in ids:
                raise ValueError(f"person id {person.id!r} appears twice")
            ids.add(person.id)
            for channel in PERSON_CHANNELS:
                identity = person.identity(channel)
                if identity is None:
                    continue
                if (channel, identity) in owner:
                    # One identity, two people: an answer from it could not say whose it is.
                    raise ValueError(f"{channel} {identity} is given for both {owner[channel, identity]} "
                                     f"and {person.id}: one identity belongs to one person")
                owner[channel, identity] = person.id
        return value

    def person(self, person_id: str) -> PersonSettings | None:
        return next((p for p in self.people if p.id == person_id), None)

    def unknown_references(self, refs: list[str]) -> list[str]:
        """Those of ``alice`` / ``group:oncall`` that name nobody of this tenant."""
        def named(ref: str) -> bool:
            if ref.startswith("group:"):
                return any(ref[len("group:"):] in p.groups for p in self.people)
            return self.person(ref) is not None
        return [ref for ref in refs if not named(ref)]

    def defaults_problem(self, *, default_timeout: int, max_timeout: int) -> str | None:
        """What is wrong with ``[tenants.defaults]`` (the key and why), or None. The request's own
        fields are checked again at create, against the request."""
        for kind, given in self.defaults.items():
            where = f"defaults.{kind}"
            timeout = given.timeout_seconds or default_timeout
            if timeout > max_timeout:
                return f"{where}.timeout_seconds: must be at most limits.max_timeout_seconds ({max_timeout})"
            for ref in self.unknown_references(given.assign_to or []):
                return f"{where}.assign_to: {ref} is not one of this tenant's people or groups ([[tenants.people]])"
            if given.on_timeout == "reject" and kind != "approval":
                return f'{where}.on_timeout: "reject" is for approvals only'
            if isinstance(given.on_timeout, dict) and kind == "approval":
                return f"{where}.on_timeout: an approval never takes a default: expiry is never consent"
            found = schedule_problems(escalation=given.escalation, reminders=given.reminders, timeout=timeout,
                                      unknown=self.unknown_references, channel_problem=_channel_problem)
            if found:
                return f"{where}.{found[0]['field']}: {found[0]['message']}"
        return None

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
    openwop: OpenWopSettings = Field(default_factory=OpenWopSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    inbox: InboxSettings = Field(default_factory=InboxSettings)
    tenants: list[TenantSettings] = Field(default_factory=list)
    # Connector sections: validated by each connector's own settings_model.
    telegram: dict[str, Any] | None = None
    matrix: dict[str, Any] | None = None
    slack: dict[str, Any] | None = None
    email: dict[str, Any] | None = None
    webhooks: list[dict[str, Any]] | None = None
    # The web channel (hosted forms) is always on: its table is there even when the file has none.
    web: dict[str, Any] = Field(default_factory=dict)
    # Where the values came from, for messages: the file, and key paths set by HANDRAISE_ variables.
    _source: Path | None = PrivateAttr(default=None)
    _env_names: dict[tuple[str, ...], str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _tenants(self) -> Settings:
        if not self.tenants:
            self.tenants = [TenantSettings(id=DEFAULT_TENANT)]
        seen: set[str] = set()
        key_ids: set[str] = set()
        for index, tenant in enumerate(self.tenants):
            if tenant.id in seen:
                raise ValueError(f"tenant id {tenant.id!r} appears twice")
            seen.add(tenant.id)
            for key in tenant.keys:
                if key.id in key_ids:
                    raise ValueError(f"key id {key.id!r} appears twice")
                if key.person is not None and tenant.person(key.person) is None:
                    raise ValueError(f"key {key.id!r}: {key.person} is not one of tenant {tenant.id}'s people")
                key_ids.add(key.id)
            problem = tenant.defaults_problem(default_timeout=self.limits.default_timeout_seconds,
                                              max_timeout=self.limits.max_timeout_seconds)
            if problem is not None:
                raise ValueError(f"tenants[{index}].{problem} (tenant {tenant.id})")
        return self

    @property
    def source(self) -> Path | None:
        """The config file these settings came from (None: the embedded default)."""
        return self._source

    def tenant(self, tenant_id: str) -> TenantSettings | None:
        for tenant in self.tenants:  # a loop, not next() over a generator: every request asks, often twice
            if tenant.id == tenant_id:
                return tenant
        return None

    def connector_section(self, name: str) -> Any:
        """The raw table of a connector, or None when it is not configured."""
        return getattr(self, name, None) if name in type(self).model_fields else None

    def config_error(self, error: ValidationError, *, section: tuple[str | int, ...] = ()) -> ConfigError:
        """The one line a user reads for a validation error of this config (or of one section of it)."""
        return _config_error(error, section=section, source=self._source, env_names=self._env_names)


# Channels a default's escalation step may name: the connectors (whether one serves the tenant is
# checked at create, when the enabled connectors are known).
_CHANNELS = frozenset({"telegram", "matrix", "slack", "email", "webhooks", "web"})


def _channel_problem(channel: str) -> str | None:
    return None if channel in _CHANNELS else f"{channel} is not a channel ({', '.join(sorted(_CHANNELS))})"


def _env_overrides(environ: dict[str, str], names: dict[tuple[str, ...], str]) -> dict[str, Any]:
    """``HANDRAISE_A__B=v`` → ``{"a": {"b": v}}``; values may be TOML literals. ``names`` gets each key
    path's variable name, so an error can name the variable rather than a key the user never wrote."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in _NOT_SETTINGS:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not parts:
            continue
        names[tuple(parts)] = name
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


def _config_error(error: ValidationError, *, section: tuple[str | int, ...], source: Path | None,
                  env_names: dict[tuple[str, ...], str]) -> ConfigError:
    loc, message = config_problem(error, section=section)
    # A value from the environment is named by its variable (the longest prefix that one set).
    for end in range(len(loc), 0, -1):
        name = env_names.get(tuple(str(p).lower() for p in loc[:end]))
        if name is not None:
            rest = dotted(loc[end:])
            return ConfigError(f"{name}{f' ({rest})' if rest else ''}: {message}")
    where = f"{source}: " if source is not None else ""
    if not loc and _KEY_FIRST.match(message):
        return ConfigError(f"{where}{message}")  # a check across tables names its key itself
    return ConfigError(f"{where}{dotted(loc) or '(top level)'}: {message}")


_KEY_FIRST = re.compile(r"^[a-z_]+\[\d+\]\.[a-z_.\d]+: ")


def _absolute_sqlite(url: str, base: Path) -> str:
    """A relative SQLite path is taken from ``base`` (the config file's folder, else the working folder)
    and made absolute, so the path printed and the file opened are the same from any folder."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return url
    path, sep, query = url[len(prefix):].partition("?")
    if not path or path == ":memory:" or Path(path).is_absolute():
        return url
    return f"{prefix}{(base / path).resolve()}{sep}{query}"


def load_settings(path: str | os.PathLike[str] | None = None, *, environ: dict[str, str] | None = None) -> Settings:
    """Read the TOML file (None: embedded default) and the environment; raise ConfigError."""
    environ = dict(os.environ if environ is None else environ)
    data: dict[str, Any] = {}
    file = Path(path) if path is not None else None
    if file is not None:
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{file}: no such config file; give an existing file to --config "
                              "or HANDRAISE_CONFIG") from None
        except IsADirectoryError:
            raise ConfigError(f"{file}: is a folder, not a config file") from None
        except PermissionError:
            raise ConfigError(f"{file}: cannot be read (permission denied)") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{file}: not UTF-8 text; save the config file as UTF-8") from None
        except OSError as e:
            raise ConfigError(f"{file}: cannot be read ({e.strerror or e})") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file}: not valid TOML: {e}") from None
    env_names: dict[tuple[str, ...], str] = {}
    overrides = _env_overrides(environ, env_names)
    from_file = isinstance(data.get("storage"), dict) and "url" in data["storage"]
    data = _merge(data, overrides)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as e:
        raise _config_error(e, section=(), source=file, env_names=env_names) from None
    settings._source = file
    settings._env_names = env_names
    from_env = ("storage", "url") in env_names
    base = file.parent if file is not None and from_file and not from_env else Path.cwd()
    settings.storage.url = _absolute_sqlite(settings.storage.url, base.absolute())
    return settings

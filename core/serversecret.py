"""The server secret: random bytes kept outside the database, from which the keys of the journal's
chain, of answer digests and of the wrapping of sensitive answers are derived (one key per purpose).

Where it lives, first found first: ``[security] secret`` (or ``HANDRAISE_SECURITY__SECRET``); the file
``[security] secret_file``; the file earlier versions made by default (``handraise.secret`` beside the
SQLite file, ``secret`` in the data folder with PostgreSQL), still read where it is since the database's
sealed answers and digests depend on it; else ``server-secret`` in the user's config folder
(``~/.config/handraise`` on Linux), made on first start. The config folder, not the data folder: whoever
copies the folder that holds the database must not get the key that checks guesses of its digests.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from handraise.core.config import APP_NAME, Settings, data_dir
from handraise.core.errors import ConfigError

log = logging.getLogger(__name__)

SECRET_BYTES = 32
SECRET_FILE_NAME = "server-secret"
_LEGACY_SQLITE_NAME = "handraise.secret"
_LEGACY_DATA_NAME = "secret"


class ServerSecret:
    def __init__(self, raw: bytes) -> None:
        if len(raw) < SECRET_BYTES:
            raise ConfigError(f"the server secret must be at least {SECRET_BYTES} bytes")
        self._raw = raw

    def key(self, purpose: str) -> bytes:
        """A key for one purpose: knowing one tells nothing of another (HMAC as a PRF)."""
        return hmac.new(self._raw, b"handraise key v1\x00" + purpose.encode(), hashlib.sha256).digest()

    @property
    def fingerprint(self) -> str:
        """Recorded in the database, so an instance started with another secret refuses to run."""
        return self.key("fingerprint").hex()[:32]

    def __repr__(self) -> str:
        return "ServerSecret(<hidden>)"


@dataclass(frozen=True)
class SecretLocation:
    """The secret file in use: ``legacy`` when it is the file an earlier version made by default."""

    path: Path
    legacy: bool = False


def config_dir() -> Path:
    """The user's config folder for Handraise (``$XDG_CONFIG_HOME/handraise``): the secret's default home."""
    return platformdirs.user_config_path(APP_NAME)


def default_secret_path() -> Path:
    return config_dir() / SECRET_FILE_NAME


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite database file of ``settings`` (absolute), None for PostgreSQL or an in-memory database."""
    url = settings.storage.url
    if url.startswith("sqlite:///"):
        database = url[len("sqlite:///"):].split("?", 1)[0]
        if database and database != ":memory:":
            return Path(database).resolve()
    return None


def legacy_secret_path(settings: Settings) -> Path:
    """Where versions before the config folder made the secret by default."""
    database = sqlite_file(settings)
    return database.parent / _LEGACY_SQLITE_NAME if database else data_dir() / _LEGACY_DATA_NAME


def secret_location(settings: Settings) -> SecretLocation | None:
    """The secret file these settings use (it may not exist yet); None when the secret is given inline."""
    if settings.security.secret is not None:
        return None
    if settings.security.secret_file:
        return SecretLocation(Path(settings.security.secret_file))
    legacy = legacy_secret_path(settings)
    if legacy.exists():
        return SecretLocation(legacy, legacy=True)
    return SecretLocation(default_secret_path())


def shares_folder_with_database(path: Path, settings: Settings) -> bool:
    database = sqlite_file(settings)
    return database is not None and path.resolve().parent == database.parent


def load_server_secret(settings: Settings) -> ServerSecret:
    """The configured secret, else the secret file (made once, 0600, by whichever process comes first)."""
    given = settings.security.secret
    if given is not None:
        return ServerSecret(bytes.fromhex(given.get_secret_value()))
    location = secret_location(settings)
    assert location is not None
    path = location.path
    if location.legacy and shares_folder_with_database(path, settings):
        log.warning("server secret %s sits beside the database: whoever copies that folder can check guesses "
                    "of sensitive answers against their digests; move it out of that folder (handraise doctor "
                    "says how)", path)
    if not path.exists():
        legacy = legacy_secret_path(settings)
        if legacy.exists() and legacy.resolve() != path.resolve():
            # secret_file names a new home for an existing deployment: the secret its database was set up
            # with goes there, never a new one. The old file stays until its owner deletes it.
            _create(path, legacy.read_bytes())
            log.warning("server secret copied from %s to [security] secret_file %s; delete the old file once "
                        "every instance reads the new one", legacy, path)
        else:
            _create(path, (secrets.token_hex(SECRET_BYTES) + "\n").encode("ascii"))
    try:
        text = path.read_text(encoding="ascii").strip()
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            log.warning("server secret %s is readable by group or others; chmod 600 it", path)
        return ServerSecret(bytes.fromhex(text))
    except (OSError, ValueError) as e:
        raise ConfigError(f"server secret file {path}: {e}") from None


def _create(path: Path, content: bytes) -> None:
    """Write ``path`` (0600, in a 0700 folder when the folder is new) unless another process got there first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Written whole under a temporary name, then linked into place: a process starting at the
    # same moment either finds no file or the complete one, and the first link wins.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink()

"""The server secret: random bytes kept outside the database, from which the keys of the journal's
chain, of answer digests and of the wrapping of sensitive answers are derived (one key per purpose)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from handraise.core.config import Settings, data_dir
from handraise.core.errors import ConfigError

SECRET_BYTES = 32


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


def default_secret_path(settings: Settings) -> Path:
    url = settings.storage.url
    if url.startswith("sqlite:///"):
        database = url[len("sqlite:///"):].split("?", 1)[0]
        if database and database != ":memory:":
            return Path(database).resolve().parent / "handraise.secret"
    return data_dir() / "secret"


def load_server_secret(settings: Settings) -> ServerSecret:
    """The configured secret, else the secret file (made once, 0600, by whichever process comes first)."""
    given = settings.security.secret
    if given is not None:
        return ServerSecret(bytes.fromhex(given.get_secret_value()))
    path = Path(settings.security.secret_file) if settings.security.secret_file else default_secret_path(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole under a temporary name, then linked into place: a process starting at the
        # same moment either finds no file or the complete one, and the first link wins.
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(SECRET_BYTES) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink()
    try:
        text = path.read_text(encoding="ascii").strip()
        return ServerSecret(bytes.fromhex(text))
    except (OSError, ValueError) as e:
        raise ConfigError(f"server secret file {path}: {e}") from None

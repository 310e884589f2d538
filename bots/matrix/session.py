"""Logging the bot in: an access token as given, or a password login whose session is kept under store_path.

A password login mints a new access token; keeping it lets a restart reuse the session."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from nio import LoginResponse, WhoamiResponse

from handraise.bots.matrix.homeserver import HomeserverCalls
from handraise.bots.matrix.settings import MatrixSettings
from handraise.core.errors import ConfigError

log = logging.getLogger(__name__)


def session_file(settings: MatrixSettings) -> Path | None:
    """Where a password login's session is kept (one file per homeserver and user), if anywhere."""
    if settings.store_path is None:
        return None
    name = hashlib.sha256(f"{settings.homeserver} {settings.user_id}".encode()).hexdigest()[:16]
    return Path(settings.store_path) / f"session-{name}.json"


def saved_session(settings: MatrixSettings) -> str | None:
    """The access token a password login saved under store_path, if any."""
    path = session_file(settings)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("access_token") if data.get("user_id") == settings.user_id else None


class MatrixSession(HomeserverCalls):
    """Logs the bot in once per start and checks the token is the configured user's."""

    async def _log_in(self) -> None:
        settings = self.settings
        client = self.client
        if settings.access_token is not None:
            client.access_token = settings.access_token.get_secret_value()
            client.user_id = settings.user_id
            await self._check_identity()
            return
        saved = self._load_session()
        if saved is not None:
            client.access_token, client.device_id = saved["access_token"], saved["device_id"]
            client.user_id = settings.user_id
            try:
                await self._check_identity()
                return
            except ConfigError:
                self.log.info("matrix: the saved session is no longer valid; logging in again")
                client.access_token = ""
        assert settings.password is not None
        response = await self._call(
            client.login(password=settings.password.get_secret_value(), device_name="Handraise"),
            LoginResponse, "log in", auth=True)
        self._save_session(response)
        await self._check_identity()

    async def _check_identity(self) -> None:
        response = await self._call(self.client.whoami(), WhoamiResponse, "check the access token", auth=True)
        if response.user_id != self.settings.user_id:
            raise ConfigError(f"matrix.user_id is {self.settings.user_id} but the access token belongs to "
                              f"{response.user_id}")
        if response.device_id:
            self.client.device_id = response.device_id

    def _load_session(self) -> dict[str, str] | None:
        path = session_file(self.settings)
        if path is None or not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            log.warning("matrix: ignoring an unreadable session file in store_path")
            return None
        if (data.get("user_id") != self.settings.user_id or data.get("homeserver") != self.settings.homeserver
                or not data.get("access_token") or not data.get("device_id")):
            return None
        return data

    def _save_session(self, response: LoginResponse) -> None:
        path = session_file(self.settings)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = {"homeserver": self.settings.homeserver, "user_id": response.user_id,
                "device_id": response.device_id, "access_token": response.access_token}
        partial = path.with_suffix(".tmp")
        # The file holds an access token: readable by this user only, from its first byte.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(partial, path)

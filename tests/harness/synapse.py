"""A real Synapse homeserver for tests: loopback only, SQLite, ephemeral port.

Start it once per pytest session through the ``synapse`` fixture in
``harness/fixtures.py``. Every test shares that server, so register users
with unique localparts (``unique_localpart``) rather than fixed names.

This module is named ``synapse`` but must never be imported as a top-level
``synapse`` (pytest's prepend import mode puts ``tests/harness`` on sys.path):
it therefore never imports the real ``synapse`` package in-process. Synapse
runs in a subprocess whose working directory is its temporary directory.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import importlib.metadata
import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any


log = logging.getLogger(__name__)

# Every rate limiter Synapse 1.163 parses as {per_second, burst_count}; the
# defaults (e.g. 0.2 messages/s, burst 10) make a fast test suite flaky.
_RATE_LIMIT_KEYS: tuple[str, ...] = (
    "rc_message",
    "rc_registration",
    "rc_registration_token_validity",
    "rc_login.address",
    "rc_login.account",
    "rc_login.failed_attempts",
    "rc_admin_redaction",
    "rc_joins.local",
    "rc_joins.remote",
    "rc_joins_per_room",
    "rc_invites.per_room",
    "rc_invites.per_user",
    "rc_invites.per_issuer",
    "rc_third_party_invite",
    "rc_room_creation",
    "rc_key_requests",
    "rc_3pid_validation",
    "rc_media_create",
    "rc_presence.per_user",
    "rc_delayed_event_mgmt",
    "rc_reports",
    "rc_user_directory",
    "rc_profile",
)
_RATE_LIMIT = {"per_second": 1000, "burst_count": 1000}

# Written instead of the generated log config: the generated one buffers INFO
# lines in memory, so the tail we show on a failed start could be stale.
_LOG_CONFIG = """\
version: 1
formatters:
  precise:
    format: '%(asctime)s - %(name)s - %(lineno)d - %(levelname)s - %(request)s - %(message)s'
handlers:
  file:
    class: logging.FileHandler
    formatter: precise
    filename: {path}
    encoding: utf8
root:
  level: INFO
  handlers: [file]
disable_existing_loggers: false
"""

# Generated config and signing key per server name, so a session that starts
# several servers pays for `--generate-config` (about 3 s) once.
_generated: dict[str, tuple[dict[str, Any], str]] = {}


class SynapseError(RuntimeError):
    """Synapse failed to start, or answered an admin call with an error."""


def synapse_missing_reason() -> str | None:
    """Why Synapse cannot run here, or None when matrix-synapse is installed."""
    # Ask the installed distributions instead of importing: a top-level
    # `synapse` on sys.path may be this very file.
    try:
        importlib.metadata.version("matrix-synapse")
    except importlib.metadata.PackageNotFoundError:
        return (
            "matrix-synapse is not installed; install the test extras with "
            "`python3 -m pip install -e '.[test]'`"
        )
    return None


def unique_localpart(prefix: str = "user") -> str:
    """A localpart no other test on the shared server will pick."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return f"({path.name} was not written)"
    return "\n".join(text.splitlines()[-lines:])


def _set_dotted(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = dict(value)


class SynapseServer:
    """One Synapse process bound to 127.0.0.1 on an ephemeral port."""

    def __init__(
        self,
        *,
        workdir: Path,
        server_name: str = "localhost",
        startup_timeout: float = 60.0,
    ) -> None:
        self._workdir = Path(workdir)
        self._server_name = server_name
        self._startup_timeout = startup_timeout
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._shared_secret: str | None = None

    @property
    def server_name(self) -> str:
        return self._server_name

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise SynapseError("Synapse has not been started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def log_path(self) -> Path:
        return self._workdir / "homeserver.log"

    @property
    def _stderr_path(self) -> Path:
        return self._workdir / "synapse.stderr"

    @property
    def _config_path(self) -> Path:
        return self._workdir / "homeserver.yaml"

    def start(self) -> None:
        """Write the config, launch Synapse and return once /health answers."""
        if self._process is not None:
            raise SynapseError("Synapse is already running")
        self._workdir.mkdir(parents=True, exist_ok=True)
        # The port is picked free and then released, so another process can
        # take it before Synapse binds: retry with a new port in that case.
        attempts = 3
        for attempt in range(1, attempts + 1):
            self._port = _free_port()
            self._write_config(self._port)
            try:
                self._launch()
            except SynapseError as exc:
                if "Address already in use" not in str(exc) or attempt == attempts:
                    raise
                log.warning("synapse port %d was taken, retrying", self._port)
            else:
                return

    def stop(self) -> None:
        """Terminate Synapse (SIGTERM, then SIGKILL after 10 s); idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self._kill)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        log.info("synapse stopped (exit %s)", process.returncode)

    def register_user(
        self, localpart: str, password: str, admin: bool = False
    ) -> tuple[str, str, str]:
        """Register through the shared-secret admin API.

        Returns ``(user_id, access_token, device_id)``; the HMAC is the one
        ``register_new_matrix_user`` computes.
        """
        if self._shared_secret is None:
            raise SynapseError("Synapse has not been started")
        url = f"{self.base_url}/_synapse/admin/v1/register"
        nonce = self._request("GET", url)["nonce"]
        mac = hmac.new(self._shared_secret.encode("utf-8"), digestmod=hashlib.sha1)
        for part in (nonce, localpart, password):
            mac.update(part.encode("utf-8"))
            mac.update(b"\x00")
        mac.update(b"admin" if admin else b"notadmin")
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        result = self._request("POST", url, body)
        log.info("registered %s on synapse", result["user_id"])
        return result["user_id"], result["access_token"], result["device_id"]

    def _request(
        self, method: str, url: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            # Synapse's error body holds errcode/error only, never a secret.
            detail = exc.read().decode("utf-8", errors="replace")
            raise SynapseError(f"{method} {url} -> HTTP {exc.code}: {detail}") from exc

    def _generated_config(self) -> tuple[dict[str, Any], str]:
        cached = _generated.get(self._server_name)
        if cached is not None:
            return cached
        gen_dir = self._workdir / "generated"
        gen_dir.mkdir(parents=True, exist_ok=True)
        config_path = gen_dir / "homeserver.yaml"
        command = [
            sys.executable,
            "-m",
            "synapse.app.homeserver",
            "--server-name",
            self._server_name,
            "--config-path",
            str(config_path),
            "--generate-config",
            "--report-stats=no",
        ]
        # cwd matters: `python -m` puts it first on sys.path, and it must not
        # be a directory holding this file.
        result = subprocess.run(
            command, cwd=gen_dir, capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise SynapseError(
                "synapse --generate-config failed:\n"
                + "\n".join((result.stdout + result.stderr).splitlines()[-40:])
            )
        import yaml  # PyYAML comes with matrix-synapse: imported only when a Synapse is started

        config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        signing_key = Path(config["signing_key_path"]).read_text(encoding="utf-8")
        _generated[self._server_name] = (config, signing_key)
        return config, signing_key

    def _write_config(self, port: int) -> None:
        generated, signing_key = self._generated_config()
        config = json.loads(json.dumps(generated))  # deep copy of plain YAML data
        workdir = self._workdir
        signing_key_path = workdir / f"{self._server_name}.signing.key"
        signing_key_path.write_text(signing_key, encoding="utf-8")
        log_config_path = workdir / "log.yaml"
        log_config_path.write_text(
            _LOG_CONFIG.format(path=json.dumps(str(self.log_path))), encoding="utf-8"
        )
        config.update(
            {
                "pid_file": str(workdir / "homeserver.pid"),
                "listeners": [
                    {
                        "port": port,
                        "bind_addresses": ["127.0.0.1"],
                        "type": "http",
                        "tls": False,
                        "x_forwarded": False,
                        "resources": [{"names": ["client"], "compress": False}],
                    }
                ],
                "database": {
                    "name": "sqlite3",
                    "args": {"database": str(workdir / "homeserver.db")},
                },
                "log_config": str(log_config_path),
                "media_store_path": str(workdir / "media_store"),
                "signing_key_path": str(signing_key_path),
                "trusted_key_servers": [],
                "suppress_key_server_warning": True,
                "federation_domain_whitelist": [],
                "enable_registration": True,
                # Synapse refuses to start with open registration unless this
                # is set too; the server is reachable from loopback only.
                "enable_registration_without_verification": True,
                "bcrypt_rounds": 4,
                "presence": {"enabled": False},
                "url_preview_enabled": False,
                "report_stats": False,
            }
        )
        for key in _RATE_LIMIT_KEYS:
            _set_dotted(config, key, _RATE_LIMIT)
        self._shared_secret = config["registration_shared_secret"]
        import yaml

        self._config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    def _launch(self) -> None:
        assert self._port is not None
        for stale in (self.log_path, self._stderr_path):
            stale.unlink(missing_ok=True)
        with self._stderr_path.open("wb") as stderr:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "synapse.app.homeserver",
                    "--config-path",
                    str(self._config_path),
                ],
                cwd=self._workdir,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                start_new_session=True,
            )
        atexit.register(self._kill)
        started = time.monotonic()
        deadline = started + self._startup_timeout
        health_url = f"{self.base_url}/health"
        while True:
            if self._process.poll() is not None:
                code = self._process.returncode
                self.stop()
                raise SynapseError(f"Synapse exited with {code} during start\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(health_url, timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise SynapseError(
                    f"Synapse did not answer {health_url} within "
                    f"{self._startup_timeout:.0f} s\n{self._log_tail()}"
                )
            # Poll interval only: the loop ends on the health answer above.
            time.sleep(0.05)
        log.info(
            "synapse ready at %s in %.1f s", self.base_url, time.monotonic() - started
        )

    def _log_tail(self) -> str:
        return (
            f"--- {self._stderr_path.name} (tail) ---\n{_tail(self._stderr_path, 30)}\n"
            f"--- {self.log_path.name} (tail) ---\n{_tail(self.log_path, 40)}"
        )

    def _kill(self) -> None:
        # Last resort at interpreter exit when a session was interrupted.
        if self._process is not None and self._process.poll() is None:
            self._process.kill()

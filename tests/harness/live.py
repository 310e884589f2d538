"""A real ``handraise serve`` in its own process, for tests that need one outside the test's event loop.

The sync client, the MCP stdio server, the examples and the kill -9 tests talk to it as any agent
would. It listens on a fixed ephemeral port chosen at start, so a restart comes back on the same
address; ``kill()`` is SIGKILL (nothing flushed, nothing closed), ``start()`` brings it back on
the same SQLite file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

AGENT_KEY = "live-agent-key-0123456789abcdef"
OPERATOR_KEY = "live-operator-key-0123456789abcdef"
READER_KEY = "live-reader-key-0123456789abcdef"
FORWARD_KEY = "live-forward-agent-key-0123456789abcdef"
OTHER_AGENT_KEY = "live-other-agent-key-0123456789abcdef"
OTHER_OPERATOR_KEY = "live-other-operator-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml_value(value: Any) -> str:
    return json.dumps(value)  # strings, numbers, booleans and flat lists read the same in TOML


def write_config(path: Path, *, db: Path | None = None, port: int, extra: str = "",
                 storage_url: str | None = None) -> None:
    """The live server's config: ``db`` (a SQLite file) or ``storage_url`` (e.g. PostgreSQL), then ``extra``."""
    url = storage_url if storage_url is not None else f"sqlite:///{db}"
    keys = {"acme": [("agent-1", AGENT_KEY, ["ask"]), ("agent-fwd", FORWARD_KEY, ["ask", "forward"]),
                     ("op-1", OPERATOR_KEY, ["answer", "read"]),
                     ("reader-1", READER_KEY, ["read"])],
            "globex": [("agent-2", OTHER_AGENT_KEY, ["ask"]), ("op-2", OTHER_OPERATOR_KEY, ["answer", "read"])]}
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", f'public_url = "http://127.0.0.1:{port}"', "",
             "[storage]", f"url = {_toml_value(url)}", "", "[limits]", "sweep_interval_seconds = 0.1",
             "", "[logging]", 'level = "WARNING"', ""]
    for tenant, entries in keys.items():
        lines += ["[[tenants]]", f"id = {_toml_value(tenant)}"]
        for key_id, key, scopes in entries:
            lines += ["  [[tenants.keys]]", f"  id = {_toml_value(key_id)}", f"  key = {_toml_value(key)}",
                      f"  scopes = {_toml_value(scopes)}"]
        lines.append("")
    path.write_text("\n".join(lines) + extra, encoding="utf-8")


class LiveServer:
    def __init__(self, workdir: Path, *, extra_config: str = "") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "handraise.toml"
        write_config(self.config, db=workdir / "handraise.db", port=self.port, extra=extra_config)
        self._process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, *, timeout: float = 60.0) -> None:
        """Start and return once the server says it is serving (the socket listens)."""
        env = {**os.environ, "HANDRAISE_CONFIG": str(self.config), "PYTHONUNBUFFERED": "1"}
        env.pop("HANDRAISE_KEY", None)
        process = subprocess.Popen([sys.executable, "-m", "handraise", "serve"], cwd=self.workdir, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        self._process = process
        ready = threading.Event()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.output.append(line.rstrip())
                if "serving on" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, name="live-server-output", daemon=True).start()
        if not ready.wait(timeout) or process.poll() is not None:
            self.stop()
            raise RuntimeError("handraise serve did not start:\n" + "\n".join(self.output[-30:]))

    def kill(self) -> None:
        """SIGKILL: the process ends at once, mid-request, with nothing flushed or closed."""
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)
            self._process = None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=30)
        self._process = None


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real ``handraise serve`` process for the session (SQLite); tests use fresh unique_ids."""
    server = LiveServer(tmp_path_factory.mktemp("live"))
    server.start()
    yield server
    server.stop()

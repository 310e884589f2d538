"""A private, throwaway PostgreSQL cluster for what stops or restarts a server (issue 19's faults).

``initdb`` into a temporary folder, its own port on loopback (trust auth), started, stopped and
restarted with ``pg_ctl``, removed afterwards: tests/core/test_faults.py and bench/faults.py
restart this one, never the machine's shared server on 127.0.0.1:5432 (other engineers' runs use it).
As root, PostgreSQL's tools run as the ``postgres`` user (``runuser``): initdb refuses root.

    with PgCluster.create() as cluster:          # or: async with cluster_running() as cluster
        url = cluster.url("handraise")           # a database made by create_database()
        cluster.restart()                        # fast mode: every connection drops

Where initdb is missing, ``missing_reason()`` says why; callers skip with it (fail in CI).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Debian's layout; HANDRAISE_TEST_PG_BIN names another folder holding initdb and pg_ctl.
_DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
OWNER = "postgres"
# Small and fast: a throwaway cluster needs no durability, and the machine is shared.
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "120",  # three instances of bench/faults.py, 26 connections each, and the bench
    "shared_buffers": "16MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
}


def find_bindir() -> Path | None:
    """The newest PostgreSQL's bin folder holding initdb and pg_ctl, or None."""
    override = os.environ.get("HANDRAISE_TEST_PG_BIN")
    candidates = [override] if override else sorted(glob.glob(_DEBIAN_BINDIRS),
                                                    key=lambda p: _version_key(Path(p).parent.name), reverse=True)
    for c in candidates:
        path = Path(c)
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def missing_reason() -> str | None:
    """Why no private cluster can be made here (None: it can)."""
    if find_bindir() is None:
        return ("PostgreSQL's initdb and pg_ctl were not found in /usr/lib/postgresql/*/bin (install the "
                "postgresql package, or set HANDRAISE_TEST_PG_BIN)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OWNER)
        except KeyError:
            return f"running as root, and there is no {OWNER!r} user to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root, and runuser (util-linux) is missing"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """One cluster in its own folder; ``create()`` makes it, ``remove()`` stops it and deletes the folder."""

    def __init__(self, *, root: Path, port: int, bindir: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self.bindir = bindir
        self.log = root / "server.log"

    # -- making and removing -----------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def create(cls, *, start: bool = True) -> Iterator[PgCluster]:
        """A new cluster (started unless told otherwise), stopped and removed when the block ends."""
        reason = missing_reason()
        if reason is not None:
            raise RuntimeError(reason)
        bindir = find_bindir()
        assert bindir is not None
        # Under /tmp itself, not pytest's tmp_path: the postgres user must be able to reach it.
        root = Path(tempfile.mkdtemp(prefix="handraise-pg-"))
        cluster = cls(root=root, port=free_port(), bindir=bindir)
        try:
            cluster._initdb()
            if start:
                cluster.start()
            yield cluster
        finally:
            cluster.remove()

    def _initdb(self) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(OWNER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "--auth=trust", "--username=postgres", "--no-sync",
                  "--encoding=UTF8", "--locale=C")
        settings = dict(_SETTINGS, port=str(self.port), unix_socket_directories=f"'{self.root}'")
        with (self.data / "postgresql.auto.conf").open("a", encoding="utf-8") as f:
            for key, value in settings.items():
                f.write(f"{key} = {value}\n")

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.resume()
        with contextlib.suppress(Exception):
            if self.running():
                self.stop(mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- running ---------------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, *, mode: str = "fast") -> None:
        """``fast``: every session is ended and the server shuts down cleanly; ``immediate``: a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, *, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", mode, "-w", "-t", "60", "restart")

    def pause(self) -> None:
        """SIGSTOP the postmaster: connections already open keep working (their backends run on), new ones
        are accepted by the kernel and never answered, as from a server that hangs or a black-holed route."""
        os.kill(self.postmaster_pid(), signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.postmaster_pid(), signal.SIGCONT)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def create_database(self, name: str) -> str:
        """Make a database on this cluster; its URL."""
        self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                  "-v", "ON_ERROR_STOP=1", "-q", "-c", f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", OWNER, "--", *argv]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                              cwd=self.root)
        if check and done.returncode != 0:
            tail = ""
            with contextlib.suppress(OSError):
                tail = self.log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{tool} {' '.join(args[-1:])} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout)[-1500:]}\n{tail}")
        return done

"""Server processes for the bench: the real ``handraise serve`` (SQLite or a throwaway PostgreSQL database) and
the floor, each in its own process so the client and the server run on different cores."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
TENANT = "bench"
ASK_KEY = "bench-agent-key-0123456789abcdef"
ANSWER_KEY = "bench-operator-key-0123456789abcdef"
PG_ADMIN_DSN = os.environ.get("BENCH_PG_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
# The question every bench request asks: a small schema the answer is validated against; not sensitive, as
# a sensitive answer adds its deletion (and a WAL checkpoint on SQLite) to every cycle.
MESSAGE = "Enter the six-digit code sent to your phone."
SCHEMA = {"type": "string", "pattern": "^[0-9]{6}$"}
# A parked wait must outlive the slowest phase of the 10,000-waiter run; the cap is raised to match.
MAX_WAIT_SECONDS = 900


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (children inherit it); returns the new soft limit."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (VmRSS from /proc, kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, str | int]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    import aiohttp as _aiohttp

    return {"nproc": os.cpu_count() or 0, "cpu": model, "memory_gb": round(mem_kb / 1024 / 1024),
            "python": sys.version.split()[0], "aiohttp": _aiohttp.__version__,
            "load_avg_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg())}


@dataclass
class Running:
    """A started server: its base URL and process (for RSS and CPU readings)."""

    name: str
    base: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid


def tenant_suffixes(count: int) -> list[str]:
    """``count`` bench tenants' suffixes: the bench's tenant is ``bench`` with the plain keys, the others
    ``bench-2`` … with ``-2`` … after each id and key."""
    return [""] + [f"-{n}" for n in range(2, count + 1)]


def config_toml(storage_url: str, *, tenants: int = 1) -> str:
    text = f"""
[storage]
url = "{storage_url}"

[logging]
level = "WARNING"

[limits]
max_wait_seconds = {MAX_WAIT_SECONDS}
"""
    for n in tenant_suffixes(tenants):
        text += f"""
[[tenants]]
id = "{TENANT}{n}"

  [[tenants.keys]]
  id = "bench-agent{n}"
  key = "{ASK_KEY}{n}"
  scopes = ["ask"]

  [[tenants.keys]]
  id = "bench-operator{n}"
  key = "{ANSWER_KEY}{n}"
  scopes = ["answer", "read"]
"""
    return text


def write_config(*, storage_url: str, workdir: Path) -> Path:
    """The bench's config file for a store (one per store; every server and the seeding read it)."""
    name = "postgresql" if storage_url.startswith("postgresql") else "sqlite"
    path = workdir / f"{name}.toml"
    path.write_text(config_toml(storage_url), encoding="utf-8")
    return path


async def seed_requests(*, storage_url: str, workdir: Path, count: int, concurrency: int = 8) -> list[str]:
    """``count`` pending requests made by the real lifecycle code in this process, before a server starts.

    Only the waiters' memory is measured, so they need not be created over HTTP (minutes at SQLite's
    create rate); going through ``RequestService.create`` keeps them real requests, journal and all.
    """
    from handraise.core.api import CreateRequestBody
    from handraise.core.config import load_settings
    from handraise.core.events import EventBus
    from handraise.core.serversecret import load_server_secret
    from handraise.core.service import RequestService
    from handraise.core.store import Store

    settings = load_settings(write_config(storage_url=storage_url, workdir=workdir))
    store = Store(url=settings.storage.url, secret=load_server_secret(settings))
    service = RequestService(settings=settings, store=store, bus=EventBus(instance_id="bench-seed"))
    run = secrets.token_hex(3)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str:
        body = CreateRequestBody.model_validate({
            "unique_id": f"bench-seed-{run}-{i}", "message_for_user": MESSAGE, "timeout_seconds": 3600,
            "schema": SCHEMA})
        async with gate:
            view, _ = await service.create(tenant_id=TENANT, principal="agent:bench-agent", body=body)
        return view.id

    await store.open()
    try:
        return list(await asyncio.gather(*(one(i) for i in range(count))))
    finally:
        await store.close()


async def _until_healthy(base: str, process: subprocess.Popen[bytes], *, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode} before serving")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(f"{base}/healthz") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{what} did not answer /healthz within {timeout:.0f} s")


async def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        for _ in range(200):
            if process.poll() is not None:
                break
            await asyncio.sleep(0.05)
        else:
            process.kill()
    process.wait()


def _spawn(argv: list[str], *, log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("wb")
    try:
        return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


@contextlib.asynccontextmanager
async def handraise_server(*, storage_url: str, workdir: Path, name: str,
                           config: Path | None = None) -> AsyncIterator[Running]:
    """``python -m core.cli serve`` on a fresh port with the bench's config (or ``config``); stopped on exit."""
    config = config or write_config(storage_url=storage_url, workdir=workdir)
    port = free_port()
    log_path = workdir / f"{name}.log"
    entry = ["-m", "handraise.core.cli", "serve"]
    # To bench a modified server without touching the tree: a script taking the CLI's arguments
    # (not a HANDRAISE_ variable: the server would read those as config keys).
    if os.environ.get("BENCH_SERVE_SCRIPT"):
        entry = [os.environ["BENCH_SERVE_SCRIPT"], "serve"]
    process = _spawn([sys.executable, *entry, "--config", str(config), "--port", str(port)], log_path=log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            await _until_healthy(base, process, what="handraise serve")
        except RuntimeError as e:
            raise RuntimeError(f"{e}; its output:\n{_tail(log_path)}") from None
        yield Running(name=name, base=base, process=process)
    finally:
        await _stop(process)


@contextlib.asynccontextmanager
async def floor_server(*, workdir: Path) -> AsyncIterator[Running]:
    """The bare aiohttp server of ``bench/floor.py``."""
    port = free_port()
    log_path = workdir / "floor.log"
    process = _spawn([sys.executable, str(BENCH / "floor.py"), "--port", str(port)], log_path=log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            await _until_healthy(base, process, what="the floor server")
        except RuntimeError as e:
            raise RuntimeError(f"{e}; its output:\n{_tail(log_path)}") from None
        yield Running(name="floor", base=base, process=process)
    finally:
        await _stop(process)


@contextlib.asynccontextmanager
async def sqlite_url(workdir: Path) -> AsyncIterator[str]:
    yield f"sqlite:///{workdir / 'bench.db'}"


@contextlib.asynccontextmanager
async def postgres_url() -> AsyncIterator[str]:
    """A fresh database on the local PostgreSQL, dropped afterwards."""
    import asyncpg

    name = f"handraise_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base, _, _db = PG_ADMIN_DSN.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="handraise-bench-") as d:
        yield Path(d)



async def journal_check(url: str, config: Path) -> dict[str, object]:
    """After a run on PostgreSQL: requests with two ``answered`` entries, answered requests, entries, chains;
    and ``handraise journal verify`` run as an operator would, with ``config``."""
    import asyncpg

    conn = await asyncpg.connect(url, timeout=10)
    try:
        doubled = await conn.fetchval(
            "SELECT count(*) FROM (SELECT request_id FROM journal WHERE event = 'answered' "
            "GROUP BY request_id HAVING count(*) > 1) d")
        answered = await conn.fetchval("SELECT count(*) FROM requests WHERE status = 'answered'")
        pending = await conn.fetchval("SELECT count(*) FROM requests WHERE status = 'pending'")
        entries = await conn.fetchval("SELECT count(*) FROM journal")
        chains = await conn.fetchval("SELECT count(*) FROM journal_heads")
    finally:
        await conn.close()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "handraise.core.cli", "journal", "verify",
                                                "--config", str(config), cwd=REPO, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(proc.communicate(), 600)
    return {"journal_doubled": doubled, "db_answered": answered, "db_pending": pending, "journal_entries": entries,
            "chains": chains, "journal_verify_rc": proc.returncode,
            "journal_verify_output": output.decode(errors="replace").strip().splitlines()[-3:]}

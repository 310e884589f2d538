"""Real mail servers for tests: an SMTP server that records what arrives, and Debian's Dovecot (IMAP).

Both listen on 127.0.0.1 only, on ephemeral ports, and are started once per pytest
session by the fixtures at the end of this module (``from harness.mail import
dovecot, smtp_server``). Tests share them, so each test makes its own mailbox
(``dovecot.add_user``) and picks recipient addresses nobody else uses
(``unique_address``).

- ``SmtpRecorder`` is aiosmtpd in a thread of its own: plain, STARTTLS or implicit
  TLS (a self-signed certificate made here), optionally with AUTH. A recipient can
  be refused (``refuse``) or deferred a number of times (``defer``), as a real
  mail server would. Tests await arrivals (``wait_for``): no polling, no sleeps.
- ``DovecotServer`` runs ``/usr/sbin/dovecot -F`` with a throwaway config and mail
  directory in a temporary folder that ``stop`` removes; nothing is
  written outside it. As root, the mailboxes belong to ``nobody`` (Dovecot refuses
  mail access as uid 0); as anyone else, Dovecot runs entirely as that user.
- ``TcpProxy`` stands between a client and a server so a test can cut the line
  (an outage) and restore it.

``tests/run.sh`` installs Dovecot (``dovecot-imapd``) like Chromium; without it
the fixture skips with the install command, and fails with CI=true.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import datetime as dt
import email
import email.policy
import imaplib
import logging
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

log = logging.getLogger(__name__)

DOVECOT = Path("/usr/sbin/dovecot")
DOVECOT_INSTALL_COMMAND = "sudo apt-get update && sudo apt-get install -y dovecot-imapd"


def unique_address(prefix: str = "person", domain: str = "example.test") -> str:
    """An address no other test on the shared servers will use."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}@{domain}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- a self-signed certificate ---------------------------------------------------


@dataclass(frozen=True)
class MailCertificate:
    """A self-signed certificate for ``localhost`` and 127.0.0.1; ``cert_path`` doubles as the CA file."""

    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_path, self.key_path)
        return context


def make_certificate(directory: Path) -> MailCertificate:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return MailCertificate(cert_path, key_path)


# -- SMTP ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedMail:
    """One message as the SMTP server took it: the envelope and the parsed message."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    raw: bytes
    tls: bool
    login: str | None

    @property
    def message(self) -> EmailMessage:
        return email.message_from_bytes(self.raw, policy=email.policy.default)  # type: ignore[return-value]

    def part(self, subtype: str) -> str:
        """The decoded ``text/<subtype>`` body part ("plain" or "html")."""
        body = self.message.get_body(preferencelist=(subtype,))
        if body is None or body.get_content_subtype() != subtype:
            raise AssertionError(f"no text/{subtype} part in {self.message['Subject']!r}")
        return str(body.get_content())


class _Recorder:
    """aiosmtpd handler: refuses or defers chosen recipients, records every accepted message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[ReceivedMail] = []
        self.refused: dict[str, str] = {}
        self.deferred: dict[str, int] = {}
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.login: tuple[str, str] | None = None

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        key = address.lower()
        with self.lock:
            if key in self.refused:
                return self.refused[key]
            if self.deferred.get(key, 0) > 0:
                self.deferred[key] -= 1
                return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        mail = ReceivedMail(
            mail_from=envelope.mail_from, rcpt_tos=tuple(envelope.rcpt_tos), raw=bytes(envelope.original_content
                                                                                      or envelope.content),
            tls=session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None,
            login=session.auth_data.decode() if isinstance(session.auth_data, bytes) else session.auth_data,
        )
        with self.lock:
            self.received.append(mail)
            waiters = list(self.waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)
        return "250 Message accepted"

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult, LoginPassword

        ok = (self.login is not None and isinstance(auth_data, LoginPassword)
              and (auth_data.login.decode(), auth_data.password.decode()) == self.login)
        return AuthResult(success=ok, handled=False, auth_data=auth_data.login if ok else None)


class SmtpRecorder:
    """An aiosmtpd server on 127.0.0.1: ``security`` is "none", "starttls" or "tls"."""

    def __init__(self, *, certificate: MailCertificate | None = None, security: str = "none",
                 login: tuple[str, str] | None = None) -> None:
        if security != "none" and certificate is None:
            raise ValueError("TLS needs a certificate")
        self.security = security
        self.certificate = certificate
        self._handler = _Recorder()
        self._handler.login = login
        self._controller: Any = None
        self.port = 0

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def start(self) -> None:
        from aiosmtpd.controller import Controller

        kwargs: dict[str, Any] = {}
        if self.security == "starttls":
            assert self.certificate is not None
            kwargs.update(tls_context=self.certificate.server_context(), require_starttls=True)
        elif self.security == "tls":
            assert self.certificate is not None
            kwargs.update(ssl_context=self.certificate.server_context())
        if self._handler.login is not None:
            kwargs.update(authenticator=self._handler.authenticate, auth_require_tls=self.security == "starttls")
        for attempt in range(3):
            self.port = _free_port()
            controller = Controller(self._handler, hostname="127.0.0.1", port=self.port, **kwargs)
            try:
                controller.start()
            except Exception:
                if attempt == 2:
                    raise
                log.warning("smtp port %d was taken, retrying", self.port)
                continue
            self._controller = controller
            return

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.stop()

    # -- what tests do -------------------------------------------------------------

    def refuse(self, address: str, reply: str = "550 5.1.1 no such user here") -> None:
        with self._handler.lock:
            self._handler.refused[address.lower()] = reply

    def defer(self, address: str, times: int) -> None:
        """Answer 451 (try again later) to the next ``times`` attempts for ``address``."""
        with self._handler.lock:
            self._handler.deferred[address.lower()] = times

    def received(self, predicate: Callable[[ReceivedMail], bool] = lambda _m: True) -> list[ReceivedMail]:
        with self._handler.lock:
            return [m for m in self._handler.received if predicate(m)]

    def to(self, address: str) -> list[ReceivedMail]:
        """Every message whose envelope names ``address``, oldest first."""
        wanted = address.lower()
        return self.received(lambda m: wanted in (r.lower() for r in m.rcpt_tos))

    async def wait_for(self, predicate: Callable[[ReceivedMail], bool] = lambda _m: True, *, count: int = 1,
                       timeout: float = 15.0) -> list[ReceivedMail]:
        """Return as soon as ``count`` recorded messages match ``predicate`` (within ``timeout`` seconds)."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        waiter = (loop, event)
        with self._handler.lock:
            self._handler.waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event.clear()
                    found = self.received(predicate)
                    if len(found) >= count:
                        return found
                    await event.wait()
        except TimeoutError:
            got = [(m.rcpt_tos, m.message["Subject"]) for m in self.received()]
            raise AssertionError(f"{count} matching message(s) did not arrive in {timeout} s; got {got}") from None
        finally:
            with self._handler.lock:
                self._handler.waiters.remove(waiter)

    async def wait_to(self, address: str, *, count: int = 1, timeout: float = 15.0) -> list[ReceivedMail]:
        wanted = address.lower()
        return await self.wait_for(lambda m: wanted in (r.lower() for r in m.rcpt_tos), count=count,
                                   timeout=timeout)


# -- IMAP (Dovecot) --------------------------------------------------------------


def dovecot_missing_reason() -> str | None:
    if not DOVECOT.is_file():
        return f"Dovecot is not installed at {DOVECOT}; install it with: {DOVECOT_INSTALL_COMMAND}"
    return None


_CONFIG = """\
# Written by tests/harness/mail.py for one test session; removed with its folder.
base_dir = {base}/run
state_dir = {base}/state
instance_name = handraise-test-{tag}
listen = 127.0.0.1
protocols = imap
ssl = yes
ssl_cert = <{cert}
ssl_key = <{key}
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
log_path = {base}/dovecot.log
{users_line}
first_valid_uid = {uid}
last_valid_uid = 0
mail_location = maildir:{base}/mail/%u
# Notice new mail quickly in IDLE (the default checks every 30 s on top of inotify).
mailbox_idle_check_interval = 1 secs
{capability_line}
# Any user name with the session's password: a test's mailbox exists from its first login.
passdb {{
  driver = static
  args = password={password}
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={base}/mail/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {tls_port}
  }}
}}
service anvil {{
  chroot =
}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"""


class DovecotError(RuntimeError):
    """Dovecot failed to start, or an IMAP call of the harness failed."""


class DovecotServer:
    """One Dovecot on 127.0.0.1: ``port`` speaks plain IMAP (STARTTLS offered), ``tls_port`` implicit TLS."""

    def __init__(self, *, certificate: MailCertificate, idle: bool = True, startup_timeout: float = 30.0) -> None:
        self.certificate = certificate
        self.idle = idle
        self._startup_timeout = startup_timeout
        self._base: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.tls_port = 0
        self._password = uuid.uuid4().hex

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def _owner(self) -> tuple[int, int, str]:
        if os.geteuid() != 0:
            user = pwd.getpwuid(os.geteuid())
            return user.pw_uid, user.pw_gid, f"default_internal_user = {user.pw_name}\n" \
                                              f"default_login_user = {user.pw_name}"
        nobody = pwd.getpwnam("nobody")
        return nobody.pw_uid, nobody.pw_gid, ""

    def start(self) -> None:
        if self._process is not None:
            raise DovecotError("Dovecot is already running")
        # Not under pytest's per-user temp folder (mode 0700): the mail user must reach its mailboxes.
        self._base = Path(tempfile.mkdtemp(prefix="handraise-dovecot-"))
        atexit.register(self.stop)
        base = self._base
        base.chmod(0o755)
        uid, gid, users_line = self._owner()
        for sub in ("run", "state", "mail"):
            (base / sub).mkdir()
        os.chown(base / "mail", uid, gid)
        shutil.copy(self.certificate.cert_path, base / "cert.pem")
        shutil.copy(self.certificate.key_path, base / "key.pem")
        # Without IDLE in the capability list a client must poll: the harness can offer either.
        capability_line = "" if self.idle else (
            "imap_capability = IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE LITERAL+ UIDPLUS MOVE NAMESPACE")
        for attempt in range(1, 4):
            self.port, self.tls_port = _free_port(), _free_port()
            (base / "dovecot.conf").write_text(_CONFIG.format(
                base=base, tag=uuid.uuid4().hex[:8], cert=base / "cert.pem", key=base / "key.pem",
                users_line=users_line, uid=uid, gid=gid, port=self.port, tls_port=self.tls_port,
                capability_line=capability_line, password=self._password))
            try:
                self._launch()
                return
            except DovecotError as exc:
                if "Address already in use" not in str(exc) or attempt == 3:
                    self.stop()
                    raise
                log.warning("dovecot port was taken, retrying")

    def _launch(self) -> None:
        assert self._base is not None
        stderr = open(self._base / "dovecot.stderr", "wb")  # noqa: SIM115  (closed with the process)
        try:
            self._process = subprocess.Popen([str(DOVECOT), "-F", "-c", str(self._base / "dovecot.conf")],
                                             stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)
        finally:
            stderr.close()
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                problem = self._tail()
                self._process = None
                raise DovecotError(f"dovecot exited at start:\n{problem}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    if sock.recv(200).startswith(b"* OK"):
                        return
            except OSError:
                pass
            time.sleep(0.05)  # a subprocess's readiness has no event to await
        self.stop()
        raise DovecotError(f"dovecot did not answer within {self._startup_timeout} s:\n{self._tail()}")

    def _tail(self) -> str:
        assert self._base is not None
        out = []
        for name in ("dovecot.stderr", "dovecot.log"):
            path = self._base / name
            if path.exists():
                out.append("\n".join(path.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Stop Dovecot and remove its folder (config, users, mail, sockets); idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        base, self._base = self._base, None
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
            atexit.unregister(self.stop)

    # -- mailboxes -------------------------------------------------------------------

    def add_user(self, prefix: str = "mailbox") -> tuple[str, str]:
        """A new mailbox of its own: ``(user, password)``. It exists from its first login."""
        assert self._base is not None, "Dovecot has not been started"
        return f"{prefix}-{uuid.uuid4().hex[:10]}", self._password

    @contextlib.contextmanager
    def _session(self, user: str) -> Iterator[imaplib.IMAP4]:
        client = imaplib.IMAP4(self.host, self.port, timeout=30)
        try:
            client.login(user, self._password)
            client.select("INBOX")
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.logout()

    def deliver(self, user: str, message: bytes | EmailMessage) -> int:
        """Put a message into the user's INBOX (as an MTA's delivery would); returns its UID."""
        raw = message if isinstance(message, bytes) else message.as_bytes(policy=email.policy.SMTP)
        with self._session(user) as client:
            typ, data = client.append("INBOX", None, None, raw)
            if typ != "OK":
                raise DovecotError(f"APPEND failed: {data!r}")
            text = data[0].decode() if data and data[0] else ""
            # [APPENDUID <uidvalidity> <uid>]
            return int(text.split("APPENDUID", 1)[1].split()[1].rstrip("]")) if "APPENDUID" in text else 0

    def flags(self, user: str) -> dict[int, set[str]]:
        """The flags of every message in the INBOX, by UID."""
        out: dict[int, set[str]] = {}
        with self._session(user) as client:
            typ, data = client.uid("FETCH", "1:*", "(FLAGS)")
            for item in data:
                if not item:
                    continue
                text = item.decode() if isinstance(item, bytes) else str(item)
                if "UID" not in text:
                    continue
                uid = int(text.split("UID ", 1)[1].split()[0].rstrip(")"))
                flags = text.split("FLAGS (", 1)[1].split(")", 1)[0].split()
                out[uid] = set(flags)
        return out


# -- an outage in between ----------------------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``. ``cut`` is an outage: open connections are reset and
    new ones are reset on arrival (``wait_refused`` awaits one), until ``restore``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._down = False
        self._refused = asyncio.Event()
        self.port = 0
        self.refused = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        self._down = True
        self._refused.clear()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def restore(self) -> None:
        self._down = False

    async def wait_refused(self, timeout: float = 15.0) -> None:
        """Return once a client has tried to connect during the outage."""
        await asyncio.wait_for(self._refused.wait(), timeout)

    async def stop(self) -> None:
        await self.cut()
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.refused += 1
            self._refused.set()
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._writers.discard(writer)
            self._writers.discard(up_writer)


# -- session fixtures ----------------------------------------------------------------


@dataclass
class _Shared:
    """One server per session however many modules import the fixtures (each import is its own definition)."""

    users: int = 0
    server: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


_shared: dict[str, _Shared] = {}


@contextlib.contextmanager
def _one_per_session(name: str, make: Callable[[], Any]) -> Iterator[Any]:
    shared = _shared.setdefault(name, _Shared())
    if shared.server is None:
        shared.server = make()
    shared.users += 1
    try:
        yield shared.server
    finally:
        shared.users -= 1
        if shared.users == 0:
            server, shared.server = shared.server, None
            server.stop()


def _certificate(tmp_path_factory: pytest.TempPathFactory) -> MailCertificate:
    shared = _shared.setdefault("certificate", _Shared())
    if shared.server is None:
        shared.server = make_certificate(tmp_path_factory.mktemp("mail-cert"))
    return shared.server  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def mail_certificate(tmp_path_factory: pytest.TempPathFactory) -> MailCertificate:
    """The session's self-signed certificate (trust it with ``cert_path`` as the CA file)."""
    return _certificate(tmp_path_factory)


@pytest.fixture(scope="session")
def smtp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmtpRecorder]:
    """One plain SMTP server for the session; tests send to addresses of their own (``unique_address``)."""

    def make() -> SmtpRecorder:
        server = SmtpRecorder()
        server.start()
        return server

    with _one_per_session("smtp", make) as server:
        yield server


@pytest.fixture(scope="session")
def dovecot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DovecotServer]:
    """One real Dovecot for the session (IDLE on); tests make their own mailbox with ``add_user``."""
    from harness.fixtures import skip_or_fail

    reason = dovecot_missing_reason()
    if reason is not None:
        skip_or_fail(reason)
    certificate = _certificate(tmp_path_factory)

    def make() -> DovecotServer:
        server = DovecotServer(certificate=certificate)
        server.start()
        return server

    with _one_per_session("dovecot", make) as server:
        yield server


@pytest_asyncio.fixture
async def tcp_proxy() -> AsyncIterator[Callable[[str, int], Any]]:
    """``proxy = await tcp_proxy(host, port)``: a line a test can cut; closed after the test."""
    proxies: list[TcpProxy] = []

    async def make(host: str, port: int) -> TcpProxy:
        proxy = TcpProxy(host, port)
        await proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        await proxy.stop()

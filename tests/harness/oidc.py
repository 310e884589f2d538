"""A real OpenID Connect provider for tests: node-oidc-provider (tests/oidc/provider.js) on loopback.

Start it once per pytest session through the ``oidc_provider`` fixture in ``harness/fixtures.py``;
``tests/run.sh`` installs it (``npm ci`` in tests/oidc). Its issuer is ``http://localhost:<port>``,
another site than the apps under test (``127.0.0.1``), as a real provider is. Each test registers a
client of its own with its app's redirect URI (``register_client``: dynamic client registration).

Accounts are whatever login is typed on the provider's login page (the script's own, loading nothing
from beyond loopback): login ``alice`` is sub ``alice`` with email ``alice@example.org``; a login
starting ``unverified-`` has an unverified email. ``log_in`` walks that page over HTTP for tests that do
not need a browser.
"""

from __future__ import annotations

import atexit
import json
import logging
import re
import shutil
import subprocess
import threading
import urllib.request
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

log = logging.getLogger(__name__)

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "oidc"
SCRIPT = PROVIDER_DIR / "provider.js"
INSTALL_COMMAND = "cd tests/oidc && npm ci"


class OidcProviderError(RuntimeError):
    """The provider failed to start, or answered a call with an error."""


def oidc_provider_missing_reason() -> str | None:
    """Why the provider cannot run here, or None when Node.js and oidc-provider are installed."""
    if shutil.which("node") is None:
        return "Node.js is not installed (the OIDC tests run node-oidc-provider); install Debian's nodejs"
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        return f"oidc-provider is not installed in tests/oidc; install it with: {INSTALL_COMMAND}"
    return None


class OidcProviderServer:
    """One node-oidc-provider process on 127.0.0.1, an ephemeral port."""

    def __init__(self, *, startup_timeout: float = 30.0) -> None:
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.issuer = ""
        self.port = 0

    @property
    def base_url(self) -> str:
        """The provider as this process reaches it; the issuer names the same server as localhost."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self._process is not None:
            raise OidcProviderError("the provider is already running")
        # stdin stays open: the script exits when it closes, so no provider outlives a killed session.
        self._process = subprocess.Popen(["node", str(SCRIPT)], cwd=PROVIDER_DIR, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        atexit.register(self._kill)
        first: list[bytes] = []
        reader = threading.Thread(target=lambda: first.append(self._process.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(self._startup_timeout)
        line = first[0] if first else b""
        try:
            ready = json.loads(line)
        except ValueError:
            self.stop()
            raise OidcProviderError(f"node-oidc-provider did not start: {line!r}") from None
        self.issuer, self.port = ready["issuer"], int(ready["port"])
        # Answers once it serves its discovery document.
        self.discovery()
        log.info("oidc provider ready at %s", self.issuer)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self._kill)
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()

    def discovery(self) -> dict[str, Any]:
        return self._request("GET", f"{self.base_url}/.well-known/openid-configuration")

    def register_client(self, redirect_uri: str, *, public: bool = False) -> dict[str, Any]:
        """A new client of the provider for ``redirect_uri``: ``client_id``, and ``client_secret`` unless
        ``public`` (then it authenticates with nothing but PKCE)."""
        body = {"redirect_uris": [redirect_uri], "grant_types": ["authorization_code"], "response_types": ["code"],
                "token_endpoint_auth_method": "none" if public else "client_secret_basic"}
        return self._request("POST", f"{self.base_url}/reg", body)

    def _request(self, method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise OidcProviderError(f"{method} {url} -> HTTP {e.code}: {e.read()[:500]!r}") from e


async def log_in(http: Any, url: str, *, login: str, stop_at: str, cancel: bool = False) -> str:
    """Follow ``url`` (the provider's authorization URL) through the provider's login page as ``login``
    (or press its cancel link), with the aiohttp ``http`` session (a cookie jar that keeps cookies of
    IP-address hosts: ``CookieJar(unsafe=True)``); return the first URL that starts with ``stop_at``
    (the app's callback, with code and state, or the provider's error)."""
    for _ in range(10):
        if url.startswith(stop_at):
            return url
        async with http.get(url, allow_redirects=False) as response:
            if response.status in (302, 303):
                url = urljoin(url, response.headers["Location"])
                continue
            page = await response.text()
            if response.status != 200:
                raise OidcProviderError(f"GET {url} -> HTTP {response.status}: {page[:500]}")
        if cancel:
            url = urljoin(url, unescape(_find(r'href="([^"]*/abort)"', page)))
            continue
        action = urljoin(url, unescape(_find(r'<form[^>]*action="([^"]+)"', page)))
        async with http.post(action, data={"login": login, "password": "any"},
                             allow_redirects=False) as response:
            if response.status not in (302, 303):
                raise OidcProviderError(f"POST {action} -> HTTP {response.status}: {(await response.text())[:500]}")
            url = urljoin(action, response.headers["Location"])
    raise OidcProviderError(f"the provider's redirects did not reach {stop_at}")


def _find(pattern: str, page: str) -> str:
    found = re.search(pattern, page)
    if found is None:
        raise OidcProviderError(f"the provider's page has no match for {pattern}: {page[:500]}")
    return found.group(1)

"""``handraise serve``: bind first, then run the app until SIGINT or SIGTERM, and say where it serves."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import signal
import socket
from collections.abc import Callable

from handraise import __version__
from handraise.core.commands.base import duration, settings_of, store_description
from handraise.core.config import Settings
from handraise.core.errors import ConfigError


def _bind(settings: Settings) -> socket.socket:
    """Listen before anything opens: a busy port is one line, not a half-started server."""
    host, port = settings.server.host, settings.server.port
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"server.host {host!r}: not an address of this machine ({e.strerror}); "
                          "set --host or [server] host (HANDRAISE_SERVER__HOST)") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(1024)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"server.port {port} on {host} is in use (another handraise serve?); "
                              "choose another with --port or [server] port (HANDRAISE_SERVER__PORT)") from None
        if e.errno == errno.EACCES:
            raise ConfigError(f"server.port {port}: not allowed for this user; use a port above 1023 "
                              "with --port or [server] port (HANDRAISE_SERVER__PORT)") from None
        raise ConfigError(f"server.host {host!r}, port {port}: cannot listen there ({e.strerror}); "
                          "set --host/--port or [server] host/port") from None
    sock.setblocking(False)
    return sock


def freeze_startup_heap() -> int:
    """Leave what startup built (modules, the app, its models and validators: ~140,000 objects) out of every
    later garbage collection; returns how many objects that is.

    A full collection walks every tracked object with the event loop stopped: 150-210 ms for the started app
    on the shared 2-core machine, a stall of every waiting agent's wake. Startup's objects live as long as
    the process, so walking them finds nothing. Garbage is collected first, so none is kept for good.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (a dependency, but for Windows), else None: asyncio's own.

    The same asyncio API with the loop's own work (polling, timers, sockets, callbacks) in C: a cycle of
    create, answer and collect costs the server's loop thread about a third fewer instructions
    (bench/instructions.py, issue 19). Everything it runs is the asyncio code it ran before.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from handraise.core.app import create_app
    from handraise.core.logs import AccessLog, configure_logging

    settings = settings_of(args)
    if args.host:
        settings.server.host = args.host
    if args.port is not None:
        settings.server.port = args.port
    configure_logging(settings.logging)
    sock = _bind(settings)
    host, port = sock.getsockname()[:2]
    settings.server.served_at(settings.server.host, port)

    async def run() -> None:
        from handraise.core.appkeys import INBOX, KEYRING, STORE

        app = await create_app(settings)
        # shutdown_timeout bounds what an ordinary request may still take after SIGTERM; long-polls and event
        # streams are ended at once by the app's on_shutdown, so they do not wait for it.
        runner = web.AppRunner(app, access_log_class=AccessLog.serving(app), shutdown_timeout=5)
        try:
            await runner.setup()  # runs the cleanup contexts' start: store, listener, sweeper, connectors
            await web.SockSite(runner, sock).start()
            # Announced only once the socket listens, so "serving" is true when read.
            stored = await app[STORE].list_api_keys()
            where = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
            print(f"handraise {__version__}: serving on {where}", flush=True)
            print(f"  store:      {store_description(settings)}", flush=True)
            print(f"  public_url: {settings.server.public_url}"
                  + ("" if settings.server.public_url_set else
                     "  (the address served; set [server] public_url to the one humans reach)"), flush=True)
            if settings.source is None:
                # The embedded default: a sign-in link for its one tenant, so a first question shows up there.
                minted = await app[INBOX].mint(tenant_id=settings.tenants[0].id, name="operator",
                                               created_by="cli:serve")
                print(f"  inbox:      {minted.url}", flush=True)
                print(f"              (sign-in link: works once, within {duration(settings.inbox.signin_link_seconds)}; "
                      "handraise inbox-link makes more)", flush=True)
            if app[KEYRING].empty and not stored:
                for line in first_run_hint(settings):
                    print(line, flush=True)
            freeze_startup_heap()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()

    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(run())
    finally:
        sock.close()
    return 0


def first_run_hint(settings: Settings) -> list[str]:
    """What a new user does next: keys, a first question, and where it shows up (the inbox)."""
    tenant = settings.tenants[0].id
    flag = "" if len(settings.tenants) == 1 else f" --tenant {tenant}"
    return ["handraise: no API keys yet. Create one for an agent and one for a human operator:",
            f"  handraise keys create{flag} --scopes ask",
            f"  handraise keys create{flag} --scopes answer,read",
            "then ask a question: HANDRAISE_KEY=<the ask key> handraise ask \"Your question?\"",
            "and answer it in the inbox: open the sign-in link above, or make one with "
            f"handraise inbox-link --tenant {tenant} --name <your name>"]

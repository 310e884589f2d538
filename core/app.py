"""The application factory: wires settings, store, service, HTTP routes and channels; nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from handraise.core.annotations import AnnotationService
from handraise.core.appkeys import (
    ADMISSION,
    ANNOTATIONS,
    BUS,
    CHANNELS,
    CONNECTORS,
    DELIVERIES,
    DISPATCHER,
    HTTP_SESSION,
    INBOX,
    INSTANCE_ID,
    KEYRING,
    METRICS,
    OIDC,
    PRIVATE,
    RUNS,
    SERVICE,
    SETTINGS,
    STORE,
    SWEEPER,
)
from handraise.core import defaults
from handraise.core.callbacks import CallbackHttp
from handraise.core.config import Settings
from handraise.core.channels import Channel, load_enabled
from handraise.core.chatrefs import ChatRefs
from handraise.core.connectors import Connector
from handraise.core.errors import ConfigError, HandraiseError, UnavailableError
from handraise.core.deliveries import DeliveryLog
from handraise.core.dispatch import Dispatcher
from handraise.core.events import EventBus, PostgresListener
from handraise.core.personal import PrivatePost
from handraise.core.http import annotations as annotation_routes
from handraise.core.http import events as events_routes
from handraise.core.http import health, hitl, home, openapi
from handraise.core.http import inbox as inbox_routes
from handraise.core.http import keys as key_routes
from handraise.core.http import metrics as metrics_routes
from handraise.core.http import requests as request_routes
from handraise.core.http.admission import WriteAdmission
from handraise.core.http import runs as run_routes
from handraise.core.http.auth import Keyring
from handraise.core.http.middleware import api_middleware, error_middleware, every_response, forbid_storing
from handraise.core.inbox import InboxAccess
from handraise.core.mcp import http as mcp_http
from handraise.core.metrics import Metrics
from handraise.core.oidc.signin import OidcSignin
from handraise.core.serversecret import ServerSecret, load_server_secret, secret_location
from handraise.core.runs import RunService
from handraise.core.service import RequestService
from handraise.core.signingkey import SigningKey
from handraise.core.store import NOTIFY_CHANNEL, Store
from handraise.core.sweeper import SweeperTask

log = logging.getLogger(__name__)


async def create_app(settings: Settings, *, connector_classes: list[type[Channel[Any]]] | None = None,
                     instance_id: str | None = None) -> web.Application:
    """Build the application. Channels default to the enabled ones found by entry point."""
    # Find the channels first: a configured one that cannot be imported fails before anything opens.
    classes = load_enabled(settings) if connector_classes is None else connector_classes
    admission = WriteAdmission(limit=settings.limits.max_writes_in_flight,
                               max_queue_seconds=settings.limits.max_write_queue_ms / 1000,
                               retry_after=settings.limits.overload_retry_after_seconds)
    # One middleware: the error handler around the write bound, so an overloaded refusal is written as the
    # flat envelope too.
    app = web.Application(middlewares=[api_middleware(admission)],
                          client_max_size=settings.server.max_body_bytes)
    app.on_response_prepare.append(forbid_storing)
    app.on_response_prepare.append(every_response)
    app[ADMISSION] = admission
    instance_id = instance_id or secrets.token_hex(6)
    store = Store(url=settings.storage.url, secret=_server_secret(settings), pool_size=settings.storage.pool_size,
                  instance_id=instance_id, connect_timeout=settings.storage.connect_timeout_seconds)
    bus = EventBus(instance_id=instance_id)
    service = RequestService(settings=settings, store=store, bus=bus)
    http = ClientSession(timeout=ClientTimeout(total=30))
    app[SETTINGS] = settings
    app[STORE] = store
    app[BUS] = bus
    app[SERVICE] = service
    app[ANNOTATIONS] = AnnotationService(settings=settings, store=store, bus=bus)
    app[RUNS] = RunService(settings=settings, store=store, annotations=app[ANNOTATIONS])
    app[INSTANCE_ID] = instance_id
    app[KEYRING] = Keyring(settings=settings, store=store)
    app[INBOX] = InboxAccess(settings=settings, store=store)
    app[OIDC] = OidcSignin(settings=settings, store=store, inbox=app[INBOX]) if settings.oidc is not None else None
    app[HTTP_SESSION] = http
    app[METRICS] = metrics = Metrics(service=service, admission=admission)
    app[SWEEPER] = SweeperTask(service, interval=settings.limits.sweep_interval_seconds)

    for table in (home.routes, health.routes, openapi.routes, metrics_routes.routes, request_routes.routes,
                  events_routes.routes, annotation_routes.routes, run_routes.routes, inbox_routes.routes,
                  key_routes.routes, hitl.routes):
        app.router.add_routes(table)

    # What channels and the dispatcher use beside the lifecycle, one interface per concept. The service's
    # clock is read at each call: a test that moves it moves theirs too.
    app[DELIVERIES] = deliveries = DeliveryLog(records=store.deliveries, clock=lambda: service.clock())
    chat_refs = ChatRefs(records=store.chat_refs, clock=lambda: service.clock())
    signing_key = SigningKey(state=store.state)
    channels: dict[str, Channel[Any]] = {}
    try:
        for cls in classes:
            channel = cls(settings=cls.load_settings(settings), service=service, state=store.state,
                          leadership=store.leadership, chat_refs=chat_refs, deliveries=deliveries,
                          signing_key=signing_key, http=http,
                          log=logging.getLogger(f"handraise.connector.{cls.name}"), app_settings=settings,
                          annotations=app[ANNOTATIONS])
            channels[cls.name] = channel
            _mount(app, channel, settings)
    except BaseException:
        await http.close()
        raise
    app[CHANNELS] = channels
    # Only connectors post requests anywhere: the dispatcher never sees a channel that cannot.
    app[CONNECTORS] = connectors = {name: c for name, c in channels.items() if isinstance(c, Connector)}
    service.channel_serves.update({name: c.serves for name, c in channels.items()})
    # What names a person reaches them alone, on their own channels (core/personal.py).
    app[PRIVATE] = PrivatePost(settings=settings, connectors=connectors, journal=service.journal)
    problem = defaults.channel_problem(settings, service.channels_for)
    if problem is not None:
        await http.close()
        raise ConfigError(problem)
    # Callbacks are posted through the shared session, only where a tenant can have them.
    callbacks_on = any(t.callbacks is not None for t in settings.tenants)
    app[DISPATCHER] = Dispatcher(service=service, deliveries=deliveries, leadership=store.leadership,
                                 cases=store.reviews, shared=store.is_postgres, connectors=connectors,
                                 http=CallbackHttp(http) if callbacks_on else None)
    app[DISPATCHER].on_delivery = metrics.on_delivery
    service.held.may_deliver = app[DISPATCHER].delivers

    app.cleanup_ctx.append(_store_ctx)
    app.cleanup_ctx.append(_listener_ctx)
    app.cleanup_ctx.append(_sweeper_ctx)
    app.cleanup_ctx.append(_channels_ctx)
    app.on_shutdown.append(_end_long_calls)
    # Last: MCP sessions stop before the connectors, the service and the store they use.
    mcp_http.setup(app)
    return app


async def _end_long_calls(app: web.Application) -> None:
    """``on_shutdown`` (SIGTERM), before aiohttp waits ``shutdown_timeout`` for its handlers, so none holds
    the stop: a wait answers the request as it stands (the agent re-attaches with wait), a blocking call is
    a 503 to make again, and an event stream ends (its client resumes with ``Last-Event-ID``)."""
    app[SERVICE].stop_waits()
    app[BUS].close()


def _mount(app: web.Application, channel: Channel[Any], settings: Settings) -> None:
    defs = channel.routes()
    if not defs:
        return
    prefix = channel.mount_prefix if channel.mount_prefix is not None else f"/bots/{channel.name}"
    if prefix:
        sub = web.Application(middlewares=[error_middleware], client_max_size=settings.server.max_body_bytes)
        sub.add_routes(defs)
        app.add_subapp(prefix, sub)
    else:
        app.router.add_routes(defs)


# PostgreSQL releases older than this are refused at start with one line (and by doctor).
MIN_POSTGRES = (13, 0)


def _storage_names(settings: Settings) -> tuple[str, str]:
    """Where the storage URL was set, and the URL without its password."""
    where = "HANDRAISE_STORAGE__URL" if "HANDRAISE_STORAGE__URL" in os.environ else "[storage] url"
    return where, re.sub(r"//([^:/@]+):[^@]+@", r"//\1:***@", settings.storage.url)


def _server_secret(settings: Settings) -> ServerSecret:
    try:
        return load_server_secret(settings)
    except OSError as e:  # the secret's folder (the user's config folder by default) cannot be made or read
        location = secret_location(settings)
        shown = location.path if location else "[security] secret"
        raise UnavailableError(f"server secret {shown}: cannot be read or made ({e}); check [security] "
                               "secret_file (HANDRAISE_SECURITY__SECRET_FILE) and its folder") from e


async def open_store(settings: Settings, store: Store | None = None) -> Store:
    """Open (and migrate) the store, or raise UnavailableError in one line naming storage.url and the fix."""
    store = store or Store(url=settings.storage.url, secret=_server_secret(settings),
                           pool_size=settings.storage.pool_size,
                           connect_timeout=settings.storage.connect_timeout_seconds)
    where, shown = _storage_names(settings)
    try:
        if store.is_postgres:
            await check_postgres_version(store.asyncpg_dsn())
        await store.open()
    except HandraiseError:
        await store.close()
        raise
    except Exception as e:
        await store.close()
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UnavailableError(f"storage.url {shown}: cannot open the store ({reason}); check {where}") from e
    return store


async def check_postgres_version(dsn: str, *, minimum: tuple[int, int] = MIN_POSTGRES) -> tuple[int, int]:
    """The server's (major, minor); UnavailableError when older than ``minimum``."""
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        version = conn.get_server_version()
    finally:
        await conn.close()
    if (version.major, version.minor) < minimum:
        raise UnavailableError(f"storage.url: PostgreSQL {version.major}.{version.minor} is too old; "
                               f"Handraise needs {minimum[0]} or newer")
    return version.major, version.minor


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    try:
        await open_store(app[SETTINGS], app[STORE])
    except BaseException:
        await app[HTTP_SESSION].close()
        raise
    yield
    await app[SERVICE].drain()
    await app[HTTP_SESSION].close()  # callbacks' own sessions last one attempt each: nothing else to close
    await app[STORE].close()


async def _listener_ctx(app: web.Application) -> AsyncIterator[None]:
    store = app[STORE]
    if not store.is_postgres:
        yield
        return
    service = app[SERVICE]

    async def resync() -> None:
        # The listener's connection was lost, so were the pools' (a restart): replace them before they fail a call.
        store.invalidate_pools()
        service.wake_all()

    listener = PostgresListener(dsn=store.asyncpg_dsn(), channel=NOTIFY_CHANNEL, bus=app[BUS], on_reconnect=resync,
                                connect_timeout=store.connect_timeout)
    task = asyncio.get_running_loop().create_task(listener.run(), name="pg-listener")
    # Start serving only once we hear other instances: no answer committed there is missed.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listener.connected.wait(), timeout=10)
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _sweeper_ctx(app: web.Application) -> AsyncIterator[None]:
    app[SWEEPER].start()
    yield
    # Stopped already, if a test held it: then there is nothing left to stop.
    await app[SWEEPER].stop()


async def _channels_ctx(app: web.Application) -> AsyncIterator[None]:
    dispatcher = app[DISPATCHER]
    started: list[Channel[Any]] = []
    try:
        for connector in app[CHANNELS].values():
            try:
                await connector.start()
            except HandraiseError:
                raise
            except Exception as e:
                # A library's own failure at start (a refused token, an unreachable server) in one line.
                raise ConfigError(f"{connector.name}: could not start ({type(e).__name__}: {e}); "
                                  f"check the [{connector.name}] section or run handraise doctor") from e
            started.append(connector)
            log.info("connector started", extra={"connector": connector.name})
        dispatcher.start()
        yield
    finally:
        await dispatcher.stop()
        for connector in reversed(started):
            try:
                await connector.stop()
            except Exception:
                log.exception("connector stop failed", extra={"connector": connector.name})

"""Typed keys for the state shared on the aiohttp application, declared in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import ClientSession, web

from core.config import Settings
from core.events import EventBus
from core.store import Store

if TYPE_CHECKING:
    from core.annotations import AnnotationService
    from core.connectors import Connector
    from core.dispatch import Dispatcher
    from core.http.auth import Keyring
    from core.service import RequestService

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
BUS = web.AppKey("bus", EventBus)
SERVICE: web.AppKey[RequestService] = web.AppKey("service")
ANNOTATIONS: web.AppKey[AnnotationService] = web.AppKey("annotations")
KEYRING: web.AppKey[Keyring] = web.AppKey("keyring")
CONNECTORS: web.AppKey[dict[str, Connector]] = web.AppKey("connectors")
DISPATCHER: web.AppKey[Dispatcher] = web.AppKey("dispatcher")
HTTP_SESSION = web.AppKey("http_session", ClientSession)
INSTANCE_ID = web.AppKey("instance_id", str)

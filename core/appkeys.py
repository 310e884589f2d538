"""Typed keys for the state shared on the aiohttp application, declared in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import ClientSession, web

from handraise.core.config import Settings
from handraise.core.events import EventBus
from handraise.core.store import Store

if TYPE_CHECKING:
    from handraise.core.annotations import AnnotationService
    from handraise.core.channels import Channel
    from handraise.core.connectors import Connector
    from handraise.core.deliveries import DeliveryLog
    from handraise.core.dispatch import Dispatcher
    from handraise.core.http.admission import WriteAdmission
    from handraise.core.http.auth import Keyring
    from handraise.core.inbox import InboxAccess
    from handraise.core.metrics import Metrics
    from handraise.core.personal import PrivatePost
    from handraise.core.runs import RunService
    from handraise.core.service import RequestService
    from handraise.core.sweeper import SweeperTask

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
BUS = web.AppKey("bus", EventBus)
SERVICE: web.AppKey[RequestService] = web.AppKey("service")
ANNOTATIONS: web.AppKey[AnnotationService] = web.AppKey("annotations")
RUNS: web.AppKey[RunService] = web.AppKey("runs")
KEYRING: web.AppKey[Keyring] = web.AppKey("keyring")
# Every enabled channel by name; the connectors among them (the channels that deliver) once more.
CHANNELS: web.AppKey[dict[str, Channel[Any]]] = web.AppKey("channels")
CONNECTORS: web.AppKey[dict[str, Connector[Any]]] = web.AppKey("connectors")
DISPATCHER: web.AppKey[Dispatcher] = web.AppKey("dispatcher")
DELIVERIES: web.AppKey[DeliveryLog] = web.AppKey("deliveries")
HTTP_SESSION = web.AppKey("http_session", ClientSession)
INSTANCE_ID = web.AppKey("instance_id", str)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
INBOX: web.AppKey[InboxAccess] = web.AppKey("inbox")
# Private notes to a person on their own channels: a sign-in or link that names them reaches only them.
PRIVATE: web.AppKey[PrivatePost] = web.AppKey("private")
ADMISSION: web.AppKey[WriteAdmission] = web.AppKey("admission")
# The sweeper's task: started and stopped by the app; a test may hold it (tests/conftest.py sweeper_held).
SWEEPER: web.AppKey[SweeperTask] = web.AppKey("sweeper")

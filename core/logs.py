"""Structured logging (structlog over the standard library): JSON or console lines with request ids.

Modules log with ``logging.getLogger(__name__)`` and pass ids in ``extra``; the
formatter renders those as fields. Values, keys and tokens are never passed, and
every rendered line goes through :func:`mask_tokens` and the redactor as well, so a
one-time link token or a secret-shaped string that reaches a message or a traceback
(an error under ``/f/``, a library's error quoting a URL with a bot token) is replaced.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from handraise.core.appkeys import METRICS
from handraise.core.config import LoggingSettings
from handraise.core.redaction import redact

_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message", "asctime"}

# Path prefixes followed by a one-time token: the hosted forms and the operator inbox's sign-in links.
ONE_TIME_PREFIXES: tuple[str, ...] = ("/f/", "/inbox/signin/")
# Two characters or more: "/f/-/static/" (the form's assets) is not a token.
_TOKEN_AFTER = re.compile("(" + "|".join(re.escape(p) for p in ONE_TIME_PREFIXES) + r")[^/?#\s\"'<>]{2,}")
MASK = "<token>"
# Where authentication leaves the principal (tenant, key id) on the request, for the access log.
PRINCIPAL_ATTR: web.RequestKey[Any] = web.RequestKey("principal")

access_log = logging.getLogger("handraise.access")


def mask_tokens(text: str) -> str:
    """``text`` with every one-time link token replaced by ``<token>``: paths, URLs, log lines."""
    return _TOKEN_AFTER.sub(lambda m: m.group(1) + MASK, text)


class AccessLog(AbstractAccessLogger):
    """One line per HTTP request: method, path (tokens masked, no query), status, ms, tenant, key id.

    Never a key, a token or a body: the principal is what authentication found, not the header.
    """

    def __init__(self, logger: logging.Logger, log_format: str) -> None:
        # Not aiohttp's "aiohttp.access" logger: ours, at INFO, through the masking formatter.
        super().__init__(access_log, log_format)

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:  # noqa: A002
        # The HTTP metrics count every request, whether the line itself is wanted (INFO) or not.
        metrics = request.app.get(METRICS) if isinstance(request, web.Request) else None
        if metrics is not None:
            metrics.on_http(request.method, response.status, time)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        principal = request.get(PRINCIPAL_ATTR)
        path = mask_tokens(request.path)
        ms = round(time * 1000, 1)
        self.logger.info("%s %s %s %.1fms", request.method, path, response.status, ms, extra={
            "method": request.method, "path": path, "status": response.status, "ms": ms,
            "tenant": getattr(principal, "tenant_id", None), "key_id": getattr(principal, "key_id", None)})

    @property
    def enabled(self) -> bool:
        # Also when the line itself is not wanted (level WARNING): the HTTP metrics still count.
        return True


def _extra_fields(_logger: object, _name: str, event_dict: dict) -> dict:
    record = event_dict.get("_record")
    if record is not None:
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_") and key not in event_dict:
                event_dict[key] = value
    return event_dict


class _Masked:
    """The last renderer, then :func:`mask_tokens` and :func:`redact` over the whole line (tracebacks included)."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, name: str, event_dict: dict) -> str:
        return redact(mask_tokens(str(self.renderer(logger, name, event_dict))))


def configure_logging(settings: LoggingSettings, *, stream: object = None) -> None:
    renderer = (structlog.processors.JSONRenderer() if settings.format == "json"
                else structlog.dev.ConsoleRenderer(colors=False))
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _extra_fields,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _Masked(renderer)],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level)
    # aiohttp's own access logger is replaced by AccessLog (masked); keep any stray one quiet.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

"""Structured logging (structlog over the standard library): JSON or console lines with request ids.

Modules log with ``logging.getLogger(__name__)`` and pass ids in ``extra``; the
formatter renders those as fields. Values, keys and tokens are never passed.
"""

from __future__ import annotations

import logging
import sys

import structlog

from handraise.core.config import LoggingSettings

_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message", "asctime"}


def _extra_fields(_logger: object, _name: str, event_dict: dict) -> dict:
    record = event_dict.get("_record")
    if record is not None:
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_") and key not in event_dict:
                event_dict[key] = value
    return event_dict


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
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level)
    # Access logs carry one-time link tokens in their paths: keep them out.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

"""Structured logging (structlog over the standard library): JSON or console lines with request ids.

Modules log with ``logging.getLogger(__name__)`` and pass ids in ``extra``; the
formatter renders those as fields. Values, keys and tokens are never passed, and
every text of a line (the message, each field, a traceback) goes through one step,
:class:`_Scrubbed`, just before the renderer: one-time link tokens masked
(:func:`mask_tokens`), secret-shaped strings redacted, and control characters escaped
(:func:`escape_controls`), so nothing a client sends can start a line of its own
(DESIGN invariant 11), on either renderer, for our records and the libraries' alike.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import BaseRequest, StreamResponse

from handraise.core.appkeys import METRICS
from handraise.core.config import LoggingSettings
from handraise.core.redaction import redact

if TYPE_CHECKING:
    from handraise.core.metrics import Metrics

_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message", "asctime"}

# Path prefixes followed by a one-time token: the hosted forms and the operator inbox's sign-in links.
ONE_TIME_PREFIXES: tuple[str, ...] = ("/f/", "/inbox/signin/")
# Two characters or more: "/f/-/static/" (the form's assets) is not a token.
_TOKEN_AFTER = re.compile("(" + "|".join(re.escape(p) for p in ONE_TIME_PREFIXES) + r")[^/?#\s\"'<>]{2,}")
MASK = "<token>"
# Where authentication leaves the principal (tenant, key id) on the request, for the access log.
PRINCIPAL_ATTR: web.RequestKey[Any] = web.RequestKey("principal")

# What may not reach a log line as itself: C0 controls (CR and LF among them), DEL, C1 controls (NEL among
# them), the line and paragraph separators, and the bidi marks, embeddings, overrides and isolates that
# would make a line read otherwise than it is stored.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Fields the renderers lay out over several lines: a traceback and a stack.
_MULTILINE = frozenset({"exception", "stack"})
# An access line shows this much of a path (a request line may be 8 KB), and of why aiohttp refused one.
_MAX_PATH = 300
_MAX_REASON = 100

access_log = logging.getLogger("handraise.access")


def mask_tokens(text: str) -> str:
    """``text`` with every one-time link token replaced by ``<token>``: paths, URLs, log lines."""
    return _TOKEN_AFTER.sub(lambda m: m.group(1) + MASK, text)


def escape_controls(text: str) -> str:
    """``text`` with every control character written as Python writes it in a literal (``\\r``, ``\\x1b``,
    ``\\u2028``): one line that reads as what was sent."""
    if text.isascii() and text.isprintable():  # nearly every text: no regex
        return text
    return _CONTROLS.sub(lambda m: repr(m.group())[1:-1], text)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class AccessLog(AbstractAccessLogger):
    """One line per HTTP request: method, path (tokens masked, no query), status, ms, tenant, key id.

    Never a key, a token or a body: the principal is what authentication found, not the header. A request
    aiohttp's parser refused (a bare CR, a 20 KB line, 500 headers, a NUL in a header) comes here as a
    stand-in without a route, method or path: one line with the status and aiohttp's reason, no traceback.
    """

    # Set by :meth:`serving`: the metrics that count requests no route reached (the unparsed ones).
    metrics: ClassVar[Metrics | None] = None

    def __init__(self, logger: logging.Logger, log_format: str) -> None:
        # Not aiohttp's "aiohttp.access" logger: ours, at INFO, through the masking formatter.
        super().__init__(access_log, log_format)

    @classmethod
    def serving(cls, app: web.Application) -> type[AccessLog]:
        """This class bound to ``app``'s metrics (an access log class is made per connection by aiohttp)."""
        return type(cls.__name__, (cls,), {"metrics": app.get(METRICS)})

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:  # noqa: A002
        routed = _routed(request)
        # The HTTP metrics count every request, whether the line itself is wanted (INFO) or not.
        metrics = self.metrics
        if metrics is None and routed:
            metrics = request.config_dict.get(METRICS)  # type: ignore[attr-defined]
        if metrics is not None:
            metrics.on_http(request.method if routed else None, response.status, time)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        ms = round(time * 1000, 1)
        if not routed:
            reason = _refusal(response)
            self.logger.info("unparsed request %s %.1fms: %s", response.status, ms, reason, extra={
                "status": response.status, "ms": ms, "reason": reason})
            return
        principal = request.get(PRINCIPAL_ATTR)
        # Masked here too: the line never holds a token, whatever formatter a handler of the root logger has.
        method, path = _bounded(request.method, 20), _bounded(mask_tokens(request.path), _MAX_PATH)
        self.logger.info("%s %s %s %.1fms", method, path, response.status, ms, extra={
            "method": method, "path": path, "status": response.status, "ms": ms,
            "tenant": getattr(principal, "tenant_id", None), "key_id": getattr(principal, "key_id", None)})

    @property
    def enabled(self) -> bool:
        # Also when the line itself is not wanted (level WARNING): the HTTP metrics still count.
        return True


def _routed(request: BaseRequest) -> bool:
    """Whether a router took ``request``: not the stand-in aiohttp makes of a request its parser refused,
    which has no route (``request.app`` asserts, or under ``-O`` fails on None)."""
    if not isinstance(request, web.Request):
        return False
    try:
        request.app  # noqa: B018
    except (AssertionError, AttributeError):
        return False
    return True


def _refusal(response: StreamResponse) -> str:
    """Why aiohttp refused a request, in its own words: the first line of the body it answered (its parser's
    message, before any quote of the client's bytes), bounded."""
    text = response.text if isinstance(response, web.Response) else None
    if not text:
        return ""
    first = text.strip().split("\n", 1)[0]
    return _bounded(first.split(": ", 1)[0].rstrip(":").strip(), _MAX_REASON)


class _ParserRefusals(logging.Filter):
    """On ``aiohttp.server``: drop its records of what its parser refused, a request or the rest of a body
    after the response (each an ERROR with a traceback, for what a client sent); the access line has the
    status, and for a request the reason."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], (HttpProcessingError, web.RequestPayloadError)))


def _extra_fields(_logger: object, _name: str, event_dict: dict) -> dict:
    record = event_dict.get("_record")
    if record is not None:
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_") and key not in event_dict:
                event_dict[key] = value
    return event_dict


class _Scrubbed:
    """The step before the renderer, over every text of a line: tokens masked, secrets redacted, controls
    escaped. Per text rather than over the rendered line, so the redactor reads a text as it was (a line
    break is not yet ``\\n``, a quote not yet ``\\"``) and the console's traceback keeps its lines.

    A traceback (``exception``, ``stack``) keeps its line breaks, and on the console each of its lines is
    indented: only a record starts a line at its first column.
    """

    def __init__(self, *, indent: str) -> None:
        self.indent = indent

    def __call__(self, _logger: Any, _name: str, event_dict: dict) -> dict:
        # Keys are the code's own words (``extra``): escaped, not read for secrets.
        return {escape_controls(key) if isinstance(key, str) else key:
                self._lines(value) if key in _MULTILINE and isinstance(value, str) else _scrubbed(value)
                for key, value in event_dict.items()}

    def _lines(self, text: str) -> str:
        lines = [_clean(line) for line in text.rstrip("\n").split("\n")]
        return "\n".join(self.indent + line for line in lines)


def _clean(text: str) -> str:
    return escape_controls(redact(mask_tokens(text)))


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {_clean(k) if isinstance(k, str) else k: _scrubbed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_scrubbed(v) for v in value]
    # Anything else as both renderers would show it, but scrubbed: an object's repr is its own text.
    return _clean(repr(value))


def configure_logging(settings: LoggingSettings, *, stream: object = None) -> None:
    console = settings.format != "json"
    renderer = (structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
                if console else structlog.processors.JSONRenderer())
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _extra_fields,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    # A traceback becomes text here, so the next step reaches it: plain, without locals
                    # (a local may hold a key or an answer).
                    structlog.processors.format_exc_info,
                    _Scrubbed(indent="  " if console else ""), renderer],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level)
    # aiohttp's own access logger is replaced by AccessLog (masked); keep any stray one quiet.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The MCP SDK's event streams log every chunk they send at DEBUG: a tool's result, the human's answer.
    logging.getLogger("sse_starlette").setLevel(logging.INFO)
    server = logging.getLogger("aiohttp.server")
    server.filters[:] = [f for f in server.filters if not isinstance(f, _ParserRefusals)]
    server.addFilter(_ParserRefusals())

"""This instance's Prometheus metrics (``prometheus-client``), one registry per application.

Counts come from the event bus (events that happened here, ``Event.local``, so
several instances behind one PostgreSQL do not count each other's work), from
small hooks (the dispatcher's delivery outcomes, the service's wake-ups, the
access log) and, at scrape time, from live gauges (agents waiting, SSE
subscribers). No label names a tenant: a ``metrics`` key belongs to one tenant,
and must not learn who the others are or how busy they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from handraise.core.events import REQUEST_CREATED, REQUEST_RESOLVED, RUN_ANNOTATED, Event

if TYPE_CHECKING:
    from handraise.core.api import RequestView
    from handraise.core.http.admission import WriteAdmission
    from handraise.core.service import RequestService

# The text format every Prometheus reads (generate_latest writes it; newer clients call it 1.0.0).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Wake latency (resolution committed → the waiting agent's call returns) is sub-millisecond on one
# instance and a few ms across instances: buckets from 0.1 ms to 1 s.
_WAKE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_HTTP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 60.0)
# The HTTP method label: these by name, any other token a client sends as "other", and a request aiohttp's
# parser refused as "unparsed". No label takes a client's words, so the series stay few.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
_OTHER, _UNPARSED = "other", "unparsed"


class Metrics:
    """The counters, histograms and gauges of one running application."""

    def __init__(self, *, service: RequestService, admission: WriteAdmission | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests_created = Counter("handraise_requests_created", "Requests created on this instance",
                                        registry=r)
        self.requests_resolved = Counter(
            "handraise_requests_resolved", "Requests that became terminal on this instance, by final status and "
            "by the route that resolved them (web, api, telegram, slack, matrix, timeout ...)",
            ["status", "via"], registry=r)
        # Its series by (status, via): labels() looks one up in several calls, for every resolution.
        self._resolved_series: dict[tuple[str, str], Any] = {}
        self.wake_latency = Histogram("handraise_wake_latency_seconds",
                                      "From a resolution to the waiting agent's call returning", registry=r,
                                      buckets=_WAKE_BUCKETS)
        self.deliveries = Counter("handraise_deliveries", "Delivery attempts by channel and outcome "
                                  "(sent, retry, failed, withdrawn)", ["channel", "outcome"], registry=r)
        self.annotations = Counter("handraise_annotations", "Run annotations recorded, by signal kind",
                                   ["kind"], registry=r)
        self.http_requests = Counter("handraise_http_requests", "HTTP requests served, by method (GET ... "
                                     "TRACE, other, unparsed: refused by the HTTP parser) and status",
                                     ["method", "status"], registry=r)
        self._http_series: dict[tuple[str | None, int], Any] = {}
        self.http_duration = Histogram("handraise_http_request_duration_seconds", "HTTP request durations "
                                       "(long-polls and event streams included)", registry=r, buckets=_HTTP_BUCKETS)
        waiting = Gauge("handraise_agents_waiting", "Agent calls waiting for an answer on this instance",
                        registry=r)
        waiting.set_function(lambda: service.waiting)
        subscribers = Gauge("handraise_sse_subscribers", "Open event streams (GET /v1/events) on this instance",
                            registry=r)
        subscribers.set_function(lambda: service.bus.subscriber_count)
        self.writes_shed = Counter("handraise_writes_shed", "Writes refused with 503 overloaded, by reason: "
                                   "queue (would wait past limits.max_write_queue_ms) or count "
                                   "(limits.max_writes_in_flight)", ["reason"], registry=r)
        if admission is not None:
            for reason in admission.shed_by:
                self.writes_shed.labels(reason)  # both series from the start, at 0
            admission.on_shed = self.on_shed
            in_flight = Gauge("handraise_writes_in_flight", "Writes being worked on by this instance", registry=r)
            in_flight.set_function(lambda: admission.in_flight)
            queue = Gauge("handraise_write_queue_seconds", "How long a write admitted now would queue "
                          "(the estimate admission compares with limits.max_write_queue_ms)", registry=r)
            queue.set_function(admission.expected_wait)
        self._clock = service.clock
        service.bus.add_listener(self.on_event, remote_data=False)
        service.on_wake = self.on_wake

    # -- hooks -----------------------------------------------------------------

    def on_event(self, ev: Event) -> None:
        if not ev.local:
            return
        if ev.type == REQUEST_CREATED:
            self.requests_created.inc()
        elif ev.type == REQUEST_RESOLVED:
            status = str(ev.data.get("status", "unknown"))
            channel = {"expired": "timeout", "cancelled": "api"}.get(status) or str(ev.data.get("answered_via") or "")
            key = (status, channel or "unknown")
            series = self._resolved_series.get(key)
            if series is None:
                series = self._resolved_series[key] = self.requests_resolved.labels(*key)
            series.inc()
        elif ev.type == RUN_ANNOTATED:
            signal = ev.data.get("signal")
            kind = signal.get("kind") if isinstance(signal, dict) else None
            self.annotations.labels(str(kind or "unknown")).inc()

    def on_wake(self, view: RequestView) -> None:
        if view.resolved_at is not None:
            self.wake_latency.observe(max(0.0, self._clock() - view.resolved_at))

    def on_delivery(self, channel: str, outcome: str) -> None:
        self.deliveries.labels(channel, outcome).inc()

    def on_shed(self, reason: str) -> None:
        self.writes_shed.labels(reason).inc()

    def on_http(self, method: str | None, status: int, seconds: float) -> None:
        """Count a request; ``method`` None: one aiohttp's parser refused (the access log's stand-in)."""
        # Every request comes here: its series looked up once per (method, status).
        series = self._http_series.get((method, status))
        if series is None:
            label = _UNPARSED if method is None else method if method in _METHODS else _OTHER
            series = self.http_requests.labels(label, str(status))
            if method is None or method in _METHODS:  # a client's own token is not kept as a key either
                self._http_series[(method, status)] = series
        series.inc()
        self.http_duration.observe(seconds)

    # -- exposition ------------------------------------------------------------

    def render(self) -> bytes:
        return generate_latest(self.registry)


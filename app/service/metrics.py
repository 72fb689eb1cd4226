"""Prometheus metrics: request counts and latencies by route, recorded by a thin ASGI layer,
and the sessions' folds and events."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REGISTRY = CollectorRegistry(auto_describe=True)
REQUESTS = Counter("engram_http_requests_total", "HTTP requests answered",
                   ["method", "route", "status"], registry=REGISTRY)
LATENCY = Histogram("engram_http_request_seconds", "HTTP request latency",
                    ["method", "route"], registry=REGISTRY,
                    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
# Sessions' background work, so an operator sees a failing summariser without reading
# every session's events.
SESSION_FOLDS = Counter("engram_session_folds_total",
                        "Session folds tried: saved, failed (the summariser), or discarded "
                        "(its turns were dropped meanwhile)", ["outcome"], registry=REGISTRY)
SESSION_EVENTS = Counter("engram_session_events_total", "Session events recorded", ["kind"],
                         registry=REGISTRY)


def render_metrics() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware): it must not cost the hot path a task per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            # The route template, not the raw path, so ids do not explode label cardinality.
            name = getattr(route, "path", "unmatched")
            method = scope["method"]
            REQUESTS.labels(method, name, str(status)).inc()
            LATENCY.labels(method, name).observe(time.perf_counter() - start)

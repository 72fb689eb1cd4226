"""Prometheus metrics: request counts and latencies by route, recorded by a thin ASGI layer;
and the background work an operator alerts on without reading logs: jobs, the queue,
consolidation runs, LLM and embeddings endpoint calls, the sessions' folds and events, the
maintenance rounds.

Every metric is this process's (one per replica); Prometheus sums them across replicas.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# No `_created` series beside every labelled counter and histogram: they doubled the
# series a scrape carries and no alert reads them (an observability probe).
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)
# The process's own figures (resident memory, open file descriptors, CPU seconds, start
# time; the Python version; garbage collections), what a long-running service's dashboard
# watches for growth. The registry is Engram's own, so the defaults do not come by
# themselves. Read from /proc at scrape time only: nothing on the request path.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
REQUESTS = Counter("engram_http_requests_total", "HTTP requests answered",
                   ["method", "route", "status"], registry=REGISTRY)
LATENCY = Histogram("engram_http_request_seconds", "HTTP request latency",
                    ["method", "route"], registry=REGISTRY,
                    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
REQUESTS_IN_FLIGHT = Gauge("engram_http_requests_in_flight",
                           "Requests being served now (not probes or metrics), as of the "
                           "scrape; past max_concurrent_requests the next ones wait",
                           registry=REGISTRY)
REQUESTS_QUEUED = Gauge("engram_http_requests_queued",
                        "Requests waiting for one of max_concurrent_requests to finish, as "
                        "of the scrape; past request_queue_seconds they are shed",
                        registry=REGISTRY)
REQUESTS_SHED = Counter("engram_http_requests_shed_total",
                        "Requests answered 503 overloaded: max_concurrent_requests were in "
                        "flight for request_queue_seconds", registry=REGISTRY)
REQUESTS_RATE_LIMITED = Counter("engram_http_requests_rate_limited_total",
                                "Requests answered 429 by their tenant's limit: `rate` (its "
                                "requests came faster than its rate) or `concurrency` (it "
                                "had its share in flight)", ["limit"], registry=REGISTRY)
# Both series exist from the start, at 0: an alert on rate() over a series that appears
# only with the first 429 sees nothing until then.
for _limit in ("rate", "concurrency"):
    REQUESTS_RATE_LIMITED.labels(_limit)
# Sessions' background work, so an operator sees a failing summariser without reading
# every session's events.
SESSION_FOLDS = Counter("engram_session_folds_total",
                        "Session folds tried: saved, failed (the summariser), or discarded "
                        "(its turns were dropped meanwhile)", ["outcome"], registry=REGISTRY)
SESSION_EVENTS = Counter("engram_session_events_total", "Session events recorded", ["kind"],
                         registry=REGISTRY)
JOBS = Counter("engram_jobs_total",
               "Background job runs by job and outcome: done; retry (it asked to run again "
               "later); failed (it raised and will be tried again); gave_up (it raised on "
               "its last try and was dropped); cancelled (the worker stopped under it)",
               ["job", "outcome"], registry=REGISTRY)
JOB_SECONDS = Histogram("engram_job_seconds", "Background job run time", ["job"],
                        registry=REGISTRY,
                        buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800))
WORKER_RECONNECTS = Counter("engram_worker_reconnects_total",
                            "Times a lane's worker lost its database connection and "
                            "connected again (a PostgreSQL restart or failover)", ["lane"],
                            registry=REGISTRY)
JOBS_QUEUED = Gauge("engram_jobs_in_queue",
                    "Jobs in the queue by job and status (queued, picked), as of the last "
                    "minute's sweep", ["job", "status"], registry=REGISTRY)
CONSOLIDATION_RUNS = Counter("engram_consolidation_runs_total",
                             "Consolidation runs ended, by trigger (api, auto) and status "
                             "(succeeded, planned, failed; failed includes runs the crash "
                             "sweep found cut off or never started)", ["trigger", "status"],
                             registry=REGISTRY)
MEMORIES_EVICTED = Counter("engram_memories_evicted_total",
                           "Memories archived because a write took their user past its cap "
                           "(max_memories_per_user)", registry=REGISTRY)
LLM_CALLS = Counter("engram_llm_calls_total",
                    "HTTP calls to the LLM, each retry counted, by outcome: ok or the error "
                    "(llm_timeout, llm_connection_error, llm_http_error, llm_bad_response, "
                    "llm_incomplete)",
                    ["outcome"], registry=REGISTRY)
LLM_SECONDS = Histogram("engram_llm_call_seconds", "Time of one HTTP call to the LLM",
                        registry=REGISTRY,
                        buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
EMBEDDING_CALLS = Counter("engram_embedding_calls_total",
                          "HTTP calls to the OpenAI-compatible embeddings endpoint, each retry "
                          "counted, by outcome: ok or the error (embedding_timeout, "
                          "embedding_unavailable, embedding_rate_limited, "
                          "embedding_input_too_large, embedding_upstream_error, "
                          "embedding_bad_response)", ["outcome"], registry=REGISTRY)
EMBEDDING_SECONDS = Histogram("engram_embedding_call_seconds",
                              "Time of one HTTP call to the embeddings endpoint",
                              registry=REGISTRY,
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
QUERY_VECTORS = Counter("engram_search_query_vectors_total",
                        "Search queries' vectors by where they came from: hit (the cache of "
                        "recent queries, ENGRAM_SEARCH_QUERY_CACHE_SIZE) or miss (embedded)",
                        ["outcome"], registry=REGISTRY)
EMBEDDED_RESTARTS = Counter("engram_embedded_postgres_restarts_total",
                            "Times the service found the embedded PostgreSQL stopped and "
                            "started it again, by outcome (ok, failed: tried again at the "
                            "next check)", ["outcome"], registry=REGISTRY)
MAINTENANCE_DELETED = Counter("engram_maintenance_deleted_total",
                              "Rows the maintenance rounds deleted, by what: expired_memories, "
                              "idempotency_keys, idle_sessions, memory_versions, queue_log, "
                              "consolidation_runs", ["what"],
                              registry=REGISTRY)
MAINTENANCE_FAILURES = Counter("engram_maintenance_failures_total",
                               "Maintenance rounds that failed (retried next round), by what",
                               ["what"], registry=REGISTRY)

# Alerted-on series exist at 0 from the start, so a rate() or an absence alert sees them
# before their first event (as the rate limits' above; a worker's lane and a maintenance
# round's `what` are made where they start).
for _outcome in ("ok", "failed"):
    EMBEDDED_RESTARTS.labels(_outcome)


def render_metrics() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


CLIENT_GONE = 499
"""The status a request is counted under when its client left before it was answered."""


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware): it must not cost the hot path a task per request.

    `routes`: the app's routes, to label a request refused before routing (its body too
    large, no slot for it, cut by the shutdown while it waited for one) by the route it
    was sent to rather than as `unmatched`. Only such requests pay for the match: a routed
    one carries its route in the scope."""

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.routes = routes

    def _route_of(self, scope: Scope) -> BaseRoute | None:
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return route
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = gone = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        async def receive_wrapper() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect" and not started:
                gone = True
            return message

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        finally:
            if gone:
                # The client left before an answer (mid-body, say): FastAPI answers that
                # 400 to nobody, and dashboards read it as the client's bug. nginx's 499.
                status = CLIENT_GONE
            # The route template, not the raw path, so ids do not explode label cardinality.
            route: Any = scope.get("route") or self._route_of(scope)
            name = getattr(route, "path", "unmatched")
            method = scope["method"]
            REQUESTS.labels(method, name, str(status)).inc()
            LATENCY.labels(method, name).observe(time.perf_counter() - start)

"""How many requests one process serves at once.

Past `max_concurrent_requests` in flight, a request waits up to `request_queue_seconds`
for one of them to finish, then answers 503 `overloaded` with Retry-After. Without a
bound, more load than the cores serve queues everywhere at once (the model's batches,
the pools, the event loop): every request gets slow, its client gives up, and the work
done for it after that is wasted while new requests queue behind it. A bounded queue
keeps the admitted requests fast and tells the others at once to retry, or to go to
another replica. Probes and metrics are never held: a busy process is not a dead one.
The requests in flight, and those waiting for a slot, are gauges read at the scrape, so
an operator sees the bound coming before requests are refused. A request's own share of
a smaller bound (a tenant's, app/tenants/concurrency.py) is given back here too, by
`at_request_end`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import problem_response
from app.log_throttle import Throttle
from app.service.metrics import REQUESTS_IN_FLIGHT, REQUESTS_QUEUED, REQUESTS_SHED

log = logging.getLogger("engram.admission")

EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})
_AT_END = "engram.at_request_end"


def at_request_end(scope: Scope, end: Callable[[], None]) -> None:
    """Run `end` once the request is over: answered, failed or cut by the shutdown.

    What FastAPI's dependencies with `yield` do, at ~27 us a request for each (measured,
    a trivial app) against ~0.1 us here; the tenant's slot is taken on every request."""
    scope.setdefault("state", {}).setdefault(_AT_END, []).append(end)


class AdmissionMiddleware:
    """Pure ASGI, like the metrics layer: a request admitted at once costs a semaphore's
    acquire and release, no task and no timer."""

    def __init__(self, app: ASGIApp, *, limit: int, wait_seconds: float) -> None:
        self.app = app
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        self._shed_throttle = Throttle(flush=lambda count: log.warning(
            "overloaded: %d more request(s) answered 503 since the last report", count))
        self.in_flight = 0
        self.queued = 0
        # Read at the scrape, so an admitted request pays no metric's lock.
        REQUESTS_IN_FLIGHT.set_function(lambda: self.in_flight)
        REQUESTS_QUEUED.set_function(lambda: self.queued)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        # Shared with the request (at_request_end); made here, since a copy of the scope
        # made further in would not carry a dict created there back.
        state = scope.setdefault("state", {})
        slots = self._slots
        if slots is not None:
            if slots.locked():
                self.queued += 1
                try:
                    async with asyncio.timeout(self.wait_seconds):
                        await slots.acquire()
                except TimeoutError:
                    await self._shed(scope, receive, send)
                    return
                finally:
                    self.queued -= 1
            else:
                await slots.acquire()  # a free slot: returns without yielding
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            if slots is not None:
                slots.release()
            for end in state.pop(_AT_END, ()):
                end()

    async def _shed(self, scope: Scope, receive: Receive, send: Send) -> None:
        REQUESTS_SHED.inc()
        # One line per interval, not per request: shedding happens under a flood.
        shed = self._shed_throttle.due()
        if shed is not None:
            log.warning("overloaded: %d request(s) answered 503 since the last report, "
                        "each after waiting %g s for one of %d slots", shed,
                        self.wait_seconds, self.limit)
        response = problem_response(
            503, "overloaded", "Overloaded",
            f"{self.limit} requests were already in flight and none finished within "
            f"{self.wait_seconds:g} s; retry later", headers={"Retry-After": "1"})
        await response(scope, receive, send)

"""How large a request body the service reads (`max_body_mb`), and how long it waits for
one (`request_body_timeout_seconds`).

Without a bound one client could make the process hold gigabytes: FastAPI reads a JSON
body whole before validating it, so the 1,000-item limit of a batch is checked only
after every byte has arrived. A request whose Content-Length is over the bound is
answered 413 at once, without reading it; one without a length (chunked) is counted as
it comes, and refused when it passes the bound. Either way the answer is the service's
own 413 problem+json, with the request's id and in the metrics: the layer sits inside
them (FastAPI's own `max_body_size` answers outside every middleware, in another shape).

Only a batch of memories may be that large. Every other request carries one memory, one
query, one turn or one run's criteria, none of which takes a MiB (32,768 characters of
content at 12 bytes each, the longest JSON escape, are 384 KiB), and is bounded at
SINGLE_MAX_BYTES: a 60 MiB body of small values (`{"metadata": {"a": [[], [], ...]}}`)
took FastAPI's JSON parser and the validation 10-25 s on the event loop, every request
waiting, and left the process 1.6 GB larger (an exploratory probe).

A body still incomplete when its time is up is a 408: uvicorn waits for a body for ever,
so a client sending a byte now and then held its slot for as long as it liked. The time
is the timeout plus a second for every MIN_RATE bytes come so far, so an upload that
keeps coming at a modest rate is never cut (a fixed 60 s cut a 63 MiB batch sent at
0.9 MiB/s) while a trickle is. The clock starts at the route's first read, not at the
connection, so a wait for a slot does not count; once the body is whole the reads (a
listen for the client's disconnect) are not timed.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import problem_response

# The slowest steady upload that always arrives: a second more for each 64 KiB come.
MIN_RATE = 64 * 1024
# The largest body of any request but a batch of memories.
SINGLE_MAX_BYTES = 2**20
BATCH = ("POST", "/v1/memories/batch")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_seconds: float = 0.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_seconds = timeout_seconds

    def _bound(self, scope: Scope) -> int:
        """The most this request's body may take; 0, no bound."""
        if not self.max_bytes or (scope["method"], scope["path"].rstrip("/")) == BATCH:
            return self.max_bytes
        return min(self.max_bytes, SINGLE_MAX_BYTES)

    def _detail(self, bound: int) -> str:
        if bound < self.max_bytes:
            return (f"the request body is larger than {bound // 2**10} KiB, the most a "
                    "request of one memory, query, turn or run takes; only a batch "
                    "(POST /v1/memories/batch) may be larger")
        return (f"the request body is larger than {bound // 2**20} MiB, the most "
                "this service reads (ENGRAM_MAX_BODY_MB); split the batch")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.max_bytes or self.timeout_seconds):
            await self.app(scope, receive, send)
            return
        bound = self._bound(scope)
        length = _content_length(scope)
        if bound and length is not None and length > bound:
            response = problem_response(413, "payload_too_large", "Payload too large",
                                        self._detail(bound), headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        received = 0
        whole = False
        started: float | None = None

        async def counted() -> Message:
            nonlocal received, whole, started
            if whole or not self.timeout_seconds:
                message = await receive()
            else:
                if started is None:
                    started = asyncio.get_running_loop().time()
                deadline = started + self.timeout_seconds + received / MIN_RATE
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    # Raised inside the route's read of the body, as the 413 below.
                    raise HTTPException(408, detail=(
                        f"the request body did not arrive in time ({received} bytes in "
                        f"{self.timeout_seconds:g} s and one more second per "
                        f"{MIN_RATE // 1024} KiB come; ENGRAM_REQUEST_BODY_TIMEOUT_SECONDS)"),
                        headers={"Connection": "close"}) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                whole = not message.get("more_body", False)
                if bound and received > bound:
                    # Raised inside the route's read of the body, so the service's
                    # exception handler answers it (app/errors.py).
                    # Closed after: else uvicorn reads, and drops, the rest of the upload.
                    raise HTTPException(413, detail=self._detail(bound),
                                        headers={"Connection": "close"})
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None

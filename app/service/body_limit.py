"""How large a request body the service reads (`max_body_mb`), and how long it waits for
one (`request_body_timeout_seconds`).

Without a bound one client could make the process hold gigabytes: FastAPI reads a JSON
body whole before validating it, so the 1,000-item limit of a batch is checked only
after every byte has arrived. A request whose Content-Length is over the bound is
answered 413 at once, without reading it; one without a length (chunked) is counted as
it comes, and refused when it passes the bound. Either way the answer is the service's
own 413 problem+json, with the request's id and in the metrics: the layer sits inside
them (FastAPI's own `max_body_size` answers outside every middleware, in another shape).

A body still incomplete when its time is up is a 408: uvicorn waits for a body for ever,
so a client sending a byte now and then held its slot for as long as it liked. The clock
starts at the route's first read, not at the connection, so a wait for a slot does not
count; once the body is whole the reads (a listen for the client's disconnect) are not
timed.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import problem_response


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_seconds: float = 0.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_seconds = timeout_seconds

    def _detail(self) -> str:
        return (f"the request body is larger than {self.max_bytes // 2**20} MiB, the most "
                "this service reads (ENGRAM_MAX_BODY_MB); split the batch")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.max_bytes or self.timeout_seconds):
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if self.max_bytes and length is not None and length > self.max_bytes:
            response = problem_response(413, "payload_too_large", "Payload too large",
                                        self._detail(), headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        received = 0
        whole = False
        deadline: float | None = None

        async def counted() -> Message:
            nonlocal received, whole, deadline
            if whole or not self.timeout_seconds:
                message = await receive()
            else:
                loop = asyncio.get_running_loop()
                if deadline is None:
                    deadline = loop.time() + self.timeout_seconds
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    # Raised inside the route's read of the body, as the 413 below.
                    raise HTTPException(408, detail=(
                        f"the request body did not arrive within {self.timeout_seconds:g} s "
                        "(ENGRAM_REQUEST_BODY_TIMEOUT_SECONDS)"),
                        headers={"Connection": "close"}) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                whole = not message.get("more_body", False)
                if self.max_bytes and received > self.max_bytes:
                    # Raised inside the route's read of the body, so the service's
                    # exception handler answers it (app/errors.py).
                    raise HTTPException(413, detail=self._detail())
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

"""How large a request body the service reads (`max_body_mb`).

Without a bound one client could make the process hold gigabytes: FastAPI reads a JSON
body whole before validating it, so the 1,000-item limit of a batch is checked only
after every byte has arrived. A request whose Content-Length is over the bound is
answered 413 at once, without reading it; one without a length (chunked) is counted as
it comes, and refused when it passes the bound. Either way the answer is the service's
own 413 problem+json, with the request's id and in the metrics: the layer sits inside
them (FastAPI's own `max_body_size` answers outside every middleware, in another shape).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import problem_response


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _detail(self) -> str:
        return (f"the request body is larger than {self.max_bytes // 2**20} MiB, the most "
                "this service reads (ENGRAM_MAX_BODY_MB); split the batch")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.max_bytes:
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            response = problem_response(413, "payload_too_large", "Payload too large",
                                        self._detail(), headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
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

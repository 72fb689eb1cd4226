"""Large answers go out in chunks, each within `response_write_timeout_seconds`.

uvicorn waits for a slow client's socket only before a write, never for the write
itself, so a 9 MB answer was handed to the transport whole and the request counted done:
40 clients that asked for one and never read it made the process hold ~400 MB for as
long as they stayed connected, and neither the admission's slots nor its gauges saw
them. Sent in chunks, each chunk waits for the last to drain, so a connection holds
about two chunks; the request keeps its slot (and its tenant's share) while its answer
goes out; and a client that reads nothing for the whole timeout is cut off: its
connection is closed, the rest unsent. Answers of one chunk or less (nearly all) pass
untouched, without a timer.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("engram.http")

CHUNK_BYTES = 64 * 1024


ABORT = "engram.abort"
"""The scope's key for dropping the connection at once (app/service/http_protocol.py)."""


class ClientStoppedReading(Exception):
    """The client read nothing of the answer for the whole timeout."""


class WriteDeadlineMiddleware:
    def __init__(self, app: ASGIApp, *, timeout_seconds: float) -> None:
        self.app = app
        self.timeout_seconds = timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.timeout_seconds:
            await self.app(scope, receive, send)
            return
        timeout = self.timeout_seconds

        async def paced(message: Message) -> None:
            body = message.get("body", b"")
            if message["type"] != "http.response.body" or len(body) <= CHUNK_BYTES:
                await send(message)
                return
            more = message.get("more_body", False)
            view = memoryview(body)
            for start in range(0, len(body), CHUNK_BYTES):
                last = start + CHUNK_BYTES >= len(body)
                try:
                    async with asyncio.timeout(timeout):
                        await send({"type": "http.response.body",
                                    "body": bytes(view[start:start + CHUNK_BYTES]),
                                    "more_body": more or not last})
                except TimeoutError:
                    raise ClientStoppedReading from None

        try:
            await self.app(scope, receive, paced)
        except ClientStoppedReading:
            log.warning("%s %s: the client drained no part of its answer for %g s "
                        "(ENGRAM_RESPONSE_WRITE_TIMEOUT_SECONDS); its connection is closed",
                        scope.get("method"), scope.get("path"), timeout)
            abort = scope.get(ABORT)
            if abort is not None:
                # Dropped, not closed: a close waits to flush what the socket holds to a
                # client that reads nothing, so the connection stayed open for good and
                # a SIGTERM waited out its whole grace for it (a probe). One turn of the
                # loop lets uvicorn see the client gone, not an answer left unfinished
                # (an ERROR line).
                abort()
                await asyncio.sleep(0)

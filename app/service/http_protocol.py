"""uvicorn's httptools protocol with a bound on a request's head (its line and headers),
writing each answer's head with its body (app/service/head_held.py).

httptools builds a header's value by appending each piece it is fed, so the time a head
takes grows with the square of its size, and uvicorn sets no bound on it: one client
without a key sending a 160 MiB header held the event loop ~25 s (/healthz answered
after 8 s), and three of 300 MiB left it unanswered and the process at 1.2 GB. Past
MAX_HEAD_BYTES the connection gets 431 and is closed, before any of it reaches the app
(so no metric counts it; a WARNING line says so, at most one every 10 s).

The close lingers: the answer is sent with the end of the stream, and what the client
still sends is read and dropped for up to LINGER_SECONDS, until it closes. Closed at
once, the socket held the client's unread bytes, and the kernel answered them with a
reset that overtook the 431 (a test saw it under load).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.service.head_held import HeadHeldTransport

log = logging.getLogger("engram.http")

# Far past any real request's (browsers send a few KiB; h11, uvicorn's other parser,
# stops at 16 KiB) and small enough that parsing it costs nothing.
MAX_HEAD_BYTES = 1024 * 1024
LINGER_SECONDS = 2.0
_LOG_EVERY_SECONDS = 10.0

_BODY = json.dumps({
    "type": "https://engram.dev/problems/request_header_fields_too_large",
    "title": "Request header fields too large", "status": 431,
    "detail": f"the request's line and headers are larger than {MAX_HEAD_BYTES // 1024} KiB, "
              "the most this service reads"}).encode()
_ANSWER_HEAD = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
             b"content-type: application/problem+json\r\n"
             b"content-length: " + str(len(_BODY)).encode() + b"\r\n"
             b"connection: close\r\n"
             # Every answer carries one, as the OpenAPI document declares; the request's
             # own is somewhere in the head this refuses to read.
             b"x-request-id: ")


class BoundedHeadProtocol(HttpToolsProtocol):
    _logged_at = -_LOG_EVERY_SECONDS
    _refused_unlogged = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._lingering: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._held = HeadHeldTransport(self.transport)
        self.transport = cast(asyncio.Transport, self._held)

    def on_response_complete(self) -> None:
        self._held.flush()
        super().on_response_complete()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None:
            return  # refused: read and dropped until the client closes
        super().data_received(data)
        # Counted once fed: a piece that finished the head (and began the body) is not
        # the head's, so a large upload's first read is never taken for one.
        if not self._in_head or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refuse()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingering is not None:
            self._lingering.cancel()
        super().connection_lost(exc)

    def _refuse(self) -> None:
        self.transport.write(_ANSWER_HEAD + os.urandom(16).hex().encode() + b"\r\n\r\n" + _BODY)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._lingering = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        cls = BoundedHeadProtocol
        cls._refused_unlogged += 1
        now = time.monotonic()
        if now - cls._logged_at >= _LOG_EVERY_SECONDS:
            log.warning("%d request(s) with a head past %d KiB answered 431 and closed since "
                        "the last report", cls._refused_unlogged, MAX_HEAD_BYTES // 1024)
            cls._logged_at, cls._refused_unlogged = now, 0

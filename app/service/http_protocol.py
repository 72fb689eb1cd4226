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

An upgrade offer the service does not take (`Upgrade: h2c`, which Java's HttpClient and
Spring's RestClient send on every plain-http request) is served as the HTTP/1.1 request it
also is, as RFC 9110 7.8 lets a server do. httptools ends such a request at its head and
pauses, its body unread: uvicorn answered it as a request with no body (422 for every
write from a Java client), and a body that came in a later read as a bad request (a
plain-text 400, the connection closed; uvicorn issue #2722). Set aside at its head, the
request is fed again to a new parser with the offer left out (app/service/upgrade_offer.py).

After the head, what stands between a chunked body's pieces and what follows its last
(its trailer section) has the head's bound too: a trailer is built as a header is, and one of
96 MiB after a 13-byte body held /healthz 9 s, with no key needed (an HTTP probe). The
trailer's fields themselves are dropped (RFC 9110 6.5.1): uvicorn appended them to the
headers the app had already been given.

A few of RFC 9112's rules httptools leaves to its user are kept here: a field's value
without the white space that ends it (an `Idempotency-Key: abc ` was refused, an
`X-Request-ID: abc ` replaced), no `100 Continue` to an HTTP/1.0 client, and a target
longer than httptools reads (64 KiB) or holding a character that is not ASCII answered
as such, not as a bare "not HTTP/1.1", and an answer to a client that shut its sending
side after a whole request (uvicorn closed at the EOF; nginx answers).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.log_throttle import Throttle
from app.service.head_held import HeadHeldTransport
from app.service.protocol_answers import problem_answer
from app.service.upgrade_offer import without_upgrade_offer
from app.service.write_deadline import ABORT

log = logging.getLogger("engram.http")

# Far past any real request's (browsers send a few KiB; h11, uvicorn's other parser,
# stops at 16 KiB) and small enough that parsing it costs nothing.
MAX_HEAD_BYTES = 1024 * 1024
LINGER_SECONDS = 2.0

# httptools' own limit on a request's target (llhttp would read more, its URL parser not).
MAX_TARGET_BYTES = 65535
_OWS = b" \t"

_TOO_LARGE = (431, "Request Header Fields Too Large", "request_header_fields_too_large",
              "Request header fields too large",
              f"the request's line and headers are larger than {MAX_HEAD_BYTES // 1024} "
              "KiB, the most this service reads")


class BoundedHeadProtocol(HttpToolsProtocol):
    # One for the process, as the protocol is one per connection.
    _refusals = Throttle(flush=lambda count: log.warning(
        "%d more request(s) with a head past %d KiB answered 431 and closed since the last "
        "report", count, MAX_HEAD_BYTES // 1024))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        # A request's bytes past its head that were not its body, and the count of
        # requests begun and body bytes seen, to tell them in each read.
        self._framing_bytes = 0
        self._begun = 0
        self._body_bytes = 0
        self._lingering: asyncio.TimerHandle | None = None
        # The head of a request offering an upgrade not taken, to be fed again without it.
        self._declined: bytes | None = None

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
        self._framing_bytes = 0
        self._begun += 1
        self._declined = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:
            super().on_header(name, value.rstrip(_OWS))
        # else a trailer field, dropped: the app has had the headers

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        # Bounded is what stands between two pieces of the body (a chunk's size line)
        # and what follows the last (the trailer section), not their sum: a 1.3 MB
        # body streamed in small chunks had 1 MiB of framing in all (a re-probe).
        self._framing_bytes = 0
        super().on_body(body)

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self.parser.get_http_version() == "1.0":
            self.expect_100_continue = False  # RFC 9110 15.2: no 1xx to an HTTP/1.0 client
        # An Upgrade header: httptools takes a CONNECT for an upgrade too, which has none
        # to leave out, and goes as uvicorn takes it. Any Upgrade line, whichever
        # Connection line asks for it: uvicorn's own look (`_get_upgrade`) reads the last
        # Connection line only, and httptools any.
        if (self.parser.should_upgrade() and not self._should_upgrade()
                and any(name == b"upgrade" for name, _ in self.headers)):
            # No cycle yet: httptools ends this request here, its body unread.
            self._declined = without_upgrade_offer(
                self.parser.get_method(), self.url, self.parser.get_http_version(),
                self.headers)
            return
        self.scope[ABORT] = self._abort  # type: ignore[literal-required]
        super().on_headers_complete()

    def _abort(self) -> None:
        self.transport.abort()

    def on_message_complete(self) -> None:
        if self._declined is None:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None:
            return  # refused: read and dropped until the client closes
        begun, body_bytes = self._begun, self._body_bytes
        self._feed(data)
        if self.transport.is_closing():
            return
        # Counted once fed: a piece that finished the head (and began the body) is not
        # the head's, so a large upload's first read is never taken for one.
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse()
        elif self._begun == begun:
            self._framing_bytes += len(data) - (self._body_bytes - body_bytes)
            if self._framing_bytes > MAX_HEAD_BYTES:
                self._refuse()

    def _feed(self, data: bytes) -> None:
        """uvicorn's data_received, but for an upgrade offer it does not take."""
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserInvalidURLError:
            self._send_problem(400, "Bad Request", "bad_request", "Bad request",
                               "the request's target holds a character HTTP does not allow "
                               "there (a space, or one that is not ASCII): percent-encode it")
        except httptools.HttpParserError:
            if len(self.url) > MAX_TARGET_BYTES:
                self._send_problem(414, "URI Too Long", "uri_too_long", "URI too long",
                                   f"the request's target is longer than "
                                   f"{MAX_TARGET_BYTES} bytes, the most this service reads")
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade as upgrade:
            head, self._declined = self._declined, None
            if head is not None:
                # The rest of this read is the request's body, and whatever follows it.
                self.parser = httptools.HttpRequestParser(self)
                self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
                self._feed(head + data[upgrade.args[0]:])
            elif self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser cannot read as HTTP/1.1 (a bad length,
        a space in a header's name, an HTTP/2 preface), as a problem: it was plain text
        with no request id (an exploratory probe)."""
        self._send_problem(400, "Bad Request", "bad_request", "Bad request",
                           "the request is not valid HTTP/1.1, which this service speaks")

    def _send_problem(self, *problem: Any) -> None:
        self.transport.write(problem_answer(*problem))
        self.transport.close()

    # uvicorn declares None, asyncio's Protocol bool | None: a true value keeps the
    # connection open for writing.
    def eof_received(self) -> bool | None:  # type: ignore[override]
        """Keep the connection open for the answer when the client has sent its whole
        request and then shut its sending side (shutdown(SHUT_WR): `nc -N`, one-shot
        scripts). Returning nothing closed the connection at the EOF: the request went
        on, and its answer had nowhere to go (an exploratory probe; nginx answers). The
        answer ends the connection, since the client can send nothing more."""
        cycle = self.cycle
        if (self._lingering is None and cycle is not None and not cycle.response_complete
                and not cycle.more_body and not self._in_head):
            cycle.keep_alive = False
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingering is not None:
            self._lingering.cancel()
        super().connection_lost(exc)

    def _refuse(self) -> None:
        if not self._in_head and self.cycle.response_started:
            # Past the bound after this request's answer began: a second answer would be
            # read as the next request's.
            self.transport.close()
            return
        self.transport.write(problem_answer(*_TOO_LARGE))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._lingering = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        refused = BoundedHeadProtocol._refusals.due()
        if refused is not None:
            log.warning("%d request(s) with a head past %d KiB answered 431 and closed since "
                        "the last report", refused, MAX_HEAD_BYTES // 1024)

"""The head bound of the service's HTTP protocol, and its answer to an upgrade offer it
does not take, on a real uvicorn server on 127.0.0.1.

Found by re-probing the admission path: httptools' cost for a header grows with the
square of its size and uvicorn sets no bound, so one client without a key sending a
160 MiB header stalled the event loop ~25 s. And by a generated Java client (JDK
HttpClient, which offers `Upgrade: h2c` on every plain-http request): every write it made
reached the app with no body."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from app.service.http_protocol import MAX_HEAD_BYTES, MAX_TARGET_BYTES, BoundedHeadProtocol


async def echo(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        await stream(send)
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/slow":
        await asyncio.sleep(0.3)  # an answer that comes after the client's EOF
    seen: dict[str, Any] = {"body_bytes": len(body), "headers": len(scope["headers"])}
    if scope["path"] == "/names":
        seen = {"body": body.decode(), "method": scope["method"],
                "names": [name.decode() for name, _ in scope["headers"]],
                "values": {name.decode(): value.decode() for name, value in scope["headers"]},
                "connection": dict(scope["headers"]).get(b"connection", b"").decode()}
    answer = json.dumps(seen).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})


async def stream(send: Any) -> None:
    """An answer in pieces, the last one late: no length, so uvicorn chunks it."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"first", "more_body": True})
    await asyncio.sleep(2)
    await send({"type": "http.response.body", "body": b"last"})


def started(server: uvicorn.Server) -> None:
    while not server.started:
        time.sleep(0.01)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(echo, host="127.0.0.1", port=free, loop="asyncio",
                                           http=BoundedHeadProtocol, log_config=None,
                                           lifespan="off"))
    serving = asyncio.create_task(server.serve())
    await asyncio.wait_for(asyncio.to_thread(started, server), 10)
    yield free
    server.should_exit = True
    await serving


async def exchange(port: int, head: bytes, body: bytes = b"") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        for start in range(0, len(body), 256 * 1024):
            writer.write(body[start:start + 256 * 1024])
            await writer.drain()
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    except BrokenPipeError:  # the server stopped reading: its answer is what matters
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.parametrize("past", [128 * 1024, 16 * MAX_HEAD_BYTES])
async def test_a_head_past_the_bound_is_431_and_closed(port: int, past: int) -> None:
    """The answer arrives however much the client sends past the bound: the close
    lingers, reading and dropping the rest. (Closed at once, a test under load got a
    reset instead: the client's unread bytes made the kernel send one.)"""
    answer = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ",
                            b"a" * (MAX_HEAD_BYTES + past))

    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    head, body = answer.split(b"\r\n\r\n", 1)
    problem = json.loads(body)
    assert problem["status"] == 431
    # As every answer and problem, and as the OpenAPI document declares for them.
    found = re.search(rb"\r\nx-request-id: ([0-9a-f]{32})(\r\n|$)", head)
    assert found
    assert problem["request_id"] == found.group(1).decode()


async def test_ordinary_heads_and_large_bodies_pass(port: int) -> None:
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(200))
    body = b"z" * (8 * MAX_HEAD_BYTES)
    head = (b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers
            + b"Content-Length: %d\r\n\r\n" % len(body))

    answer = await exchange(port, head, body)

    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"body_bytes": len(body),
                                                          "headers": 203}


async def read_until(reader: asyncio.StreamReader, marker: bytes, seconds: float = 2) -> bytes:
    return await asyncio.wait_for(reader.readuntil(marker), seconds)


async def test_a_head_with_no_body_after_it_still_goes_and_the_connection_serves_on(
    port: int,
) -> None:
    """The protocol holds an answer's head for its body (app/service/head_held.py); an
    answer to HEAD has none, so the head must go when the answer ends."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await read_until(reader, b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await read_until(reader, b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        body = await asyncio.wait_for(reader.readexactly(length), 2)
        assert json.loads(body)["body_bytes"] == 0
    finally:
        writer.close()


async def test_a_continue_is_not_held_the_client_waits_for_it(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Length: 5\r\nConnection: close\r\n\r\n")
        assert await read_until(reader, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hello")
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["body_bytes"] == 5
    finally:
        writer.close()


async def test_a_streamed_answer_goes_out_piece_by_piece(port: int) -> None:
    """The head waits for the first piece only, not for the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        early = await read_until(reader, b"first\r\n", seconds=1.5)
        assert early.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"transfer-encoding: chunked" in early
        rest = await asyncio.wait_for(reader.read(), 5)
        assert rest == b"4\r\nlast\r\n0\r\n\r\n"
    finally:
        writer.close()


H2C = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
       b"HTTP2-Settings: AAEAAEAAAAIAAAAAAAMAAAAAAAQBAAAAAAUAAEAAAAYABgAA\r\n")


async def answers(reader: asyncio.StreamReader, n: int) -> list[dict[str, Any]]:
    """The next `n` answers' bodies (each 200, with a length)."""
    out = []
    for _ in range(n):
        head = await read_until(reader, b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        out.append(json.loads(await asyncio.wait_for(reader.readexactly(length), 2)))
    return out


@pytest.mark.parametrize("later", [False, True], ids=["with_the_head", "in_a_later_read"])
async def test_an_upgrade_offer_not_taken_is_served_as_the_request_it_came_with(
    port: int, later: bool,
) -> None:
    """RFC 9110 7.8: the offer is ignored, the body delivered. Before, the app got the
    request with no body and, when the body came in a read of its own, the client a
    plain-text 400 and a closed connection. The app sees no Upgrade header, and the
    Connection header keeps its other options."""
    body = b'{"content": "Alice prefers green tea."}'
    head = (b"POST /names HTTP/1.1\r\nHost: x\r\n" + H2C
            + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if later:
            writer.write(head)
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(body)
        else:
            writer.write(head + body)
        (seen,) = await answers(reader, 1)
        assert seen["body"] == body.decode()
        assert seen["method"] == "POST"
        assert "upgrade" not in seen["names"]
        assert "http2-settings" in seen["names"]
        assert seen["connection"] == "HTTP2-Settings"
        # And the connection serves on.
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        (after,) = await answers(reader, 1)
        assert after["body_bytes"] == 3
    finally:
        writer.close()


async def test_chunked_and_pipelined_requests_offering_an_upgrade_are_each_served(
    port: int,
) -> None:
    chunked = (b"POST /names HTTP/1.1\r\nHost: x\r\n" + H2C
               + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    sized = (b"PATCH /names HTTP/1.1\r\nHost: x\r\n" + H2C
             + b"Content-Length: 4\r\n\r\nwxyz")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(chunked + sized + b"GET /names HTTP/1.1\r\nHost: x\r\n" + H2C + b"\r\n")
        seen = await answers(reader, 3)
        assert [(s["method"], s["body"]) for s in seen] == [
            ("POST", "abcde"), ("PATCH", "wxyz"), ("GET", "")]
    finally:
        writer.close()


async def test_an_upgrade_offer_that_also_asks_to_close_is_answered_then_closed(
    port: int,
) -> None:
    answer = await exchange(port, b"POST / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\n"
                                  b"Upgrade: h2c\r\nContent-Length: 2\r\n\r\nhi")

    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["body_bytes"] == 2


async def test_an_upgrade_offer_over_two_connection_lines_is_served_too(port: int) -> None:
    """A field may come as several lines (RFC 9110 5.3); uvicorn reads the last Connection
    line only, so the offer in the first went unseen and the body was lost (a re-probe)."""
    body = b"hello"
    answer = await exchange(port, b"POST /names HTTP/1.1\r\nHost: x\r\n"
                                  b"Connection: Upgrade, HTTP2-Settings\r\n"
                                  b"Connection: close\r\nUpgrade: h2c\r\n"
                                  b"Content-Length: 5\r\n\r\n" + body)

    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    seen = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert seen["body"] == "hello"
    assert "upgrade" not in seen["names"]


CHUNKED = b"POST /names HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("trailer", [
    b"X-Big: " + b"a" * (16 * MAX_HEAD_BYTES) + b"\r\n",
    b"X: 1\r\n" * (2 * MAX_HEAD_BYTES // 6),
], ids=["one_large_field", "many_small_fields"])
async def test_a_trailer_section_past_the_head_bound_is_431_and_closed(
    port: int, trailer: bytes,
) -> None:
    """A trailer is built as a header is: unbounded, 96 MiB of one after a 13-byte body
    held the event loop 9 s, with no key needed (an HTTP probe)."""
    started_at = time.monotonic()
    answer = await exchange(port, CHUNKED + b"5\r\nhello\r\n0\r\n", trailer + b"\r\n")

    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:200]
    assert time.monotonic() - started_at < 8


async def test_a_trailer_past_the_bound_after_the_answer_began_closes_the_connection(
    port: int,
) -> None:
    """The answer went out before the body ended (a GET of a stream): no second answer
    may follow it on the connection, which would be read as the next request's."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"\r\n0\r\nX-Big: ")
        await read_until(reader, b"first\r\n")
        for _ in range(2 * MAX_HEAD_BYTES // (256 * 1024)):
            writer.write(b"a" * 256 * 1024)
            await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5)
        assert b"431" not in rest
        assert reader.at_eof()
    except ConnectionResetError:
        pass  # closed, as it must be, with the client's bytes unread
    finally:
        writer.close()


async def test_trailer_fields_are_dropped_and_small_chunks_pass(port: int) -> None:
    """What stands between chunks is bounded, not its sum: 400,000 one-byte chunks
    (2.4 MB of framing; a re-probe's 1.3 MB body streamed in small chunks was a 431)
    pass. A trailer field does not reach the app's headers, to which
    uvicorn appended it after the app had them."""
    chunks = b"1\r\nz\r\n" * 400_000
    answer = await exchange(port, CHUNKED.replace(b"Host: x\r\n",
                                                  b"Host: x\r\nConnection: close\r\n"),
                            chunks + b"0\r\nAuthorization: Bearer sneaked\r\n\r\n")

    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    seen = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert seen["body"] == "z" * 400_000
    assert "authorization" not in seen["names"]


async def test_a_fields_trailing_white_space_is_not_its_value(port: int) -> None:
    """RFC 9112 5: a parser excludes the white space around a value; httptools keeps
    what ends it, so `Idempotency-Key: abc ` was refused and `X-Request-ID: abc `
    replaced (an HTTP probe)."""
    answer = await exchange(port, b"GET /names HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                  b"Idempotency-Key: abc \t \r\nX-Request-ID:  r-1\t\r\n"
                                  b"X-Inner: a  b \r\n\r\n")

    values = json.loads(answer.split(b"\r\n\r\n", 1)[1])["values"]
    assert values["idempotency-key"] == "abc"
    assert values["x-request-id"] == "r-1"
    assert values["x-inner"] == "a  b"


async def test_an_http_1_0_client_gets_no_continue(port: int) -> None:
    """RFC 9110 15.2: a server must not send a 1xx answer to an HTTP/1.0 client."""
    answer = await exchange(port, b"POST / HTTP/1.0\r\nExpect: 100-continue\r\n"
                                  b"Content-Length: 5\r\n\r\n", b"hello")

    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert b"100 Continue" not in answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["body_bytes"] == 5


def problem_of(answer: bytes) -> tuple[bytes, dict[str, Any]]:
    head, body = answer.split(b"\r\n\r\n", 1)
    assert b"content-type: application/problem+json" in head
    # RFC 9110 6.6.1: every 4xx answer has one; these had none.
    assert re.search(rb"\r\ndate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r\n", head)
    return head.split(b"\r\n", 1)[0], json.loads(body)


async def test_a_target_longer_than_the_parser_reads_is_414(port: int) -> None:
    """It was the bare 400 of a request that is not HTTP/1.1."""
    answer = await exchange(port, b"GET /v1/memories?user_id=" + b"a" * MAX_TARGET_BYTES
                                  + b" HTTP/1.1\r\nHost: x\r\n\r\n")

    line, problem = problem_of(answer)
    assert line == b"HTTP/1.1 414 URI Too Long"
    assert problem["status"] == 414
    assert str(MAX_TARGET_BYTES) in problem["detail"]


async def test_a_target_with_a_character_that_is_not_ascii_says_to_percent_encode_it(
    port: int,
) -> None:
    """What `curl 'localhost:8080/v1/memories?user_id=josé'` sends."""
    answer = await exchange(port, "GET /v1/memories?user_id=josé HTTP/1.1\r\nHost: x\r\n\r\n"
                                  .encode())

    line, problem = problem_of(answer)
    assert line == b"HTTP/1.1 400 Bad Request"
    assert "percent-encode" in problem["detail"]


async def half_closed_exchange(port: int, request: bytes) -> bytes:
    """`request`, then the client's sending side shut; what arrives until the close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_a_whole_request_then_the_clients_eof_is_answered_and_then_closed(
    port: int,
) -> None:
    """The connection had been closed at the EOF, the answer lost (an exploratory
    probe; `nc -N` sends requests so)."""
    body = b"x" * 1000
    answer = await half_closed_exchange(port, (
        b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)))

    head, _, sent = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert b"\r\nconnection: close" in head.lower()
    assert json.loads(sent)["body_bytes"] == len(body)
    # and the server closed the connection after it: read() returns at the close


async def test_an_eof_inside_a_request_still_closes_at_once(port: int) -> None:
    """Half a body cannot be answered: the connection goes as it did."""
    answer = await half_closed_exchange(
        port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf")
    assert answer == b""
    answer = await half_closed_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert answer == b""

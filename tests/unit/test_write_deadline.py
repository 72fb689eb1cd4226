"""Large answers go out in chunks, each within the write timeout; small ones untouched."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from app.service.write_deadline import ABORT, CHUNK_BYTES, WriteDeadlineMiddleware


def answering(body: bytes) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
    return app


SCOPE = {"type": "http", "method": "GET", "path": "/v1/memories"}


async def nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def test_a_small_answer_is_sent_as_it_is() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await WriteDeadlineMiddleware(answering(b"x" * CHUNK_BYTES), timeout_seconds=1)(
        SCOPE, nothing, send)

    assert [m.get("body") for m in sent] == [None, b"x" * CHUNK_BYTES]


async def test_a_large_answer_goes_out_in_chunks_that_add_up_to_it() -> None:
    body = bytes(range(256)) * (CHUNK_BYTES // 64)  # 4 chunks and a bit
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        await asyncio.sleep(0)  # a client reading steadily
        sent.append(message)

    await WriteDeadlineMiddleware(answering(body), timeout_seconds=1)(SCOPE, nothing, send)

    chunks = sent[1:]
    assert len(chunks) == -(-len(body) // CHUNK_BYTES)
    assert b"".join(m["body"] for m in chunks) == body
    assert [m["more_body"] for m in chunks] == [True] * (len(chunks) - 1) + [False]


async def test_a_client_that_stops_reading_is_cut_off_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an exploratory probe: uvicorn took a 9 MB answer whole into the socket's
    buffer and the request counted done; 40 clients that never read held ~400 MB."""
    sent: list[dict[str, Any]] = []
    stuck = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if len(sent) == 2:  # the first chunk taken, then nothing drains
            await stuck.wait()
        sent.append(message)

    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.WARNING, logger="engram.http"):
        await WriteDeadlineMiddleware(answering(b"y" * (CHUNK_BYTES * 10)),
                                      timeout_seconds=0.2)(SCOPE, nothing, send)

    assert 0.2 <= loop.time() - started < 2
    assert len(sent) == 2  # the start and one chunk: the rest was never handed over
    [line] = [r.getMessage() for r in caplog.records if r.name == "engram.http"]
    assert line == ("GET /v1/memories: the client drained no part of its answer for 0.2 s "
                    "(ENGRAM_RESPONSE_WRITE_TIMEOUT_SECONDS); its connection is closed")


async def test_the_connection_of_a_client_cut_off_is_dropped_not_closed() -> None:
    """Found by a probe: a close waits to flush what the socket holds, so the connection
    of a client that reads nothing stayed open for good, and a SIGTERM then waited out
    its whole grace (22 s by default) with no request running."""
    aborted: list[bool] = []
    stuck = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await stuck.wait()

    scope = {**SCOPE, ABORT: lambda: aborted.append(True)}
    await WriteDeadlineMiddleware(answering(b"y" * (CHUNK_BYTES * 3)),
                                  timeout_seconds=0.1)(scope, nothing, send)

    assert aborted == [True]

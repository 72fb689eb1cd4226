"""A request the shutdown cancels: answered 503 problem+json when nothing was sent yet; and
the count of requests in flight that the app's shutdown waits on until they have answered."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import COMMIT_CUT
from app.service.shutdown import RequestsInFlight, ShutdownCutMiddleware, ShutdownSignal

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/v1/memories", "headers": []}


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def cut_layer(app: ASGIApp, in_flight: RequestsInFlight | None = None) -> ShutdownCutMiddleware:
    return ShutdownCutMiddleware(app, in_flight=in_flight or RequestsInFlight())


async def run(app: ShutdownCutMiddleware, scope: Scope = SCOPE) -> list[Message]:
    scope = dict(scope)  # the layer adds the request's state to it
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def cancelled(scope: Scope, receive: Receive, send: Send) -> None:
    raise asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded")


async def test_a_request_cut_before_answering_is_told_to_retry() -> None:
    start, body = await run(cut_layer(cancelled))
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    problem = json.loads(body["body"])

    assert start["status"] == 503
    assert headers["content-type"] == "application/problem+json"
    assert headers["retry-after"] == "1"
    assert headers["connection"] == "close"
    assert problem["type"].endswith("/shutting_down")
    assert problem["status"] == 503
    assert "retry it" in problem["detail"]


async def test_a_request_cut_while_committing_is_told_the_outcome_is_unknown() -> None:
    async def committing(scope: Scope, receive: Receive, send: Send) -> None:
        scope["state"][COMMIT_CUT] = True  # as app/db.py marks it
        raise asyncio.CancelledError

    start, body = await run(cut_layer(committing))
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    problem = json.loads(body["body"])

    assert start["status"] == 503
    assert headers["retry-after"] == "1"
    assert headers["connection"] == "close"
    assert problem["type"].endswith("/outcome_unknown")
    assert "may or may not have been applied" in problem["detail"]


async def test_a_request_cut_mid_answer_is_left_to_the_server_to_close() -> None:
    async def half(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await run(cut_layer(half))


async def test_answers_and_other_errors_pass_through() -> None:
    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    assert [m.get("status") for m in await run(cut_layer(ok))] == [201, None]
    with pytest.raises(RuntimeError):
        await run(cut_layer(broken))
    with pytest.raises(asyncio.CancelledError):  # not a request: not answered
        await run(cut_layer(cancelled), {"type": "lifespan"})


async def test_a_request_counts_as_in_flight_until_it_has_answered_however_it_ends() -> None:
    in_flight = RequestsInFlight()
    seen: list[int] = []

    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(in_flight.count)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(in_flight.count)
        raise RuntimeError("a bug")

    async def cut(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(in_flight.count)
        raise asyncio.CancelledError

    await run(cut_layer(ok, in_flight))
    with pytest.raises(RuntimeError):
        await run(cut_layer(broken, in_flight))
    sent = await run(cut_layer(cut, in_flight))

    assert seen == [1, 1, 1]
    assert sent[0]["status"] == 503  # counted until its cut answer was sent
    assert in_flight.count == 0


async def test_the_wait_for_none_left_ends_with_the_last_answer_or_at_its_bound() -> None:
    in_flight = RequestsInFlight()
    assert await in_flight.none_left(0)  # nothing in flight: no wait at all

    release = asyncio.Event()

    async def slow_to_unwind(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            raise asyncio.CancelledError
        finally:
            await release.wait()  # e.g. its connection given back to a slow database

    layer = cut_layer(slow_to_unwind, in_flight)
    requests = [asyncio.create_task(run(layer)) for _ in range(2)]
    await asyncio.sleep(0)
    assert in_flight.count == 2

    assert not await in_flight.none_left(0.05)  # still unwinding: the bound ends the wait
    waiting = asyncio.create_task(in_flight.none_left(5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    assert await waiting
    assert in_flight.count == 0
    assert [sent[0]["status"] for sent in await asyncio.gather(*requests)] == [503, 503]


async def test_the_shutdown_signal_sets_its_event_on_the_loop() -> None:
    signal = ShutdownSignal()
    signal.received()  # before the app started: nothing to tell yet

    event = signal.bind()
    assert not event.is_set()
    signal.received()
    signal.received()  # a second signal changes nothing
    await asyncio.wait_for(event.wait(), 1)

"""A request the shutdown cancels: answered 503 problem+json when nothing was sent yet."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.types import Message, Receive, Scope, Send

from app.errors import COMMIT_CUT
from app.service.shutdown import ShutdownCutMiddleware

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/v1/memories", "headers": []}


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


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
    start, body = await run(ShutdownCutMiddleware(cancelled))
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

    start, body = await run(ShutdownCutMiddleware(committing))
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
        await run(ShutdownCutMiddleware(half))


async def test_answers_and_other_errors_pass_through() -> None:
    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    assert [m.get("status") for m in await run(ShutdownCutMiddleware(ok))] == [201, None]
    with pytest.raises(RuntimeError):
        await run(ShutdownCutMiddleware(broken))
    with pytest.raises(asyncio.CancelledError):  # not a request: not answered
        await run(ShutdownCutMiddleware(cancelled), {"type": "lifespan"})

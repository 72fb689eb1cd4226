"""A synchronous consolidation cut by the shutdown: its 503 names the run, whose groups
written before the cut stay written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from starlette.types import Message

from app.consolidation.runs import ConsolidationRunner
from app.main import create_app
from app.resources import Resources
from tests.conftest import TenantKey
from tests.integration.consolidation.conftest import memory, seed


async def test_a_run_cut_by_the_shutdown_is_named_in_its_answer(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A probe of two replicas: SIGTERM cut a synchronous run with 5 of its 20 groups
    committed, and the answer said only "retry it", naming no run to read."""
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    started = asyncio.Event()

    async def stalled(self: ConsolidationRunner, *args: Any, **kwargs: Any) -> Any:
        started.set()
        await asyncio.sleep(60)

    monkeypatch.setattr(ConsolidationRunner, "_execute", stalled)
    app = create_app(resources.settings, resources)
    body = json.dumps({"user_id": "u1"}).encode()
    headers = [(b"host", b"localhost"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()),
               *((k.lower().encode(), v.encode()) for k, v in tenant.headers.items())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/consolidations",
             "raw_path": b"/v1/consolidations", "query_string": b"", "root_path": "",
             "headers": headers, "client": ("127.0.0.1", 50000),
             "server": ("localhost", 80)}
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    request = asyncio.create_task(app(scope, receive, send))
    await asyncio.wait_for(started.wait(), 10)
    request.cancel()  # as uvicorn cuts a request past the shutdown's grace
    await asyncio.wait_for(request, 10)

    start, answer = sent
    assert start["status"] == 503
    problem = json.loads(answer["body"])
    assert problem["type"].endswith("/shutting_down")
    (run,) = (await client.get("/v1/consolidations")).json()["items"]
    assert f"stopped consolidation run {run['id']} before it finished" in problem["detail"]
    assert f"GET /v1/consolidations/{run['id']}" in problem["detail"]

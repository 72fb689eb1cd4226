"""A request's key and its tenant's limits are settled before its body is read, and a
body that does not arrive in time is a 408: a slow body holds a slot only so long.

Found by an exploratory probe: 64 connections without a key, each sending a body one
byte short, held every slot of the process for as long as they stayed open (requests
with a key got 503), and a tenant past its share held slots until its bodies arrived.
These drive the ASGI app directly with a body that never comes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from app.main import create_app
from app.resources import Resources
from tests.conftest import TenantKey, count_memories, make_client, reconfigured, sample

PATH = "/v1/memories"


class StalledBody:
    """A request whose body never comes (or comes in part): whether it was read at all."""

    def __init__(self, first: bytes | None = None) -> None:
        self.first = first
        self.reads = 0
        self.read = asyncio.Event()
        self.messages: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        self.read.set()
        if self.reads == 1 and self.first is not None:
            return {"type": "http.request", "body": self.first, "more_body": True}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        [start] = [m for m in self.messages if m["type"] == "http.response.start"]
        return int(start["status"])

    @property
    def problem(self) -> dict[str, Any]:
        body = b"".join(m.get("body", b"") for m in self.messages
                        if m["type"] == "http.response.body")
        parsed: dict[str, Any] = json.loads(body)
        return parsed


def scope(headers: dict[str, str]) -> dict[str, Any]:
    raw = [(b"host", b"localhost"), (b"content-type", b"application/json"),
           (b"content-length", b"100")]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": PATH, "raw_path": PATH.encode(),
            "query_string": b"", "root_path": "", "headers": raw,
            "client": ("127.0.0.1", 50000), "server": ("localhost", 80)}


async def call(app: Any, headers: dict[str, str], body: StalledBody,
               seconds: float = 5.0) -> StalledBody:
    await asyncio.wait_for(app(scope(headers), body.receive, body.send), seconds)
    return body


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="no-key"),
    pytest.param({"Authorization": "Bearer egm_not-a-key"}, id="wrong-key"),
    pytest.param({"Authorization": "Basic dXNlcjpwYXNz"}, id="other-scheme"),
])
async def test_a_request_without_a_valid_key_is_401_before_its_body_is_read(
    resources: Resources, headers: dict[str, str],
) -> None:
    app = create_app(resources.settings, resources)

    answered = await call(app, headers, StalledBody())

    assert answered.status == 401
    assert answered.reads == 0
    assert answered.problem["type"].endswith("/unauthorized")


async def test_another_scheme_is_named_as_such(resources: Resources) -> None:
    app = create_app(resources.settings, resources)

    answered = await call(app, {"Authorization": "Basic dXNlcjpwYXNz"}, StalledBody())

    assert "scheme is not Bearer" in answered.problem["detail"]


@pytest.fixture
async def one_in_flight(resources: Resources, database_url: str) -> AsyncIterator[Resources]:
    async with reconfigured(resources, database_url, tenant_max_concurrent_requests=1,
                            max_concurrent_requests=2, request_queue_seconds=0.2,
                            request_body_timeout_seconds=0.5) as res:
        yield res


async def test_a_tenant_past_its_share_is_429_before_its_body_is_read(
    one_in_flight: Resources, tenant: TenantKey, other_tenant: TenantKey,
) -> None:
    app = create_app(one_in_flight.settings, one_in_flight)
    holding = StalledBody()
    held = asyncio.create_task(call(app, tenant.headers, holding))
    await asyncio.wait_for(holding.read.wait(), 5)

    refused = await call(app, tenant.headers, StalledBody())

    assert refused.status == 429
    assert refused.reads == 0
    assert refused.problem["type"].endswith("/concurrency_limited")
    # The process's other slot is free for another tenant: the refusal gave it back.
    other = await call(app, other_tenant.headers, StalledBody(first=b'{"content": '))
    assert other.status == 408
    answered = await held
    assert answered.status == 408


async def test_a_body_that_does_not_arrive_in_time_is_408_and_writes_nothing(
    one_in_flight: Resources, tenant: TenantKey, other_tenant: TenantKey,
) -> None:
    app = create_app(one_in_flight.settings, one_in_flight)
    loop = asyncio.get_running_loop()
    started = loop.time()

    answered = await call(app, tenant.headers, StalledBody(first=b'{"content": "x'))

    assert 0.5 <= loop.time() - started < 3
    assert answered.status == 408
    assert answered.problem["type"].endswith("/request_timeout")
    assert "ENGRAM_REQUEST_BODY_TIMEOUT_SECONDS" in answered.problem["detail"]
    assert await count_memories(one_in_flight, tenant) == 0
    # Both of the process's slots are free again: two tenants' requests are admitted at
    # once (a slot still held would have made one wait 0.2 s, then answer 503).
    admitted = [StalledBody(first=b"{") for _ in range(2)]
    await asyncio.gather(*(call(app, t.headers, b)
                           for t, b in zip((tenant, other_tenant), admitted, strict=True)))
    assert [b.status for b in admitted] == [408, 408]


async def test_a_database_failure_while_the_key_is_checked_is_a_503_not_a_500(
    bounded: Resources, tenant: TenantKey, caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an exploratory probe (a regression of the gate): the key's lookup raised
    past the routes' handlers, so an outage's 503s were counted as 500s and logged each
    with a traceback at ERROR."""
    labels = {"method": "GET", "route": "/v1/memories", "status": "503"}
    before = sample("engram_http_requests_total", **labels)
    async with bounded.engine.connect() as locker:
        await locker.execute(text("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE"))
        with caplog.at_level(logging.WARNING):
            async with make_client(bounded, tenant.headers) as client:
                answered = await client.get("/v1/memories")
        await locker.rollback()

    assert answered.status_code == 503, answered.text
    assert answered.json()["type"].endswith("/database_timeout")
    assert sample("engram_http_requests_total", **labels) == before + 1
    assert not [r for r in caplog.records if r.exc_info is not None]


async def test_a_steady_upload_past_the_timeout_is_not_cut(
    one_in_flight: Resources, tenant: TenantKey,
) -> None:
    """Found by re-probing the gate: a fixed 60 s cut a 63 MiB batch arriving steadily at
    0.9 MiB/s. Each 64 KiB come adds a second; this one (timeout 0.5 s) takes ~2.4 s at
    ~107 KiB/s."""
    body = json.dumps({"items": [{"content": f"{i} " + "x" * 30_000}
                                 for i in range(8)]}).encode()
    pieces = [body[i:i + 32 * 1024] for i in range(0, len(body), 32 * 1024)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.3)
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    app = create_app(one_in_flight.settings, one_in_flight)
    request = scope(tenant.headers) | {"path": "/v1/memories/batch",
                                       "raw_path": b"/v1/memories/batch"}
    request["headers"] = [h for h in request["headers"] if h[0] != b"content-length"] + [
        (b"content-length", str(len(body)).encode())]
    started = asyncio.get_running_loop().time()

    await asyncio.wait_for(app(request, receive, send), 10)

    [start] = [m for m in sent if m["type"] == "http.response.start"]
    assert start["status"] == 201
    assert asyncio.get_running_loop().time() - started > 2 * 0.5
    assert await count_memories(one_in_flight, tenant) == 8


async def test_a_client_gone_before_its_answer_is_counted_499_not_400(
    resources: Resources, tenant: TenantKey,
) -> None:
    """Found by two exploratory probes: a client that dropped mid-body was counted as a
    400 (FastAPI answers its disconnect so, to nobody), read on dashboards as a client's
    bug; 58 of them in 30 s of mixed load."""
    labels = {"method": "POST", "route": "/v1/memories"}
    before = {s: sample("engram_http_requests_total", **labels, status=s)
              for s in ("400", "499")}
    app = create_app(resources.settings, resources)
    sent: list[dict[str, Any]] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads == 1:
            return {"type": "http.request", "body": b'{"content": "half', "more_body": True}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope(tenant.headers), receive, send), 5)

    after = {s: sample("engram_http_requests_total", **labels, status=s)
             for s in ("400", "499")}
    assert after == {"400": before["400"], "499": before["499"] + 1}
    assert await count_memories(resources, tenant) == 0

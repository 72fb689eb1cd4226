"""The bound on requests in flight, through the app on the real database: a request
past it, while another is stuck (a write queued behind a lock), is refused at once with a
503 problem and changes nothing; probes still answer; the stuck one finishes after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.resources import Resources
from tests.conftest import (
    TenantKey,
    backends_where,
    make_client,
    memories_locked,
    reconfigured,
    sample,
)


@pytest.fixture
async def one_slot(resources: Resources, database_url: str) -> AsyncIterator[Resources]:
    async with reconfigured(resources, database_url, max_concurrent_requests=1,
                            request_queue_seconds=0.2) as res:
        yield res


async def test_a_request_past_the_bound_is_refused_while_one_is_stuck(
    one_slot: Resources, tenant: TenantKey,
) -> None:
    labels = {"method": "POST", "route": "/v1/memories", "status": "503"}
    counted = sample("engram_http_requests_total", **labels)
    async with make_client(one_slot, tenant.headers) as client:
        async with memories_locked(one_slot) as lock:
            stuck = asyncio.create_task(
                client.post("/v1/memories", json={"content": "written after a wait"}))
            for _ in range(200):  # until the write waits for the lock
                if await backends_where(lock, "wait_event_type = 'Lock'"):
                    break
                await asyncio.sleep(0.02)
            refused = await client.post("/v1/memories", json={"content": "refused"})
            ready = await client.get("/readyz")
        written = await stuck
        listed = await client.get("/v1/memories")

    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.headers["retry-after"] == "1"
    problem = refused.json()
    assert problem["type"].endswith("/overloaded")
    assert problem["request_id"] == refused.headers["x-request-id"]
    assert ready.status_code == 200
    # Refused before routing, and still counted under the route it was sent to.
    assert sample("engram_http_requests_total", **labels) == counted + 1
    assert written.status_code == 201, written.text
    assert [m["content"] for m in listed.json()["items"]] == ["written after a wait"]

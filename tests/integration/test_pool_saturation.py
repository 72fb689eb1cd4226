"""Every connection of a pool taken for longer than ENGRAM_DB_POOL_TIMEOUT_SECONDS: a
request answers 503 database_busy with Retry-After instead of waiting without end (the
asyncpg pools) or failing as a 500 (the engine's)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from app.resources import Resources
from app.search.reader import SearchReader
from tests.conftest import TenantKey, make_client, reconfigured


@pytest.fixture
async def one_connection(resources: Resources, database_url: str) -> AsyncIterator[Resources]:
    """The suite's database behind pools of one connection each, waited for 0.3 s."""
    async with reconfigured(resources, database_url, db_pool_size=1, db_max_overflow=0,
                            db_pool_timeout_seconds=0.3) as res:
        yield res


def assert_busy(resp: httpx.Response) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.headers["retry-after"] == "1"
    body = resp.json()
    assert body["type"].endswith("/database_busy")
    assert body["detail"] == "no database connection was free within 0.3 s; retry later"


async def test_a_write_waiting_past_the_timeout_for_the_engines_pool_is_503(
    one_connection: Resources, tenant: TenantKey,
) -> None:
    async with make_client(one_connection, tenant.headers) as client:
        async with one_connection.engine.connect() as held:
            await held.exec_driver_sql("SELECT 1")
            busy = await client.post("/v1/memories", json={"content": "waits"})
        created = await client.post("/v1/memories", json={"content": "gets through"})

    assert_busy(busy)
    assert created.status_code == 201, created.text


@pytest.mark.parametrize("reader", ["memory_reader", "search_reader"])
async def test_a_read_waiting_past_the_timeout_for_its_pool_is_503(
    one_connection: Resources, tenant: TenantKey, reader: str,
) -> None:
    pool = await getattr(one_connection, reader)()
    assert isinstance(pool, SearchReader)
    async with make_client(one_connection, tenant.headers) as client:
        held = await pool._pool.acquire()
        try:
            if reader == "memory_reader":
                busy = await client.get(f"/v1/memories/{uuid.uuid4()}")
            else:
                busy = await client.post("/v1/search", json={"query": "anything"})
        finally:
            await pool._pool.release(held)
        after = (await client.get(f"/v1/memories/{uuid.uuid4()}") if reader == "memory_reader"
                 else await client.post("/v1/search", json={"query": "anything"}))

    assert_busy(busy)
    assert after.status_code in (200, 404), after.text


async def test_a_request_waiting_less_than_the_timeout_gets_its_connection(
    one_connection: Resources, tenant: TenantKey,
) -> None:
    reads = await one_connection.memory_reader()
    async with make_client(one_connection, tenant.headers) as client:
        held = await reads._pool.acquire()
        waiting = asyncio.ensure_future(client.get(f"/v1/memories/{uuid.uuid4()}"))
        await asyncio.sleep(0.1)
        await reads._pool.release(held)
        resp = await waiting

    assert resp.status_code == 404, resp.text

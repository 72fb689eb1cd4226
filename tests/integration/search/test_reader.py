"""The search's own asyncpg pool (the API key lookup's too) and the memory reads' pool:
the session their statements run in, and their recovery when the server drops their
connections."""

from __future__ import annotations

import httpx
from sqlalchemy import text

from app.resources import Resources
from tests.conftest import TenantKey


async def test_search_connections_start_with_the_plan_settings(resources: Resources) -> None:
    reader = await resources.search_reader()

    [row] = await reader.fetch(
        "SELECT current_setting('plan_cache_mode'), "
        "current_setting('max_parallel_workers_per_gather'), "
        "current_setting('application_name'), current_setting('hnsw.iterative_scan'), "
        "current_setting('hnsw.ef_search')"
    )

    assert tuple(row) == (
        "force_generic_plan", "0", "engram-search", "relaxed_order",
        str(resources.settings.hnsw_ef_search),
    )


async def test_memory_read_connections_plan_for_their_parameters(resources: Resources) -> None:
    reader = await resources.memory_reader()

    [row] = await reader.fetch(
        "SELECT current_setting('plan_cache_mode'), current_setting('application_name'), "
        "current_setting('hnsw.iterative_scan')"
    )

    # A listing filtered by a rare category took 27 ms under a generic plan, 0.6 custom.
    assert tuple(row) == ("force_custom_plan", "engram-reads", "relaxed_order")


async def drop_the_pools_connections(resources: Resources, pool: str = "engram-search") -> None:
    """What a server restart does to the pool: every one of its backends terminated."""
    async with resources.engine.connect() as conn:
        killed = (await conn.execute(text(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = :pool"
        ), {"pool": pool})).scalar_one()
    assert killed >= 1


async def test_a_search_after_the_server_dropped_its_connections_still_answers(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await client.post("/v1/memories", json={"content": "Alice keeps bees"})
    assert created.status_code == 201, created.text
    first = await client.post("/v1/search", json={"query": "bees"})
    assert first.status_code == 200, first.text

    await drop_the_pools_connections(resources)

    again = await client.post("/v1/search", json={"query": "bees"})

    assert again.status_code == 200, again.text
    assert [r["memory"]["id"] for r in again.json()["results"]] == [created.json()["id"]]


async def test_the_key_lookup_after_the_server_dropped_the_pools_connections_still_answers(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Every authenticated request looks its key up on this pool first (app/auth.py), not
    only searches."""
    created = await client.post("/v1/memories", json={"content": "Alice keeps bees"})
    assert created.status_code == 201, created.text
    memory_id = created.json()["id"]

    await drop_the_pools_connections(resources)

    again = await client.get(f"/v1/memories/{memory_id}")

    assert again.status_code == 200, again.text
    assert again.json()["content"] == "Alice keeps bees"


async def test_memory_reads_after_the_server_dropped_their_pools_connections_still_answer(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await client.post("/v1/memories", json={"content": "Alice keeps bees"})
    assert created.status_code == 201, created.text
    memory_id = created.json()["id"]
    assert (await client.get(f"/v1/memories/{memory_id}")).status_code == 200

    await drop_the_pools_connections(resources, "engram-reads")
    got = await client.get(f"/v1/memories/{memory_id}")
    await drop_the_pools_connections(resources, "engram-reads")
    listed = await client.get("/v1/memories")

    assert got.status_code == 200, got.text
    assert got.json() == created.json()
    assert listed.status_code == 200, listed.text
    assert [m["id"] for m in listed.json()["items"]] == [memory_id]
